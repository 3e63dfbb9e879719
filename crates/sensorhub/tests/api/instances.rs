//! Two `sensorhub serve` processes sharing one PostgreSQL database and one
//! Redis, as behind a load balancer: data, limits and credential changes
//! are the same on both.

use crate::harness::{ALICE_PASSWORD, FIXTURE, RedisPrefix, ServeProcess, basic, postgres_admin_url, redis_url};
use reqwest::StatusCode;
use sensorhub_testing::TempDatabase;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn cli(db: &str, args: &[&str], stdin: &str) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sensorhub"))
        .args(args)
        .args(["--database", db])
        .env("SENSORHUB_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    child.stdin.take().expect("stdin").write_all(stdin.as_bytes()).expect("stdin");
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// GET `path` on `base`, as client address `ip` (the servers trust X-Forwarded-For).
async fn get(base: &str, path: &str, ip: &str, auth: Option<&str>) -> StatusCode {
    let mut req = reqwest::Client::new().get(format!("{base}{path}")).header("X-Forwarded-For", ip);
    if let Some(a) = auth {
        req = req.header("Authorization", a);
    }
    req.send().await.expect("request").status()
}

#[tokio::test]
async fn two_instances_share_data_limits_and_credentials() {
    let pg = TempDatabase::create(&postgres_admin_url()).await.expect("test database");
    let prefix = RedisPrefix::new();
    let dir = tempfile::tempdir().expect("dir");
    let fixture = dir.path().join("fixture.json");
    std::fs::write(&fixture, FIXTURE).expect("write");
    cli(pg.url(), &["apply", fixture.to_str().expect("path")], "");
    let args = [
        "--database",
        pg.url(),
        "--rate-limit",
        "5/minute",
        "--rate-limit-store",
        &redis_url(),
        "--redis-prefix",
        &prefix.prefix,
        "--webhook-mode",
        "ingest",
        "--client-ip-header",
        "X-Forwarded-For",
    ];
    let a = ServeProcess::start(&args);
    let b = ServeProcess::start(&args);
    assert!(a.log.contains("rate_limit_store=redis://"), "{}", a.log);

    // A reading ingested through A is served by B.
    let envelope = r#"{"event":"sensor-data","device_id":"AWLR-001","timestamp":"2026-06-01T08:00:00Z","data":{"AWLR1-wl":123.5}}"#;
    let posted = reqwest::Client::new()
        .post(format!("{}/webhook/sensor-data", a.base))
        .header("X-API-KEY", "wh-alice-secret")
        .header("Content-Type", "application/json")
        .body(envelope)
        .send()
        .await
        .expect("post");
    assert_eq!(posted.status(), 200);
    let body = reqwest::Client::new()
        .get(format!("{}/devices/AWLR-001/data?start=2026-06-01T07:00:00Z&end=2026-06-01T09:00:00Z", b.base))
        .header("Authorization", basic("alice", ALICE_PASSWORD))
        .header("X-Forwarded-For", "10.0.0.1")
        .send()
        .await
        .expect("get")
        .text()
        .await
        .expect("body");
    assert_eq!(
        body,
        r#"{"message":"Success","data":[{"timestamp":"2026-06-01T08:00:00Z","sensors":[{"id":"AWLR1-wl","value":123.5,"unit":"cm"}]}]}"#
    );

    // One quota across both: three on A, three on B, the sixth is refused.
    let mut statuses = Vec::new();
    for base in [&a.base, &a.base, &a.base, &b.base, &b.base, &b.base] {
        statuses.push(get(base, "/pk-alice-awlr/devices", "10.0.0.2", None).await.as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429]);

    // Alice's password works on both (and is now cached on both)…
    let old = basic("alice", ALICE_PASSWORD);
    assert_eq!(get(&a.base, "/devices", "10.0.0.3", Some(&old)).await, 200);
    assert_eq!(get(&b.base, "/devices", "10.0.0.3", Some(&old)).await, 200);
    // …until the admin CLI changes it: then both refuse it within 5 seconds.
    cli(pg.url(), &["account", "passwd", "alice", "--password-stdin"], "a-new-password\n");
    let changed = Instant::now();
    let mut refused = [false, false];
    let mut round = 0;
    while refused != [true, true] && changed.elapsed() < Duration::from_secs(5) {
        round += 1;
        let ip = format!("10.0.1.{round}");
        for (i, base) in [&a.base, &b.base].into_iter().enumerate() {
            if !refused[i] {
                refused[i] = get(base, "/devices", &ip, Some(&old)).await == 401;
            }
        }
        if refused != [true, true] {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert_eq!(refused, [true, true], "old password still accepted after {:?}", changed.elapsed());
    let new = basic("alice", "a-new-password");
    assert_eq!(get(&a.base, "/devices", "10.0.2.1", Some(&new)).await, 200);
    assert_eq!(get(&b.base, "/devices", "10.0.2.1", Some(&new)).await, 200);
    drop((a, b));
}
