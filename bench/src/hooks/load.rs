//! The `hooks` scenario's load: webhook readings of the reference station
//! posted by a closed loop of clients.

use crate::closed_loop::{load, load_each};
use crate::dataset;
use crate::keepalive::Conn;
use std::sync::Arc;

/// `clients` posting readings of the reference station (from reading
/// `first`, a second apart; all its sensors if `full`) for `seconds`, each
/// on its keep-alive connection or on a connection per reading: readings/s.
pub(super) async fn ingest_load(
    port: u16,
    clients: usize,
    (per_request, full): (bool, bool),
    seconds: u64,
    first: u64,
) -> Result<f64, String> {
    if per_request {
        return load(clients, seconds, first, move |k| crate::live::post_reading(port, 1_700_000_000 + k as i64, k))
            .await;
    }
    load_each(clients, seconds, first, move || Conn::new(port), post_on(webhook_headers(), full)).await
}

/// The keep-alive client's POST of reading `k` ([`crate::live::reading_body`]).
pub(super) fn post_on(headers: Arc<str>, full: bool) -> impl Fn(Conn, u64) -> PostOn + Send + Sync + 'static {
    move |mut conn, k| {
        let (headers, body) = (headers.clone(), crate::live::reading_body(k, full));
        Box::pin(async move {
            conn.post("/external/v1/webhook/sensor-data", &headers, &body?, 200).await?;
            Ok(conn)
        })
    }
}

/// One POST of [`post_on`] under way.
type PostOn = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Conn, String>> + Send>>;

/// The webhook's headers.
pub(super) fn webhook_headers() -> Arc<str> {
    format!("Content-Type: application/json\r\nX-API-KEY: {}\r\n", dataset::BENCH_WEBHOOK_KEY).into()
}
