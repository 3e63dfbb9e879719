//! Access that lasts (issue 23): an open stream ends within seconds of any
//! change that would refuse it a new request, made by another process (the
//! admin commands, as another instance would); a resumed stream does not
//! resend readings removed since; streams are capped per caller, per client
//! address and in all, so that other requests always find a connection.

use crate::cli::{ok, run};
use crate::harness::{ALICE_PASSWORD, TestApp, basic};
use crate::stream::{Sse, envelope, ingest};
use sensorhub::config::serve::ServeSettings;
use sensorhub::config::server::ConnectionLimits;
use sensorhub::config::server::StreamLimits;
use std::time::{Duration, Instant};

/// How soon a stream must end after its caller lost access.
const WITHIN: Duration = Duration::from_secs(5);

/// Opens `path` (under `/external/v1`) as a stream, as alice with Basic when `as_alice`.
async fn open(app: &TestApp, path: &str, as_alice: bool) -> Sse {
    let auth = basic("alice", ALICE_PASSWORD);
    let headers: Vec<(&str, &str)> = if as_alice { vec![("Authorization", &auth)] } else { vec![] };
    Sse::open(&format!("{}{path}", app.base), &headers).await
}

/// Asserts that `stream` ends within [`WITHIN`], and says how long it took.
async fn ends(stream: &mut Sse, what: &str) {
    let started = Instant::now();
    assert!(stream.ends_within(WITHIN).await, "the stream was still open {WITHIN:?} after: {what}");
    eprintln!("{what}: the stream ended {} ms after the change", started.elapsed().as_millis());
}

/// Runs `sql` on the database `db` (a SQLite file or a PostgreSQL URL)
/// from a connection of its own, as another program would.
async fn sql(db: &str, sql: &str) {
    if !db.starts_with("postgres") {
        rusqlite::Connection::open(db).expect("open").execute_batch(sql).expect(sql);
        return;
    }
    let (client, connection) = tokio_postgres::connect(db, tokio_postgres::NoTls).await.expect("connect");
    let connection = tokio::spawn(connection);
    client.batch_execute(sql).await.expect(sql);
    drop(client);
    let _ = connection.await;
}

/// Writes `doc` to a file and applies it with the `apply` command.
fn apply(app: &TestApp, doc: &str) {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("change.json");
    std::fs::write(&path, doc).expect("write");
    ok(&run(&app.db, &["apply", path.to_str().expect("utf-8")], ""));
}

on_each_backend! {
    async fn a_stream_ends_within_seconds_of_its_caller_losing_access() {
        let app = TestApp::with(ingest()).await;
        // A stream nothing below takes away: it stays open and gets readings.
        let mut untouched = open(&app, "/pk-alice-awlr/devices/AWLR-001/stream", false).await;

        let mut narrowed = open(&app, "/pk-alice-all/devices/AWS-002/stream", false).await;
        apply(&app, r#"{"accounts":[{"username":"alice","api_keys":[{"id":"pk-alice-all","devices":["AWLR-001"]}]}]}"#);
        ends(&mut narrowed, "the key's devices narrowed by apply").await;

        apply(&app, r#"{"accounts":[{"username":"carol","devices":["AWS-002"]}]}"#);
        let mut removed = open(&app, "/pk-carol/devices/AWS-002/stream", false).await;
        apply(&app, r#"{"accounts":[{"username":"carol","devices":[]}]}"#);
        ends(&mut removed, "the device taken from the account by apply").await;

        let posted = app.webhook(Some("wh-alice-secret"), &envelope("2026-06-01T08:00:00Z", r#"{"AWLR1-wl":1.5}"#)).await;
        assert_eq!(posted.status, 200, "{}", posted.text);
        let (_, event) = untouched.event().await;
        assert!(event.contains(r#""value":1.5"#), "a stream whose caller lost nothing goes on: {event}");

        let mut revoked = open(&app, "/pk-alice-awlr/devices/AWLR-001/stream", false).await;
        ok(&run(&app.db, &["key", "revoke", "pk-alice-awlr"], ""));
        ends(&mut revoked, "the key revoked by command").await;
        ends(&mut untouched, "the key revoked by command (the older stream)").await;

        let mut password = open(&app, "/devices/AWLR-001/stream", true).await;
        ok(&run(&app.db, &["account", "passwd", "alice", "--password-stdin"], "a-new-password\n"));
        ends(&mut password, "the password changed by command").await;

        let mut disabled = open(&app, "/pk-alice-all/devices/AWLR-001/stream", false).await;
        ok(&run(&app.db, &["account", "disable", "alice"], ""));
        ends(&mut disabled, "the account disabled by command").await;
        assert_eq!(app.get("/pk-alice-all/devices/AWLR-001/stream").await.status, 403, "and it cannot open again");
    }

    // A change whose check the database cannot answer (here: the table
    // of keys gone from under the server) ends the stream too, within the
    // same bound: its caller may have lost access in that change.
    async fn a_stream_whose_caller_cannot_be_checked_again_ends() {
        let app = TestApp::with(ingest()).await;
        let mut stream = open(&app, "/pk-alice-awlr/devices/AWLR-001/stream", false).await;
        sql(&app.db, "ALTER TABLE api_keys RENAME TO api_keys_away").await;
        sql(&app.db, "UPDATE access_generation SET generation = generation + 1").await;
        ends(&mut stream, "the access generation moved with the keys unreadable").await;
        sql(&app.db, "ALTER TABLE api_keys_away RENAME TO api_keys").await;
        let mut again = open(&app, "/pk-alice-awlr/devices/AWLR-001/stream", false).await;
        let posted = app.webhook(Some("wh-alice-secret"), &envelope("2026-06-01T08:00:00Z", r#"{"AWLR1-wl":2.5}"#)).await;
        assert_eq!(posted.status, 200, "{}", posted.text);
        let (_, event) = again.event().await;
        assert!(event.contains(r#""value":2.5"#), "with the keys back a stream opens and gets readings: {event}");
    }

    // A public raw window goes ahead on the key's answer kept from an
    // earlier request when the window's own read finds the access
    // generation unchanged; every change made by another process (the
    // commands) is still refused at the next request, with the answer and
    // headers a fresh lookup gives (a 403 before a 400, no rate-limit
    // headers on it).
    async fn a_kept_api_key_answers_as_a_fresh_lookup_after_any_change() {
        let app = TestApp::with(ingest()).await;
        let posted = app.webhook(Some("wh-alice-secret"), &envelope("2026-06-01T08:00:00Z", r#"{"AWLR1-wl":1.5}"#)).await;
        assert_eq!(posted.status, 200, "{}", posted.text);
        let day = "start=2026-06-01T00:00:00Z&end=2026-06-01T23:59:59Z";
        let get = async |key: &str, device: &str, query: &str| {
            let a = app.get(&format!("/{key}/devices/{device}/data?{query}")).await;
            let limited = a.headers.contains_key("ratelimit-limit");
            (a.status.as_u16(), a.text, limited)
        };
        let first = get("pk-alice-awlr", "AWLR-001", day).await;
        assert_eq!((first.0, first.2), (200, true), "{}", first.1);
        assert!(first.1.contains("1.5"), "{}", first.1);

        // The kept answer is used: with the key table out of the way, a
        // window still reads while anything that looks the key up fails.
        sql(&app.db, "ALTER TABLE api_keys RENAME TO api_keys_away").await;
        assert_eq!(get("pk-alice-awlr", "AWLR-001", day).await, first, "a window on the kept answer");
        assert_eq!(get("pk-alice-awlr", "AWS-002", day).await.0, 404, "not in the key's list, at the kept generation");
        assert_eq!(get("pk-alice-awlr", "AWLR-001", "interval=1h").await.0, 500, "an aggregate looks the key up");
        sql(&app.db, "ALTER TABLE api_keys_away RENAME TO api_keys").await;
        assert_eq!(get("pk-alice-awlr", "AWLR-001", "start=nonsense").await.0, 400);

        assert_eq!(get("pk-alice-all", "AWS-002", day).await.0, 200);
        apply(&app, r#"{"accounts":[{"username":"alice","api_keys":[{"id":"pk-alice-all","devices":["AWLR-001"]}]}]}"#);
        assert_eq!(get("pk-alice-all", "AWS-002", day).await.0, 404, "the key's devices narrowed by apply");
        assert_eq!(get("pk-alice-all", "AWLR-001", day).await, first, "what the narrowed key still sees");

        // Each refused request comes on a freshly kept answer.
        for (query, what) in [(day, "a window"), ("start=nonsense", "a bad query"), ("interval=1h", "an aggregate")] {
            apply(&app, r#"{"accounts":[{"username":"alice","api_keys":[{"id":"pk-alice-awlr","revoked":false}]}]}"#);
            assert_eq!(get("pk-alice-awlr", "AWLR-001", day).await, first, "restored, before {what}");
            ok(&run(&app.db, &["key", "revoke", "pk-alice-awlr"], ""));
            let (status, text, limited) = get("pk-alice-awlr", "AWLR-001", query).await;
            assert_eq!((status, limited), (403, false), "{what} with the key revoked by command: {text}");
        }

        assert_eq!(get("pk-alice-all", "AWLR-001", day).await, first);
        ok(&run(&app.db, &["account", "disable", "alice"], ""));
        let (status, _, limited) = get("pk-alice-all", "AWLR-001", day).await;
        assert_eq!((status, limited), (403, false), "the account disabled by command");
    }

    async fn a_resumed_stream_does_not_resend_readings_removed_since() {
        let app = TestApp::with(ingest()).await;
        let mut stream = open(&app, "/devices/AWLR-001/stream", true).await;
        for time in ["2026-06-01T08:00:00Z", "2026-06-01T08:15:00Z"] {
            let posted = app.webhook(Some("wh-alice-secret"), &envelope(time, r#"{"AWLR1-wl":2.5}"#)).await;
            assert_eq!(posted.status, 200, "{}", posted.text);
        }
        let (first, _) = stream.event().await;
        let (second, kept) = stream.event().await;
        ok(&run(
            &app.db,
            &["readings", "delete", "--device", "AWLR-001", "--start", "2026-06-01T08:00:00Z", "--end", "2026-06-01T08:00:00Z"],
            "",
        ));
        let auth = basic("alice", ALICE_PASSWORD);
        let url = format!("{}/devices/AWLR-001/stream", app.base);
        let mut resumed = Sse::open(&url, &[("Authorization", &auth), ("Last-Event-ID", "0")]).await;
        assert_eq!(resumed.event().await, (second, kept), "the removed reading (event {first}) is not resent");
        let posted = app.webhook(Some("wh-alice-secret"), &envelope("2026-06-01T08:30:00Z", r#"{"AWLR1-wl":3.5}"#)).await;
        assert_eq!(posted.status, 200, "{}", posted.text);
        let (_, live) = resumed.event().await;
        assert!(live.contains("3.5"), "then live ones: {live}");
    }
}

/// A stream request from `address` (through the trusted proxy header) with key `key`.
async fn stream_from(app: &TestApp, key: &str, address: &str) -> reqwest::Response {
    let url = format!("{}/{key}/devices/AWLR-001/stream", app.base);
    reqwest::Client::new().get(url).header("X-Forwarded-For", address).send().await.expect("request")
}

#[tokio::test]
async fn streams_are_capped_per_caller_per_address_and_in_all() {
    let options = ServeSettings {
        client_ip_header: Some(axum::http::HeaderName::from_static("x-forwarded-for")),
        streams: StreamLimits { total: 5, per_caller: 2, per_address: 3 },
        ..TestApp::settings()
    };
    let app = TestApp::with(options).await;
    let mut open = Vec::new();
    for (key, address) in [("pk-alice-all", "192.0.2.1"), ("pk-alice-all", "192.0.2.2")] {
        let res = stream_from(&app, key, address).await;
        assert_eq!(res.status(), 200);
        open.push(res);
    }
    let refused = stream_from(&app, "pk-alice-all", "192.0.2.3").await;
    assert_eq!(refused.status(), 429, "the caller holds its two");
    assert_eq!(refused.headers()["retry-after"], "10");
    assert_eq!(refused.headers()["connection"], "close", "a refused stream holds no connection either");
    assert_eq!(refused.text().await.expect("body"), r#"{"message":"To Many Request","data":null}"#);
    for address in ["192.0.2.1", "192.0.2.1"] {
        let res = stream_from(&app, "pk-alice-awlr", address).await;
        assert_eq!(res.status(), 200, "another caller");
        open.push(res);
    }
    assert_eq!(stream_from(&app, "pk-carol", "192.0.2.1").await.status(), 404, "carol does not see AWLR-001");
    let url = format!("{}/devices/AWLR-001/stream", app.base);
    let alice = || {
        reqwest::Client::new()
            .get(&url)
            .header("Authorization", basic("alice", ALICE_PASSWORD))
            .header("X-Forwarded-For", "192.0.2.1")
    };
    assert_eq!(alice().send().await.expect("request").status(), 429, "the address holds its three");
    let fifth = alice().header("X-Forwarded-For", "192.0.2.9").send().await.expect("request");
    assert_eq!(fifth.status(), 200, "from another address");
    open.push(fifth);
    let res = reqwest::Client::new()
        .get(&url)
        .header("Authorization", basic("alice", ALICE_PASSWORD))
        .header("X-Forwarded-For", "192.0.2.10")
        .send()
        .await
        .expect("request");
    assert_eq!(res.status(), 429, "the instance's five are taken");
    let metrics = app.request(reqwest::Method::GET, &format!("{}/metrics", app.root()), &[], None).await.text;
    for line in [
        "sensorhub_live_streams_refused_total{reason=\"caller\"} 1",
        "sensorhub_live_streams_refused_total{reason=\"address\"} 1",
        "sensorhub_live_streams_refused_total{reason=\"total\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
    open.pop();
    // The place is given back once the server sees the stream gone.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let res = alice().header("X-Forwarded-For", "192.0.2.10").send().await.expect("request");
        if res.status() == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "a closed stream's place was not given back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn other_requests_find_a_connection_while_one_key_asks_for_more_streams_than_fit() {
    let limits =
        ConnectionLimits { max_connections: 40, shutdown_grace: Duration::from_secs(5), ..ConnectionLimits::default() };
    let options = ServeSettings {
        client_ip_header: Some(axum::http::HeaderName::from_static("x-forwarded-for")),
        streams: StreamLimits { total: 20, per_caller: 1000, per_address: 1000 },
        ..TestApp::settings()
    };
    let app = TestApp::with_limits(options, limits).await;
    let requests = (0..60).map(|i| {
        let app = &app;
        async move { stream_from(app, "pk-alice-all", &format!("198.51.100.{i}")).await }
    });
    let answers = futures_util::future::join_all(requests).await;
    let streaming = answers.iter().filter(|r| r.status() == 200).count();
    let refused = answers.iter().filter(|r| r.status() == 429).count();
    assert_eq!((streaming, refused), (20, 40), "the stream budget, then 429");
    let started = Instant::now();
    let url = format!("{}/healthz", app.root());
    let healthz = app.request(reqwest::Method::GET, &url, &[], None);
    let health = tokio::time::timeout(Duration::from_secs(10), healthz).await.expect("/healthz answers");
    assert_eq!(health.status, 200);
    let latest = tokio::time::timeout(Duration::from_secs(10), app.get("/pk-alice-all/devices/AWLR-001/latest"))
        .await
        .expect("a read answers");
    assert_eq!(latest.status, 200);
    eprintln!("/healthz and latest answered in {} ms beside 20 streams", started.elapsed().as_millis());
    drop(answers);
}

#[tokio::test]
async fn csp_reports_are_throttled_per_client_address() {
    let options = ServeSettings {
        client_ip_header: Some(axum::http::HeaderName::from_static("x-forwarded-for")),
        ..TestApp::settings()
    };
    let app = TestApp::with(options).await;
    let url = format!("{}/dashboard/csp-report", app.root());
    let report = |address: &'static str| {
        reqwest::Client::new()
            .post(&url)
            .header("Content-Type", "application/csp-report")
            .header("X-Forwarded-For", address)
            .body(r#"{"csp-report":{"violated-directive":"script-src"}}"#)
            .send()
    };
    let per_minute = sensorhub::http::dashboard::REPORTS_PER_MINUTE;
    for _ in 0..per_minute {
        assert_eq!(report("203.0.113.5").await.expect("report").status(), 204);
    }
    let over = report("203.0.113.5").await.expect("report");
    assert_eq!(over.status(), 429);
    assert!(over.headers().contains_key("retry-after"));
    assert_eq!(report("203.0.113.6").await.expect("report").status(), 204, "another address has its own");
    let metrics = app.request(reqwest::Method::GET, &format!("{}/metrics", app.root()), &[], None).await.text;
    let counted = format!("sensorhub_dashboard_csp_reports_total {}", per_minute + 1);
    assert!(metrics.contains(&counted), "only the reports let in are counted: {metrics}");
}
