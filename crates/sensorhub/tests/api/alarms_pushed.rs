//! Alarm transitions where they leave the server (issue 25): a SIGKILL in
//! the middle of a flood loses no transition and repeats none (the events
//! list and the signed deliveries after a restart agree with a replay of
//! the same readings), and with `--mqtt-url` each device's current state is
//! kept as a retained message on the real Mosquitto (published again each
//! time the link connects).

use crate::alarms::SIAGA;
use crate::cli::ok;
use crate::harness::{ServeProcess, secs};
use crate::hooks::SECRET_KEY;
use crate::hooks::receiver::Receiver;
use crate::mqtt::{Broker, Publisher, client_id, provisioned, serve};
use crate::stream::envelope;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::Packet;
use rumqttc::v5::{AsyncClient, Event, MqttOptions};
use sensorhub_store::Scope;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A rise of 20 cm within 5 minutes, on the same sensor.
const RISING: &str = r#"{"name": "rising", "sensor": "AWLR1-wl", "rise": 20, "within": "5m"}"#;

/// A transition as both sides can tell it: rule, transition, level, value
/// and the reading's second.
type Seen = (String, String, Option<String>, Option<u64>, Option<i64>);

/// Three flood waves through every band, one reading a second ending a
/// minute ago, each with a wobble inside the deadband.
fn flood() -> Vec<(i64, f64)> {
    let start = jiff::Timestamp::now().as_second() - 60 - 240;
    (0..240)
        .map(|i| {
            let wave = 120.0 - 110.0 * (std::f64::consts::TAU * i as f64 / 80.0).cos();
            let wobble = if i % 2 == 0 { 2.0 } else { -2.0 };
            (start + i, (wave + wobble).round())
        })
        .collect()
}

fn post(base: &str, (second, value): (i64, f64)) -> impl Future<Output = Option<u16>> + use<> {
    let time = jiff::Timestamp::from_second(second).expect("a time").to_string();
    let body = envelope(&time, &format!(r#"{{"AWLR1-wl":{value}}}"#));
    let url = format!("{base}/webhook/sensor-data");
    async move {
        let sent = reqwest::Client::new()
            .post(url)
            .header("X-API-KEY", "wh-alice-secret")
            .header("Content-Type", "application/json")
            .body(body)
            .send()
            .await;
        sent.ok().map(|r| r.status().as_u16())
    }
}

/// What the server's events list says, from its HTTP API.
async fn listed(base: &str, since: i64) -> Vec<Seen> {
    let start = jiff::Timestamp::from_second(since).expect("a time");
    let url = format!("{base}/pk-alice-all/devices/AWLR-001/alarms/events?start={start}");
    let body: Value = reqwest::get(url).await.expect("get").json().await.expect("JSON");
    body["data"].as_array().expect("a list").iter().map(seen).collect()
}

/// A transition object (the events list's, or a delivery's `data`) as [`Seen`].
fn seen(e: &Value) -> Seen {
    let text = |v: &Value| v.as_str().map(str::to_owned);
    (
        text(&e["rule"]).unwrap_or_default(),
        text(&e["transition"]).unwrap_or_default(),
        text(&e["level"]),
        e["value"].as_f64().map(f64::to_bits),
        e["timestamp"].as_str().map(secs),
    )
}

/// The transitions of the same readings written one by one into a fresh store.
async fn replay(readings: &[(i64, f64)]) -> Vec<Seen> {
    let (db, _dir, _pg) = provisioned().await;
    ok(&crate::cli::run(&db, &["alarm", "add", "AWLR-001", SIAGA], ""));
    ok(&crate::cli::run(&db, &["alarm", "add", "AWLR-001", RISING], ""));
    let store = sensorhub_store::open(&db).await.expect("open");
    for &(second, value) in readings {
        store.ingest(crate::harness::reading("AWLR-001", second, "AWLR1-wl", value)).await.expect("ingest");
    }
    let range = sensorhub_core::time::TimeRange { start: 0, end: i64::MAX / 2 };
    let events = store.alarm_events(Scope::All, "AWLR-001", range).await.expect("events").expect("visible");
    events
        .into_iter()
        .map(|e| (e.rule, e.transition.as_str().to_owned(), e.level, e.value.map(f64::to_bits), e.timestamp))
        .collect()
}

on_each_backend! {
    async fn a_sigkill_mid_flood_loses_no_transition_and_repeats_none() {
        let (db, _dir, _pg) = provisioned().await;
        ok(&crate::cli::run(&db, &["alarm", "add", "AWLR-001", SIAGA], ""));
        ok(&crate::cli::run(&db, &["alarm", "add", "AWLR-001", RISING], ""));
        let mut rx = Receiver::start(vec![]).await;
        let add = ["add", "--account", "alice", "--url", &rx.url, "--allow-http", "--events", "alarms"];
        ok(&crate::hooks::subscription(&db, Some(SECRET_KEY), &add));
        let readings = flood();
        // A kill between a claim's commit and its POST leaves that delivery
        // leased until the lease runs out (the attempt's timeout times the
        // rounds of slots: 170 s by default), then it is sent again. A
        // 1 s timeout with 16 slots an endpoint makes the lease 5 s, so the
        // resend comes within this test's waits wherever the kill lands.
        let serve = [
            "--database",
            db.as_str(),
            "--webhook-mode",
            "ingest",
            "--rate-limit",
            "off",
            "--webhook-allow-private",
            "--webhook-timeout",
            "1",
            "--webhook-concurrency",
            "16",
            // Attempts in the normal class (see hooks::delivery::worker_metered).
            "--webhook-priority",
            "normal",
        ];
        let key = [("SENSORHUB_SECRET_KEY", SECRET_KEY)];

        // One station posting in order, delivering as it goes; killed at a random reading.
        let mut first = ServeProcess::start_with(&serve, &key);
        let acked = Arc::new(AtomicUsize::new(0));
        let poster = {
            let (base, acked, readings) = (first.base.clone(), acked.clone(), readings.clone());
            tokio::spawn(async move {
                for r in readings {
                    match post(&base, r).await {
                        Some(200) => acked.fetch_add(1, Ordering::SeqCst),
                        Some(status) => panic!("only the kill may fail a post: {status}"),
                        None => return,
                    };
                }
            })
        };
        let kill_at = fastrand::usize(20..readings.len() - 20);
        while acked.load(Ordering::SeqCst) < kill_at {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        first.child.kill().expect("SIGKILL");
        let _ = first.child.wait();
        poster.await.expect("the poster");

        // The station sends again from its first unacknowledged reading (which may be stored already).
        let second = ServeProcess::start_with(&serve, &key);
        for &r in &readings[acked.load(Ordering::SeqCst)..] {
            assert_eq!(post(&second.base, r).await, Some(200));
        }
        let events = listed(&second.base, readings[0].0 - 60).await;
        assert_eq!(events, replay(&readings).await, "killed after {kill_at} readings");
        assert!(events.len() >= 12, "three floods of several transitions each: {events:?}");

        // Each transition delivered, under one webhook id, however often it was sent.
        let mut delivered = BTreeMap::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while delivered.len() < events.len() {
            assert!(Instant::now() < deadline, "{} of {} transitions delivered", delivered.len(), events.len());
            let got = rx.next().await;
            let body: Value = serde_json::from_str(&got.body).expect("JSON");
            let id = got.headers["webhook-id"].to_str().expect("an id").to_owned();
            let previous = delivered.insert(id, seen(&body["data"]));
            assert!(previous.is_none_or(|p| p == seen(&body["data"])), "one id, one transition");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        while let Ok(got) = rx.got.try_recv() {
            let id = got.headers["webhook-id"].to_str().expect("an id").to_owned();
            assert!(delivered.contains_key(&id), "a transition beyond the events list was delivered: {}", got.body);
        }
        let delivered: BTreeSet<Seen> = delivered.into_values().collect();
        assert_eq!(delivered, events.into_iter().collect::<BTreeSet<_>>());
    }
}

/// A subscriber that connects now and takes the first message on `topic`
/// (the retained one, when there is one) within 10 s.
async fn retained(port: u16, topic: &str) -> (Value, bool) {
    let options = MqttOptions::new(client_id("alarms-reader"), "127.0.0.1", port);
    let (client, mut eventloop) = AsyncClient::new(options, 10);
    client.subscribe(topic, QoS::AtLeastOnce).await.expect("subscribe");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, eventloop.poll()).await.expect("a message on the topic within 10 s") {
            Ok(Event::Incoming(Packet::Publish(p))) => {
                let _ = client.disconnect().await;
                return (serde_json::from_slice(&p.payload).expect("JSON"), p.retain);
            }
            Ok(_) => {}
            Err(e) => panic!("the subscriber's link: {e}"),
        }
    }
}

#[tokio::test]
async fn each_transition_is_published_and_the_current_state_is_retained() {
    let broker = Broker::start();
    let (db, _dir, _pg) = provisioned().await;
    ok(&crate::cli::run(&db, &["alarm", "add", "AWLR-001", SIAGA], ""));
    // Raised while no server ran (by `import`): the link publishes the state when it connects.
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("one.ndjson");
    let at = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second() - 120).expect("a time");
    let line = serde_json::json!({"device_id": "AWLR-001", "timestamp": at.to_string(), "sensors": [{"id": "AWLR1-wl", "value": 100.0}]});
    std::fs::write(&file, format!("{line}\n")).expect("write");
    ok(&crate::cli::run(&db, &["import", file.to_str().expect("a path")], ""));
    let _server = serve(&db, &broker, &client_id("alarms"), &[]).await;
    let (state, _) = kept(broker.port, |state| state["event"].is_null()).await;
    assert_eq!(
        (state["alarms"][0]["state"].as_str(), state["alarms"][0]["level"].as_str()),
        (Some("active"), Some("Siaga 3")),
        "the state at the link's start: {state}"
    );
    let publisher = Publisher::connect(broker.port, &client_id("station"));
    // Seconds apart (an older or same-second reading moves nothing).
    let reading = |value: f64, ago: i64| {
        let time = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second() - ago).expect("a time").to_string();
        serde_json::json!({"timestamp": time, "sensors": [{"id": "AWLR1-wl", "value": value}]}).to_string()
    };

    publisher.publish("sensorhub/AWLR-001/readings", reading(170.0, 60)).await;
    let (state, _) = kept(broker.port, |state| state["event"]["transition"] == "level_changed").await;
    assert_eq!(
        (state["alarms"][0]["state"].as_str(), state["alarms"][0]["level"].as_str()),
        (Some("active"), Some("Siaga 2"))
    );

    publisher.publish("sensorhub/AWLR-001/readings", reading(10.0, 30)).await;
    let (state, _) = kept(broker.port, |state| state["event"]["transition"] == "cleared").await;
    assert_eq!((state["alarms"][0]["state"].as_str(), &state["alarms"][0]["level"]), (Some("ok"), &Value::Null));
}

/// Waits until a subscriber that connects finds a retained state on
/// AWLR-001's alarms topic for which `done` holds (a subscriber that came
/// before the transition gets it as it happens, not retained).
async fn kept(port: u16, done: impl Fn(&Value) -> bool) -> (Value, bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (state, retain) = retained(port, "sensorhub/AWLR-001/alarms").await;
        if retain && done(&state) {
            return (state, retain);
        }
        assert!(Instant::now() < deadline, "not kept by the broker within 10 s: {state}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn transitions_of_one_reading_are_each_published_with_the_state_after_them() {
    let broker = Broker::start();
    let (db, _dir, _pg) = provisioned().await;
    ok(&crate::cli::run(&db, &["alarm", "add", "AWLR-001", SIAGA], ""));
    ok(&crate::cli::run(&db, &["alarm", "add", "AWLR-001", RISING], ""));
    let _server = serve(&db, &broker, &client_id("alarms"), &[]).await;
    // The state published at the link's start is retained before the subscriber comes.
    kept(broker.port, |state| state["event"].is_null()).await;
    let options = MqttOptions::new(client_id("alarms-live"), "127.0.0.1", broker.port);
    let (client, mut eventloop) = AsyncClient::new(options, 10);
    client.subscribe("sensorhub/AWLR-001/alarms", QoS::AtLeastOnce).await.expect("subscribe");
    let mut live = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let publisher = Publisher::connect(broker.port, &client_id("station"));
    let reading = |value: f64, ago: i64| {
        let time = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second() - ago).expect("a time").to_string();
        serde_json::json!({"timestamp": time, "sensors": [{"id": "AWLR1-wl", "value": value}]}).to_string()
    };
    let mut subscribed = false;
    // One quiet reading, then one that enters Siaga 3 and rises 90 cm: two
    // transitions of one device in one transaction.
    while live.len() < 2 {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, eventloop.poll()).await.expect("both transitions within 10 s") {
            Ok(Event::Incoming(Packet::SubAck(_))) if !subscribed => {
                subscribed = true;
                publisher.publish("sensorhub/AWLR-001/readings", reading(10.0, 60)).await;
                publisher.publish("sensorhub/AWLR-001/readings", reading(100.0, 30)).await;
            }
            Ok(Event::Incoming(Packet::Publish(p))) if !p.retain => {
                live.push(serde_json::from_slice::<Value>(&p.payload).expect("JSON"));
            }
            Ok(_) => {}
            Err(e) => panic!("the subscriber's link: {e}"),
        }
    }
    let _ = client.disconnect().await;
    let told: Vec<_> = live.iter().map(|m| (m["event"]["rule"].as_str(), m["event"]["transition"].as_str())).collect();
    assert_eq!(told, [(Some("siaga"), Some("raised")), (Some("rising"), Some("raised"))], "{live:?}");
    for message in &live {
        let states: Vec<_> =
            message["alarms"].as_array().expect("the alarms").iter().map(|a| a["state"].as_str()).collect();
        assert_eq!(states, [Some("active"), Some("active")], "each message carries the state after both: {message}");
        assert_eq!(message["alarms"][0]["level"], "Siaga 3");
    }
}

#[tokio::test]
async fn a_device_whose_transitions_overflowed_the_queue_has_its_state_published_again() {
    let broker = Broker::start();
    let (db, _dir, _pg) = provisioned().await;
    for name in ["siaga", "siaga-b", "siaga-c", "siaga-d"] {
        let rule = SIAGA.replacen(r#""name": "siaga""#, &format!(r#""name": "{name}""#), 1);
        ok(&crate::cli::run(&db, &["alarm", "add", "AWLR-001", &rule], ""));
    }
    let _server = serve(&db, &broker, &client_id("alarms"), &[]).await;
    kept(broker.port, |state| state["event"].is_null()).await;
    // 3,000 readings a second apart within the last hour in one message (so
    // one transaction), each raising (250 cm) or clearing (10 cm) all four
    // rules: 12,000 transitions at once, past the 10,000 the publisher
    // queues. The last reading steps down to Siaga 2.
    let now = jiff::Timestamp::now().as_second();
    let readings: Vec<Value> = (0..3000_i64)
        .map(|i| {
            let value = if i == 2999 {
                170.0
            } else if i % 2 == 0 {
                250.0
            } else {
                10.0
            };
            let time = jiff::Timestamp::from_second(now - 3100 + i).expect("a time").to_string();
            serde_json::json!({"timestamp": time, "sensors": [{"id": "AWLR1-wl", "value": value}]})
        })
        .collect();
    let publisher = Publisher::connect(broker.port, &client_id("station"));
    publisher.publish("sensorhub/AWLR-001/readings", Value::Array(readings).to_string()).await;
    // The transitions published are each retained in turn; the last ones
    // were dropped, so what is kept at the end is the state published
    // again once the queue drained: no event, every rule at Siaga 2.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (state, retain) = retained(broker.port, "sensorhub/AWLR-001/alarms").await;
        let levels: Vec<_> =
            state["alarms"].as_array().map_or(vec![], |a| a.iter().map(|a| a["level"].clone()).collect());
        if retain && state["event"].is_null() && levels.len() == 4 && levels.iter().all(|l| l == "Siaga 2") {
            break;
        }
        assert!(Instant::now() < deadline, "the current state is not kept within 90 s: {state}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Writes one reading of AWLR-001's water level, `ago` seconds ago, by
/// `sensorhub import`: another process than the server's.
fn import_elsewhere(db: &str, value: f64, ago: i64) {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("one.ndjson");
    let at = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second() - ago).expect("a time");
    let line = serde_json::json!({"device_id": "AWLR-001", "timestamp": at.to_string(), "sensors": [{"id": "AWLR1-wl", "value": value}]});
    std::fs::write(&file, format!("{line}\n")).expect("write");
    ok(&crate::cli::run(db, &["import", file.to_str().expect("a path")], ""));
}

#[tokio::test]
async fn what_another_process_changes_is_published_at_the_next_resync_and_nothing_else_is() {
    let broker = Broker::start();
    let (db, _dir, _pg) = provisioned().await;
    ok(&crate::cli::run(&db, &["alarm", "add", "AWLR-001", SIAGA], ""));
    let _server = serve(&db, &broker, &client_id("alarms"), &["--mqtt-alarm-resync", "1"]).await;
    kept(broker.port, |state| state["event"].is_null() && state["alarms"][0]["state"] == "ok").await;
    // A subscriber that sees every publication from now on.
    let options = MqttOptions::new(client_id("alarms-live"), "127.0.0.1", broker.port);
    let (client, mut eventloop) = AsyncClient::new(options, 10);
    client.subscribe("sensorhub/AWLR-001/alarms", QoS::AtLeastOnce).await.expect("subscribe");
    let mut next = async |within: Duration| -> Option<Value> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, eventloop.poll()).await {
                Err(_) => return None,
                Ok(Ok(Event::Incoming(Packet::Publish(p)))) if !p.retain => {
                    return Some(serde_json::from_slice(&p.payload).expect("JSON"));
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => panic!("the subscriber's link: {e}"),
            }
        }
    };
    assert_eq!(next(Duration::from_secs(1)).await, None, "the retained state only");
    // A quiet reading stored by another process moves the last value, not
    // an episode: three resyncs publish nothing.
    import_elsewhere(&db, 10.0, 120);
    assert_eq!(next(Duration::from_secs(3)).await, None, "nothing changed that a subscriber is told");
    // Siaga 3 raised by another process: published at the next resync.
    import_elsewhere(&db, 100.0, 60);
    let state = next(Duration::from_secs(10)).await.expect("the raised state within 10 s");
    assert!(state["event"].is_null(), "{state}");
    assert_eq!(
        (state["alarms"][0]["state"].as_str(), state["alarms"][0]["level"].as_str()),
        (Some("active"), Some("Siaga 3")),
        "{state}"
    );
    assert_eq!(next(Duration::from_secs(3)).await, None, "published once");
    // The device's last rule removed by a command: an empty list, retained.
    ok(&crate::cli::run(&db, &["alarm", "remove", "AWLR-001", "siaga"], ""));
    let state = next(Duration::from_secs(10)).await.expect("the empty list within 10 s");
    assert_eq!(state, serde_json::json!({"alarms": [], "event": null}));
    assert_eq!(next(Duration::from_secs(3)).await, None, "published once");
    let _ = client.disconnect().await;
    let (state, retain) = retained(broker.port, "sensorhub/AWLR-001/alarms").await;
    assert!(retain, "{state}");
    assert_eq!(state, serde_json::json!({"alarms": [], "event": null}), "what a new subscriber finds");
}
