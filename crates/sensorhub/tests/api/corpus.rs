//! The committed corpus (`tests/corpus/`): hostile inputs for the parsers
//! of outside bytes, sent through the real server. Each answer is a clear
//! 2xx or 4xx envelope, never a 500 or a dropped connection. Add a file
//! there for every input that ever broke a parser (or that a long
//! `fuzz_*` run turns up); the property tests cover the space around them.

use crate::harness::{TestApp, assert_error};
use reqwest::Method;
use sensorhub::config::serve::ServeSettings;
use sensorhub::config::server::WebhookMode;
use sensorhub::limiter::RateLimitSetting;
use std::path::PathBuf;

/// The files of one corpus directory, by name.
fn corpus(kind: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus").join(kind);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    assert!(files.len() >= 5, "the {kind} corpus has its files");
    files
        .into_iter()
        .map(|p| (p.file_name().expect("name").to_string_lossy().into_owned(), std::fs::read(&p).expect("read")))
        .collect()
}

async fn app() -> TestApp {
    let mut options = ServeSettings { rate_limit: RateLimitSetting::Off, ..TestApp::settings() };
    options.webhook.mode = WebhookMode::Ingest;
    TestApp::with(options).await
}

#[tokio::test]
async fn hostile_envelopes_get_200_or_a_400_with_a_detail() {
    let app = app().await;
    let url = format!("{}/webhook/sensor-data", app.base);
    for (name, body) in corpus("envelope") {
        let headers = [("Content-Type", "application/json"), ("X-API-KEY", "wh-alice-secret")];
        let a = app.request(Method::POST, &url, &headers, Some(body.into())).await;
        match a.status.as_u16() {
            200 => assert_eq!(a.body["message"], "Data received successfully", "{name}"),
            400 => assert!(a.body["detail"].as_str().is_some_and(|d| !d.is_empty()), "{name}: {}", a.text),
            s => panic!("{name}: {s} {}", a.text),
        }
    }
}

#[tokio::test]
async fn hostile_query_strings_get_200_or_a_400_with_a_detail() {
    let app = app().await;
    for (name, query) in corpus("query") {
        let query = String::from_utf8(query).expect("queries are text");
        let a = app.get(&format!("/pk-alice-all/devices/AWLR-001/data?{query}")).await;
        match a.status.as_u16() {
            200 => assert_eq!(a.body["message"], "Success", "{name}"),
            400 => {
                assert_error(&a, 400, "Bad Request");
                assert!(a.body["detail"].as_str().is_some_and(|d| !d.is_empty()), "{name}: {}", a.text);
            }
            s => panic!("{name}: {s} {}", a.text),
        }
    }
}

#[tokio::test]
async fn hostile_basic_headers_get_401() {
    let app = app().await;
    for (name, header) in corpus("basic") {
        let header = String::from_utf8(header).expect("headers are text");
        let a = app.send(Method::GET, "/devices", Some(&header)).await;
        assert_error(&a, 401, "Unauthorized");
        assert!(!name.is_empty());
    }
}
