//! No endpoint takes more than its share: one that accepts connections and
//! never answers holds only its own slots while a healthy endpoint's
//! deliveries go out at once; an endpoint that asks to be retried at once
//! (`Retry-After: 0`) waits the schedule's minimum all the same.

use super::delivery::{KEY, ingest, recorded, subscribe, worker_with};
use super::receiver::{Receiver, Reply};
use crate::harness::TestApp;
use sensorhub::config::delivery::DeliverySettings;
use sensorhub::delivery::worker::Clock;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

fn envelope(minute: u32, second: u32) -> String {
    json!({"event": "sensor-data", "device_id": "AWLR-001",
           "timestamp": format!("2026-05-05T07:{minute:02}:{second:02}+07:00"), "data": {"AWLR1-batt": 91.5}})
    .to_string()
}

/// An endpoint that accepts every connection and never answers: returns
/// its URL and how many connections it holds.
async fn black_hole() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
    let held = Arc::new(AtomicUsize::new(0));
    let count = held.clone();
    tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            open.push(socket);
            count.store(open.len(), Ordering::SeqCst);
        }
    });
    (url, held)
}

on_each_backend! {
    async fn a_black_hole_endpoint_slows_only_itself() {
        let app = TestApp::with(ingest()).await;
        let (hole, connections) = black_hole().await;
        subscribe(&*app.store, &hole).await;
        // A backlog for the black hole, older than anything else and far
        // more than the worker's slots.
        for i in 0..120 {
            assert_eq!(app.webhook(Some(KEY), &envelope(i / 60, i % 60)).await.status, 200);
        }
        let settings = DeliverySettings {
            allow_private: true,
            timeout: Duration::from_secs(20),
            in_flight: 16,
            ..DeliverySettings::default()
        };
        let (worker, _clock) = worker_with(app.store.clone(), settings);
        worker.wake();
        // The worker has taken the black hole's backlog once it holds its connections.
        let deadline = Instant::now() + Duration::from_secs(10);
        while connections.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "the worker never reached the black hole");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }

        let mut rx = Receiver::start(Vec::new()).await;
        subscribe(&*app.store, &rx.url).await;
        let mut lags = Vec::new();
        for i in 0..5 {
            let stored = Instant::now();
            assert_eq!(app.webhook(Some(KEY), &envelope(10, i)).await.status, 200);
            worker.wake();
            let got = tokio::time::timeout(Duration::from_secs(10), rx.next()).await;
            assert!(got.is_ok(), "reading {i}: the healthy endpoint got nothing in 10 s beside the black hole");
            lags.push(stored.elapsed());
        }
        let worst = lags.iter().max().copied().unwrap_or_default();
        eprintln!("healthy endpoint beside a black hole: worst lag {worst:?} over {} readings", lags.len());
        assert!(worst < Duration::from_secs(3), "lags {lags:?}");
        let held = connections.load(Ordering::SeqCst);
        assert!((1..=4).contains(&held), "the black hole holds {held} connections: at most its 4 at once");
    }

    async fn retry_after_zero_waits_the_schedules_minimum() {
        let app = TestApp::with(ingest()).await;
        let mut rx = Receiver::start(vec![Reply::RetryAfter(503, "0")]).await;
        let (sub, _) = subscribe(&*app.store, &rx.url).await;
        let settings = DeliverySettings { allow_private: true, ..DeliverySettings::default() };
        let (worker, clock) = worker_with(app.store.clone(), settings);
        assert_eq!(app.webhook(Some(KEY), &envelope(0, 1)).await.status, 200);
        worker.wake();
        rx.next().await;
        let list = recorded(&*app.store, &sub, |d| d.first().is_some_and(|d| d.attempts == 1)).await;
        let wait = list[0].next_attempt - clock.now_ms();
        assert!((2_500..=5_000).contains(&wait), "Retry-After: 0 brought the retry {wait} ms later, not the schedule's");
    }
}
