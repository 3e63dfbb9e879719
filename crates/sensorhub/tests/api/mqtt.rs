//! MQTT ingestion against a real Mosquitto: each test starts its own
//! broker on a free port (with persistence in a temporary directory, so
//! that it can be restarted without touching anyone else's) and the real
//! `sensorhub serve` binary. Readings are published at QoS 1 and read back
//! over HTTP; nothing the broker accepted may be lost across a SIGKILL of
//! sensorhub or a broker restart, and nothing is stored twice.

use crate::harness::{FIXTURE, ServeProcess, fresh_database};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::Packet;
use rumqttc::v5::{AsyncClient, Event, MqttOptions};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// First reading second: 2026-01-01T00:00:00Z.
pub(crate) const T0: i64 = 1_767_225_600;

/// A Mosquitto of the test's own, stopped on drop.
pub(crate) struct Broker {
    child: std::process::Child,
    pub(crate) port: u16,
    dir: tempfile::TempDir,
}

impl Broker {
    pub(crate) fn start() -> Self {
        Self::start_at(free_port(), tempfile::tempdir().expect("temp dir"))
    }

    fn start_at(port: u16, dir: tempfile::TempDir) -> Self {
        Self::start_with(port, dir, "allow_anonymous true\n")
    }

    /// A broker on `port` whose listener takes the `listener` lines (TLS, passwords).
    pub(crate) fn start_with(port: u16, dir: tempfile::TempDir, listener: &str) -> Self {
        let conf = dir.path().join("mosquitto.conf");
        std::fs::write(
            &conf,
            format!(
                "user root\nlistener {port} 127.0.0.1\n{listener}persistence true\npersistence_location {}/\n\
                 max_queued_messages 100000\n",
                dir.path().display()
            ),
        )
        .expect("write the broker's config");
        let binary =
            if std::path::Path::new("/usr/sbin/mosquitto").exists() { "/usr/sbin/mosquitto" } else { "mosquitto" };
        let child = std::process::Command::new(binary)
            .arg("-c")
            .arg(&conf)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("mosquitto (Debian's package; .ci/services installs it)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "mosquitto did not listen on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Self { child, port, dir }
    }

    pub(crate) fn url(&self) -> String {
        format!("mqtt://127.0.0.1:{}", self.port)
    }

    /// Stops the broker cleanly (it saves its sessions) and starts it again
    /// on the same port with the same storage.
    fn restart(mut self) -> Self {
        let (port, dir) = (self.port, std::mem::replace(&mut self.dir, tempfile::tempdir().expect("temp dir")));
        stop(&mut self.child);
        Self::start_at(port, dir)
    }
}

/// A loopback port nobody listens on now.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port()
}

/// SIGTERM, then wait.
fn stop(child: &mut std::process::Child) {
    let _ = std::process::Command::new("kill").arg(child.id().to_string()).status();
    let _ = child.wait();
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A database with the test fixture applied.
pub(crate) async fn provisioned() -> (String, tempfile::TempDir, Option<sensorhub_testing::TempDatabase>) {
    let (db, dir, pg) = fresh_database().await;
    let file = dir.path().join("fixture.json");
    std::fs::write(&file, FIXTURE).expect("write fixture");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sensorhub"))
        .args(["apply", file.to_str().expect("utf-8"), "--database", &db])
        .env("SENSORHUB_LOG", "warn")
        .output()
        .expect("apply");
    assert!(out.status.success(), "apply: {}", String::from_utf8_lossy(&out.stderr));
    (db, dir, pg)
}

/// `sensorhub serve` ingesting from `broker` as `client_id`, once its link is up.
pub(crate) async fn serve(db: &str, broker: &Broker, client_id: &str, extra: &[&str]) -> ServeProcess {
    let url = broker.url();
    let mut args = vec!["--database", db, "--rate-limit", "off", "--mqtt-url", &url, "--mqtt-client-id", client_id];
    args.extend_from_slice(extra);
    let server = ServeProcess::start(&args);
    wait_for(&server, Duration::from_secs(20), |ready| ready["mqtt"] == "connected", "/readyz", "the MQTT link").await;
    server
}

/// Polls `path` (under the server's root) until `done` holds for its JSON body.
pub(crate) async fn wait_for(
    server: &ServeProcess,
    limit: Duration,
    done: impl Fn(&Value) -> bool,
    path: &str,
    what: &str,
) {
    let root = server.base.trim_end_matches("/external/v1");
    let deadline = Instant::now() + limit;
    let mut last = Value::Null;
    while Instant::now() < deadline {
        if let Ok(r) = reqwest::get(format!("{root}{path}")).await {
            last = r.json().await.unwrap_or(Value::Null);
            if done(&last) {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what} did not come within {limit:?}: {last}");
}

/// AWLR-001's readings from `T0` on, as stored: second → number of values.
async fn stored(server: &ServeProcess) -> BTreeMap<i64, usize> {
    let url = format!(
        "{}/pk-alice-all/devices/AWLR-001/data?start=2026-01-01T00:00:00Z&end=2026-03-01T00:00:00Z",
        server.base
    );
    let body: Value = reqwest::get(url).await.expect("read").json().await.expect("JSON");
    body["data"]
        .as_array()
        .expect("readings")
        .iter()
        .map(|r| {
            let s = r["timestamp"].as_str().expect("ts").parse::<jiff::Timestamp>().expect("ts").as_second();
            (s, r["sensors"].as_array().expect("sensors").len())
        })
        .collect()
}

/// Waits until AWLR-001 holds `n` readings from `T0` on.
pub(crate) async fn wait_stored(server: &ServeProcess, n: usize, limit: Duration) -> BTreeMap<i64, usize> {
    let deadline = Instant::now() + limit;
    loop {
        let got = stored(server).await;
        if got.len() >= n || Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A reading of AWLR-001's four sensors at `T0 + n` minutes.
pub(crate) fn payload(n: i64) -> String {
    let ts = jiff::Timestamp::from_second(T0 + n * 60).expect("time").to_string();
    json!({"timestamp": ts, "sensors": [
        {"id": "AWLR1-batt", "value": 90.0 + (n % 10) as f64 / 10.0},
        {"id": "AWLR1-wl", "value": 120.125 + n as f64},
        {"id": "AWLR1-sig", "value": -70},
        {"id": "AWLR1-status", "value": n % 3}
    ]})
    .to_string()
}

/// A QoS 1 publisher: counts the broker's acknowledgements.
pub(crate) struct Publisher {
    client: AsyncClient,
    acked: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Publisher {
    pub(crate) fn connect(port: u16, id: &str) -> Self {
        Self::connect_with(port, id, 10_000)
    }

    /// [`Publisher::connect`] whose client library holds at most `queue` messages not yet sent.
    pub(crate) fn connect_with(port: u16, id: &str, queue: usize) -> Self {
        let mut options = MqttOptions::new(id, "127.0.0.1", port);
        options.set_keep_alive(Duration::from_secs(5)).set_clean_start(false).set_session_expiry_interval(Some(600));
        let (client, mut eventloop) = AsyncClient::new(options, queue);
        let acked = Arc::new(AtomicUsize::new(0));
        let counter = acked.clone();
        let task = tokio::spawn(async move {
            loop {
                match eventloop.poll().await {
                    Ok(Event::Incoming(Packet::PubAck(_))) => {
                        counter.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(_) => {}
                    // The broker is restarting: try again shortly.
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        });
        Self { client, acked, task }
    }

    pub(crate) async fn publish(&self, topic: &str, body: impl Into<Vec<u8>>) {
        self.client.publish(topic, QoS::AtLeastOnce, false, body.into()).await.expect("queue a publish");
    }

    /// Publishes at QoS 0: no acknowledgement, nothing kept for an absent subscriber.
    pub(crate) async fn publish_qos0(&self, topic: &str, body: impl Into<Vec<u8>>) {
        self.client.publish(topic, QoS::AtMostOnce, false, body.into()).await.expect("queue a publish");
    }

    /// Waits until the broker acknowledged `n` messages in all.
    pub(crate) async fn wait_acked(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.acked.load(Ordering::SeqCst) < n {
            assert!(Instant::now() < deadline, "the broker acknowledged {} of {n}", self.acked.load(Ordering::SeqCst));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A unique client id for this test run.
pub(crate) fn client_id(what: &str) -> String {
    format!("t-{what}-{}-{}", std::process::id(), fastrand::u32(..))
}

/// The value of a metric series (`name{labels}`) in the server's /metrics.
pub(crate) async fn metric(server: &ServeProcess, series: &str) -> f64 {
    let root = server.base.trim_end_matches("/external/v1");
    let text = reqwest::get(format!("{root}/metrics")).await.expect("metrics").text().await.expect("text");
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("no {series} in {text}"))
}

on_each_backend! {
    async fn published_readings_are_stored_and_refusals_explained() {
        let broker = Broker::start();
        let (db, _dir, _pg) = provisioned().await;
        let server = serve(&db, &broker, &client_id("basic"), &["--mqtt-errors"]).await;
        // Listen for refusals first.
        let (errors, mut errors_loop) = AsyncClient::new(MqttOptions::new(client_id("errors"), "127.0.0.1", broker.port), 100);
        errors.subscribe("sensorhub/+/errors", QoS::AtLeastOnce).await.expect("subscribe");
        let refusals = Arc::new(std::sync::Mutex::new(Vec::<(String, Value)>::new()));
        let seen = refusals.clone();
        let (subscribed, mut suback) = tokio::sync::watch::channel(false);
        let errors_task = tokio::spawn(async move {
            while let Ok(event) = errors_loop.poll().await {
                match event {
                    Event::Incoming(Packet::Publish(p)) => {
                        let topic = String::from_utf8_lossy(&p.topic).into_owned();
                        seen.lock().expect("lock").push((topic, serde_json::from_slice(&p.payload).unwrap_or(Value::Null)));
                    }
                    Event::Incoming(Packet::SubAck(_)) => {
                        let _ = subscribed.send(true);
                    }
                    _ => {}
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(10), suback.wait_for(|s| *s)).await.expect("subscribed").expect("acked");
        let publisher = Publisher::connect(broker.port, &client_id("pub"));
        let array = format!("[{},{}]", payload(1), payload(2));
        let refused = [
            ("sensorhub/AWLR-001/readings", "{not json".to_owned(), "bad_json"),
            ("sensorhub/NOPE-1/readings", payload(3), "unknown_device"),
            ("sensorhub/AWLR-001/readings", payload(4).replace("AWLR1-sig", "AWLR9-x"), "unknown_sensor"),
            ("sensorhub/AWLR-001/readings", payload(5).replace("2026-01-01T", "2026-13-01T"), "bad_time"),
            ("sensorhub/AWLR-001/readings", payload(6).replace("-70", "\"low\""), "bad_reading"),
        ];
        publisher.publish("sensorhub/AWLR-001/readings", payload(0)).await;
        publisher.publish("sensorhub/AWLR-001/readings", array).await;
        for (topic, body, _) in &refused {
            publisher.publish(topic, body.clone()).await;
        }
        publisher.wait_acked(2 + refused.len()).await;
        let got = wait_stored(&server, 3, Duration::from_secs(20)).await;
        assert_eq!(got, BTreeMap::from([(T0, 4), (T0 + 60, 4), (T0 + 120, 4)]), "three readings, no refused one");
        let data: Value = reqwest::get(format!("{}/pk-alice-all/devices/AWLR-001/data?start=2026-01-01T00:00:00Z&end=2026-01-01T00:00:00Z", server.base))
            .await.expect("read").json().await.expect("JSON");
        assert_eq!(data["data"][0], json!({"timestamp": "2026-01-01T00:00:00Z", "sensors": [
            {"id": "AWLR1-batt", "value": 90.0, "unit": "%"}, {"id": "AWLR1-wl", "value": 120.125, "unit": "cm"},
            {"id": "AWLR1-sig", "value": -70.0, "unit": "dBm"}, {"id": "AWLR1-status", "value": 0.0, "unit": "."}]}));
        for (_, _, reason) in &refused {
            let series = format!("sensorhub_mqtt_messages_total{{outcome=\"{reason}\"}}");
            assert_eq!(metric(&server, &series).await, 1.0, "{series}");
        }
        assert_eq!(metric(&server, "sensorhub_mqtt_messages_total{outcome=\"stored\"}").await, 2.0);
        assert_eq!(metric(&server, "sensorhub_mqtt_readings_stored_total").await, 3.0);
        let deadline = Instant::now() + Duration::from_secs(10);
        // Every refusal but the unknown device's is published, in order: once
        // the last has come, the unknown device's would have come before it.
        let published: Vec<&str> = refused.iter().map(|r| r.2).filter(|r| *r != "unknown_device").collect();
        while refusals.lock().expect("lock").len() < published.len() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let refusals = refusals.lock().expect("lock").clone();
        errors_task.abort();
        let reasons: Vec<&str> = refusals.iter().map(|(_, v)| v["reason"].as_str().unwrap_or("")).collect();
        assert_eq!(reasons, published, "{refusals:?}");
        assert!(refusals.iter().all(|(topic, _)| topic == "sensorhub/AWLR-001/errors"), "nothing for NOPE-1: {refusals:?}");
        let detail = |i: usize| refusals[i].1["detail"].as_str().unwrap_or("").to_owned();
        assert!(detail(1).contains("sensors[2].value: sensor \"AWLR9-x\" is not registered for this device"), "{}", detail(1));
        assert!(detail(3).contains("sensors[2].value must be a number, not a string"), "{}", detail(3));
    }
}

on_each_backend! {
    async fn a_redelivered_message_stores_nothing_twice() {
        let broker = Broker::start();
        let (db, _dir, _pg) = provisioned().await;
        let server = serve(&db, &broker, &client_id("dup"), &[]).await;
        let publisher = Publisher::connect(broker.port, &client_id("pub"));
        for _ in 0..3 {
            publisher.publish("sensorhub/AWLR-001/readings", payload(7)).await;
        }
        publisher.publish("sensorhub/AWLR-001/readings", payload(8)).await;
        publisher.wait_acked(4).await;
        let got = wait_stored(&server, 2, Duration::from_secs(20)).await;
        wait_for(&server, Duration::from_secs(10), |_| true, "/healthz", "health").await;
        assert_eq!(metric(&server, "sensorhub_mqtt_messages_total{outcome=\"stored\"}").await, 4.0);
        assert_eq!(got, BTreeMap::from([(T0 + 420, 4), (T0 + 480, 4)]), "one reading per second, whatever was sent twice");
    }
}

on_each_backend! {
    async fn sigkill_while_publishing_loses_nothing_the_broker_accepted() {
        const MESSAGES: i64 = 600;
        let broker = Broker::start();
        let (db, _dir, _pg) = provisioned().await;
        let id = client_id("kill");
        let mut server = serve(&db, &broker, &id, &[]).await;
        let publisher = Publisher::connect(broker.port, &client_id("pub"));
        for n in 0..MESSAGES {
            publisher.publish("sensorhub/AWLR-001/readings", payload(n)).await;
            if n == MESSAGES / 3 {
                // Mid-stream: whatever sensorhub held unacknowledged goes back to the broker.
                publisher.wait_acked(n as usize / 2).await;
                server.child.kill().expect("SIGKILL");
                let _ = server.child.wait();
            }
        }
        publisher.wait_acked(MESSAGES as usize).await;
        // The same client id: the broker hands over the session's messages.
        let server = serve(&db, &broker, &id, &[]).await;
        let got = wait_stored(&server, MESSAGES as usize, Duration::from_secs(60)).await;
        let missing: Vec<i64> = (0..MESSAGES).filter(|n| !got.contains_key(&(T0 + n * 60))).collect();
        assert!(missing.is_empty(), "{} of {MESSAGES} accepted messages lost, first {:?}", missing.len(), missing.first());
        assert!(got.values().all(|v| *v == 4), "every reading whole");
        assert_eq!(got.len(), MESSAGES as usize);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_restart_loses_no_acknowledged_message() {
    let broker = Broker::start();
    let (db, _dir, _pg) = provisioned().await;
    let id = client_id("restart");
    // sensorhub's session exists, then sensorhub is away: the broker queues for it.
    let mut away = serve(&db, &broker, &id, &[]).await;
    away.child.kill().expect("SIGKILL");
    let _ = away.child.wait();
    let publisher = Publisher::connect(broker.port, &client_id("pub"));
    for n in 0..200 {
        publisher.publish("sensorhub/AWLR-001/readings", payload(n)).await;
    }
    publisher.wait_acked(200).await;
    // The queued messages must outlive the broker's restart.
    let broker = broker.restart();
    let server = serve(&db, &broker, &id, &[]).await;
    let got = wait_stored(&server, 200, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 200, "the messages queued before the restart are stored after it");
    // And mid-stream, with sensorhub connected: its link comes back by itself.
    for n in 200..300 {
        publisher.publish("sensorhub/AWLR-001/readings", payload(n)).await;
    }
    let broker = broker.restart();
    wait_for(&server, Duration::from_secs(40), |r| r["mqtt"] == "connected", "/readyz", "the link after the restart")
        .await;
    for n in 300..400 {
        publisher.publish("sensorhub/AWLR-001/readings", payload(n)).await;
    }
    publisher.wait_acked(400).await;
    let got = wait_stored(&server, 400, Duration::from_secs(60)).await;
    assert_eq!(got.len(), 400, "every message the broker acknowledged is stored");
    drop(broker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_the_load_and_store_each_message_once() {
    const MESSAGES: i64 = 400;
    let broker = Broker::start();
    let (db, _dir, _pg) = provisioned().await;
    let group = ["--mqtt-group", "ingest"];
    let a = serve(&db, &broker, &client_id("a"), &group).await;
    let b = serve(&db, &broker, &client_id("b"), &group).await;
    let publisher = Publisher::connect(broker.port, &client_id("pub"));
    for n in 0..MESSAGES {
        publisher.publish("sensorhub/AWLR-001/readings", payload(n)).await;
    }
    publisher.wait_acked(MESSAGES as usize).await;
    let got = wait_stored(&a, MESSAGES as usize, Duration::from_secs(60)).await;
    assert_eq!(got.len(), MESSAGES as usize);
    let series = "sensorhub_mqtt_messages_total{outcome=\"stored\"}";
    let (by_a, by_b) = (metric(&a, series).await, metric(&b, series).await);
    assert_eq!(by_a + by_b, MESSAGES as f64, "each message written by one instance: {by_a} + {by_b}");
    assert!(by_a > 0.0 && by_b > 0.0, "both instances take part: {by_a} and {by_b}");
}

on_each_backend! {
    async fn a_published_reading_reaches_an_open_stream() {
        let broker = Broker::start();
        let (db, _dir, _pg) = provisioned().await;
        let server = serve(&db, &broker, &client_id("stream"), &[]).await;
        let url = format!("{}/pk-alice-all/devices/AWLR-001/stream?tz=7", server.base);
        let mut stream = crate::stream::Sse::open(&url, &[]).await;
        let publisher = Publisher::connect(broker.port, &client_id("pub"));
        publisher.publish("sensorhub/AWLR-001/readings", payload(9)).await;
        let (_, data) = stream.event().await;
        assert_eq!(
            data,
            concat!(
                r#"{"timestamp":"2026-01-01T07:09:00+07:00","sensors":[{"id":"AWLR1-batt","value":90.9,"unit":"%"},"#,
                r#"{"id":"AWLR1-wl","value":129.125,"unit":"cm"},{"id":"AWLR1-sig","value":-70.0,"unit":"dBm"},"#,
                r#"{"id":"AWLR1-status","value":0.0,"unit":"."}]}"#
            ),
            "the data endpoint's element, in the stream's tz"
        );
    }
}
