//! Alarms through the API (issue 25): a device's rules and states, the
//! active alarms of a caller, the transitions in a range, acknowledging,
//! `event: alarm` on a stream, rules changed on a running server, and the
//! silence watch raising by the clock (and not in a burst after a restart).

use crate::cli::ok;
use crate::harness::{ServeProcess, TestApp, assert_error, fresh_database};
use crate::stream::{Sse, envelope, ingest};
use sensorhub_core::alarm::RuleSpec;
use sensorhub_core::provision::{Provision, parse_json};
use serde_json::Value;
use std::time::{Duration, Instant};

/// Runs `sensorhub ARGS --database DB`.
fn run(db: &str, args: &[&str]) -> std::process::Output {
    crate::cli::run(db, args, "")
}

/// Katulampa's bands on AWLR-001's water level.
pub(crate) const SIAGA: &str = r#"{"name": "siaga", "sensor": "AWLR1-wl", "direction": "above", "deadband": 5, "for": "0s",
    "levels": [{"name": "Siaga 4", "at": 60}, {"name": "Siaga 3", "at": 90}, {"name": "Siaga 2", "at": 160}, {"name": "Siaga 1", "at": 210}]}"#;

/// Sets AWLR-001's rules.
pub(crate) async fn rules(app: &TestApp, specs: &[&str]) {
    let rules = specs
        .iter()
        .map(|s| serde_json::from_str::<RuleSpec>(s).expect("spec").check("rule").expect("a rule"))
        .collect();
    app.store.set_alarm_rules("AWLR-001", rules).await.expect("rules set");
}

/// RFC 3339 of `second`.
fn at(second: i64) -> String {
    jiff::Timestamp::from_second(second).expect("a time").to_string()
}

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// Posts a water level of AWLR-001 at `second` through the webhook (ingest mode).
async fn level(app: &TestApp, second: i64, value: f64) {
    let posted = app
        .with_webhook_key("wh-alice-secret")
        .post("/webhook/sensor-data", &envelope(&at(second), &format!(r#"{{"AWLR1-wl":{value}}}"#)))
        .await;
    assert_eq!(posted.status, 200, "{}", posted.text);
}

/// The transitions of AWLR-001 since an hour ago, as (rule, transition, level).
async fn transitions(app: &TestApp) -> Vec<(String, String, Option<String>)> {
    let path = format!("/devices/AWLR-001/alarms/events?start={}", at(now() - 3600));
    let a = app.as_alice().get(&path).await;
    assert_eq!(a.status, 200, "{}", a.text);
    let s = |v: &Value| v.as_str().map(str::to_owned);
    a.data()
        .as_array()
        .expect("a list")
        .iter()
        .map(|e| (s(&e["rule"]).unwrap_or_default(), s(&e["transition"]).unwrap_or_default(), s(&e["level"])))
        .collect()
}

fn t(rule: &str, transition: &str, level: Option<&str>) -> (String, String, Option<String>) {
    (rule.into(), transition.into(), level.map(str::to_owned))
}

on_each_backend! {
    async fn a_flood_is_shown_raised_escalated_and_cleared_to_each_caller() {
        let app = TestApp::with(ingest()).await;
        rules(&app, &[SIAGA, r#"{"name": "silent", "no_data_for": "30m"}"#]).await;
        let quiet = app.as_alice().get("/devices/AWLR-001/alarms?tz=7").await;
        assert_eq!(quiet.status, 200, "{}", quiet.text);
        let list = quiet.data().as_array().expect("a list");
        assert_eq!(list.iter().map(|a| a["rule"].as_str()).collect::<Vec<_>>(), [Some("siaga"), Some("silent")]);
        assert_eq!((list[0]["state"].as_str(), &list[0]["level"], list[0]["kind"].as_str()), (Some("ok"), &Value::Null, Some("level")));
        assert_eq!(list[0]["spec"]["levels"][3]["name"], "Siaga 1", "the rule as written");
        assert_eq!(list[0]["may_acknowledge"], true, "alice owns AWLR-001");

        let start = now() - 900;
        for (i, v) in [61.0, 95.0, 170.0, 215.0, 158.0, 20.0].iter().enumerate() {
            level(&app, start + i as i64 * 60, *v).await;
        }
        assert_eq!(transitions(&app).await, [
            t("siaga", "raised", Some("Siaga 4")),
            t("siaga", "level_changed", Some("Siaga 3")),
            t("siaga", "level_changed", Some("Siaga 2")),
            t("siaga", "level_changed", Some("Siaga 1")),
            t("siaga", "level_changed", Some("Siaga 2")),
            t("siaga", "cleared", None),
        ]);
        let events = app.with_key("pk-alice-awlr").get(&format!("/devices/AWLR-001/alarms/events?start={}&tz=7", at(start - 60))).await;
        assert_eq!(events.status, 200, "{}", events.text);
        let first = &events.data()[0];
        assert_eq!((first["value"].as_f64(), first["timestamp"].as_str()), (Some(61.0), Some(jiff::Timestamp::from_second(start).expect("t").to_zoned(jiff::tz::TimeZone::fixed(jiff::tz::Offset::constant(7))).strftime("%Y-%m-%dT%H:%M:%S+07:00").to_string().as_str())), "times in tz: {first}");

        level(&app, start + 400, 100.0).await;
        let active = app.with_key("pk-alice-all").get("/alarms").await;
        assert_eq!(active.status, 200, "{}", active.text);
        let active = active.data().as_array().expect("a list").clone();
        assert_eq!(active.len(), 1, "{active:?}");
        assert_eq!((active[0]["device_id"].as_str(), active[0]["level"].as_str(), active[0]["state"].as_str()), (Some("AWLR-001"), Some("Siaga 3"), Some("active")));
        assert_eq!(active[0]["may_acknowledge"], false, "a key never acknowledges");
        assert_eq!(app.as_user("carol", "carol-pass").get("/alarms").await.data(), &Value::Array(vec![]), "carol sees no device of alice's");
        assert_error(&app.as_user("carol", "carol-pass").get("/devices/AWLR-001/alarms").await, 404, "Device not found");
        assert_error(&app.with_key("pk-alice-all").get("/devices/AWLR-001/alarms?tz=+25:00").await, 400, "Bad Request");
    }

    async fn acknowledging_needs_a_write_grant_and_an_active_episode() {
        let app = TestApp::with(ingest()).await;
        rules(&app, &[SIAGA]).await;
        let mut doc: Provision = parse_json(r#"{"accounts": [{"username": "dina", "password": "dina-pass", "devices": ["AWLR-001"]}]}"#).expect("doc");
        let readings = doc.check().expect("valid");
        app.store.apply(doc, readings).await.expect("dina sees AWLR-001");
        let ack = "/devices/AWLR-001/alarms/siaga/acknowledge";
        let conflict = app.as_alice().post(ack, "").await;
        assert_error(&conflict, 409, "Conflict");
        assert!(conflict.body["detail"].as_str().is_some_and(|d| d.contains("not active")), "{}", conflict.text);
        level(&app, now() - 60, 100.0).await;
        let refused = app.as_user("dina", "dina-pass").post(ack, "").await;
        assert_error(&refused, 403, "Forbidden");
        assert!(refused.body["detail"].as_str().is_some_and(|d| d.contains("write grant")), "{}", refused.text);
        let seen = app.as_user("dina", "dina-pass").get("/alarms").await;
        assert_eq!(seen.data()[0]["may_acknowledge"], false, "dina may see but not acknowledge");
        assert_error(&app.as_alice().post("/devices/AWLR-001/alarms/nope/acknowledge", "").await, 404, "Not Found");
        assert_error(&app.as_alice().post("/devices/SECRET-9/alarms/siaga/acknowledge", "").await, 404, "Device not found");
        assert_error(&app.as_alice().get(ack).await, 405, "Method Not Allowed");
        let done = app.as_alice().post(ack, "").await;
        assert_eq!(done.status, 200, "{}", done.text);
        assert_eq!((done.data()["transition"].as_str(), done.data()["level"].as_str()), (Some("acknowledged"), Some("Siaga 3")));
        let state = app.as_alice().get("/devices/AWLR-001/alarms").await;
        assert!(state.data()[0]["acknowledged_at"].is_string(), "{}", state.text);
        assert_eq!(transitions(&app).await.last(), Some(&t("siaga", "acknowledged", Some("Siaga 3"))));
        // Sent again (a double click, a retry): the same acknowledgement, recorded once.
        let again = app.as_alice().post(ack, "").await;
        assert_eq!(again.status, 200, "{}", again.text);
        assert_eq!(again.data(), done.data(), "the first acknowledgement, as recorded");
        let acks = transitions(&app).await.into_iter().filter(|(_, kind, _)| kind == "acknowledged").count();
        assert_eq!(acks, 1, "one acknowledgement recorded");
    }

    async fn a_stream_carries_each_transition_as_an_alarm_event() {
        let app = TestApp::with(ingest()).await;
        rules(&app, &[SIAGA]).await;
        let mut stream = Sse::open(&format!("{}/pk-alice-all/devices/AWLR-001/stream?tz=7", app.base), &[]).await;
        level(&app, now() - 30, 95.0).await;
        let mut blocks = vec![stream.block().await, stream.block().await];
        blocks.sort();
        let alarm = blocks.iter().find(|b| b.starts_with("event: alarm")).expect("an alarm event");
        let data: Value = serde_json::from_str(alarm.split("data: ").nth(1).expect("data")).expect("JSON");
        assert_eq!((data["transition"].as_str(), data["level"].as_str(), data["value"].as_f64()), (Some("raised"), Some("Siaga 3"), Some(95.0)));
        assert!(data["at"].as_str().is_some_and(|t| t.ends_with("+07:00")), "in the stream's zone: {data}");
        assert!(blocks.iter().any(|b| b.starts_with("id: ") && b.contains("\"AWLR1-wl\"") && !b.contains("event:")), "the reading as before: {blocks:?}");
    }
}

/// Waits until AWLR-001's transitions satisfy `done`.
async fn wait_for(
    app: &TestApp,
    done: impl Fn(&[(String, String, Option<String>)]) -> bool,
    limit: Duration,
) -> Vec<(String, String, Option<String>)> {
    let deadline = Instant::now() + limit;
    loop {
        let all = transitions(app).await;
        if done(&all) {
            return all;
        }
        assert!(Instant::now() < deadline, "not within {limit:?}: {all:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

on_each_backend! {
    async fn rules_changed_on_a_running_server_take_effect_and_silence_is_raised_by_the_clock() {
        let app = TestApp::with(ingest()).await;
        // Added by the command while the server runs: the next reading is judged by it.
        ok(&run(&app.db, &["alarm", "add", "AWLR-001", SIAGA]));
        level(&app, now() - 30, 70.0).await;
        assert_eq!(transitions(&app).await, [t("siaga", "raised", Some("Siaga 4"))]);
        let listed = ok(&run(&app.db, &["alarm", "list"]));
        assert!(listed.contains("AWLR-001") && listed.contains("Siaga 4"), "{listed}");

        // A silence rule: raised by the watch within its time and 10 s, with no reading to notice it by.
        let added = Instant::now();
        ok(&run(&app.db, &["alarm", "add", "AWLR-001", r#"{"name": "quiet", "no_data_for": "3s"}"#]));
        let raised = wait_for(&app, |all| all.contains(&t("quiet", "raised", None)), Duration::from_secs(15)).await;
        assert!(added.elapsed() < Duration::from_secs(3 + 10), "raised after {:?}: {raised:?}", added.elapsed());
        level(&app, now(), 50.0).await;
        assert!(transitions(&app).await.contains(&t("quiet", "cleared", None)), "the next reading clears it");
        // Watched again from that reading: raised again within its time and 10 s.
        let cleared = Instant::now();
        let raises = |all: &[(String, String, Option<String>)]| all.iter().filter(|e| **e == t("quiet", "raised", None)).count();
        wait_for(&app, |all| raises(all) == 2, Duration::from_secs(15)).await;
        assert!(cleared.elapsed() < Duration::from_secs(3 + 10), "raised again after {:?}", cleared.elapsed());

        // Removed: its episode ends.
        ok(&run(&app.db, &["alarm", "remove", "AWLR-001", "siaga"]));
        let all = transitions(&app).await;
        assert_eq!(all.iter().rfind(|e| e.0 == "siaga"), Some(&t("siaga", "cleared", None)), "{all:?}");
        let refused = run(&app.db, &["alarm", "remove", "AWLR-001", "siaga"]);
        assert!(!refused.status.success());
    }

    async fn a_server_that_was_down_raises_no_burst_of_silence() {
        let (db, _dir, _pg) = fresh_database().await;
        let provision = format!("{}/tests/api/fixture.json", env!("CARGO_MANIFEST_DIR"));
        ok(&run(&db, &["apply", &provision]));
        ok(&run(&db, &["alarm", "add", "AWLR-001", r#"{"name": "quiet", "no_data_for": "4s"}"#]));
        let server = ServeProcess::start(&["--database", &db, "--webhook-mode", "ingest", "--rate-limit", "off"]);
        let post = |second: i64| {
            let body = envelope(&at(second), r#"{"AWLR1-wl": 10}"#);
            let url = format!("{}/webhook/sensor-data", server.base);
            async move {
                reqwest::Client::new()
                    .post(url)
                    .header("X-API-KEY", "wh-alice-secret")
                    .header("Content-Type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .expect("post")
                    .status()
            }
        };
        assert_eq!(post(now()).await, 200);
        drop(server);
        // Down for longer than the rule's time.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let restarted = Instant::now();
        let server = ServeProcess::start(&["--database", &db, "--rate-limit", "off"]);
        let events = || {
            let url = format!("{}/pk-alice-all/devices/AWLR-001/alarms/events?start={}", server.base, at(now() - 3600));
            async move {
                reqwest::get(url).await.expect("get").json::<Value>().await.expect("JSON")["data"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            }
        };
        // Polled from the start: an early raise would be seen before 4 s passed.
        let deadline = restarted + Duration::from_secs(4 + 10);
        while events().await.is_empty() {
            assert!(Instant::now() < deadline, "not raised within 4 s + 10 s of the start");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert!(restarted.elapsed() >= Duration::from_secs(4), "raised no sooner than 4 s after the start");
    }
}
