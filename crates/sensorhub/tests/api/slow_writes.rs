//! A write whose body comes slowly is decided on the key as it stands
//! once the body has come: a key revoked while a webhook envelope or a
//! line-protocol body is still arriving gets a 401 (whether the body
//! parses or not) and nothing is stored, on each backend.

use crate::cli::{ok, run};
use crate::harness::TestApp;
use sensorhub::config::server::WebhookMode;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const KEY: &str = "wh-alice-secret";
/// A key of alice's that only the request with a body that does not
/// parse uses: its answer is not kept from another request's lookup.
const SECOND: &str = "wh-alice-second";

/// A request whose head and first half of `body` are sent now; the rest
/// goes with [`Slow::finish`].
struct Slow {
    conn: TcpStream,
    rest: String,
}

impl Slow {
    async fn start(app: &TestApp, head: &str, body: &str) -> Slow {
        let mut conn = TcpStream::connect(app.root().trim_start_matches("http://")).await.expect("connect");
        let (first, rest) = body.split_at(body.len() / 2);
        let request = format!("{head}Host: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{first}", body.len());
        conn.write_all(request.as_bytes()).await.expect("send the head");
        Slow { conn, rest: rest.to_owned() }
    }

    /// Sends the rest of the body; the answer's status line.
    async fn finish(mut self) -> String {
        self.conn.write_all(self.rest.as_bytes()).await.expect("send the rest");
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), self.conn.read_to_end(&mut got))
            .await
            .expect("answered")
            .expect("read");
        String::from_utf8_lossy(&got).lines().next().unwrap_or_default().to_owned()
    }
}

on_each_backend! {
    async fn a_write_whose_key_was_refused_while_its_body_came_is_not_stored() {
        let mut settings = TestApp::settings();
        settings.webhook.mode = WebhookMode::Ingest;
        let app = TestApp::with(settings).await;
        let dir = tempfile::tempdir().expect("dir");
        let keys = |revoked: bool| {
            let file = dir.path().join(format!("keys-{revoked}.json"));
            let keys = [KEY, SECOND].map(|key| serde_json::json!({"key": key, "revoked": revoked}));
            let document = serde_json::json!({"accounts": [{"username": "alice", "webhook_keys": keys}]});
            std::fs::write(&file, document.to_string()).expect("write");
            ok(&run(&app.db, &["apply", file.to_str().expect("utf-8")], ""));
        };
        keys(false);
        let envelope = serde_json::json!({"event": "sensor-data", "device_id": "AWLR-001",
            "timestamp": "2026-05-06T07:00:00Z", "data": {"AWLR1-wl": 321.5}})
        .to_string();
        let webhook = |key: &str| {
            format!("POST /external/v1/webhook/sensor-data HTTP/1.1\r\nContent-Type: application/json\r\nX-API-KEY: {key}\r\n")
        };
        let line = "AWLR-001 AWLR1-wl=654.25 1778050860000000000\n";
        let influx = format!("POST /api/v2/write HTTP/1.1\r\nAuthorization: Token {KEY}\r\n");
        let started = Instant::now();
        let slow = [
            Slow::start(&app, &webhook(KEY), &envelope).await,
            Slow::start(&app, &influx, line).await,
            // A body that does not parse is refused as the key is now, too.
            Slow::start(&app, &webhook(SECOND), "{\"event\": not JSON}").await,
            Slow::start(&app, &influx, "AWLR-001 AWLR1-wl=oops\n").await,
        ];
        // The keys looked up (at the heads) before they are revoked (were
        // they not, the heads' own lookups would refuse them, and the test
        // would pass without deciding again after the bodies).
        tokio::time::sleep(Duration::from_secs(1)).await;
        keys(true);
        // Past the second within which a key's answer is taken as it was read.
        tokio::time::sleep(Duration::from_millis(2_300).saturating_sub(started.elapsed())).await;
        for request in slow {
            let status = request.finish().await;
            assert!(status.starts_with("HTTP/1.1 401"), "{status}");
        }
        let a = app.alice("/devices/AWLR-001/data?start=2026-05-06T00:00:00Z&end=2026-05-06T23:59:59Z").await;
        assert_eq!((a.status.as_u16(), a.body["data"].as_array().map(Vec::len)), (200, Some(0)), "{}", a.text);
    }
}
