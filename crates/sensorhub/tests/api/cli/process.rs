//! The server process and the command line's own settings: several
//! processes opening one new database, `migrate`'s report, unreachable
//! PostgreSQL, the config file's layers, graceful shutdown, logs that hold
//! no secret, and every variable the command line reads.

use super::{BIN, failed, ok, run};
use crate::harness::{FIXTURE, TestApp};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

#[test]
fn processes_opening_a_new_database_at_once_all_succeed() {
    let dir = tempfile::tempdir().expect("dir");
    let db = dir.path().join("race.db");
    let children: Vec<_> = (0..4)
        .map(|_| {
            Command::new(BIN).arg("migrate").arg("--database").arg(&db).stderr(Stdio::piped()).spawn().expect("spawn")
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().expect("wait");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn unreachable_postgres_fails_clearly_and_config_layers_apply() {
    let dir = tempfile::tempdir().expect("dir");
    let err = failed(&run("postgres://u:secret@127.0.0.1:1/db", &["device", "list"], ""));
    assert!(err.contains("database error"), "{err}");
    assert!(!err.contains("secret"), "{err}");

    let db = dir.path().join("from-config.db");
    let config = dir.path().join("sensorhub.toml");
    std::fs::write(&config, format!("database = {:?}\n", db.to_str().expect("path"))).expect("write");
    let out = Command::new(BIN).args(["device", "list", "--config"]).arg(&config).output().expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(db.exists(), "the config file's database was created");

    let env_db = dir.path().join("from-env.db");
    let out = Command::new(BIN)
        .args(["migrate", "--config"])
        .arg(&config)
        .env("SENSORHUB_DATABASE", &env_db)
        .output()
        .expect("run");
    assert!(out.status.success());
    assert!(env_db.exists(), "the environment wins over the config file");

    let out = Command::new(BIN).args(["device", "list", "--database", "sqlite::memory:"]).output().expect("run");
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("no in-memory database"));

    std::fs::write(
        &config,
        format!("database = {:?}\ndefault_tz = 7\nshutdown_grace = 3\n", db.to_str().expect("path")),
    )
    .expect("write");
    let out = Command::new(BIN).args(["device", "list", "--config"]).arg(&config).output().expect("run");
    assert!(out.status.success(), "a number of hours is a valid default_tz: {}", String::from_utf8_lossy(&out.stderr));

    std::fs::write(&config, "databse = \"typo\"\n").expect("write");
    let out = Command::new(BIN).args(["device", "list", "--config"]).arg(&config).output().expect("run");
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("unknown field"));
}

#[test]
fn serve_shuts_down_gracefully_and_logs_no_secret() {
    let dir = tempfile::tempdir().expect("dir");
    let db = dir.path().join("s.db");
    let fixture = dir.path().join("fixture.json");
    std::fs::write(&fixture, FIXTURE).expect("write");
    ok(&run(&db, &["apply", fixture.to_str().expect("path")], ""));
    // Enough readings that a client which does not read blocks the response.
    let csv = dir.path().join("many.csv");
    let mut text = String::from("device_id,timestamp,sensor_id,value\n");
    let start = crate::harness::secs("2025-06-01T00:00:00Z");
    for i in 0..200_000i64 {
        let ts = jiff::Timestamp::from_second(start + i * 60).expect("ts");
        text.push_str(&format!("AWLR-001,{ts},AWLR1-batt,{}\n", i % 100));
    }
    std::fs::write(&csv, text).expect("write");
    ok(&run(&db, &["import", csv.to_str().expect("path")], ""));

    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--shutdown-grace", "1", "--database"])
        .arg(&db)
        .env("SENSORHUB_LOG", "info")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut log = String::new();
    let addr = loop {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).expect("read") > 0, "server exited: {log}");
        log.push_str(&line);
        if let Some(rest) = line.split("listen=").nth(1) {
            break rest.split_whitespace().next().expect("address").to_owned();
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let stalled = rt.block_on(async {
        let client = reqwest::Client::new();
        let base = format!("http://{addr}/external/v1");
        let r = client.get(format!("{base}/pk-alice-all/devices")).send().await.expect("request");
        assert_eq!(r.status(), 200);
        let r = client
            .get(format!("{base}/devices/AWLR-001/data?start=2025-06-01T00:00:00Z&end=2026-01-01T00:00:00Z"))
            .header("Authorization", crate::harness::basic("alice", crate::harness::ALICE_PASSWORD))
            .send()
            .await
            .expect("request");
        assert_eq!(r.status(), 200);
        let body = r.text().await.expect("body");
        assert!(body.len() > 10_000_000, "{}", body.len());
        // A client that asks for it all again and never reads.
        let mut stalled = std::net::TcpStream::connect(&addr).expect("connect");
        let request = format!(
            "GET /external/v1/pk-alice-all/devices/AWLR-001/data?start=2025-06-01T00:00:00Z&end=2026-01-01T00:00:00Z HTTP/1.1\r\nHost: {addr}\r\n\r\n"
        );
        stalled.write_all(request.as_bytes()).expect("send");
        // The answer has begun once its first bytes arrive; the rest stays unread.
        stalled.set_read_timeout(Some(std::time::Duration::from_secs(10))).expect("timeout");
        let mut head = [0u8; 12];
        std::io::Read::read_exact(&mut stalled, &mut head).expect("the answer begins");
        assert_eq!(&head, b"HTTP/1.1 200");
        stalled
    });
    let kill = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill");
    assert!(kill.success());
    let status = child.wait().expect("wait");
    drop(stalled);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).expect("read");
    log.push_str(&rest);
    assert!(status.success(), "exit status {status:?}: {log}");
    assert!(log.contains("grace period"), "the stalled client was cut off after the grace period: {log}");
    assert!(log.contains("route=/external/v1/{api_key_id}/devices"), "{log}");
    assert!(log.contains("complete=true"), "{log}");
    for secret in ["pk-alice-all", "alice:pass", "Basic ", "YWxpY2"] {
        assert!(!log.contains(secret), "{secret} in the log: {log}");
    }
}

#[test]
fn json_logs_are_one_object_per_line() {
    let dir = tempfile::tempdir().expect("dir");
    let db = dir.path().join("j.db");
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--log-format", "json", "--database"])
        .arg(&db)
        .env("SENSORHUB_LOG", "info")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let line = loop {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).expect("read") > 0, "server exited");
        if line.contains("listen") {
            break line;
        }
    };
    let event: serde_json::Value = serde_json::from_str(&line).expect("a JSON log line");
    assert_eq!(event["level"], "INFO");
    assert!(event["listen"].as_str().is_some_and(|a| a.starts_with("127.0.0.1:")), "{event}");
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill");
    assert!(child.wait().expect("wait").success());
}

#[tokio::test]
async fn passwords_in_database_urls_never_print() {
    let pg =
        sensorhub_testing::TempDatabase::create(&crate::harness::postgres_admin_url()).await.expect("test database");
    // The test server trusts loopback, so the password is sent and ignored.
    let sep = if pg.url().contains('?') { '&' } else { '?' };
    let url = format!("{}{sep}password=query-secret-1", pg.url());
    let unreachable = "postgres://u:userinfo-secret-2@127.0.0.1:1/x?password=query-secret-3&connect_timeout=2";
    let mut printed = String::new();
    for (db, args) in
        [(url.as_str(), &["migrate"][..]), (url.as_str(), &["device", "list"]), (unreachable, &["migrate"])]
    {
        let out =
            Command::new(BIN).args(args).arg("--database").arg(db).env("SENSORHUB_LOG", "debug").output().expect("run");
        printed += &String::from_utf8_lossy(&out.stdout);
        printed += &String::from_utf8_lossy(&out.stderr);
    }
    assert!(printed.contains("password=***"), "the URL is shown, redacted: {printed}");
    for secret in ["query-secret-1", "userinfo-secret-2", "query-secret-3"] {
        assert!(!printed.contains(secret), "{secret} printed in: {printed}");
    }
}

#[test]
fn migrate_adds_summaries_to_older_hours_and_says_how_many() {
    let dir = tempfile::tempdir().expect("dir");
    let db = dir.path().join("summaries.db");
    let out = ok(&run(&db, &["migrate", "--summaries", "--batch-hours", "2"], ""));
    assert!(out.contains("stored hours rewritten with summaries: 0"), "{out}");
}

#[tokio::test]
async fn every_variable_the_command_line_reads_is_known_and_a_typo_is_warned_about() {
    let app = TestApp::start().await;
    let out = Command::new(BIN)
        .args(["device", "list", "--database", &app.db])
        .env("SENSORHUB_LOG", "warn")
        .env("SENSORHUB_MQTT_URL", "mqtt://127.0.0.1:1883")
        .env("SENSORHUB_NO_DASHBOARD", "true")
        // Set by cargo for the binaries it runs (`cargo run`: the README's first command).
        .env("SENSORHUB_COMMIT", "abc123")
        .env("SENSORHUB_DATABSE", "typo.db")
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for known in ["SENSORHUB_MQTT_URL", "SENSORHUB_NO_DASHBOARD", "SENSORHUB_COMMIT"] {
        assert!(!stderr.contains(known), "{known}: {stderr}");
    }
    assert!(
        stderr.contains("unknown SENSORHUB_ environment variable ignored") && stderr.contains("SENSORHUB_DATABSE"),
        "{stderr}"
    );
}
