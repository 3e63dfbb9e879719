//! Batched deliveries: readings that arrive together for a subscription
//! that asks for it go in one signed POST of `sensor-data.batch`, and a
//! failing batch is retried whole, every member recording the outcome.

use super::delivery::{recorded, verify, worker};
use super::receiver::{Receiver, Reply};
use super::{SECRET_KEY, id_and_secret, subscription};
use crate::cli::ok;
use crate::harness::{TestApp, reading};
use sensorhub::delivery::sign::SigningSecret;
use sensorhub_store::delivery::Outbox;
use std::collections::BTreeSet;

/// Subscribes alice's devices to `url` in batches of up to 10; returns the
/// id and secret.
fn subscribe_batched(db: &str, url: &str) -> (String, SigningSecret) {
    let add = ["add", "--account", "alice", "--url", url, "--allow-http", "--batch", "--batch-max", "10"];
    let (id, secret) = id_and_secret(&ok(&subscription(db, Some(SECRET_KEY), &add)));
    (id, SigningSecret::parse(&secret).expect("whsec"))
}

/// Stores 5 readings of AWLR-001 in one write that owes deliveries.
async fn five_readings(app: &TestApp) {
    let five = (0..5).map(|i| Ok(reading("AWLR-001", 1_777_964_400 + i * 60, "AWLR1-wl", i as f64)));
    app.store.import(Box::new(five.collect::<Vec<_>>().into_iter()), Outbox::Deliver).await.expect("import");
}

/// The batch's member ids, checking its shape.
fn members(body: &str) -> Vec<String> {
    let body: serde_json::Value = serde_json::from_str(body).expect("JSON");
    assert_eq!(body["event"], "sensor-data.batch");
    let data = body["data"].as_array().expect("data");
    for m in data {
        assert_eq!(m["envelope"]["event"], "sensor-data");
        assert_eq!(m["envelope"]["device_id"], "AWLR-001");
    }
    data.iter().map(|m| m["webhook_id"].as_str().expect("id").to_owned()).collect()
}

on_each_backend! {
    async fn readings_that_arrive_together_go_in_one_signed_post() {
        let app = TestApp::start().await;
        let mut rx = Receiver::start(vec![]).await;
        let (sub, secret) = subscribe_batched(&app.db, &rx.url);
        assert!(ok(&subscription(&app.db, None, &["list"])).contains("batch=10"));
        five_readings(&app).await;
        let (worker, _clock) = worker(app.store.clone(), true);
        worker.wake();
        let got = rx.next().await;
        verify(&secret, &got);
        let ids = members(&got.body);
        assert_eq!(ids.len(), 5, "{}", got.body);
        assert_eq!(ids.iter().collect::<BTreeSet<_>>().len(), 5, "each member has its own id");
        let batch_id = got.headers["webhook-id"].to_str().expect("id");
        assert!(batch_id.starts_with("batch_") && !ids.iter().any(|m| m == batch_id), "{batch_id}");
        let timestamps: Vec<_> = serde_json::from_str::<serde_json::Value>(&got.body).expect("JSON")["data"]
            .as_array()
            .expect("data")
            .iter()
            .map(|m| m["envelope"]["timestamp"].as_str().expect("ts").to_owned())
            .collect();
        assert_eq!(timestamps.first().map(String::as_str), Some("2026-05-05T07:00:00Z"), "oldest first");
        recorded(&*app.store, &sub, <[_]>::is_empty).await;
        assert!(rx.got.try_recv().is_err(), "one POST for the five");
    }

    async fn a_failing_batch_is_retried_whole() {
        let app = TestApp::start().await;
        let mut rx = Receiver::start(vec![Reply::Status(503)]).await;
        let (sub, secret) = subscribe_batched(&app.db, &rx.url);
        five_readings(&app).await;
        let (worker, clock) = worker(app.store.clone(), true);
        worker.wake();
        let first = rx.next().await;
        verify(&secret, &first);
        let list = recorded(&*app.store, &sub, |d| d.len() == 5 && d.iter().all(|d| d.attempts == 1)).await;
        let due: BTreeSet<i64> = list.iter().map(|d| d.next_attempt).collect();
        assert_eq!(due.len(), 1, "every member got the same outcome: {list:?}");
        assert!(list.iter().all(|d| d.last_status == Some(503) && d.state == "pending"));

        clock.set(list[0].next_attempt);
        worker.wake();
        let again = rx.next().await;
        verify(&secret, &again);
        assert_eq!(again.headers["webhook-id"], first.headers["webhook-id"], "the same batch, the same id");
        assert_eq!(members(&again.body), members(&first.body));
        recorded(&*app.store, &sub, <[_]>::is_empty).await;
        assert!(rx.got.try_recv().is_err(), "retried as one POST");
    }
}
