//! Upgrading a database written by the release of schema version 2 (the
//! fixtures in `tests/fixtures/schema-v2`, made by that release's binary):
//! `sensorhub migrate` is killed with SIGKILL in the middle of converting
//! the stored readings, run again, and then every answer the old release
//! gave over that database is given again, byte for byte (compared by
//! SHA-256), on SQLite and on PostgreSQL.

use crate::harness::{TestApp, postgres_admin_url};
use sensorhub_testing::TempDatabase;
use sha2::{Digest, Sha256};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/schema-v2");

/// Runs `sensorhub migrate` one hour per transaction and kills it as soon as
/// it reports its first committed batch.
fn migrate_and_kill(database: &str) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sensorhub"))
        .args(["migrate", "--database", database, "--batch-hours", "1"])
        .env("SENSORHUB_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run migrate");
    let stderr = child.stderr.take().expect("stderr");
    let mut seen = Vec::new();
    for line in BufReader::new(stderr).lines() {
        let line = line.expect("a log line");
        let started = line.contains("upgraded hours");
        seen.push(line);
        if started {
            break;
        }
    }
    child.kill().expect("SIGKILL");
    let status = child.wait().expect("wait");
    assert!(!status.success(), "killed in the middle, not finished: {}", seen.join("\n"));
}

fn migrate(database: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sensorhub"))
        .args(["migrate", "--database", database])
        .env("SENSORHUB_LOG", "info")
        .output()
        .expect("run migrate");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    text
}

/// Asks every question of `answers.txt` and compares the answers' digests.
async fn assert_same_answers(app: &TestApp) {
    let answers = std::fs::read_to_string(format!("{FIXTURES}/answers.txt")).expect("answers");
    let client = reqwest::Client::new();
    let mut checked = 0;
    for line in answers.lines() {
        let mut parts = line.split(' ');
        let (Some(who), Some(path), Some(digest)) = (parts.next(), parts.next(), parts.next()) else {
            panic!("malformed line {line:?}");
        };
        let mut req = client.get(format!("{}{path}", app.base));
        if let Some(credentials) = who.strip_prefix("basic:") {
            let (user, password) = credentials.split_once(':').expect("user:password");
            req = req.basic_auth(user, Some(password));
        }
        let body = req.send().await.expect("request").bytes().await.expect("body");
        let got = format!("{:x}", Sha256::digest(&body));
        assert_eq!(got, digest, "{who} {path}: {}", String::from_utf8_lossy(&body[..body.len().min(400)]));
        checked += 1;
    }
    assert!(checked >= 30, "{checked} answers");
}

/// The `latest` index of the upgraded database (filled while the hours
/// were converted, through a kill) agrees with a scan of every reading.
async fn assert_latest_is_the_newest_of_each_sensor(database: &str) {
    use futures_util::StreamExt;
    use sensorhub_store::Scope;
    let store = sensorhub_store::open(database).await.expect("open");
    let mut sensors = 0;
    for device in store.list_devices(Scope::All).await.expect("devices") {
        let (handle, latest) = store.latest(Scope::All, &device.device_id).await.expect("latest").expect("visible");
        let range = sensorhub_core::time::TimeRange { start: 0, end: 253_402_214_399 };
        let mut newest = std::collections::BTreeMap::new();
        let mut batches = store.read_readings(&handle, range);
        while let Some(batch) = batches.next().await {
            let batch = batch.expect("batch");
            let mut values = batch.values.iter();
            for (&ts, &mask) in batch.timestamps.iter().zip(&batch.masks) {
                let mut m = mask;
                while m != 0 {
                    let idx = m.trailing_zeros() as usize;
                    m &= m - 1;
                    let value = values.next().expect("a value per bit").to_f64();
                    newest.insert(idx, (ts, value.to_bits()));
                }
            }
        }
        let got: std::collections::BTreeMap<_, _> =
            latest.iter().map(|v| (v.idx, (v.timestamp, v.value.to_f64().to_bits()))).collect();
        assert_eq!(got, newest, "{}", device.device_id);
        sensors += got.len();
    }
    assert!(sensors > 0, "the fixture has readings");
}

#[tokio::test]
async fn a_sqlite_file_of_schema_2_upgrades_through_a_kill() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("v2.db");
    std::fs::copy(format!("{FIXTURES}/v2.db"), &path).expect("copy fixture");
    let db = path.to_str().expect("utf-8").to_owned();

    migrate_and_kill(&db);
    {
        let conn = rusqlite::Connection::open(&path).expect("open");
        let left: i64 = conn.query_row("SELECT count(*) FROM readings", [], |r| r.get(0)).expect("old table left");
        let moved: i64 = conn.query_row("SELECT count(*) FROM hours", [], |r| r.get(0)).expect("new table");
        assert!(left > 0 && moved > 0, "the kill came in the middle: {left} hours left, {moved} moved");
    }
    let log = migrate(&db);
    assert!(log.contains("upgrade of stored readings finished"), "{log}");
    {
        let conn = rusqlite::Connection::open(&path).expect("open");
        let old: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_schema WHERE name = 'readings'", [], |r| r.get(0))
            .expect("schema");
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).expect("version");
        assert_eq!((old, version), (0, newest_schema("sqlite")), "the old table is gone, the schema is the newest");
    }
    assert!(!migrate(&db).contains("upgrading"), "a second run has nothing to upgrade");
    assert_latest_is_the_newest_of_each_sensor(&db).await;
    assert_same_answers(&TestApp::over(db, dir, None).await).await;
}

#[tokio::test]
async fn a_postgres_database_of_schema_2_upgrades_through_a_kill() {
    let pg = TempDatabase::create(&postgres_admin_url()).await.expect("a PostgreSQL test database");
    let (client, conn) = tokio_postgres::connect(pg.url(), tokio_postgres::NoTls).await.expect("connect");
    let connection = tokio::spawn(conn);
    let dump = std::fs::read_to_string(format!("{FIXTURES}/v2-postgres.sql")).expect("dump");
    client.batch_execute(&dump).await.expect("restore the fixture");
    // The dump empties the session's search_path.
    client.batch_execute("RESET ALL").await.expect("reset");
    let url = pg.url().to_owned();

    migrate_and_kill(&url);
    let count = |sql: &'static str| {
        let client = &client;
        async move { client.query_one(sql, &[]).await.expect(sql).get::<_, i64>(0) }
    };
    let (left, moved) = (count("SELECT count(*) FROM readings").await, count("SELECT count(*) FROM hours").await);
    assert!(left > 0 && moved > 0, "the kill came in the middle: {left} hours left, {moved} moved");
    let log = migrate(&url);
    assert!(log.contains("upgrade of stored readings finished"), "{log}");
    assert_eq!(count("SELECT count(*) FROM pg_tables WHERE tablename = 'readings'").await, 0);
    assert_eq!(
        count("SELECT max(version)::bigint FROM sensorhub_schema").await,
        newest_schema("postgres"),
        "the newest schema"
    );
    // A schema newer than this binary knows is refused, not written to.
    client.batch_execute("INSERT INTO sensorhub_schema (version) VALUES (99)").await.expect("bump");
    let out =
        Command::new(env!("CARGO_BIN_EXE_sensorhub")).args(["migrate", "--database", &url]).output().expect("run");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && text.contains("schema version 99, newer than this sensorhub knows"), "{text}");
    client.batch_execute("DELETE FROM sensorhub_schema WHERE version = 99").await.expect("unbump");
    drop(client);
    let _ = connection.await;
    assert_latest_is_the_newest_of_each_sensor(&url).await;
    let dir = tempfile::tempdir().expect("dir");
    assert_same_answers(&TestApp::over(url, dir, Some(pg)).await).await;
}

/// The newest schema version of `backend`: how many migrations it has.
fn newest_schema(backend: &str) -> i64 {
    let dir = format!("{}/../sensorhub-store/migrations/{backend}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_dir(&dir)
        .expect("the migrations")
        .filter(|e| e.as_ref().is_ok_and(|e| e.path().extension().is_some_and(|x| x == "sql")))
        .count() as i64
}
