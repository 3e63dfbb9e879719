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

/// The value of the metric line that starts with `series` in `text`.
fn gauge(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{series} missing from:\n{text}"))
}

on_each_backend! {
    async fn metrics_show_what_the_bounded_caches_hold() {
        let options = sensorhub::config::serve::ServeSettings {
            webhook: sensorhub::config::server::WebhookSettings {
                mode: sensorhub::config::server::WebhookMode::Ingest,
                ..Default::default()
            },
            ..TestApp::settings()
        };
        let app = TestApp::with(options).await;
        let metrics = || async { app.request(Method::GET, &format!("{}/metrics", app.root()), &[], None).await.text };
        let (rendered, kept) = (r#"sensorhub_memory_cache_bytes{cache="rendered_hours"}"#, r#"sensorhub_memory_cache_bytes{cache="kept_hours"}"#);
        let before = metrics().await;
        assert_eq!((gauge(&before, rendered), gauge(&before, kept)), (0.0, 0.0));
        // A window of whole hours is kept rendered; a written hour is kept decoded.
        assert_eq!(app.alice("/devices/AWLR-001/data?start=2026-05-05T00:00:00Z&end=2026-05-05T01:59:59Z").await.status, 200);
        let reading = json!({"event": "sensor-data", "device_id": "AWLR-001", "timestamp": "2026-05-05T03:00:00Z",
                             "data": {"AWLR1-batt": 90.0}});
        assert_eq!(app.webhook(Some("wh-alice-secret"), &reading.to_string()).await.status, 200);
        let after = metrics().await;
        assert!(gauge(&after, rendered) > 0.0, "{after}");
        assert!(gauge(&after, kept) > 0.0, "{after}");
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

on_each_backend! {
    async fn metrics_can_require_a_token_and_operations_are_throttled() {
        let token = "a-long-metrics-token";
        let app = TestApp::with(sensorhub::config::serve::ServeSettings {
            rate_limit: "3/minute".parse().expect("quota"),
            metrics_access: sensorhub::config::server::MetricsAccess {
                token_digest: Some(sensorhub_core::secret::key_digest(token)),
                separate_listener: false,
            },
            ..crate::harness::TestApp::settings()
        })
        .await;
        let url = format!("{}/metrics", app.root());
        let a = app.request(Method::GET, &url, &[], None).await;
        assert_eq!(a.status, 401);
        assert_eq!(a.text, r#"{"message":"Unauthorized","data":null}"#);
        assert_eq!(a.headers["www-authenticate"], "Bearer realm=\"sensorhub-metrics\"");
        assert_eq!(app.request(Method::GET, &url, &[("Authorization", "Bearer wrong-token-wrong")], None).await.status, 401);
        let bearer = format!("Bearer {token}");
        assert_eq!(app.request(Method::GET, &url, &[("Authorization", &bearer)], None).await.status, 200);
        // Three operations requests from one address a minute, then 429 (liveness is never throttled).
        let a = app.request(Method::GET, &format!("{}/openapi.json", app.root()), &[], None).await;
        assert_eq!(a.status, 429, "{}", a.text);
        assert!(a.headers.contains_key("retry-after"));
        assert_eq!(app.request(Method::GET, &format!("{}/readyz", app.root()), &[], None).await.status, 429);
        assert_eq!(app.request(Method::GET, &format!("{}/healthz", app.root()), &[], None).await.status, 200);
    }
}

#[tokio::test]
async fn metrics_move_to_their_own_listener() {
    let (db, _dir, _pg) = crate::harness::fresh_database().await;
    let server = crate::harness::ServeProcess::start(&["--database", &db, "--metrics-listen", "127.0.0.1:0"]);
    let ops = server
        .log
        .split("address=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the metrics listener's address is logged")
        .to_owned();
    let status = |url: String| async move { reqwest::get(url).await.expect("answer").status().as_u16() };
    let root = server.base.trim_end_matches("/external/v1").to_owned();
    assert_eq!(status(format!("{root}/metrics")).await, 404, "not on the API's listener");
    assert_eq!(status(format!("http://{ops}/metrics")).await, 200);
    assert_eq!(status(format!("http://{ops}/readyz")).await, 200);
    assert_eq!(status(format!("http://{ops}/external/v1/devices")).await, 404, "no API there");
}

on_each_backend! {
    async fn the_vacuum_pass_runs_only_where_autovacuum_is_off() {
        let app = TestApp::start().await;
        let metrics = sensorhub::metrics::Metrics::default();
        let off = match crate::harness::BACKEND.with(|b| *b) {
            crate::harness::Backend::Sqlite => false,
            crate::harness::Backend::Postgres => {
                let (admin, connection) =
                    tokio_postgres::connect(&app.db, tokio_postgres::NoTls).await.expect("connect");
                let connection = tokio::spawn(connection);
                let on: String = admin.query_one("SHOW autovacuum", &[]).await.expect("show").get(0);
                drop(admin);
                let _ = connection.await;
                on == "off"
            }
        };
        // Whether sensorhub vacuums, said once when it changes.
        let mut said = sensorhub::vacuum::Said::default();
        sensorhub::vacuum::pass(&*app.store, &metrics, &mut said).await;
        assert_eq!(said.vacuuming, off);
        sensorhub::vacuum::pass(&*app.store, &metrics, &mut said).await;
        assert_eq!(said.vacuuming, off);
        assert!(said.not_permitted.is_empty(), "the test's role owns its tables: {said:?}");
    }
}
