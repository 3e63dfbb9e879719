//! Alarm transitions delivered to a subscription that asks for them:
//! signed, retried with the same webhook id, and only to subscriptions
//! that chose the `alarms` events (the default stays `sensor-data`);
//! and woken by the commit that queued them, not left for the next poll.

use super::delivery::{KEY, ingest, recorded, subscribe, subscribe_to, verify, worker, worker_with};
use super::receiver::{Receiver, Reply};
use crate::harness::TestApp;
use sensorhub::config::delivery::DeliverySettings;
use sensorhub::delivery::alarm_wake::AlarmWake;
use sensorhub::delivery::worker::WAKE_GAP;
use std::sync::Arc;
use std::time::Duration;

/// A reading of AWLR-001's water level at `second`, as the webhook takes it.
fn level(second: i64, value: f64) -> String {
    let time = jiff::Timestamp::from_second(second).expect("t").to_string();
    format!(r#"{{"event":"sensor-data","device_id":"AWLR-001","timestamp":"{time}","data":{{"AWLR1-wl":{value}}}}}"#)
}

on_each_backend! {
    async fn a_transition_goes_to_subscribers_of_alarms_signed_with_one_id_on_every_attempt() {
        let app = TestApp::with(ingest()).await;
        crate::alarms::rules(&app, &[crate::alarms::SIAGA]).await;
        let mut rx = Receiver::start(vec![Reply::Status(503)]).await;
        let (sub, secret) = subscribe_to(&*app.store, &rx.url, &["alarms"]).await;
        let (readings_only, _) = subscribe(&*app.store, "http://127.0.0.1:9/never").await;
        let (worker, clock) = worker(app.store.clone(), true);
        let now = jiff::Timestamp::now().as_second() - 60;
        let time = jiff::Timestamp::from_second(now).expect("t").to_string();
        let body = format!(r#"{{"event":"sensor-data","device_id":"AWLR-001","timestamp":"{time}","data":{{"AWLR1-wl":100}}}}"#);
        assert_eq!(app.webhook(Some(KEY), &body).await.status, 200);
        worker.wake();
        let first = rx.next().await;
        verify(&secret, &first);
        let got: serde_json::Value = serde_json::from_str(&first.body).expect("JSON");
        assert_eq!((got["event"].as_str(), got["device_id"].as_str(), got["timestamp"].as_str()), (Some("alarm.raised"), Some("AWLR-001"), Some(time.as_str())));
        let data = &got["data"];
        assert_eq!((data["rule"].as_str(), data["transition"].as_str(), data["level"].as_str(), data["value"].as_f64()), (Some("siaga"), Some("raised"), Some("Siaga 3"), Some(100.0)));
        let id = first.headers["webhook-id"].to_str().expect("id").to_owned();
        assert!(id.starts_with("msg_alarm_"), "{id}");

        let list = recorded(&*app.store, &sub, |d| d.first().is_some_and(|d| d.attempts == 1)).await;
        assert_eq!(list.len(), 1, "one delivery: the reading itself is not this subscription's");
        clock.set(list[0].next_attempt);
        worker.wake();
        let again = rx.next().await;
        assert_eq!(again.headers["webhook-id"].to_str().expect("id"), id, "the same id on every attempt");
        assert_eq!(again.body, first.body);
        let readings = app.store.deliveries(&readings_only, false).await.expect("deliveries");
        assert_eq!(readings.len(), 1, "the sensor-data subscriber got the reading and no alarm: {readings:?}");
    }
}

on_each_backend! {
    async fn a_commit_that_queues_an_alarm_wakes_the_worker_whose_poll_is_an_hour_away() {
        let app = TestApp::with(ingest()).await;
        crate::alarms::rules(&app, &[crate::alarms::SIAGA]).await;
        let mut rx = Receiver::start(Vec::new()).await;
        subscribe_to(&*app.store, &rx.url, &["alarms"]).await;
        let settings = DeliverySettings {
            allow_private: true,
            timeout: Duration::from_millis(500),
            poll: Duration::from_secs(3600),
            ..DeliverySettings::default()
        };
        let (worker, _clock) = worker_with(app.store.clone(), settings);
        app.store.observe(Arc::new(AlarmWake(worker)));
        let now = jiff::Timestamp::now().as_second();
        // The worker's first look (at its start) may be what delivers this one ...
        assert_eq!(app.webhook(Some(KEY), &level(now - 60, 100.0)).await.status, 200);
        let raised: serde_json::Value = serde_json::from_str(&rx.next().await.body).expect("JSON");
        assert_eq!(raised["event"], "alarm.raised");
        // (A wake left over from that commit makes at most one more claim,
        // within WAKE_GAP of the one that sent it: let it pass.)
        tokio::time::sleep(WAKE_GAP * 4).await;
        // ... but not this one: its next look is an hour away, so only the
        // commit that queued the transition can have woken it.
        assert_eq!(app.webhook(Some(KEY), &level(now - 30, 170.0)).await.status, 200);
        let changed: serde_json::Value = serde_json::from_str(&rx.next().await.body).expect("JSON");
        assert_eq!((changed["event"].as_str(), changed["data"]["level"].as_str()), (Some("alarm.level_changed"), Some("Siaga 2")));
    }
}
