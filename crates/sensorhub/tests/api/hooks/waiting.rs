//! A delivery claimed while its endpoint is slow waits its turn, up to its
//! lease; one that waited is checked again before it goes, so an account
//! disabled meanwhile gets nothing more than the attempt already under
//! way, and the next claim drops the rest with the reason; and one whose
//! subscription was given a new secret (or URL, or headers) meanwhile
//! goes as the subscription is now, not as it was claimed.

use super::delivery::{KEY, ingest, recorded, subscribe, verify, worker_with};
use super::receiver::{Received, Receiver, Reply};
use super::{SECRET_KEY, id_and_secret, subscription};
use crate::cli::{ok, run};
use crate::harness::TestApp;
use sensorhub::config::delivery::DeliverySettings;
use sensorhub::delivery::sign::SigningSecret;
use sensorhub::delivery::worker::WorkerHandle;
use sensorhub_store::delivery::DROPPED_DISABLED;
use serde_json::json;
use std::time::Duration;

const STALL: Duration = Duration::from_secs(6);

fn envelope(second: u32) -> String {
    json!({"event": "sensor-data", "device_id": "AWLR-001",
           "timestamp": format!("2026-05-05T07:30:{second:02}+07:00"), "data": {"AWLR1-batt": 91.5}})
    .to_string()
}

/// Four envelopes stored for a subscription to `rx`, and a worker of one
/// attempt at a time per endpoint: once the first attempt is under way
/// (`rx`'s first answer stalls), the other three wait claimed behind it.
/// The stall is [`STALL`]: a command run meanwhile (a process, on a
/// machine the suite loads) must be done before it ends.
/// The subscription's id and secret, the worker, and the first request.
async fn three_claimed_behind_one(app: &TestApp, rx: &mut Receiver) -> (String, SigningSecret, WorkerHandle, Received) {
    let (sub, secret) = subscribe(&*app.store, &rx.url).await;
    for i in 0..4 {
        assert_eq!(app.webhook(Some(KEY), &envelope(i)).await.status, 200);
    }
    let settings = DeliverySettings {
        allow_private: true,
        timeout: Duration::from_secs(10),
        per_endpoint: 1,
        ..DeliverySettings::default()
    };
    let (worker, _clock) = worker_with(app.store.clone(), settings);
    worker.wake();
    let first = rx.next().await;
    (sub, secret, worker, first)
}

on_each_backend! {
    async fn a_delivery_that_waited_for_a_slow_endpoint_is_checked_again_before_it_goes() {
        let app = TestApp::with(ingest()).await;
        let stall = Reply::Stall(STALL);
        let mut rx = Receiver::start(vec![stall.clone(), stall.clone(), stall.clone(), stall]).await;
        let (sub, _, _worker, _) = three_claimed_behind_one(&app, &mut rx).await;
        ok(&run(&app.db, &["account", "disable", "alice"], ""));
        tokio::time::sleep(STALL + Duration::from_secs(2)).await;
        assert!(rx.got.try_recv().is_err(), "nothing more went out after the account was disabled");
        let list = recorded(&*app.store, &sub, |d| d.iter().filter(|d| d.state == "dropped").count() == 3).await;
        for d in list.iter().filter(|d| d.state == "dropped") {
            assert_eq!((d.attempts, d.last_error.as_deref()), (0, Some(DROPPED_DISABLED)), "{d:?}");
        }
    }

    async fn a_delivery_that_waited_goes_with_the_secret_its_subscription_has_now() {
        let app = TestApp::with(ingest()).await;
        let mut rx = Receiver::start(vec![Reply::Stall(STALL)]).await;
        let (sub, old, _worker, first) = three_claimed_behind_one(&app, &mut rx).await;
        verify(&old, &first);
        // Three claimed under the old secret.
        let (_, new) = id_and_secret(&ok(&subscription(&app.db, Some(SECRET_KEY), &["rotate-secret", &sub])));
        let new = SigningSecret::parse(&new).expect("whsec");
        for _ in 0..3 {
            verify(&new, &rx.next().await);
        }
        recorded(&*app.store, &sub, <[_]>::is_empty).await;
    }
}
