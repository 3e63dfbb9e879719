//! `sensorhub copy`: a generated installation moved from SQLite to
//! PostgreSQL and back, verified table by table (alarm rules included); a
//! changed row is caught.

use crate::harness::postgres_admin_url;
use sensorhub_testing::TempDatabase;
use std::process::{Command, Output};

fn sensorhub(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sensorhub")).args(args).env("SENSORHUB_LOG", "warn").output().expect("run")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[tokio::test]
async fn an_installation_moves_to_postgres_and_back_verified() {
    let dir = tempfile::tempdir().expect("dir");
    let sqlite = dir.path().join("old.db");
    let sqlite = sqlite.to_str().expect("path");
    let demo = sensorhub(&["demo", "--database", sqlite]);
    assert!(demo.status.success(), "{}", text(&demo));
    let pg = TempDatabase::create(&postgres_admin_url()).await.expect("test database");
    for (kind, id, keep) in [("device", "AWLR-001", "90d"), ("account", "alice", "2y")] {
        let set = sensorhub(&[kind, "retention", id, keep, "--database", sqlite]);
        assert!(set.status.success(), "{}", text(&set));
    }

    let out = sensorhub(&["copy", "--from", sqlite, "--to", pg.url()]);
    let report = text(&out);
    assert!(out.status.success(), "{report}");
    assert!(report.contains("verified"), "{report}");
    let tables = ["accounts", "devices", "sensors", "account_devices", "api_keys", "webhook_keys", "alarm_rules"];
    for table in tables.into_iter().chain(["readings"]) {
        let line = report.lines().find(|l| l.starts_with(table)).unwrap_or_else(|| panic!("{table}: {report}"));
        assert!(line.ends_with("ok"), "{line}");
    }
    let readings = report.lines().find(|l| l.starts_with("readings")).expect("readings line");
    let hours: u64 = readings.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("count");
    assert!(hours > 100, "the demo's readings were copied: {readings}");
    let rules = report.lines().find(|l| l.starts_with("alarm_rules")).expect("alarm_rules line");
    assert_eq!(rules.split_whitespace().nth(1), Some("2"), "the demo's two rules on AWLR-001: {rules}");
    // A copied station's alarms start at rest, as of its newest copied reading.
    let copied = sensorhub_store::open(pg.url()).await.expect("target");
    let alarms = copied.alarms(sensorhub_store::Scope::All, "AWLR-001").await.expect("alarms").expect("device");
    assert!(alarms.iter().all(|a| a.level_name().is_none() && !a.state.active), "at rest: {alarms:?}");
    drop(copied);

    // A non-empty target is refused unless --append, and --append refuses overlaps.
    let again = sensorhub(&["copy", "--from", sqlite, "--to", pg.url()]);
    assert!(!again.status.success() && text(&again).contains("not empty"), "{}", text(&again));
    let overlap = sensorhub(&["copy", "--from", sqlite, "--to", pg.url(), "--append"]);
    assert!(!overlap.status.success() && text(&overlap).contains("already exists"), "{}", text(&overlap));

    // And back, into a fresh SQLite file.
    let back = dir.path().join("back.db");
    let out = sensorhub(&["copy", "--from", pg.url(), "--to", back.to_str().expect("path")]);
    assert!(out.status.success(), "{}", text(&out));
    // Owners and write grants came along: alice may still write her stations, budi may not.
    let list = text(&sensorhub(&["account", "list", "--database", back.to_str().expect("path")]));
    assert!(list.lines().any(|l| l.starts_with("alice") && l.contains("AWLR-001*")), "{list}");
    assert!(list.lines().any(|l| l.starts_with("budi") && !l.contains('*')), "{list}");
    // The alarm rules came along too, in order.
    let listed =
        |db: &str| String::from_utf8_lossy(&sensorhub(&["alarm", "list", "--database", db]).stdout).into_owned();
    let rules = listed(back.to_str().expect("path"));
    assert_eq!(rules.lines().filter(|l| l.starts_with("AWLR-001")).count(), 2, "{rules}");
    assert_eq!(rules, listed(sqlite), "the same rules as the source");

    // One altered row in the target: the check fails and names its table.
    let (client, conn) = tokio_postgres::connect(pg.url(), tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(conn);
    let changed = client
        .execute(
            "UPDATE hours SET data = data || '\\x00'::bytea
             WHERE (device_pk, chunk) = (SELECT device_pk, chunk FROM hours ORDER BY device_pk, chunk LIMIT 1)",
            &[],
        )
        .await
        .expect("alter");
    assert_eq!(changed, 1);
    drop(client);
    let verify = sensorhub(&["copy", "--from", sqlite, "--to", pg.url(), "--verify-only"]);
    let report = text(&verify);
    assert!(!verify.status.success(), "{report}");
    assert!(report.contains("verification failed") && report.contains("readings"), "{report}");
    let devices = report.lines().find(|l| l.starts_with("devices")).expect("devices line");
    assert!(devices.ends_with("ok"), "only the altered table differs: {report}");

    // Retention came along, and is checked: cleared in the target, the devices differ.
    let (client, conn) = tokio_postgres::connect(pg.url(), tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(conn);
    let kept = |sql: &'static str| {
        let client = &client;
        async move { client.query_one(sql, &[]).await.expect("retention").get::<_, Option<i64>>(0) }
    };
    assert_eq!(kept("SELECT retention_seconds FROM devices WHERE device_id = 'AWLR-001'").await, Some(90 * 86_400));
    assert!(kept("SELECT retention_seconds FROM accounts WHERE username = 'alice'").await.is_some());
    client.execute("UPDATE devices SET retention_seconds = NULL", &[]).await.expect("clear");
    let verify = sensorhub(&["copy", "--from", sqlite, "--to", pg.url(), "--verify-only"]);
    let report = text(&verify);
    let devices = report.lines().find(|l| l.starts_with("devices")).expect("devices line");
    assert!(!verify.status.success() && !devices.ends_with("ok"), "a lost retention is caught: {report}");
}
