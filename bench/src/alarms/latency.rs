//! The latency phase: from a webhook's 200 to the signed `alarm.raised` it
//! caused arriving at a receiver here.

use super::ingest::{envelope, post};
use crate::dataset::Station;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The receiver of alarm deliveries: when each `alarm.raised` arrived, by device and reading time.
pub(super) type Arrivals = Arc<Mutex<HashMap<(String, String), Instant>>>;

/// Starts the receiver; its URL and what it saw.
pub(super) async fn receiver() -> Result<(String, Arrivals), String> {
    let arrivals: Arrivals = Arc::default();
    let seen = arrivals.clone();
    let app = axum::Router::new().route(
        "/alarms",
        axum::routing::post(move |body: axum::body::Bytes| {
            let now = Instant::now();
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body)
                && v["event"] == "alarm.raised"
                && let (Some(d), Some(t)) = (v["device_id"].as_str(), v["timestamp"].as_str())
                && let Ok(mut map) = seen.lock()
            {
                map.entry((d.to_owned(), t.to_owned())).or_insert(now);
            }
            async { axum::http::StatusCode::NO_CONTENT }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((format!("http://{addr}/alarms"), arrivals))
}

/// A raising reading (device and time) and when its 200 came.
type Answered = ((String, String), Instant);

/// Posts readings at `rate` per second for `seconds`, each station's going
/// high and low in turn (each high one raises); the latencies (ms, sorted)
/// from each raising reading's 200 to its delivery's arrival.
pub(super) async fn latency(
    port: u16,
    stations: Arc<Vec<Station>>,
    rate: u64,
    seconds: u64,
    arrivals: Arrivals,
) -> Result<Vec<f64>, String> {
    let base = jiff::Timestamp::now().as_second() - 1200;
    let answered: Arc<Mutex<Vec<Answered>>> = Arc::default();
    let total = rate * seconds;
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(total as usize);
    for k in 0..total {
        let due = started + Duration::from_secs_f64(k as f64 / rate as f64);
        tokio::time::sleep_until(due.into()).await;
        let high = (k / stations.len() as u64).is_multiple_of(2);
        let (body, second, device) = envelope(&stations, base, k, Some(high));
        let answered = answered.clone();
        tasks.push(tokio::spawn(async move {
            let at = post(port, &body).await?;
            if high && let Ok(mut a) = answered.lock() {
                let ts = jiff::Timestamp::from_second(second).map_or_else(|_| String::new(), |t| t.to_string());
                a.push(((device, ts), at));
            }
            Ok::<_, String>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    // Deliveries of the last readings may still be on their way.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let answered = answered.lock().map_err(|e| e.to_string())?.clone();
    let arrived = arrivals.lock().map_err(|e| e.to_string())?.clone();
    let mut out: Vec<f64> = answered
        .iter()
        .filter_map(|(key, at)| arrived.get(key).map(|got| got.saturating_duration_since(*at).as_secs_f64() * 1000.0))
        .collect();
    out.sort_by(f64::total_cmp);
    Ok(out)
}
