//! A closed-loop load: clients that each send their next request as soon
//! as the previous one is answered, for a while; the figure is requests/s.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// `clients` sending `send(k)` for distinct `k` (from `first`) for
/// `seconds`; returns requests/s.
pub async fn load<F, Fut>(clients: usize, seconds: u64, first: u64, send: F) -> Result<f64, String>
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    load_at_least(clients, seconds, 0, first, send).await
}

/// As [`load`], going on past `seconds` until at least `requests` were sent.
pub async fn load_at_least<F, Fut>(
    clients: usize,
    seconds: u64,
    requests: u64,
    first: u64,
    send: F,
) -> Result<f64, String>
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    let send = Arc::new(send);
    clients_for(
        clients,
        seconds,
        requests,
        first,
        || (),
        move |(), k| {
            let send = send.clone();
            async move { send(k).await }
        },
    )
    .await
}

/// As [`load`], with a state per client (its connection, say): `send`
/// takes the client's state and gives it back with its answer.
pub async fn load_each<S, F, Fut>(
    clients: usize,
    seconds: u64,
    first: u64,
    state: impl Fn() -> S,
    send: F,
) -> Result<f64, String>
where
    S: Send + 'static,
    F: Fn(S, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<S, String>> + Send,
{
    clients_for(clients, seconds, 0, first, state, send).await
}

/// `clients` sending for `seconds` and until `requests` were sent, each
/// with its own state; requests/s.
async fn clients_for<S, F, Fut>(
    clients: usize,
    seconds: u64,
    requests: u64,
    first: u64,
    state: impl Fn() -> S,
    send: F,
) -> Result<f64, String>
where
    S: Send + 'static,
    F: Fn(S, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<S, String>> + Send,
{
    let send = Arc::new(send);
    let next = Arc::new(AtomicU64::new(first));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (next, stop, send, mut s) = (next.clone(), stop.clone(), send.clone(), state());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    s = send(s, next.fetch_add(1, Ordering::Relaxed)).await?;
                }
                Ok::<_, String>(())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    while next.load(Ordering::Relaxed) - first < requests && !tasks.iter().any(|t| t.is_finished()) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    Ok((next.load(Ordering::Relaxed) - first) as f64 / started.elapsed().as_secs_f64())
}
