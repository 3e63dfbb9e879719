//! A partner's endpoint on 127.0.0.1: it answers from a script (a status,
//! a status with `Retry-After`, or a stall past the sender's time limit;
//! 204 once the script is done) and hands every request it gets to the test.

use axum::Router;
use axum::body::Bytes;
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// One answer of the script.
#[derive(Debug, Clone)]
pub enum Reply {
    /// This status.
    Status(u16),
    /// This status with `Retry-After: VALUE`.
    RetryAfter(u16, &'static str),
    /// No answer for this long (past the sender's time limit), then 204.
    Stall(Duration),
}

/// A request the receiver got.
pub struct Received {
    pub headers: HeaderMap,
    pub body: String,
    /// The sender's address: the same for requests on one connection.
    pub peer: SocketAddr,
}

/// The receiver: its URL and what it got.
pub struct Receiver {
    pub url: String,
    pub got: mpsc::UnboundedReceiver<Received>,
}

impl Receiver {
    /// Starts a receiver answering `script`, then 204.
    pub async fn start(script: Vec<Reply>) -> Self {
        let script = Arc::new(Mutex::new(VecDeque::from(script)));
        let (tx, got) = mpsc::unbounded_channel();
        let app = Router::new().route(
            "/hook",
            axum::routing::post(move |ConnectInfo(peer): ConnectInfo<SocketAddr>, headers: HeaderMap, body: Bytes| {
                let (script, tx) = (script.clone(), tx.clone());
                async move {
                    let reply = script.lock().expect("script").pop_front();
                    let _ = tx.send(Received { headers, body: String::from_utf8_lossy(&body).into_owned(), peer });
                    answer(reply).await
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(
            async move { axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await },
        );
        Self { url: format!("http://{addr}/hook"), got }
    }

    /// The next request, within 10 s.
    pub async fn next(&mut self) -> Received {
        tokio::time::timeout(Duration::from_secs(10), self.got.recv())
            .await
            .expect("a delivery within 10 s")
            .expect("receiver running")
    }
}

async fn answer(reply: Option<Reply>) -> Response {
    match reply {
        None => StatusCode::NO_CONTENT.into_response(),
        Some(Reply::Status(s)) => status(s).into_response(),
        Some(Reply::RetryAfter(s, value)) => (status(s), [("retry-after", value)]).into_response(),
        Some(Reply::Stall(d)) => {
            tokio::time::sleep(d).await;
            StatusCode::NO_CONTENT.into_response()
        }
    }
}

fn status(s: u16) -> StatusCode {
    StatusCode::from_u16(s).expect("status")
}
