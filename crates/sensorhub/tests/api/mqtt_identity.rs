//! Who is who on the broker, against a real Mosquitto: sensorhub's default
//! client id (stable per installation, not guessable), the documented
//! station-per-user setup (`examples/mosquitto/`: a password file and an
//! ACL where a station writes only its own topic), and an errors topic
//! that says nothing about device ids that do not exist.

use crate::harness::ServeProcess;
use crate::mqtt::{
    Broker, Publisher, T0, client_id, free_port, metric, payload, provisioned, serve, wait_for, wait_stored,
};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, PubAckReason, SubscribeReasonCode};
use rumqttc::v5::{AsyncClient, Event, MqttOptions};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a client saw of the broker: publishes received (topic, JSON),
/// acknowledgements of its publishes and answers to its subscriptions.
#[derive(Default)]
struct Seen {
    received: Vec<(String, Value)>,
    acks: Vec<PubAckReason>,
    subscriptions: Vec<SubscribeReasonCode>,
}

/// An MQTT 5 client logged in as `user` (when given), with its event loop polled.
fn watcher(port: u16, user: Option<(&str, &str)>) -> (AsyncClient, Arc<Mutex<Seen>>, tokio::task::JoinHandle<()>) {
    let mut options = MqttOptions::new(client_id("watch"), "127.0.0.1", port);
    if let Some((name, password)) = user {
        options.set_credentials(name, password);
    }
    let (client, mut eventloop) = AsyncClient::new(options, 100);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let into = seen.clone();
    let task = tokio::spawn(async move {
        while let Ok(event) = eventloop.poll().await {
            let mut seen = into.lock().expect("lock");
            match event {
                Event::Incoming(Packet::Publish(p)) => seen.received.push((
                    String::from_utf8_lossy(&p.topic).into_owned(),
                    serde_json::from_slice(&p.payload).unwrap_or(Value::Null),
                )),
                Event::Incoming(Packet::PubAck(ack)) => seen.acks.push(ack.reason),
                Event::Incoming(Packet::SubAck(ack)) => seen.subscriptions.extend(ack.return_codes),
                _ => {}
            }
        }
    });
    (client, seen, task)
}

/// Waits until `done` holds for what `seen` holds.
async fn until(seen: &Mutex<Seen>, what: &str, done: impl Fn(&Seen) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done(&seen.lock().expect("lock")) {
        assert!(Instant::now() < deadline, "{what} did not happen within 20 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

on_each_backend! {
    async fn the_errors_topic_says_nothing_about_unknown_devices() {
        let broker = Broker::start();
        let (db, _dir, _pg) = provisioned().await;
        let server = serve(&db, &broker, &client_id("probe"), &["--mqtt-errors"]).await;
        let (errors, seen, task) = watcher(broker.port, None);
        errors.subscribe("sensorhub/+/errors", QoS::AtLeastOnce).await.expect("subscribe");
        until(&seen, "the subscription", |s| !s.subscriptions.is_empty()).await;
        let publisher = Publisher::connect(broker.port, &client_id("prober"));
        // Probes: a good reading, bad JSON, an id no device may have.
        let long = format!("sensorhub/{}/readings", "N".repeat(300));
        let probes = [("sensorhub/NOPE-1/readings", payload(1)), ("sensorhub/NOPE-2/readings", "{".into()), (&long, payload(2))];
        for (topic, body) in &probes {
            publisher.publish(topic, body.clone()).await;
        }
        // Then a refusal for a device that exists: it is answered.
        publisher.publish("sensorhub/AWLR-001/readings", "{").await;
        publisher.wait_acked(probes.len() + 1).await;
        // Refusals are published in order: once the known device's has come,
        // any for the probes would have come before it.
        until(&seen, "the known device's refusal", |s| !s.received.is_empty()).await;
        let received = seen.lock().expect("lock").received.clone();
        task.abort();
        assert_eq!(received.len(), 1, "{received:?}");
        assert_eq!((received[0].0.as_str(), &received[0].1["reason"]), ("sensorhub/AWLR-001/errors", &Value::from("bad_json")));
        let unknown = metric(&server, "sensorhub_mqtt_messages_total{outcome=\"unknown_device\"}").await;
        assert_eq!(unknown, probes.len() as f64, "the probes are still counted");
    }
}

/// The `sensorhub-…` client ids Mosquitto's log says connected, in order,
/// but the earlier versions' `sensorhub-HOSTNAME` (collected once, see
/// [`the_earlier_client_ids_session_is_collected_once`]).
async fn connected_ids(log: &std::path::Path, at_least: usize) -> Vec<String> {
    let legacy = format!("sensorhub-{}", hostname());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        // "New client connected from 127.0.0.1:40000 as ID (p5, c0, k30)."
        let ids: Vec<String> = text
            .lines()
            .filter_map(|l| l.split(" as ").nth(1).filter(|_| l.contains("New client connected")))
            .filter_map(|rest| rest.split(' ').next().map(str::to_owned))
            .filter(|id| (id.starts_with("sensorhub-") && *id != legacy) || id.starts_with("given-"))
            .collect();
        if ids.len() >= at_least {
            return ids;
        }
        assert!(Instant::now() < deadline, "{at_least} connections not in the broker's log: {text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// This machine's name, as sensorhub reads it.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname").trim().to_owned()
}

/// Connects as `id` with a kept session of an hour, subscribed to the
/// readings topics when `subscribe`; returns whether the broker had a
/// session for it, once the connection is gone again.
async fn session(port: u16, id: &str, subscribe: bool) -> bool {
    let mut options = MqttOptions::new(id, "127.0.0.1", port);
    options.set_clean_start(false).set_session_expiry_interval(Some(3600));
    let (client, mut events) = AsyncClient::new(options, 10);
    let mut present = None;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(5), events.poll()).await {
            Ok(Ok(Event::Incoming(Packet::ConnAck(ack)))) => {
                present = Some(ack.session_present);
                if !subscribe {
                    break;
                }
                client.subscribe("sensorhub/+/readings", QoS::AtLeastOnce).await.expect("subscribe");
            }
            Ok(Ok(Event::Incoming(Packet::SubAck(_)))) => break,
            Ok(Ok(_)) => {}
            other => panic!("no session for {id}: {other:?}"),
        }
    }
    client.disconnect().await.expect("disconnect");
    let _ = tokio::time::timeout(Duration::from_secs(2), async { while events.poll().await.is_ok() {} }).await;
    present.expect("connected")
}

/// `sensorhub serve` over `db` with the default client id, once its link is up.
async fn serve_default_id(db: &str, broker: &Broker) -> ServeProcess {
    let server = ServeProcess::start(&["--database", db, "--rate-limit", "off", "--mqtt-url", &broker.url()]);
    wait_for(&server, Duration::from_secs(20), |r| r["mqtt"] == "connected", "/readyz", "the MQTT link").await;
    server
}

on_each_backend! {
    async fn the_default_client_id_is_stable_per_installation_and_not_guessable() {
        let logs = tempfile::tempdir().expect("temp dir");
        let log = logs.path().join("broker.log");
        let lines = format!("allow_anonymous true\nlog_dest file {}\nlog_type all\n", log.display());
        let broker = Broker::start_with(free_port(), tempfile::tempdir().expect("temp dir"), &lines);
        let (db, _dir, _pg) = provisioned().await;
        let hostname = hostname();
        let first = serve_default_id(&db, &broker).await;
        drop(first);
        let again = serve_default_id(&db, &broker).await;
        drop(again);
        let (other_db, _other_dir, _other_pg) = provisioned().await;
        let other = serve_default_id(&other_db, &broker).await;
        drop(other);
        let given = ServeProcess::start(&["--database", &db, "--mqtt-url", &broker.url(), "--mqtt-client-id", "given-id"]);
        wait_for(&given, Duration::from_secs(20), |r| r["mqtt"] == "connected", "/readyz", "the MQTT link").await;
        let ids = connected_ids(&log, 4).await;
        let id = &ids[0];
        let hex = id.strip_prefix(&format!("sensorhub-{hostname}-")).unwrap_or_else(|| panic!("{id}: not sensorhub-{hostname}-…"));
        assert!(hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()), "{id}: 16 hex digits after the hostname");
        assert_eq!(&ids[1], id, "the same id after a restart: the broker keeps the session");
        assert!(ids[2].starts_with(&format!("sensorhub-{hostname}-")) && &ids[2] != id, "another installation, another id: {ids:?}");
        assert_eq!(ids[3], "given-id", "--mqtt-client-id wins");
        let store = sensorhub_store::open(&db).await.expect("open");
        let installation = store.installation_id().await.expect("installation id");
        assert!(!installation.contains(hex), "derived from the installation id, not a copy of it");
    }
}

/// `examples/mosquitto/NAME`.
/// What the collection of the earlier session recorded in database `db`,
/// once it has (waiting up to 10 s).
async fn drained(db: &str) -> Option<String> {
    let store = sensorhub_store::open(db).await.expect("open");
    for _ in 0..100 {
        let recorded = store.installation_fact("mqtt_legacy_session_drained").await.expect("fact");
        if recorded.is_some() {
            return recorded;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

fn example(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/mosquitto").join(name)
}

/// Adds `user` with `password` to the password file `file` (made if missing).
fn mosquitto_passwd(file: &std::path::Path, user: &str, password: &str) {
    let mut cmd = std::process::Command::new("mosquitto_passwd");
    cmd.arg("-b");
    if !file.exists() {
        cmd.arg("-c");
    }
    let out = cmd.arg(file).args([user, password]).output().expect("mosquitto_passwd");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_example_acl_a_station_writes_only_its_own_topic() {
    // The setup of docs/ingest.md: the example config with its paths moved here.
    let etc = tempfile::tempdir().expect("temp dir");
    let passwd = etc.path().join("sensorhub.passwd");
    for (user, password) in [("sensorhub", "hub-pass"), ("AWLR-001", "station-a"), ("AWS-002", "station-b")] {
        mosquitto_passwd(&passwd, user, password);
    }
    std::fs::copy(example("sensorhub.acl"), etc.path().join("sensorhub.acl")).expect("copy the ACL");
    let conf = std::fs::read_to_string(example("sensorhub.conf")).expect("the example config");
    let conf: String = conf
        .lines()
        .filter(|l| !l.starts_with("listener"))
        .map(|l| format!("{}\n", l.replace("/etc/mosquitto/", &format!("{}/", etc.path().display()))))
        .collect();
    assert!(conf.contains("acl_file") && conf.contains("password_file"), "{conf}");
    let broker = Broker::start_with(free_port(), tempfile::tempdir().expect("temp dir"), &conf);
    let (db, _dir, _pg) = provisioned().await;
    // Through a shared subscription: the ACL's `topic read` holds for those too.
    let server = ServeProcess::start(&[
        "--database",
        &db,
        "--rate-limit",
        "off",
        "--mqtt-url",
        &broker.url(),
        "--mqtt-errors",
        "--mqtt-group",
        "ingest",
        "--mqtt-username",
        "sensorhub",
        "--mqtt-password",
        "hub-pass",
    ]);
    wait_for(&server, Duration::from_secs(20), |r| r["mqtt"] == "connected", "/readyz", "the MQTT link").await;
    // B publishes bad JSON and a reading, each to its own topic.
    let (b, seen_b, task_b) = watcher(broker.port, Some(("AWS-002", "station-b")));
    b.subscribe("sensorhub/AWS-002/errors", QoS::AtLeastOnce).await.expect("subscribe");
    until(&seen_b, "B's subscription", |s| s.subscriptions.len() == 1).await;
    let b_own = r#"{"timestamp":"2026-01-01T00:01:00Z","sensors":[{"id":"AWS2-temp","value":27}]}"#;
    b.publish("sensorhub/AWS-002/readings", QoS::AtLeastOnce, false, "{").await.expect("publish");
    b.publish("sensorhub/AWS-002/readings", QoS::AtLeastOnce, false, b_own).await.expect("publish");
    until(&seen_b, "B's acknowledgements", |s| s.acks.len() == 2).await;
    // A listens to both errors topics (Mosquitto grants the subscription and
    // checks the ACL on delivery), writes to B's topic, then bad JSON and a
    // reading to its own.
    let (a, seen_a, task_a) = watcher(broker.port, Some(("AWLR-001", "station-a")));
    a.subscribe("sensorhub/AWS-002/errors", QoS::AtLeastOnce).await.expect("subscribe");
    a.subscribe("sensorhub/AWLR-001/errors", QoS::AtLeastOnce).await.expect("subscribe");
    until(&seen_a, "A's subscriptions", |s| s.subscriptions.len() == 2).await;
    let to_b = r#"{"timestamp":"2026-01-01T00:00:00Z","sensors":[{"id":"AWS2-temp","value":99}]}"#;
    a.publish("sensorhub/AWS-002/readings", QoS::AtLeastOnce, false, to_b).await.expect("publish");
    a.publish("sensorhub/AWLR-001/readings", QoS::AtLeastOnce, false, "{").await.expect("publish");
    a.publish("sensorhub/AWLR-001/readings", QoS::AtLeastOnce, false, payload(0)).await.expect("publish");
    until(&seen_a, "A's acknowledgements", |s| s.acks.len() == 3).await;
    let acks = seen_a.lock().expect("lock").acks.clone();
    assert_eq!(
        acks,
        [PubAckReason::NotAuthorized, PubAckReason::Success, PubAckReason::Success],
        "the broker refuses A on B's topic"
    );
    assert_eq!(wait_stored(&server, 1, Duration::from_secs(20)).await, BTreeMap::from([(T0, 4)]), "A's own reading");
    let url = format!(
        "{}/pk-alice-all/devices/AWS-002/data?start=2026-01-01T00:00:00Z&end=2026-01-01T00:01:00Z",
        server.base
    );
    let body: Value = reqwest::get(&url).await.expect("read").json().await.expect("JSON");
    let stamps: Vec<&str> =
        body["data"].as_array().expect("readings").iter().map(|r| r["timestamp"].as_str().unwrap_or("")).collect();
    assert_eq!(stamps, ["2026-01-01T00:01:00Z"], "B's own reading only: A's to B's topic was never stored");
    // sensorhub answers each station on its own errors topic, which only it
    // may read: B's refusal came first, yet A receives only its own.
    until(&seen_a, "A's refusal", |s| !s.received.is_empty()).await;
    until(&seen_b, "B's refusal", |s| !s.received.is_empty()).await;
    for (seen, device) in [(&seen_a, "AWLR-001"), (&seen_b, "AWS-002")] {
        let received = seen.lock().expect("lock").received.clone();
        let topics: Vec<&str> = received.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(topics, [format!("sensorhub/{device}/errors")], "{received:?}");
        assert_eq!(received[0].1["reason"], "bad_json");
    }
    assert_eq!(metric(&server, "sensorhub_mqtt_messages_total{outcome=\"stored\"}").await, 2.0);
    // With a client id per user, the earlier id names the live session:
    // collecting it must leave that session alone, once, and say so.
    let recorded = drained(&db).await;
    let log = server.wait_log("MQTT", Duration::from_secs(1)).await;
    let recorded =
        recorded.unwrap_or_else(|| panic!("the collection is recorded, not tried again at every start: {log}"));
    assert!(recorded.contains("shared with the live session"), "{recorded}");
    a.publish("sensorhub/AWLR-001/readings", QoS::AtLeastOnce, false, payload(1)).await.expect("publish");
    assert_eq!(wait_stored(&server, 2, Duration::from_secs(20)).await.len(), 2, "the live session is still subscribed");
    task_a.abort();
    task_b.abort();
}

on_each_backend! {
    async fn the_earlier_client_ids_session_is_collected_once() {
        let broker = Broker::start();
        let (db, _dir, _pg) = provisioned().await;
        let legacy = format!("sensorhub-{}", hostname());
        // An earlier version's session, subscribed, then away (stopped for the upgrade)…
        session(broker.port, &legacy, true).await;
        // …while stations publish: the broker keeps these for it.
        let publisher = Publisher::connect(broker.port, &client_id("pub"));
        for n in 0..20 {
            publisher.publish("sensorhub/AWLR-001/readings", payload(n)).await;
        }
        publisher.wait_acked(20).await;

        let server = serve_default_id(&db, &broker).await;
        let got = wait_stored(&server, 20, Duration::from_secs(30)).await;
        assert_eq!(got.len(), 20, "what the broker kept for the earlier id is stored, with nothing to do");
        // New readings reach the new session.
        publisher.publish("sensorhub/AWLR-001/readings", payload(20)).await;
        assert_eq!(wait_stored(&server, 21, Duration::from_secs(20)).await.len(), 21);
        let recorded = drained(&db).await.expect("the collection is recorded");
        // A reading published while the session is looked at (before it
        // is unsubscribed) reaches it too: stored once all the same.
        assert!(recorded.ends_with(" 20 messages") || recorded.ends_with(" 21 messages"), "{recorded}");
        assert!(!session(broker.port, &legacy, false).await, "the earlier session is gone from the broker");
    }
}
