//! A NUL character in an identifier a caller sends (a device id in the
//! path, a webhook envelope or a line-protocol tag; a Basic user name) is
//! answered as any other identifier nothing is stored under, on both
//! backends: PostgreSQL refuses NUL in text, which once became a 500
//! before the caller was even authenticated.

use crate::harness::{ALICE_PASSWORD, TestApp, basic};
use reqwest::Method;
use sensorhub::config::serve::ServeSettings;
use sensorhub::config::server::{WebhookMode, WebhookSettings};
use serde_json::json;

/// `status` and body of `path` as alice.
async fn as_alice(app: &TestApp, path: &str) -> (u16, String) {
    let a = app.alice(path).await;
    (a.status.as_u16(), a.text)
}

/// The webhook answer for an envelope naming `device`.
async fn webhook(app: &TestApp, device: &str) -> (u16, String) {
    let body = json!({"event": "sensor-data", "device_id": device, "timestamp": "2026-05-05T07:00:00Z",
        "data": {"AWLR1-wl": 1.5}});
    let a = app.webhook(Some("wh-alice-secret"), &body.to_string()).await;
    (a.status.as_u16(), a.text)
}

/// Each read path of a device, as alice and through her key.
const READS: [&str; 8] = [
    "/devices/{}/data?start=2026-05-05T00:00:00Z&end=2026-05-05T01:00:00Z",
    "/devices/{}/latest",
    "/devices/{}/alarms",
    "/devices/{}/alarms/events",
    "/pk-alice-all/devices/{}/data?start=2026-05-05T00:00:00Z&end=2026-05-05T01:00:00Z",
    "/pk-alice-all/devices/{}/latest",
    "/pk-alice-all/devices/{}/alarms",
    "/pk-alice-all/devices/{}/stream",
];

async fn answers_as_unknown(app: &TestApp) {
    for path in READS {
        let nul = as_alice(app, &path.replace("{}", "AB%00C")).await;
        let unknown = as_alice(app, &path.replace("{}", "ABXC")).await;
        assert_eq!(nul, unknown, "{path}: a NUL in the id answers as an unknown id");
        assert!(nul.0 < 500, "{path}: {nul:?}");
    }
    let nul = app.send(Method::GET, "/devices", Some(&basic("al\0ice", ALICE_PASSWORD))).await;
    let unknown = app.send(Method::GET, "/devices", Some(&basic("alxice", ALICE_PASSWORD))).await;
    assert_eq!((nul.status, &nul.text), (unknown.status, &unknown.text), "a NUL in a user name: as an unknown user");
    assert_eq!(nul.status, 401, "{}", nul.text);
    assert_eq!(webhook(app, "AWLR\u{0}001").await, webhook(app, "AWLRX001").await, "a NUL in a webhook device id");
}

on_each_backend! {
    async fn a_nul_in_an_identifier_answers_as_an_unknown_one() {
        let app = TestApp::start().await;
        answers_as_unknown(&app).await;
        let ingest = ServeSettings {
            webhook: WebhookSettings { mode: WebhookMode::Ingest, ..WebhookSettings::default() },
            ..TestApp::settings()
        };
        let app = TestApp::with(ingest).await;
        answers_as_unknown(&app).await;
        let (nul, unknown) = (webhook(&app, "AWLR\u{0}001").await, webhook(&app, "AWLRX001").await);
        assert!(nul.0 < 500 && unknown.0 < 500, "{nul:?} {unknown:?}");

        let write = |line: &'static [u8]| {
            let url = format!("{}/api/v2/write?bucket=x&precision=s", app.root());
            let app = &app;
            async move {
                let a = app.request(Method::POST, &url, &[("Authorization", "Token wh-alice-secret")], Some(line.to_vec().into())).await;
                (a.status.as_u16(), a.text)
            }
        };
        let nul = write(b"AWLR\0X AWLR1-wl=1 1777964400").await;
        let unknown = write(b"AWLRYX AWLR1-wl=1 1777964400").await;
        assert!(nul.0 == 400 && unknown.0 == 400, "line protocol: {nul:?} {unknown:?}");
    }
}
