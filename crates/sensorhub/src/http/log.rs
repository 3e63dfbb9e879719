//! One access-log line per request: method, route template, status and
//! latency, and the request metrics. The raw path is never logged: a public path holds an API key id.
//! A streamed response is logged when its body ends, with its full duration
//! and whether it was sent completely.

use super::AppState;
use super::client_ip::client_ip;
use crate::metrics::Metrics;
use axum::body::{Body, BodyDataStream, Bytes, HttpBody};
use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use futures_util::Stream;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

/// What one access-log line says.
struct Entry {
    method: &'static str,
    client: IpAddr,
    route: String,
    status: u16,
    started: Instant,
    metrics: Arc<Metrics>,
}

impl Entry {
    fn write(self, complete: bool) {
        let seconds = self.started.elapsed().as_secs_f64();
        self.metrics.request(self.method, &self.route, self.status, seconds);
        tracing::info!(
            target: "sensorhub::access",
            method = self.method,
            client = %self.client,
            route = %self.route,
            status = self.status,
            latency_ms = seconds * 1000.0,
            complete,
            "request"
        );
    }
}

/// The method as a label: one of the standard ones, or `OTHER`, so that a
/// client cannot create unbounded metric series with made-up methods.
fn method_label(m: &Method) -> &'static str {
    const KNOWN: [&str; 9] = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT"];
    KNOWN.into_iter().find(|k| *k == m.as_str()).unwrap_or("OTHER")
}

/// Middleware writing the access log and the request metrics.
pub async fn access_log(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = method_label(req.method());
    let client = client_ip(req.headers(), req.extensions(), state.forwarded_for.as_ref());
    let route =
        req.extensions().get::<MatchedPath>().map_or_else(|| "<unmatched>".to_owned(), |p| p.as_str().to_owned());
    let res = next.run(req).await;
    let entry = Entry { method, client, route, status: res.status().as_u16(), started, metrics: state.metrics.clone() };
    if res.body().size_hint().exact().is_some() {
        entry.write(true);
        return res;
    }
    let (parts, body) = res.into_parts();
    let logged = LoggedBody { inner: body.into_data_stream(), entry: Some(entry) };
    Response::from_parts(parts, Body::from_stream(logged))
}

/// A streamed body that writes its log line when it ends or is dropped.
struct LoggedBody {
    inner: BodyDataStream,
    entry: Option<Entry>,
}

impl Stream for LoggedBody {
    type Item = Result<Bytes, axum::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let item = Pin::new(&mut self.inner).poll_next(cx);
        match &item {
            Poll::Ready(None) => self.finish(true),
            Poll::Ready(Some(Err(_))) => self.finish(false),
            _ => {}
        }
        item
    }
}

impl LoggedBody {
    fn finish(&mut self, complete: bool) {
        if let Some(entry) = self.entry.take() {
            entry.write(complete);
        }
    }
}

impl Drop for LoggedBody {
    fn drop(&mut self) {
        self.finish(false);
    }
}
