//! A long answer lasts only as long as its caller's access: a window of
//! many pages read slowly (a raw one, and an aggregated one) is cut at its
//! next page once the caller's key is revoked, the body left short (never
//! a complete-looking one); unrevoked, the same read completes.

use crate::cli::{ok, run};
use crate::harness::{TestApp, secs};
use sensorhub_core::model::{Origin, ReadingInput, ValueInput};
use std::time::Duration;

/// Sixty-two days of AWLR-001 every minute, four values each: some 16 MB
/// of JSON raw or in one-minute means, more than the socket buffers hold,
/// in pages of 26 hours (raw) or batches of 512 (aggregated).
async fn sixty_two_days(app: &TestApp) {
    let start = secs("2026-04-01T00:00:00Z");
    let sensors = ["AWLR1-batt", "AWLR1-wl", "AWLR1-sig", "AWLR1-status"];
    let readings = (0..62 * 1440)
        .map(|i| ReadingInput {
            device_id: "AWLR-001".into(),
            timestamp: start + 60 * i,
            values: sensors
                .iter()
                .map(|s| ValueInput { sensor_id: (*s).into(), value: (i % 1000) as f64 + 0.25, unit: None })
                .collect(),
            origin: Origin::Item("test".into()),
        })
        .collect();
    app.add_readings(readings).await;
}

const QUERIES: [&str; 2] = [
    "start=2026-04-01T00:00:00Z&end=2026-06-01T23:59:59Z",
    "start=2026-04-01T00:00:00Z&end=2026-06-01T23:59:59Z&interval=1m&agg=mean",
];

/// Reads the first piece of the answer to `query`, runs `meanwhile`, waits
/// for the access generation to be read (every second), then reads on:
/// what came, and whether the body ended cleanly.
async fn read_slowly(app: &TestApp, query: &str, meanwhile: impl FnOnce()) -> (Vec<u8>, bool) {
    let url = format!("{}/pk-alice-awlr/devices/AWLR-001/data?{query}", app.base);
    let mut answer = reqwest::get(url).await.expect("request");
    assert_eq!(answer.status(), 200);
    let mut got = answer.chunk().await.expect("first piece").expect("some bytes").to_vec();
    meanwhile();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    loop {
        match answer.chunk().await {
            Ok(Some(piece)) => got.extend_from_slice(&piece),
            Ok(None) => return (got, true),
            Err(_) => return (got, false),
        }
    }
}

/// Revokes alice's key of AWLR-001 by command, as an operator would.
fn revoke(app: &TestApp) -> impl FnOnce() + '_ {
    move || {
        ok(&run(&app.db, &["key", "revoke", "pk-alice-awlr"], ""));
    }
}

on_each_backend! {
    async fn a_long_answer_ends_at_its_next_page_once_its_key_is_revoked() {
        let app = TestApp::start().await;
        sixty_two_days(&app).await;
        for query in QUERIES {
            let (whole, clean) = read_slowly(&app, query, || {}).await;
            assert!(clean, "{query}: unrevoked, the answer ends cleanly");
            let parsed: serde_json::Value = serde_json::from_slice(&whole).expect("the whole answer is JSON");
            assert!(parsed["data"].as_array().is_some_and(|d| d.len() == 62 * 1440), "{query}");
        }
        let (cut, clean) = read_slowly(&app, QUERIES[0], revoke(&app)).await;
        assert!(!clean, "the body is cut, not ended cleanly");
        assert!(serde_json::from_slice::<serde_json::Value>(&cut).is_err(), "never a complete-looking answer");
        assert_eq!(app.get("/pk-alice-awlr/devices").await.status, 403, "and the key is refused from now on");
        // The aggregated answer, through a key of the same devices made now.
        let doc = r#"{"accounts":[{"username":"alice","api_keys":[{"id":"pk-alice-awlr","revoked":false}]}]}"#;
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join("k.json"), doc).expect("write");
        ok(&run(&app.db, &["apply", dir.path().join("k.json").to_str().expect("utf-8")], ""));
        let (cut, clean) = read_slowly(&app, QUERIES[1], revoke(&app)).await;
        assert!(!clean && serde_json::from_slice::<serde_json::Value>(&cut).is_err(), "the aggregated answer is cut too");
    }
}
