//! A real Chromium (Debian's `chromium` and `chromium-driver`, installed by
//! `.ci/services`) driven through chromedriver over WebDriver, headless, in
//! a profile of its own, with the browser's console kept for checks. Used
//! by the dashboard's tests, its benchmark and the README's screenshots.

use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder};
use serde_json::{Value, json};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A browser session and the chromedriver serving it.
pub struct Browser {
    /// The WebDriver session.
    pub client: Client,
    driver: Child,
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
    "--hide-scrollbars",
];

/// What went wrong starting or driving the browser.
pub type BrowserResult<T> = Result<T, String>;

fn free_port() -> BrowserResult<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("a free port: {e}"))?;
    Ok(listener.local_addr().map_err(|e| e.to_string())?.port())
}

/// Chromedriver's legacy log command: the browser console's entries since the last call.
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(&self, base: &url::Url, session: Option<&str>) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/se/log", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(json!({"type": "browser"}).to_string()))
    }
}

impl Browser {
    /// Starts chromedriver and a browser whose window is `width`×`height`.
    pub async fn start(width: u32, height: u32) -> BrowserResult<Self> {
        let port = free_port()?;
        // A process group of its own: dropping the browser stops chromedriver and the Chromium it started.
        let mut driver = Command::new("chromedriver")
            .process_group(0)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("chromedriver does not run ({e}); .ci/services installs Debian's chromium-driver"))?;
        let driver_url = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            if started.elapsed() > Duration::from_secs(20) {
                let _ = driver.kill();
                return Err("chromedriver did not listen within 20 s".into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let profile = tempfile::tempdir().map_err(|e| format!("a browser profile directory: {e}"))?;
        let mut args: Vec<String> = CHROMIUM_ARGS.iter().map(|a| (*a).to_owned()).collect();
        args.push(format!("--user-data-dir={}", profile.path().display()));
        args.push(format!("--window-size={width},{height}"));
        // The viewport exactly (a headless window is at least 500 px wide), as a phone below 600 px.
        let phone = width < 600;
        let metrics = json!({"width": width, "height": height, "pixelRatio": 1.0, "touch": phone, "mobile": phone});
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({"binary": "/usr/bin/chromium", "args": args, "mobileEmulation": {"deviceMetrics": metrics}}),
        );
        caps.insert("goog:loggingPrefs".into(), json!({"browser": "ALL"}));
        let mut client = None;
        // chromedriver may listen a moment before it takes sessions.
        for _ in 0..50 {
            match ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                .capabilities(caps.clone())
                .connect(&driver_url)
                .await
            {
                Ok(c) => {
                    client = Some(c);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        let Some(client) = client else {
            let _ = driver.kill();
            return Err("chromedriver did not start a Chromium session".into());
        };
        Ok(Self { client, driver, _profile: profile })
    }

    /// Runs `script` (its `return` value comes back).
    pub async fn js(&self, script: &str) -> BrowserResult<Value> {
        self.client.execute(script, vec![]).await.map_err(|e| format!("script: {e}"))
    }

    /// Waits up to `timeout` for `script` to return true; the error says
    /// what the page showed instead.
    pub async fn until(&self, what: &str, script: &str, timeout: Duration) -> BrowserResult<()> {
        let started = Instant::now();
        loop {
            if self.js(script).await? == Value::Bool(true) {
                return Ok(());
            }
            if started.elapsed() > timeout {
                let body = self.js("return document.body.innerText").await?;
                return Err(format!("waited {timeout:?} for {what}; the page shows: {body}"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The console's messages since the last call, as (level, text).
    pub async fn console(&self) -> BrowserResult<Vec<(String, String)>> {
        let answer = self.client.issue_cmd(BrowserLog).await.map_err(|e| format!("the browser log: {e}"))?;
        let entries = answer.as_array().cloned().unwrap_or_default();
        Ok(entries
            .iter()
            .map(|e| (e["level"].as_str().unwrap_or("").to_owned(), e["message"].as_str().unwrap_or("").to_owned()))
            .collect())
    }

    /// Closes the session and stops chromedriver.
    pub async fn finish(self) {
        let _ = self.client.clone().close().await;
        // Drop stops chromedriver's group.
    }
}

impl Drop for Browser {
    /// Stops chromedriver's whole group: Chromium too when the session was not
    /// closed (a failed test).
    fn drop(&mut self) {
        let group = format!("-{}", self.driver.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).stderr(Stdio::null()).status();
        let _ = self.driver.wait();
    }
}
