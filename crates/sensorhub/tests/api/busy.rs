//! Writers never stall readers: a large `sensorhub import` runs in another
//! process while clients read and ingest through the server. Reads keep
//! answering quickly, every ingest is either stored (200) or refused with a
//! 503 and `Retry-After` (a retry is idempotent), and nothing answers 500.

use crate::harness::{TestApp, secs};
use sensorhub::config::serve::ServeSettings;
use sensorhub::config::server::WebhookMode;
use sensorhub::config::server::WebhookSettings;
use serde_json::json;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Clients posting readings at once.
const WRITERS: usize = 24;

/// Posts readings of AWLR-001 (writer `w`'s own seconds) until `done`;
/// returns how many were stored and how many refused with 503. Any other
/// answer fails the test.
async fn ingest_until(base: String, w: usize, done: Arc<AtomicBool>) -> (usize, usize) {
    let http = reqwest::Client::new();
    let t0 = secs("2026-06-01T00:00:00Z");
    let (mut stored, mut refused) = (0, 0);
    while !done.load(Ordering::Relaxed) {
        let second = t0 + (stored * WRITERS + w) as i64;
        let ts = jiff::Timestamp::from_second(second).expect("ts").to_string();
        let body = json!({"event": "sensor-data", "device_id": "AWLR-001", "timestamp": ts,
                          "data": {"AWLR1-wl": stored}});
        let res = http
            .post(format!("{base}/webhook/sensor-data"))
            .header("X-API-KEY", "wh-alice-secret")
            .header("Content-Type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("the server answers");
        let status = res.status().as_u16();
        let retry_after = res.headers().get("retry-after").map(|v| v.to_str().unwrap_or_default().to_owned());
        let text = res.text().await.unwrap_or_default();
        match status {
            200 => stored += 1,
            503 => {
                assert_eq!(retry_after.as_deref(), Some("1"), "{text}");
                refused += 1;
            }
            other => panic!("ingest answered {other}: {text}"),
        }
    }
    (stored, refused)
}

/// Rows of the import: AWS-002's five sensors each minute, ~100 days.
const MINUTES: i64 = 144_000;

/// Writes the import file: one CSV row per value.
fn big_csv(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("big.csv");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).expect("create"));
    writeln!(out, "device_id,timestamp,sensor_id,value").expect("write");
    let t0 = secs("2025-01-01T00:00:00Z");
    for m in 0..MINUTES {
        let ts = jiff::Timestamp::from_second(t0 + m * 60).expect("ts");
        for (k, s) in ["AWS2-temp", "AWS2-hum", "AWS2-rain", "AWS2-wind", "AWS2-batt"].iter().enumerate() {
            writeln!(out, "AWS-002,{ts},{s},{}.{}", m % 40, k).expect("write");
        }
    }
    out.flush().expect("flush");
    path
}

on_each_backend! {
    async fn a_large_import_stalls_neither_reads_nor_ingest() {
        let app = TestApp::with(ServeSettings {
            webhook: WebhookSettings { mode: WebhookMode::Ingest, ..WebhookSettings::default() },
            rate_limit: sensorhub::limiter::RateLimitSetting::Off,
            ..TestApp::settings()
        })
        .await;
        let dir = tempfile::tempdir().expect("dir");
        let csv = big_csv(dir.path());
        let mut import = std::process::Command::new(env!("CARGO_BIN_EXE_sensorhub"))
            .args(["import", csv.to_str().expect("utf-8"), "--database", &app.db])
            .env("SENSORHUB_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn import");
        let window = "/devices/AWLR-001/data?start=2026-06-01T00:00:00Z&end=2026-06-02T00:00:00Z";
        // Writers: more than the pool has connections (16 on PostgreSQL), so
        // that writes waiting for the import's lock could take them all.
        let done = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..WRITERS).map(|w| tokio::spawn(ingest_until(app.base.clone(), w, done.clone()))).collect();
        let (mut reads, mut slowest) = (0, Duration::ZERO);
        while import.try_wait().expect("wait").is_none() {
            let started = Instant::now();
            let a = app.alice(window).await;
            assert_eq!(a.status, 200, "{}", a.text);
            slowest = slowest.max(started.elapsed());
            reads += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        done.store(true, Ordering::Relaxed);
        let (mut stored, mut refused) = (0, 0);
        for w in writers {
            let (s, r) = w.await.expect("writer");
            stored += s;
            refused += r;
        }
        let out = import.wait_with_output().expect("import");
        assert!(out.status.success(), "import: {}", String::from_utf8_lossy(&out.stderr));
        let report = String::from_utf8_lossy(&out.stdout);
        assert!(report.contains(&format!("imported {MINUTES} readings")), "{report}");
        eprintln!("during the import: {reads} reads (slowest {slowest:?}), {stored} ingests stored, {refused} refused");
        assert!(reads >= 5, "the import ran long enough to test anything ({reads} reads)");
        // Before reads and writes had connections of their own, a read could
        // wait behind ingest requests that waited up to 10 s for the lock
        // (the bound leaves room for a machine loaded by the tests beside).
        assert!(slowest < Duration::from_secs(5), "a read took {slowest:?} during the import");
        assert!(stored > 0, "ingest got its turn between the import's transactions ({refused} refused)");
        // Everything acknowledged is there.
        let a = app.alice(window).await;
        assert_eq!(a.data().as_array().map(Vec::len), Some(stored));
    }
}
