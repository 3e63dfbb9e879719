//! The admin commands, run as the real binary against the database of a
//! running test server.

use crate::harness::{TestApp, assert_error};
use sensorhub_store::Scope;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_sensorhub");

/// Runs `sensorhub ARGS --database DB` with `stdin`.
pub(crate) fn run(db: impl AsRef<std::ffi::OsStr>, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .arg("--database")
        .arg(db)
        .env("SENSORHUB_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sensorhub");
    child.stdin.take().expect("stdin").write_all(stdin.as_bytes()).expect("write stdin");
    child.wait_with_output().expect("wait")
}

pub(crate) fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub(crate) fn failed(out: &Output) -> String {
    assert!(!out.status.success(), "should have failed: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn examples() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples"))
}

on_each_backend! {
    async fn apply_is_idempotent() {
        let app = TestApp::empty().await;
        let file = examples().join("provision.json");
        let first = ok(&run(&app.db, &["apply", file.to_str().expect("path")], ""));
        assert!(first.contains("accounts: 2 created"), "{first}");
        assert!(first.contains("readings: 2 stored"), "{first}");
        let second = ok(&run(&app.db, &["apply", file.to_str().expect("path")], ""));
        assert_eq!(second.trim(), "nothing changed: the database already matches");
        assert_eq!(app.get_as("alice", "change-me-alice", "/devices").await.status, 200);
        assert_eq!(app.get_as("dinas-pu", "dinas-pu-example", "/devices").await.status, 200);
        assert_error(&app.get("/pk-old/devices").await, 403, "Forbidden");

        // Revoking a key by command survives re-applying a file that lists it
        // without `revoked`.
        ok(&run(&app.db, &["key", "revoke", "pk-alice-all"], ""));
        let again = ok(&run(&app.db, &["apply", file.to_str().expect("path")], ""));
        assert_eq!(again.trim(), "nothing changed: the database already matches");
        assert_error(&app.get("/pk-alice-all/devices").await, 403, "Forbidden");

        // A changed name and a changed reading are updated; the rest is left alone.
        let dir = tempfile::tempdir().expect("dir");
        let changed = dir.path().join("changed.json");
        std::fs::write(
            &changed,
            r#"{"devices":[{"device_id":"AWS-002","name":"Renamed","type":"AWS","lat":-7.8881,"long":110.3289,"interval_seconds":600}],
                "readings":[{"device_id":"AWS-002","timestamp":"2026-05-05T00:00:00Z","sensors":[{"id":"AWS2-temp","value":30}]}]}"#,
        )
        .expect("write");
        let out = ok(&run(&app.db, &["apply", changed.to_str().expect("path")], ""));
        assert!(out.contains("devices: 0 created, 1 updated") && out.contains("readings: 1"), "{out}");
        let a = app
            .get_as("alice", "change-me-alice", "/devices/AWS-002/data?start=2026-05-05T00:00:00Z&end=2026-05-05T00:00:00Z")
            .await;
        assert_eq!(
            a.data()[0]["sensors"],
            serde_json::json!([{"id": "AWS2-temp", "value": 30.0, "unit": "°C"}, {"id": "AWS2-rain", "value": 0.0, "unit": "mm"}])
        );
        assert_eq!(app.get_as("alice", "change-me-alice", "/devices").await.data()[1]["name"], "Renamed");
        assert_eq!(
            app.get_as("alice", "change-me-alice", "/devices").await.data()[1]["sensors"].as_array().map(Vec::len),
            Some(5)
        );
    }
}

/// Everything the store shows, to compare before and after a refused change.
async fn snapshot(app: &TestApp) -> String {
    let devices = app.store.list_devices(Scope::All).await.expect("devices");
    let accounts = app.store.accounts().await.expect("accounts");
    let keys = app.store.api_keys().await.expect("keys");
    let data = app.get("/pk-alice-all/devices/AWLR-001/data?start=2026-01-01T00:00:00Z&end=2026-12-31T00:00:00Z").await;
    format!("{devices:?}{accounts:?}{keys:?}{}", data.text)
}

on_each_backend! {
    async fn a_bad_file_is_refused_whole_naming_the_item() {
        let app = TestApp::start().await;
        let before = snapshot(&app).await;
        let good_device = r#"{"device_id":"NEW-1","name":"n","type":"AWS","lat":0,"long":0,"interval_seconds":60,
            "sensors":[{"sensor_id":"N1-t","name":"t","type":"AIR_TEMPERATURE","unit":"°C"}]}"#;
        let cases = [
            ("{\"accounts\": [", "line 1 column"),
            (
                &*format!(
                    r#"{{"devices":[{good_device}],"readings":[{{"device_id":"NEW-1","timestamp":"2026-05-05T00:00:00Z","sensors":[{{"id":"nope","value":1}}]}}]}}"#
                ),
                "readings[0].sensors[0]: unknown sensor \"nope\"",
            ),
            (
                &*format!(
                    r#"{{"devices":[{good_device}],"readings":[{{"device_id":"NEW-1","timestamp":"2026-05-05T00:00:00Z","sensors":[{{"id":"N1-t","value":1,"unit":"K"}}]}}]}}"#
                ),
                "readings[0].sensors[0]: unit \"K\"",
            ),
            (
                &*format!(
                    r#"{{"devices":[{good_device}],"readings":[{{"device_id":"GONE","timestamp":"2026-05-05T00:00:00Z","sensors":[{{"id":"N1-t","value":1}}]}}]}}"#
                ),
                "readings[0].device_id: unknown device",
            ),
            (&*format!(r#"{{"devices":[{good_device},{good_device}]}}"#), "devices[1]: duplicate device_id"),
            (
                &*format!(
                    r#"{{"devices":[{good_device}],"readings":[{{"device_id":"NEW-1","timestamp":"2026-05-05T00:00","sensors":[{{"id":"N1-t","value":1}}]}}]}}"#
                ),
                "readings[0].timestamp",
            ),
            (
                r#"{"accounts":[{"username":"alice","password":"changed"},{"username":"zed","devices":["NOPE"],"password":"p"}]}"#,
                "accounts[1].devices[0]: unknown device",
            ),
            (r#"{"accounts":[{"username":"newbie"}]}"#, "accounts[0].password: a new account needs a password"),
            (
                r#"{"accounts":[{"username":"carol","api_keys":[{"id":"pk-alice-all"}]}]}"#,
                "accounts[0].api_keys[0]: this API key id already belongs",
            ),
            (
                r#"{"accounts":[{"username":"carol","api_keys":[{"id":"pk-c2","devices":["AWLR-001"]}]}]}"#,
                "accounts[0].api_keys[0].devices[0]: the account cannot see",
            ),
        ];
        let dir = tempfile::tempdir().expect("dir");
        for (i, (text, expected)) in cases.iter().enumerate() {
            let file = dir.path().join(format!("bad{i}.json"));
            std::fs::write(&file, text).expect("write");
            let err = failed(&run(&app.db, &["apply", file.to_str().expect("path")], ""));
            assert!(err.contains(expected), "case {i}: expected {expected:?} in {err}");
            assert!(err.contains("nothing was written"), "{err}");
            assert_eq!(snapshot(&app).await, before, "case {i} changed the database");
        }
        assert_eq!(app.alice("/devices").await.status, 200, "alice's password is unchanged");
    }
}

#[tokio::test]
async fn no_plaintext_secret_is_stored() {
    let app = TestApp::start().await;
    let out = ok(&run(&app.db, &["key", "add", "--account", "alice"], ""));
    let key = out.lines().last().expect("key line").trim().to_owned();
    let mut bytes = std::fs::read(&app.db).expect("db");
    if let Ok(wal) = std::fs::read(Path::new(&app.db).with_extension("db-wal")) {
        bytes.extend(wal);
    }
    let text = String::from_utf8_lossy(&bytes);
    for secret in ["alice:pass:with:colons", "bob-pass", "pk-alice-all", "pk-alice-awlr", "wh-alice-secret", &key] {
        assert!(!text.contains(secret), "{secret} is stored in plain text");
    }
    assert!(text.contains("$argon2id$"), "passwords are Argon2id hashes");
}

on_each_backend! {
    async fn keys_are_added_listed_by_prefix_and_revoked() {
        let app = TestApp::start().await;
        let out = ok(&run(&app.db, &["key", "add", "--account", "alice", "--devices", "AWS-002"], ""));
        let key = out.lines().last().expect("key line").trim().to_owned();
        assert!(key.starts_with("pk_") && key.len() >= 3 + 32, "at least 128 random bits: {key}");
        let a = app.get(&format!("/{key}/devices")).await;
        assert_eq!(a.status, 200);
        assert_eq!(a.data().as_array().map(Vec::len), Some(1));
        assert_eq!(a.data()[0]["device_id"], "AWS-002");

        let list = ok(&run(&app.db, &["key", "list"], ""));
        assert!(list.contains(&key[..8]) && !list.contains(&key), "{list}");

        ok(&run(&app.db, &["key", "revoke", &key[..8]], ""));
        assert_error(&app.get(&format!("/{key}/devices")).await, 403, "Forbidden");
        let err = failed(&run(&app.db, &["key", "revoke", "pk_nothing"], ""));
        assert!(err.contains("no API key"), "{err}");
        let err = failed(&run(&app.db, &["key", "add", "--account", "nobody"], ""));
        assert!(err.contains("no account named"), "{err}");
    }
}

on_each_backend! {
    async fn accounts_are_added_changed_disabled_and_enabled() {
        let app = TestApp::start().await;
        let out = ok(&run(&app.db, &["account", "add", "dewi", "--password-stdin", "--devices", "AWS-002"], "dewi-pass\n"));
        assert!(out.contains("created account dewi"), "{out}");
        let a = app.get_as("dewi", "dewi-pass", "/devices").await;
        assert_eq!(a.data()[0]["device_id"], "AWS-002");
        let err = failed(&run(&app.db, &["account", "add", "dewi", "--password-stdin"], "x\n"));
        assert!(err.contains("already exists"), "{err}");

        ok(&run(&app.db, &["account", "passwd", "dewi", "--password-stdin"], "dewi-new\n"));
        assert_error(&app.get_as("dewi", "dewi-pass", "/devices").await, 401, "Unauthorized");
        assert_eq!(app.get_as("dewi", "dewi-new", "/devices").await.status, 200);

        ok(&run(&app.db, &["account", "disable", "dewi"], ""));
        assert_error(&app.get_as("dewi", "dewi-new", "/devices").await, 403, "Forbidden");
        ok(&run(&app.db, &["account", "enable", "dewi"], ""));
        assert_eq!(app.get_as("dewi", "dewi-new", "/devices").await.status, 200);

        let list = ok(&run(&app.db, &["account", "list"], ""));
        assert!(list.lines().any(|l| l.starts_with("bob") && l.contains("disabled")), "{list}");
        let err = failed(&run(&app.db, &["account", "passwd", "nobody", "--password-stdin"], "x\n"));
        assert!(err.contains("no account named"), "{err}");
    }
}

on_each_backend! {
    async fn devices_are_added_and_listed() {
        let app = TestApp::start().await;
        let out = ok(&run(
            &app.db,
            &[
                "device",
                "add",
                "AWLR-009",
                "--name",
                "Kali Opak",
                "--type",
                "AWLR",
                "--lat",
                "-7.9",
                "--long",
                "110.4",
                "--interval",
                "300",
                "--sensor",
                "AWLR9-wl,Water Level,FLUID_LEVEL,cm",
                "--account",
                "carol",
            ],
            "",
        ));
        assert!(out.contains("added device AWLR-009 with 1 sensors"), "{out}");
        let a = app.get_as("carol", "carol-pass", "/devices").await;
        assert_eq!(a.data()[0]["sensors"][0]["sensor_id"], "AWLR9-wl");
        assert_eq!(a.data()[0]["lat"], -7.9);
        let list = ok(&run(&app.db, &["device", "list"], ""));
        assert!(list.contains("AWLR-009") && list.contains("SECRET-9"), "{list}");
        let err = failed(&run(
            &app.db,
            &[
                "device",
                "add",
                "AWLR-009",
                "--name",
                "x",
                "--type",
                "AWLR",
                "--lat",
                "0",
                "--long",
                "0",
                "--interval",
                "60",
            ],
            "",
        ));
        assert!(err.contains("already exists"), "{err}");
    }
}

on_each_backend! {
    async fn imports_are_atomic_per_file_and_report_their_rate() {
        let app = TestApp::start().await;
        let dir = tempfile::tempdir().expect("dir");
        let csv = dir.path().join("r.csv");
        std::fs::write(&csv, "device_id,timestamp,sensor_id,value\nAWLR-001,2026-06-01T00:00:00Z,AWLR1-batt,90\nAWLR-001,2026-06-01T00:00:00Z,AWLR1-wl,110.5\nAWLR-001,2026-06-01T00:15:00+07:00,AWLR1-wl,111\n").expect("write");
        let out = ok(&run(&app.db, &["import", csv.to_str().expect("path")], ""));
        assert!(out.contains("imported 2 readings (3 values)") && out.contains("rows/s"), "{out}");
        let ndjson = dir.path().join("r.ndjson");
        std::fs::write(&ndjson, "{\"device_id\":\"AWLR-001\",\"timestamp\":\"2026-06-02T00:00:00Z\",\"sensors\":[{\"id\":\"AWLR1-sig\",\"value\":-80}]}\n").expect("write");
        ok(&run(&app.db, &["import", ndjson.to_str().expect("path")], ""));
        let a = app.alice("/devices/AWLR-001/data?start=2026-05-31T00:00:00Z&end=2026-06-03T00:00:00Z").await;
        assert_eq!(a.data().as_array().map(Vec::len), Some(3), "{}", a.text);

        let before = snapshot(&app).await;
        let bad = dir.path().join("bad.csv");
        std::fs::write(&bad, "device_id,timestamp,sensor_id,value\nAWLR-001,2026-06-05T00:00:00Z,AWLR1-batt,1\nAWLR-001,2026-06-05T00:15:00Z,AWLR1-batt,NaN\n").expect("write");
        let err = failed(&run(&app.db, &["import", bad.to_str().expect("path")], ""));
        assert!(err.contains("line 3") && err.contains("nothing was imported"), "{err}");
        let bad = dir.path().join("bad.ndjson");
        std::fs::write(&bad, "{\"device_id\":\"AWLR-001\",\"timestamp\":\"2026-06-05T00:00:00Z\",\"sensors\":[{\"id\":\"AWLR1-sig\",\"value\":-80}]}\n{\"device_id\":\"AWLR-001\",\"timestamp\":\"2026-06-05T00:00:00Z\",\"sensors\":[{\"id\":\"X\",\"value\":1}]}\n").expect("write");
        let err = failed(&run(&app.db, &["import", bad.to_str().expect("path")], ""));
        assert!(err.contains("line 2.sensors[0]: unknown sensor"), "{err}");
        assert_eq!(snapshot(&app).await, before);
    }
}

on_each_backend! {
    async fn demo_fills_an_empty_database_with_working_credentials() {
        let app = TestApp::empty().await;
        let out = ok(&run(&app.db, &["demo"], ""));
        assert!(out.contains("curl -u alice:alice-demo-password"), "{out}");
        let curls: Vec<&str> = out.lines().filter(|l| l.trim_start().starts_with("curl")).collect();
        assert_eq!(curls.len(), 3, "{out}");
        let devices = app.get_as("alice", "alice-demo-password", "/devices").await;
        assert_eq!(devices.data().as_array().map(Vec::len), Some(5));
        let units: Vec<_> =
            devices.data()[0]["sensors"].as_array().expect("sensors").iter().map(|s| s["unit"].clone()).collect();
        assert!(units.contains(&serde_json::json!(".")), "a dimensionless sensor: {units:?}");
        let a = app
            .get_as(
                "alice",
                "alice-demo-password",
                "/devices/AWS-001/data?start=2026-01-01T00:00:00Z&end=2027-01-01T00:00:00Z&tz=7",
            )
            .await;
        assert!(a.data().as_array().is_some_and(|d| d.len() > 30 * 144), "30+ days at 10 minutes");
        assert_eq!(app.get("/pk-demo-budi/devices").await.data().as_array().map(Vec::len), Some(2));
        // A flood wave is passing AWLR-001 as the demo starts: a newcomer sees its alarm at once.
        let active = app.get("/pk-demo-alice-all/alarms").await;
        let active = active.data().as_array().expect("a list").clone();
        assert_eq!(active.len(), 1, "{active:?}");
        assert_eq!((active[0]["device_id"].as_str(), active[0]["rule"].as_str()), (Some("AWLR-001"), Some("siaga")));
        let level = active[0]["level"].as_str().unwrap_or_default();
        assert!(["Siaga 2", "Siaga 1"].contains(&level), "near the crest: {level}");
        let since = (jiff::Timestamp::now() - jiff::SignedDuration::from_hours(2)).to_string();
        let events = app.get(&format!("/pk-demo-alice-all/devices/AWLR-001/alarms/events?start={since}")).await;
        assert_eq!(events.data()[0]["transition"], "raised", "{}", events.text);
        let again = ok(&run(&app.db, &["demo"], ""));
        assert!(again.contains("not empty"), "{again}");
    }
}

on_each_backend! {
    async fn readings_are_deleted_by_range_and_grants_are_listed() {
        let app = TestApp::start().await;
        let window = "/devices/AWLR-001/data?start=2026-06-01T00:00:00Z&end=2026-06-01T23:59:59Z";
        app.add_readings(vec![
            crate::harness::reading("AWLR-001", crate::harness::secs("2026-06-01T00:00:00Z"), "AWLR1-wl", 1.0),
            crate::harness::reading("AWLR-001", crate::harness::secs("2026-06-01T01:00:00Z"), "AWLR1-wl", 2.0),
            crate::harness::reading("AWLR-001", crate::harness::secs("2026-06-01T02:00:00Z"), "AWLR1-wl", 3.0),
        ])
        .await;
        let out = ok(&run(
            &app.db,
            &["readings", "delete", "--device", "AWLR-001", "--start", "2026-06-01T07:30:00+07:00", "--end", "2026-06-01T02:00:00Z"],
            "",
        ));
        assert_eq!(
            out.trim(),
            "deleted 2 readings (2 values) of device AWLR-001 from 2026-06-01T00:30:00Z to 2026-06-01T02:00:00Z, in 2 stored hours"
        );
        let left = app.alice(window).await;
        assert_eq!(left.data().as_array().map(Vec::len), Some(1), "{}", left.text);
        let err = failed(&run(&app.db, &["readings", "delete", "--device", "NOPE", "--start", "2026-06-01T00:00:00Z", "--end", "2026-06-02T00:00:00Z"], ""));
        assert!(err.contains("no device \"NOPE\""), "{err}");
        let err = failed(&run(&app.db, &["readings", "delete", "--device", "AWLR-001", "--start", "2026-06-02T00:00:00Z", "--end", "2026-06-01T00:00:00Z"], ""));
        assert!(err.contains("is after --end"), "{err}");

        // alice owns both stations (marked *); bob only sees AWS-002, until the upgrade choice.
        let list = ok(&run(&app.db, &["account", "list"], ""));
        assert!(list.lines().any(|l| l.starts_with("alice") && l.ends_with("AWLR-001*,AWS-002*")), "{list}");
        assert!(list.lines().any(|l| l.starts_with("bob") && l.ends_with(" AWS-002")), "{list}");
        let out = ok(&run(&app.db, &["migrate", "--grant-write-to-viewers"], ""));
        assert!(out.contains("write grants added: 1"), "{out}");
        let list = ok(&run(&app.db, &["account", "list"], ""));
        assert!(list.lines().any(|l| l.starts_with("bob") && l.ends_with(" AWS-002*")), "{list}");
    }
}

on_each_backend! {
    async fn retention_is_set_per_device_and_account_and_applied_by_expire() {
        let app = TestApp::start().await;
        let now = jiff::Timestamp::now().as_second();
        let (old, recent) = (now - 3 * 86_400, now - 3600);
        let at = |s: i64| jiff::Timestamp::from_second(s).expect("time").to_string();
        app.add_readings(vec![
            crate::harness::reading("AWLR-001", old, "AWLR1-wl", 1.0),
            crate::harness::reading("AWLR-001", recent, "AWLR1-wl", 2.0),
            crate::harness::reading("AWS-002", old, "AWS2-temp", 3.0),
        ])
        .await;
        let count = |device: &'static str| {
            let path = format!("/devices/{device}/data?start={}&end={}", at(old - 60), at(now));
            let app = &app;
            async move { app.alice(&path).await.data().as_array().map_or(0, Vec::len) }
        };
        assert_eq!((count("AWLR-001").await, count("AWS-002").await), (2, 1));

        let out = ok(&run(&app.db, &["device", "retention", "AWLR-001", "2d"], ""));
        assert_eq!(out.trim(), "device AWLR-001 now keeps its readings: 2d");
        let out = ok(&run(&app.db, &["device", "retention", "AWLR-001", "48h"], ""));
        assert_eq!(out.trim(), "device AWLR-001 already keeps its readings: 2d", "48h is 2d");
        // The fixture's own readings of AWLR-001 are older still: they go too.
        let out = ok(&run(&app.db, &["readings", "expire"], ""));
        assert!(out.starts_with("removed ") && out.contains(" readings of 1 devices past their retention"), "{out}");
        assert_eq!((count("AWLR-001").await, count("AWS-002").await), (1, 1), "AWS-002 keeps everything");

        // alice owns AWS-002: her retention applies to it; AWLR-001 keeps its own.
        let out = ok(&run(&app.db, &["account", "retention", "alice", "1d"], ""));
        assert!(out.starts_with("account alice now keeps its devices' readings: 1d"), "{out}");
        let out = ok(&run(&app.db, &["readings", "expire"], ""));
        assert!(out.contains(" readings of 1 devices past their retention"), "{out}");
        assert_eq!((count("AWLR-001").await, count("AWS-002").await), (1, 0));

        let err = failed(&run(&app.db, &["device", "retention", "AWLR-001", "30m"], ""));
        assert!(err.contains("is not a retention"), "{err}");
        let err = failed(&run(&app.db, &["readings", "expire", "--retention", "inherit"], ""));
        assert!(err.contains("cannot inherit"), "{err}");
        let err = failed(&run(&app.db, &["device", "retention", "NOPE", "1d"], ""));
        assert!(err.contains("no device \"NOPE\""), "{err}");
    }
}

mod process;
