//! Health, readiness, metrics and the OpenAPI document.

use crate::harness::TestApp;
use reqwest::Method;
use serde_json::json;

on_each_backend! {
    async fn health_and_readiness() {
        let app = TestApp::start().await;
        let a = app.request(Method::GET, &format!("{}/healthz", app.root()), &[], None).await;
        assert_eq!((a.status.as_u16(), a.body.clone()), (200, json!({"status": "ok"})));
        let a = app.request(Method::GET, &format!("{}/readyz", app.root()), &[], None).await;
        assert_eq!((a.status.as_u16(), a.body.clone()), (200, json!({"status": "ready"})));
    }
}

on_each_backend! {
    async fn metrics_count_requests_limits_webhooks_readings_and_the_pool() {
        let app = TestApp::start().await;
        app.alice("/devices").await;
        app.alice("/devices/AWLR-001/data?start=2026-05-05T00:00:00Z&end=2026-05-05T00:30:00Z").await;
        let ok =
            json!({"event": "e", "device_id": "AWLR-001", "timestamp": "2026-05-05T00:00:00Z", "data": {}}).to_string();
        app.webhook(Some("wh-alice-secret"), &ok).await;
        app.webhook(Some("wh-alice-secret"), "[]").await;
        app.webhook(Some("wrong"), "[]").await;
        let odd = reqwest::Method::from_bytes(b"ZZ12345").expect("method");
        app.request(odd, &format!("{}/healthz", app.root()), &[], None).await;
        let a = app.request(Method::GET, &format!("{}/metrics", app.root()), &[], None).await;
        assert_eq!(a.status, 200);
        for needle in [
            r#"sensorhub_http_requests_total{method="GET",route="/external/v1/devices",status="200"} 1"#,
            r#"sensorhub_http_request_duration_seconds_count{route="/external/v1/devices/{device_id}/data",status="200"} 1"#,
            r#"sensorhub_webhook_envelopes_total{outcome="accepted"} 1"#,
            r#"sensorhub_webhook_envelopes_total{outcome="rejected"} 2"#,
            r#"sensorhub_http_requests_total{method="OTHER",route="/healthz",status="405"} 1"#,
            "sensorhub_readings_served_total 3",
            r#"sensorhub_db_pool_connections{state="max"}"#,
            "sensorhub_rate_limited_requests",
        ] {
            assert!(a.text.contains(needle), "{needle} missing from:\n{}", a.text);
        }
    }
}

on_each_backend! {
    async fn the_openapi_document_lists_every_endpoint() {
        let app = TestApp::start().await;
        let a = app.request(Method::GET, &format!("{}/openapi.json", app.root()), &[], None).await;
        assert_eq!(a.status, 200);
        assert!(a.body["openapi"].as_str().is_some_and(|v| v.starts_with("3.1")));
        let paths = a.body["paths"].as_object().expect("paths");
        for path in sensorhub::http::routes().paths() {
            assert!(paths.contains_key(*path), "{path}");
        }
        assert!(a.body["paths"]["/external/v1/webhook/sensor-data"]["post"]["requestBody"].is_object());
    }
}
