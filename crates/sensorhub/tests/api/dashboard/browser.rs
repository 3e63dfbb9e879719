//! A real Chromium (Debian's `chromium` and `chromium-driver`, installed by
//! `.ci/services`) driven through chromedriver over WebDriver, headless, in
//! a profile of its own, with the browser's console kept for the checks.

use fantoccini::{Client, ClientBuilder};
use serde_json::{Value, json};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A browser session and the chromedriver serving it.
pub struct Browser {
    pub client: Client,
    driver: Child,
    driver_url: String,
    _profile: tempfile::TempDir,
}

/// Flags for a headless Chromium on a machine without a network beyond loopback.
const CHROMIUM_ARGS: &[&str] = &[
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
];

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("address").port()
}

impl Browser {
    /// Starts chromedriver and a browser whose window is `width`×`height`.
    pub async fn start(width: u32, height: u32) -> Self {
        let port = free_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver runs (.ci/services installs Debian's chromium-driver)");
        let driver_url = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        while reqwest::get(format!("{driver_url}/status")).await.is_err() {
            assert!(started.elapsed() < Duration::from_secs(20), "chromedriver did not answer within 20 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let profile = tempfile::tempdir().expect("a browser profile directory");
        let mut args: Vec<String> = CHROMIUM_ARGS.iter().map(|a| (*a).to_owned()).collect();
        args.push(format!("--user-data-dir={}", profile.path().display()));
        args.push(format!("--window-size={width},{height}"));
        let caps = json!({
            "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args},
            "goog:loggingPrefs": {"browser": "ALL"},
        });
        let Value::Object(caps) = caps else { unreachable!("an object") };
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&driver_url)
            .await
            .expect("a Chromium session");
        Self { client, driver, driver_url, _profile: profile }
    }

    /// Runs `script` (its `return` value comes back).
    pub async fn js(&self, script: &str) -> Value {
        self.client.execute(script, vec![]).await.expect("script runs")
    }

    /// Waits up to 15 s for `script` to return true.
    pub async fn until(&self, what: &str, script: &str) {
        let started = Instant::now();
        loop {
            if self.js(script).await == Value::Bool(true) {
                return;
            }
            if started.elapsed() > Duration::from_secs(15) {
                let body = self.js("return document.body.innerText").await;
                panic!("waited 15 s for {what}; the page shows: {body}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The console's messages since the last call, as (level, text).
    pub async fn console(&self) -> Vec<(String, String)> {
        let id = self.client.session_id().await.expect("session").expect("a session id");
        let answer: Value = reqwest::Client::new()
            .post(format!("{}/session/{id}/se/log", self.driver_url))
            .json(&json!({"type": "browser"}))
            .send()
            .await
            .expect("the log")
            .json()
            .await
            .expect("JSON");
        let entries = answer["value"].as_array().cloned().unwrap_or_default();
        entries
            .iter()
            .map(|e| (e["level"].as_str().unwrap_or("").to_owned(), e["message"].as_str().unwrap_or("").to_owned()))
            .collect()
    }

    /// Closes the session and stops chromedriver.
    pub async fn finish(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
    }
}
