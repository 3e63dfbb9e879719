//! Live streams (Server-Sent Events): a webhook-ingested reading arrives
//! with the data endpoint's exact bytes, a client resumes with
//! `Last-Event-ID`, a stalled reader is cut, heartbeats keep a quiet stream
//! past the server's timeouts, the read endpoints' errors, streams go on
//! while Redis is down, and a reading written through one instance (or the
//! `import` command) reaches a stream on another.

use crate::harness::{
    ALICE_PASSWORD, FIXTURE, RedisPrefix, ServeProcess, TestApp, assert_error, basic, postgres_admin_url, reading,
    redis_url,
};
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use reqwest::Method;
use sensorhub::config::serve::ServeSettings;
use sensorhub::config::server::WebhookMode;
use sensorhub::config::server::{ConnectionLimits, WebhookSettings};
use std::pin::Pin;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// The longest any test waits for one thing to happen.
const WAIT: Duration = Duration::from_secs(10);

pub(crate) fn ingest() -> ServeSettings {
    ServeSettings {
        webhook: WebhookSettings { mode: WebhookMode::Ingest, ..WebhookSettings::default() },
        ..TestApp::settings()
    }
}

/// A client reading a stream's blocks.
pub(crate) struct Sse {
    body: Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>,
    buf: Vec<u8>,
}

impl Sse {
    /// Opens `url` with `headers`: the stream once its headers (and retry hint) arrived.
    pub(crate) async fn open(url: &str, headers: &[(&str, &str)]) -> Sse {
        // Asked for gzip: a stream must go plain all the same.
        let mut req = reqwest::Client::new().get(url).header("Accept-Encoding", "gzip, br");
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let res = tokio::time::timeout(WAIT, req.send()).await.expect("headers in time").expect("request");
        assert_eq!(res.status(), 200, "{url}");
        assert_eq!(res.headers()["content-type"], "text/event-stream");
        assert_eq!(res.headers()["cache-control"], "no-cache");
        assert!(res.headers().get("content-encoding").is_none(), "never compressed");
        let mut sse = Sse { body: Box::pin(res.bytes_stream()), buf: Vec::new() };
        assert_eq!(sse.block().await, "retry: 2000", "the stream begins with the reconnection delay");
        sse
    }

    /// The next block (the text up to a blank line).
    pub(crate) async fn block(&mut self) -> String {
        self.block_within(WAIT).await
    }

    /// The next block, waiting at most `limit` for each chunk.
    async fn block_within(&mut self, limit: Duration) -> String {
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let block = String::from_utf8(self.buf[..end].to_vec()).expect("utf-8");
                self.buf.drain(..end + 2);
                return block;
            }
            let chunk = tokio::time::timeout(limit, self.body.next()).await.expect("a block in time");
            self.buf.extend_from_slice(&chunk.expect("the stream goes on").expect("bytes"));
        }
    }

    /// Reads until the server ends the stream, for at most `limit`;
    /// whether it ended. Events and heartbeats meanwhile are skipped.
    pub(crate) async fn ends_within(&mut self, limit: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            match tokio::time::timeout_at(deadline, self.body.next()).await {
                Err(_) => return false,
                Ok(None | Some(Err(_))) => return true,
                Ok(Some(Ok(chunk))) => self.buf.extend_from_slice(&chunk),
            }
        }
    }

    /// The next event's id and data.
    pub(crate) async fn event(&mut self) -> (u64, String) {
        loop {
            let block = self.block().await;
            if block.starts_with(':') {
                continue;
            }
            let (id, data) = block.split_once('\n').expect("id and data lines");
            let id = id.strip_prefix("id: ").expect("an id line").parse().expect("a numeric id");
            return (id, data.strip_prefix("data: ").expect("a data line").to_owned());
        }
    }
}

/// An ingest envelope of AWLR-001 at `time` with `data`.
pub(crate) fn envelope(time: &str, data: &str) -> String {
    format!(r#"{{"event":"sensor-data","device_id":"AWLR-001","timestamp":"{time}","data":{data}}}"#)
}

/// The element of the data endpoint's `data` for the one reading at `time`, as bytes.
async fn data_element(app: &TestApp, time: &str, tz: &str) -> String {
    let path = format!("/devices/AWLR-001/data?start={time}&end={time}&tz={tz}");
    let a = app.alice(&path).await;
    let inner = a.text.strip_prefix(r#"{"message":"Success","data":["#).and_then(|t| t.strip_suffix("]}"));
    inner.expect("exactly one reading").to_owned()
}

/// A metric's value in `/metrics`.
async fn metric(app: &TestApp, name: &str) -> String {
    let text = app.request(Method::GET, &format!("{}/metrics", app.root()), &[], None).await.text;
    let line = text.lines().find(|l| l.split_once(' ').is_some_and(|(n, _)| n == name));
    line.and_then(|l| l.split_once(' ')).map(|(_, v)| v.to_owned()).unwrap_or_default()
}

/// Waits (bounded) until `name` reads `value` in `/metrics`.
async fn await_metric(app: &TestApp, name: &str, value: &str) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while metric(app, name).await != value {
        assert!(tokio::time::Instant::now() < deadline, "{name} is {} after {WAIT:?}", metric(app, name).await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

on_each_backend! {
    async fn a_webhook_reading_arrives_as_the_data_endpoint_shows_it() {
        let app = TestApp::with(ingest()).await;
        let auth = basic("alice", ALICE_PASSWORD);
        let url = format!("{}/devices/AWLR-001/stream?tz=7", app.base);
        let mut basic_stream = Sse::open(&url, &[("Authorization", &auth)]).await;
        let url = format!("{}/pk-alice-awlr/devices/AWLR-001/stream?tz=Asia/Jakarta", app.base);
        let mut public_stream = Sse::open(&url, &[]).await;
        let time = "2026-06-01T08:00:00Z";
        // Sensors out of order, a whole number and a negative: the event lists them as the data endpoint does.
        let data = r#"{"AWLR1-sig":-71.5,"AWLR1-wl":130.25,"AWLR1-batt":91}"#;
        let posted = app.webhook(Some("wh-alice-secret"), &envelope(time, data)).await;
        assert_eq!(posted.status, 200, "{}", posted.text);
        let (id, event) = basic_stream.event().await;
        let expected = data_element(&app, time, "7").await;
        assert_eq!(event, expected);
        assert!(expected.starts_with(r#"{"timestamp":"2026-06-01T15:00:00+07:00","sensors":[{"id":"AWLR1-batt","value":91.0"#), "{expected}");
        let (public_id, public_event) = public_stream.event().await;
        assert_eq!((public_id, public_event), (id, expected), "the same event, the same bytes in the same offset");
        assert_eq!(metric(&app, "sensorhub_live_events_sent_total").await, "2");
        assert_eq!(metric(&app, "sensorhub_live_streams").await, "2");
    }
}

#[tokio::test]
async fn a_client_resumes_with_last_event_id_and_gets_nothing_twice() {
    let app = TestApp::with(ingest()).await;
    let url = format!("{}/pk-alice-all/devices/AWLR-001/stream", app.base);
    let app = &app;
    let post = |minute: u32| async move {
        let body = envelope(&format!("2026-06-02T00:{minute:02}:00Z"), &format!(r#"{{"AWLR1-wl":{minute}}}"#));
        let a = app.webhook(Some("wh-alice-secret"), &body).await;
        assert_eq!(a.status, 200, "{}", a.text);
    };
    let mut first = Sse::open(&url, &[]).await;
    let mut seen = Vec::new();
    for minute in 1..=3 {
        post(minute).await;
        seen.push(first.event().await);
    }
    assert!(seen.windows(2).all(|w| w[0].0 < w[1].0), "ids grow: {seen:?}");
    drop(first);
    // Missed while away: minutes 4 and 5.
    post(4).await;
    post(5).await;
    let last = seen[1].0.to_string();
    let mut resumed = Sse::open(&url, &[("Last-Event-ID", &last)]).await;
    let mut minutes = Vec::new();
    for _ in 0..3 {
        let (_, data) = resumed.event().await;
        let value: serde_json::Value = serde_json::from_str(&data).expect("JSON");
        minutes.push(value["sensors"][0]["value"].as_f64().expect("value"));
    }
    assert_eq!(minutes, [3.0, 4.0, 5.0], "the events after the one named, in order");
    post(6).await;
    let (_, data) = resumed.event().await;
    assert!(data.contains(r#""value":6.0"#), "the next live event, no repeat: {data}");
    // An id this server never gave resumes nothing: only live events follow.
    let mut fresh = Sse::open(&url, &[("Last-Event-ID", "not-a-number")]).await;
    post(7).await;
    let (_, data) = fresh.event().await;
    assert!(data.contains(r#""value":7.0"#), "{data}");
}

#[tokio::test]
async fn a_stalled_reader_is_cut_and_its_queue_freed() {
    let limits = ConnectionLimits {
        write_timeout: Duration::from_secs(2),
        shutdown_grace: Duration::from_secs(2),
        ..ConnectionLimits::default()
    };
    let app = TestApp::with_limits(ingest(), limits).await;
    let addr: std::net::SocketAddr = app.root().trim_start_matches("http://").parse().expect("address");
    // A raw client with a small receive buffer that never reads.
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("buffer size");
    let mut stalled = socket.connect(addr).await.expect("connect");
    let request = format!(
        "GET /external/v1/pk-alice-all/devices/AWLR-001/stream HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n"
    );
    stalled.write_all(request.as_bytes()).await.expect("request");
    await_metric(&app, "sensorhub_live_streams", "1").await;
    // A healthy reader of the same device is not affected.
    let mut healthy = Sse::open(&format!("{}/pk-alice-all/devices/AWLR-001/stream", app.base), &[]).await;
    let base = jiff::Timestamp::from_second(1_780_000_000).expect("time").as_second();
    let mut sent = 0;
    // Wide events (four values each), so that the kernel's socket buffers
    // (up to 4 MiB of send buffer on Linux) fill after a few thousand.
    let wide = |t: i64| {
        let mut r = reading("AWLR-001", t, "AWLR1-wl", 1234.5678);
        for sensor in ["AWLR1-batt", "AWLR1-sig", "AWLR1-status"] {
            r.values.push(sensorhub_core::model::ValueInput { sensor_id: sensor.into(), value: -98.7654, unit: None });
        }
        r
    };
    for round in 0..200 {
        app.add_readings((0..250).map(|i| wide(base + round * 250 + i)).collect()).await;
        for _ in 0..250 {
            healthy.event().await;
        }
        sent += 250;
        if metric(&app, "sensorhub_live_streams_cut_total").await == "1" {
            break;
        }
    }
    assert_eq!(metric(&app, "sensorhub_live_streams_cut_total").await, "1", "cut after {sent} events");
    // The write timeout then closes its connection: only the healthy stream is open.
    await_metric(&app, "sensorhub_live_streams", "1").await;
    app.add_readings(vec![reading("AWLR-001", base - 60, "AWLR1-wl", 2.5)]).await;
    let (_, data) = healthy.event().await;
    assert!(data.contains(r#""value":2.5"#), "{data}");
    drop(stalled);
}

#[tokio::test]
async fn a_quiet_stream_gets_heartbeats_and_outlives_the_request_and_keep_alive_timeouts() {
    let limits = ConnectionLimits { keep_alive_timeout: Duration::from_secs(1), ..ConnectionLimits::default() };
    let options = ServeSettings { request_timeout: Duration::from_secs(1), ..ingest() };
    let app = TestApp::with_limits(options, limits).await;
    // Counted from before the request: the server's 15 s start before its head arrives here.
    let opened = tokio::time::Instant::now();
    let mut quiet = Sse::open(&format!("{}/pk-alice-all/devices/AWLR-001/stream", app.base), &[]).await;
    let heartbeat = quiet.block_within(Duration::from_secs(20)).await;
    assert_eq!(heartbeat, ":", "a comment line");
    let after = opened.elapsed();
    assert!(after >= Duration::from_secs(14), "the first heartbeat came after {after:?}, not 15 s");
    app.add_readings(vec![reading("AWLR-001", 1_780_000_000, "AWLR1-wl", 7.25)]).await;
    let (_, data) = quiet.event().await;
    assert!(data.contains(r#""value":7.25"#), "15 s past both 1 s limits the stream still serves: {data}");
}

#[tokio::test]
async fn without_redis_answering_readings_still_reach_this_instances_streams() {
    let app = TestApp::with(ServeSettings { counters: crate::harness::stopped_redis(), ..ingest() }).await;
    let mut stream = Sse::open(&format!("{}/pk-alice-all/devices/AWLR-001/stream", app.base), &[]).await;
    let posted = app.webhook(Some("wh-alice-secret"), &envelope("2026-06-03T00:00:00Z", r#"{"AWLR1-wl":5}"#)).await;
    assert_eq!(posted.status, 200, "{}", posted.text);
    let (_, data) = stream.event().await;
    assert!(data.contains(r#""value":5.0"#), "{data}");
    assert_eq!(metric(&app, "sensorhub_live_events_unshared_total").await, "1");
    assert_eq!(metric(&app, "sensorhub_live_redis_linked").await, "0");
}

#[tokio::test]
async fn streams_answer_the_read_endpoints_errors() {
    let app = TestApp::with(ingest()).await;
    let alice = basic("alice", ALICE_PASSWORD);
    assert_error(&app.send(Method::GET, "/devices/AWLR-001/stream", None).await, 401, "Unauthorized");
    assert_error(
        &app.send(Method::GET, "/devices/AWLR-001/stream", Some(&basic("alice", "x"))).await,
        401,
        "Unauthorized",
    );
    assert_error(&app.send(Method::GET, "/devices/SECRET-9/stream", Some(&alice)).await, 404, "Device not found");
    assert_error(&app.send(Method::GET, "/devices/NOPE/stream", Some(&alice)).await, 404, "Device not found");
    assert_error(&app.send(Method::POST, "/devices/AWLR-001/stream", None).await, 405, "Method Not Allowed");
    assert_error(
        &app.send(Method::DELETE, "/pk-alice-all/devices/AWLR-001/stream", None).await,
        405,
        "Method Not Allowed",
    );
    assert_error(&app.get("/pk-alice-awlr/devices/AWS-002/stream").await, 404, "Device not found");
    assert_error(&app.get("/pk-alice-old/devices/AWLR-001/stream").await, 403, "Forbidden");
    assert_error(&app.get("/pk-bob/devices/AWS-002/stream").await, 403, "Forbidden");
    let bad_tz = app.get("/pk-alice-all/devices/AWLR-001/stream?tz=Mars/Olympus").await;
    assert_error(&bad_tz, 400, "Bad Request");
    assert_eq!(metric(&app, "sensorhub_live_streams").await, "0", "no refused request subscribed");
}

#[tokio::test]
async fn a_reading_written_through_one_instance_reaches_a_stream_on_another() {
    let pg = sensorhub_testing::TempDatabase::create(&postgres_admin_url()).await.expect("test database");
    let prefix = RedisPrefix::new();
    let dir = tempfile::tempdir().expect("dir");
    let fixture = dir.path().join("fixture.json");
    std::fs::write(&fixture, FIXTURE).expect("write");
    let store = sensorhub_store::open(pg.url()).await.expect("open");
    let mut doc: sensorhub_core::provision::Provision =
        sensorhub_core::provision::parse_json(FIXTURE).expect("fixture");
    let readings = doc.check().expect("valid");
    store.apply(doc, readings).await.expect("applies");
    let redis = redis_url();
    let args = [
        "--database",
        pg.url(),
        "--rate-limit-store",
        &redis,
        "--redis-prefix",
        &prefix.prefix,
        "--webhook-mode",
        "ingest",
    ];
    let a = ServeProcess::start(&args);
    let b = ServeProcess::start(&args);
    let linked = |base: String| async move {
        let url = format!("{}/metrics", base.trim_end_matches("/external/v1"));
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let text = reqwest::get(&url).await.expect("metrics").text().await.expect("text");
            if text.contains("sensorhub_live_redis_linked 1") {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "not subscribed to Redis after {WAIT:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    linked(b.base.clone()).await;
    let auth = basic("alice", ALICE_PASSWORD);
    let mut on_b = Sse::open(&format!("{}/devices/AWLR-001/stream", b.base), &[("Authorization", &auth)]).await;
    let posted = reqwest::Client::new()
        .post(format!("{}/webhook/sensor-data", a.base))
        .header("X-API-KEY", "wh-alice-secret")
        .header("Content-Type", "application/json")
        .body(envelope("2026-06-01T08:00:00Z", r#"{"AWLR1-wl":123.5}"#))
        .send()
        .await
        .expect("post");
    assert_eq!(posted.status(), 200);
    let (first, data) = on_b.event().await;
    assert_eq!(data, r#"{"timestamp":"2026-06-01T08:00:00Z","sensors":[{"id":"AWLR1-wl","value":123.5,"unit":"cm"}]}"#);

    // The import command, another process, reaches it too.
    let file = dir.path().join("one.ndjson");
    let line =
        r#"{"device_id":"AWLR-001","timestamp":"2026-06-01T08:15:00Z","sensors":[{"id":"AWLR1-wl","value":124}]}"#;
    std::fs::write(&file, line).expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sensorhub"))
        .args(["import", file.to_str().expect("path"), "--database", pg.url()])
        .args(["--rate-limit-store", &redis, "--redis-prefix", &prefix.prefix])
        .env("SENSORHUB_LOG", "warn")
        .output()
        .expect("import");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (second, data) = on_b.event().await;
    assert!(second > first, "ids grow across instances");
    assert_eq!(data, r#"{"timestamp":"2026-06-01T08:15:00Z","sensors":[{"id":"AWLR1-wl","value":124.0,"unit":"cm"}]}"#);

    // Resuming on A (which got every event through Redis) from B's first id.
    let first = first.to_string();
    let mut on_a = Sse::open(
        &format!("{}/devices/AWLR-001/stream", a.base),
        &[("Authorization", &auth), ("Last-Event-ID", &first)],
    )
    .await;
    assert_eq!(on_a.event().await.0, second, "ids mean the same on every instance");
    drop((a, b));
}
