//! The endpoints the `hooks` scenario's subscriptions deliver to: a
//! receiver that counts what it gets, on the load's runtime or one of its
//! own, and one that takes connections and never answers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Starts the receiver; returns its URL and the count of deliveries
/// (readings: a batched POST counts its members) it got.
pub(super) async fn receiver() -> Result<(String, Arc<AtomicU64>), String> {
    let count = Arc::new(AtomicU64::new(0));
    let counted = count.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: axum::body::Bytes| {
            let members = body.windows(13).filter(|w| w == b"\"webhook_id\":").count();
            counted.fetch_add(members.max(1) as u64, Ordering::Relaxed);
            async { axum::http::StatusCode::NO_CONTENT }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((format!("http://{addr}/hook"), count))
}

/// A runtime of two threads for the receiver, in the idle scheduling
/// class (Linux) if `idle`.
pub(super) fn receiver_runtime(idle: bool) -> Result<tokio::runtime::Runtime, String> {
    use thread_priority::unix::{NormalThreadSchedulePolicy, ThreadSchedulePolicy};
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(move || {
            if !idle {
                return;
            }
            let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
            let id = thread_priority::thread_native_id();
            if let Err(e) =
                thread_priority::set_thread_priority_and_policy(id, thread_priority::ThreadPriority::Min, idle)
            {
                eprintln!("the receiver's thread stays in the normal class: {e:?}");
            }
        })
        .build()
        .map_err(|e| e.to_string())
}

/// Starts an endpoint that takes connections and never answers (a partner
/// down behind a load balancer that still accepts); returns its URL.
pub(super) async fn black_hole() -> Result<String, String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            held.push(conn);
        }
    });
    Ok(format!("http://{addr}/hook"))
}
