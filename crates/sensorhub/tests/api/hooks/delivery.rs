//! Deliveries to a local receiver: signed (checked by the Standard
//! Webhooks reference library), retried on the schedule (the worker's
//! clock is the test's), `Retry-After` honoured, timeouts retried, a 400
//! final and replayable, private targets refused, one delivery per event
//! with two workers, and nothing lost to a SIGKILL.

use super::receiver::{Received, Receiver, Reply};
use super::{SECRET_KEY, id_and_secret, subscription};
use crate::cli::ok;
use crate::harness::{ServeProcess, TestApp, fresh_database};
use sensorhub::config::delivery::{AttemptPriority, DeliverySettings};
use sensorhub::config::serve::ServeSettings;
use sensorhub::config::server::WebhookMode;
use sensorhub::delivery::seal::SealingKey;
use sensorhub::delivery::sign::SigningSecret;
use sensorhub::delivery::worker::{Clock, WorkerHandle, spawn};
use sensorhub::metrics::Metrics;
use sensorhub_core::secret::generate_key;
use sensorhub_store::Store;
use sensorhub_store::delivery::{DeliveryRecord, NewSubscription, Outbox, Replay, SENSOR_DATA};
use serde_json::json;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

pub(super) const KEY: &str = "wh-alice-secret";

/// A clock the test moves.
pub(super) struct TestClock(AtomicI64);

impl Clock for TestClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl TestClock {
    pub(super) fn set(&self, ms: i64) {
        self.0.store(ms, Ordering::SeqCst);
    }
}

pub(super) fn ingest() -> ServeSettings {
    let mut options = TestApp::settings();
    options.webhook.mode = WebhookMode::Ingest;
    options
}

fn key() -> SealingKey {
    SealingKey::from_base64(SECRET_KEY).expect("key")
}

/// Subscribes alice's devices to `url` (http allowed); returns its id and secret.
pub(super) async fn subscribe(store: &dyn Store, url: &str) -> (String, SigningSecret) {
    subscribe_to(store, url, &[SENSOR_DATA]).await
}

/// Subscribes alice's devices to `url` (http allowed) for `events`; returns its id and secret.
pub(super) async fn subscribe_to(store: &dyn Store, url: &str, events: &[&str]) -> (String, SigningSecret) {
    let id = generate_key("sub_").expect("id");
    let secret = SigningSecret::generate().expect("secret");
    let sub = NewSubscription {
        id: id.clone(),
        username: "alice".into(),
        url: url.into(),
        devices: None,
        events: events.iter().map(|e| (*e).to_owned()).collect(),
        sealed_secret: key().seal(&id, secret.as_bytes()).expect("seal"),
        sealed_headers: None,
        batch: false,
        batch_max: 100,
        allow_http: true,
    };
    store.add_subscription(sub).await.expect("subscribe");
    (id, secret)
}

/// A worker over `app`'s store on the test's clock (a minute ahead, so
/// that what the test stores is due), with loopback allowed or not, and a
/// half-second limit per attempt.
pub(super) fn worker(store: Arc<dyn Store>, allow_private: bool) -> (WorkerHandle, Arc<TestClock>) {
    let settings =
        DeliverySettings { allow_private, timeout: Duration::from_millis(500), ..DeliverySettings::default() };
    worker_with(store, settings)
}

/// A worker as [`worker`] makes, with `settings`.
pub(super) fn worker_with(store: Arc<dyn Store>, settings: DeliverySettings) -> (WorkerHandle, Arc<TestClock>) {
    let (worker, clock, _) = worker_metered(store, settings);
    (worker, clock)
}

/// A worker as [`worker_with`] makes, and its metrics.
fn worker_metered(store: Arc<dyn Store>, settings: DeliverySettings) -> (WorkerHandle, Arc<TestClock>, Arc<Metrics>) {
    // Attempts in the normal scheduling class: in the idle class (the
    // default; lane.rs tests it) they would get no CPU while the suite's
    // heavy tests run beside, and every bound here would bound the load.
    let settings = DeliverySettings { priority: AttemptPriority::Normal, ..settings };
    let clock = Arc::new(TestClock(AtomicI64::new(jiff::Timestamp::now().as_millisecond() + 60_000)));
    let metrics = Arc::new(Metrics::default());
    (spawn(store, key(), settings, metrics.clone(), clock.clone()).expect("worker"), clock, metrics)
}

fn envelope(second: u32) -> String {
    json!({"event": "sensor-data", "device_id": "AWLR-001", "timestamp": format!("2026-05-05T07:00:{second:02}+07:00"),
           "data": {"AWLR1-batt": 91.5}})
    .to_string()
}

/// Subscription `sub`'s deliveries once `done` holds of them (waiting for
/// the worker to record an attempt).
pub(super) async fn recorded(
    store: &dyn Store,
    sub: &str,
    done: impl Fn(&[DeliveryRecord]) -> bool,
) -> Vec<DeliveryRecord> {
    for _ in 0..1000 {
        let list = store.deliveries(sub, false).await.expect("deliveries");
        if done(&list) {
            return list;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the deliveries of {sub} never got there: {:?}", store.deliveries(sub, false).await);
}

/// Checks `got`'s signature with the Standard Webhooks reference library.
pub(super) fn verify(secret: &SigningSecret, got: &Received) {
    let reference = standardwebhooks::Webhook::new(&secret.reveal()).expect("secret");
    reference.verify(got.body.as_bytes(), &got.headers).expect("the signature verifies");
    assert_eq!(got.headers["content-type"], "application/json");
}

fn message_id(got: &Received) -> String {
    got.headers["webhook-id"].to_str().expect("id").to_owned()
}

on_each_backend! {
    async fn deliveries_are_signed_and_retried_on_schedule_until_they_succeed() {
        let app = TestApp::with(ingest()).await;
        let mut rx = Receiver::start(vec![Reply::Status(503), Reply::Status(500)]).await;
        let (sub, secret) = subscribe(&*app.store, &rx.url).await;
        let (worker, clock) = worker(app.store.clone(), true);
        assert_eq!(app.webhook(Some(KEY), &envelope(0)).await.status, 200);
        worker.wake();

        let first = rx.next().await;
        verify(&secret, &first);
        let body: serde_json::Value = serde_json::from_str(&first.body).expect("JSON");
        assert_eq!(body["event"], "sensor-data");
        assert_eq!(body["device_id"], "AWLR-001");
        assert_eq!(body["timestamp"], "2026-05-05T00:00:00Z");
        assert_eq!(body["data"]["sensors"][0]["id"], "AWLR1-batt");
        assert_eq!(body["data"]["sensors"][0]["value"], 91.5);

        // Backoff 5 s then 10 s, each with jitter of at most half.
        for (attempts, range) in [(1, 2_500..=5_000), (2, 5_000..=10_000)] {
            let list = recorded(&*app.store, &sub, |d| d.first().is_some_and(|d| d.attempts == attempts)).await;
            let wait = list[0].next_attempt - clock.now_ms();
            assert!(range.contains(&wait), "attempt {attempts}: next in {wait} ms");
            clock.set(list[0].next_attempt);
            worker.wake();
            let again = rx.next().await;
            verify(&secret, &again);
            assert_eq!(message_id(&again), message_id(&first), "one webhook-id for every attempt");
            assert_eq!(again.peer, first.peer, "the connection is kept for the next attempt");
        }
        assert!(recorded(&*app.store, &sub, <[_]>::is_empty).await.is_empty(), "delivered: no longer owed");
        assert_eq!(app.store.outbox_backlog().await.expect("backlog"), 0);
    }

    async fn retry_after_is_honoured() {
        let app = TestApp::with(ingest()).await;
        let mut rx = Receiver::start(vec![Reply::RetryAfter(429, "120")]).await;
        let (sub, _) = subscribe(&*app.store, &rx.url).await;
        let (worker, clock) = worker(app.store.clone(), true);
        assert_eq!(app.webhook(Some(KEY), &envelope(1)).await.status, 200);
        worker.wake();
        rx.next().await;
        let list = recorded(&*app.store, &sub, |d| d.first().is_some_and(|d| d.attempts == 1)).await;
        assert_eq!(list[0].next_attempt - clock.now_ms(), 120_000, "Retry-After: 120");
        assert_eq!(list[0].last_status, Some(429));
        clock.set(list[0].next_attempt);
        worker.wake();
        rx.next().await;
        recorded(&*app.store, &sub, <[_]>::is_empty).await;
    }

    async fn a_timeout_is_retried() {
        let app = TestApp::with(ingest()).await;
        let mut rx = Receiver::start(vec![Reply::Stall(Duration::from_secs(3))]).await;
        let (sub, _) = subscribe(&*app.store, &rx.url).await;
        let (worker, clock) = worker(app.store.clone(), true);
        assert_eq!(app.webhook(Some(KEY), &envelope(2)).await.status, 200);
        worker.wake();
        rx.next().await;
        let list = recorded(&*app.store, &sub, |d| d.first().is_some_and(|d| d.attempts == 1)).await;
        assert!(list[0].last_error.as_deref().is_some_and(|e| e.contains("no answer")), "{list:?}");
        assert_eq!((list[0].state.as_str(), list[0].last_status), ("pending", None));
        clock.set(list[0].next_attempt);
        worker.wake();
        rx.next().await;
        recorded(&*app.store, &sub, <[_]>::is_empty).await;
    }

    async fn a_400_ends_a_delivery_which_stays_visible_and_replays() {
        let app = TestApp::with(ingest()).await;
        let mut rx = Receiver::start(vec![Reply::Status(400)]).await;
        let (sub, _) = subscribe(&*app.store, &rx.url).await;
        let (worker, _clock) = worker(app.store.clone(), true);
        assert_eq!(app.webhook(Some(KEY), &envelope(3)).await.status, 200);
        worker.wake();
        let first = rx.next().await;
        let list = recorded(&*app.store, &sub, |d| d.first().is_some_and(|d| d.state == "failed")).await;
        assert_eq!((list[0].attempts, list[0].last_status), (1, Some(400)));
        let shown = ok(&subscription(&app.db, None, &["deliveries", &sub, "--failed"]));
        assert!(shown.contains("failed") && shown.contains("status=400") && shown.contains(&message_id(&first)), "{shown}");

        let replayed = ok(&subscription(&app.db, None, &["replay", &sub, "--failed"]));
        assert!(replayed.starts_with("1 deliveries"), "{replayed}");
        worker.wake();
        assert_eq!(message_id(&rx.next().await), message_id(&first));
        recorded(&*app.store, &sub, <[_]>::is_empty).await;
        assert_eq!(app.store.replay_deliveries(&sub, Replay::Failed, 0).await.expect("replay"), 0);
    }

    async fn an_endpoint_failing_for_too_long_gets_its_subscription_disabled() {
        let app = TestApp::with(ingest()).await;
        let mut rx = Receiver::start(vec![Reply::Status(503), Reply::Status(503)]).await;
        let (sub, _) = subscribe(&*app.store, &rx.url).await;
        let settings = DeliverySettings {
            allow_private: true,
            timeout: Duration::from_millis(500),
            disable_after: Duration::from_secs(1),
            ..DeliverySettings::default()
        };
        let (worker, clock) = worker_with(app.store.clone(), settings);
        assert_eq!(app.webhook(Some(KEY), &envelope(6)).await.status, 200);
        worker.wake();
        rx.next().await;
        let list = recorded(&*app.store, &sub, |d| d.first().is_some_and(|d| d.attempts == 1)).await;
        let enabled = |subs: Vec<sensorhub_store::delivery::Subscription>| subs.iter().any(|s| s.id == sub && s.enabled);
        assert!(enabled(app.store.subscriptions().await.expect("list")), "one failure disables nothing");
        clock.set(list[0].next_attempt);
        worker.wake();
        rx.next().await;
        for _ in 0..1000 {
            if !enabled(app.store.subscriptions().await.expect("list")) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!enabled(app.store.subscriptions().await.expect("list")), "failing for over a second: disabled");
        let list = recorded(&*app.store, &sub, |d| d.first().is_some_and(|d| d.attempts == 2)).await;
        assert_eq!(list[0].state, "pending", "what it owes stays owed");
    }

    async fn the_backlog_gauge_follows_a_busy_worker() {
        let app = TestApp::with(ingest()).await;
        // 200 deliveries of 100 ms each, 4 at once: the worker is busy for 5 s.
        let mut rx = Receiver::start(vec![Reply::Stall(Duration::from_millis(100)); 200]).await;
        let (sub, _) = subscribe(&*app.store, &rx.url).await;
        let readings = (0..200).map(|i| crate::harness::reading("AWLR-001", 1_777_964_400 + i * 60, "AWLR1-batt", 90.0));
        app.store.import(Box::new(readings.map(Ok)), Outbox::Deliver).await.expect("import");
        let settings = DeliverySettings { allow_private: true, ..DeliverySettings::default() };
        let (worker, _clock, metrics) = worker_metered(app.store.clone(), settings);
        worker.wake();
        let mut seen = Vec::new();
        for _ in 0..60 {
            seen.push(metrics.deliveries.backlog_now());
            if seen.iter().any(|&n| n > 0 && n < 200) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(seen.iter().any(|&n| n > 0 && n < 200), "counted while busy, some delivered: {seen:?}");
        assert!(rx.got.len() < 200, "still delivering when it was counted");
        for _ in 0..200 {
            rx.next().await;
        }
        recorded(&*app.store, &sub, <[_]>::is_empty).await;
    }

    async fn private_targets_are_refused_unless_the_operator_allows_them() {
        let app = TestApp::with(ingest()).await;
        let mut rx = Receiver::start(vec![]).await;
        let (sub, _) = subscribe(&*app.store, &rx.url).await;
        let (worker, _clock) = worker(app.store.clone(), false);
        assert_eq!(app.webhook(Some(KEY), &envelope(4)).await.status, 200);
        worker.wake();
        let list = recorded(&*app.store, &sub, |d| d.first().is_some_and(|d| d.state == "failed")).await;
        let error = list[0].last_error.clone().unwrap_or_default();
        assert!(error.contains("127.0.0.1") && error.contains("--webhook-allow-private"), "{error}");
        assert!(rx.got.try_recv().is_err(), "nothing was sent to the refused address");
    }

    async fn two_workers_deliver_each_event_once() {
        let app = TestApp::with(ingest()).await;
        let mut rx = Receiver::start(vec![]).await;
        let (sub, _) = subscribe(&*app.store, &rx.url).await;
        let other = sensorhub_store::open(&app.db).await.expect("a second instance's store");
        let (one, _) = worker(app.store.clone(), true);
        let (two, _) = worker(other, true);
        let readings = (0..40).map(|i| crate::harness::reading("AWLR-001", 1_777_964_400 + i * 60, "AWLR1-batt", 90.0));
        app.store.import(Box::new(readings.map(Ok)), Outbox::Deliver).await.expect("import");
        one.wake();
        two.wake();
        let mut ids = BTreeSet::new();
        for _ in 0..40 {
            assert!(ids.insert(message_id(&rx.next().await)), "a webhook-id came twice");
        }
        recorded(&*app.store, &sub, <[_]>::is_empty).await;
        assert!(rx.got.try_recv().is_err(), "no event was delivered twice");
    }

    async fn a_sigkill_after_the_acknowledgement_still_delivers_after_restart() {
        let (db, dir, _pg) = fresh_database().await;
        let fixture = dir.path().join("fixture.json");
        std::fs::write(&fixture, crate::harness::FIXTURE).expect("write fixture");
        ok(&crate::cli::run(&db, &["apply", fixture.to_str().expect("path")], ""));
        let mut rx = Receiver::start(vec![]).await;
        let added = ok(&subscription(&db, Some(SECRET_KEY), &["add", "--account", "alice", "--url", &rx.url, "--allow-http"]));
        let (_, secret) = id_and_secret(&added);
        let secret = SigningSecret::parse(&secret).expect("whsec");

        // Without the key, this instance stores but never delivers; it dies right after the acknowledgement.
        let mut first = ServeProcess::start(&["--database", &db, "--webhook-mode", "ingest"]);
        let url = format!("{}/webhook/sensor-data", first.base);
        let answer = reqwest::Client::new().post(url).header("X-API-KEY", KEY).body(envelope(5)).send().await.expect("post");
        assert_eq!(answer.status(), 200);
        first.child.kill().expect("SIGKILL");
        let _ = first.child.wait();

        let _second = ServeProcess::start_with(
            // Attempts in the normal class (see worker_metered).
            &["--database", &db, "--webhook-allow-private", "--webhook-priority", "normal"],
            &[("SENSORHUB_SECRET_KEY", SECRET_KEY)],
        );
        let got = rx.next().await;
        verify(&secret, &got);
        assert!(got.body.contains("\"2026-05-05T00:00:05Z\""), "{}", got.body);
    }
}

on_each_backend! {
    async fn sensorhubs_own_simulated_receiver_accepts_every_envelope() {
        let app = TestApp::start().await;
        let url = format!("{}/webhook/sensor-data", app.base);
        let header = format!("X-API-KEY: {KEY}");
        let add = ["add", "--account", "alice", "--url", &url, "--allow-http", "--header", &header];
        let (sub, _) = id_and_secret(&ok(&subscription(&app.db, Some(SECRET_KEY), &add)));
        let (worker, _clock) = worker(app.store.clone(), true);
        let values = [91.5, 0.1, -3.0, 1e-7, 123_456_789.125, 0.0];
        let readings = values.into_iter().enumerate().flat_map(|(i, v)| {
            let ts = 1_777_964_400 + i as i64 * 60;
            [
                crate::harness::reading("AWLR-001", ts, "AWLR1-wl", v),
                crate::harness::reading("AWS-002", ts, "AWS2-temp", v),
            ]
        });
        let readings: Vec<_> = readings.collect();
        app.store.import(Box::new(readings.into_iter().map(Ok)), Outbox::Deliver).await.expect("import");
        worker.wake();
        recorded(&*app.store, &sub, <[_]>::is_empty).await;

        let list = app.request(reqwest::Method::GET, &format!("{url}/received"), &[("X-API-KEY", KEY)], None).await;
        let items = list.body["data"].as_array().expect("received list");
        assert_eq!(items.len(), 2 * values.len(), "{}", list.text);
        for item in items {
            let warnings = item["warnings"].as_array().expect("warnings");
            assert!(warnings.is_empty(), "the receiver accepts it without a warning: {item}");
            assert_eq!(item["envelope"]["event"], "sensor-data");
        }
    }
}
