//! Alarm transitions delivered to a subscription that asks for them:
//! signed, retried with the same webhook id, and only to subscriptions
//! that chose the `alarms` events (the default stays `sensor-data`).

use super::delivery::{KEY, ingest, recorded, subscribe, subscribe_to, verify, worker};
use super::receiver::{Receiver, Reply};
use crate::harness::TestApp;

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
