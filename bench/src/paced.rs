//! An open-loop load: clients that each send a request at fixed times (a
//! fleet of stations reporting on their own clocks), whatever the pace of
//! the answers; a client whose answer comes after its next time skips
//! that time. The figure is how many requests were sent.

use std::time::Duration;

/// `clients` together sending `rate` requests/s of `send(state, k)` for
/// distinct `k` (from `first`) for `seconds`; returns the requests sent.
pub async fn paced<S, F, Fut>(
    clients: usize,
    rate: f64,
    seconds: f64,
    first: u64,
    state: impl Fn() -> S,
    send: F,
) -> Result<u64, String>
where
    S: Send + 'static,
    F: Fn(S, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<S, String>> + Send,
{
    let clients = clients.max(1);
    let every = Duration::from_secs_f64(clients as f64 / rate.max(1e-3));
    let each = (seconds / every.as_secs_f64()).floor() as u64;
    let send = std::sync::Arc::new(send);
    let tasks: Vec<_> = (0..clients as u64)
        .map(|c| {
            let (send, mut s) = (send.clone(), state());
            tokio::spawn(async move {
                // The clients' times spread over one period.
                let start = tokio::time::Instant::now() + every.mul_f64(c as f64 / clients as f64);
                let mut tick = tokio::time::interval_at(start, every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                let mut sent = 0;
                for i in 0..each {
                    tick.tick().await;
                    s = send(s, first + i * clients as u64 + c).await?;
                    sent += 1;
                }
                Ok::<u64, String>(sent)
            })
        })
        .collect();
    let mut sent = 0;
    for t in tasks {
        sent += t.await.map_err(|e| e.to_string())??;
    }
    Ok(sent)
}
