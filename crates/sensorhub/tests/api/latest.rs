//! The latest endpoints: each sensor's newest reading with its own time,
//! in sensor order, rendered in tz, with the errors of the data endpoints.

use crate::harness::{ALICE_PASSWORD, TestApp, assert_error, basic, reading, secs};
use jiff::tz::Offset;
use reqwest::Method;
use sensorhub::config::serve::ServeSettings;
use sensorhub::config::server::WebhookMode;
use sensorhub::config::server::WebhookSettings;
use sensorhub_core::time::{RangeRules, TimeRange};

/// AWS-002 after a battery reading two hours after the fixture's last one:
/// temperature and rain keep their own (older) time, humidity and wind never
/// reported.
const AWS_LATEST: &str = r#"{"message":"Success","data":[{"id":"AWS2-temp","value":24.1,"unit":"°C","timestamp":"2026-05-04T23:00:00Z"},{"id":"AWS2-rain","value":0.2,"unit":"mm","timestamp":"2026-05-04T23:00:00Z"},{"id":"AWS2-batt","value":12.0,"unit":"%","timestamp":"2026-05-05T01:00:00Z"}]}"#;

on_each_backend! {
    async fn each_sensor_comes_with_its_own_newest_time() {
        let app = TestApp::start().await;
        app.add_readings(vec![reading("AWS-002", secs("2026-05-05T01:00:00Z"), "AWS2-batt", 12.0)]).await;
        let a = app.alice("/devices/AWS-002/latest").await;
        assert_eq!(a.status, 200, "{}", a.text);
        assert_eq!(a.headers["content-type"], "application/json");
        assert_eq!(a.text, AWS_LATEST);
        let public = app.get("/pk-alice-all/devices/AWS-002/latest").await;
        assert_eq!(public.text, AWS_LATEST, "public and Basic answers are the same bytes");
        let head = app.send(Method::HEAD, "/devices/AWS-002/latest", Some(&basic("alice", ALICE_PASSWORD))).await;
        assert_eq!((head.status.as_u16(), head.text.as_str()), (200, ""));
    }
}

on_each_backend! {
    async fn tz_renders_each_time_in_the_offset_or_zone() {
        let app = TestApp::start().await;
        let at_seven = r#"{"message":"Success","data":[{"id":"AWLR1-batt","value":92.3,"unit":"%","timestamp":"2026-05-05T07:30:00+07:00"},{"id":"AWLR1-wl","value":123.0,"unit":"cm","timestamp":"2026-05-05T07:30:00+07:00"},{"id":"AWLR1-sig","value":-73.0,"unit":"dBm","timestamp":"2026-05-05T07:30:00+07:00"},{"id":"AWLR1-status","value":1.0,"unit":".","timestamp":"2026-05-05T07:30:00+07:00"}]}"#;
        assert_eq!(app.alice("/devices/AWLR-001/latest?tz=7").await.text, at_seven);
        assert_eq!(app.get("/pk-alice-awlr/devices/AWLR-001/latest?tz=Asia/Jakarta").await.text, at_seven);
        assert_eq!(app.alice("/devices/AWLR-001/latest?tz=%2B07:00&start=ignored&x=1").await.text, at_seven);
        let utc = app.alice("/devices/AWLR-001/latest?tz=").await;
        assert_eq!(utc.data()[0]["timestamp"], "2026-05-05T00:30:00Z", "an empty tz is the default");
        let berlin = app.alice("/devices/AWLR-001/latest?tz=Europe/Berlin").await;
        assert_eq!(berlin.data()[3]["timestamp"], "2026-05-05T02:30:00+02:00", "summer time");

        for (query, word) in [("tz=25", "tz"), ("tz=Mars/Olympus", "tz"), ("tz=7&tz=8", "malformed query")] {
            let a = app.alice(&format!("/devices/AWLR-001/latest?{query}")).await;
            assert_error(&a, 400, "Bad Request");
            assert!(a.body["detail"].as_str().is_some_and(|d| d.contains(word)), "{query}: {}", a.text);
        }
        let bad_tz_unknown_device = app.alice("/devices/NOPE/latest?tz=25").await;
        assert_error(&bad_tz_unknown_device, 400, "Bad Request");
    }
}

on_each_backend! {
    async fn the_configured_default_tz_applies_without_tz() {
        let app = TestApp::with_rules(RangeRules { default_tz: sensorhub_core::time::Zone::Fixed(Offset::constant(7)), max_range_days: 366 }).await;
        let a = app.alice("/devices/AWS-002/latest").await;
        assert_eq!(a.data()[0]["timestamp"], "2026-05-05T06:00:00+07:00");
    }
}

on_each_backend! {
    async fn errors_are_those_of_the_data_endpoints() {
        let app = TestApp::start().await;
        assert_error(&app.alice("/devices/SECRET-9/latest").await, 404, "Device not found");
        assert_error(&app.alice("/devices/NOPE/latest").await, 404, "Device not found");
        assert_error(&app.get("/pk-alice-awlr/devices/AWS-002/latest").await, 404, "Device not found");
        assert_error(&app.get("/pk-carol/devices/AWLR-001/latest").await, 404, "Device not found");
        assert_error(&app.get("/devices/AWLR-001/latest").await, 401, "Unauthorized");
        assert_error(&app.get_as("alice", "wrong", "/devices/AWLR-001/latest").await, 401, "Unauthorized");
        assert_error(&app.get_as("bob", "bob-pass", "/devices/AWS-002/latest").await, 403, "Forbidden");
        assert_error(&app.get("/pk-alice-old/devices/AWLR-001/latest").await, 403, "Forbidden");
        assert_error(&app.get("/pk-nope/devices/AWLR-001/latest").await, 403, "Forbidden");
        for path in ["/devices/AWLR-001/latest", "/pk-alice-all/devices/AWLR-001/latest"] {
            for method in [Method::POST, Method::PUT, Method::DELETE] {
                let a = app.send(method.clone(), path, None).await;
                assert_error(&a, 405, "Method Not Allowed");
                assert_eq!(a.headers["allow"], "GET, HEAD", "{method} {path}");
            }
        }
    }
}

on_each_backend! {
    async fn a_device_without_readings_has_no_entries() {
        let app = TestApp::start().await;
        app.store.delete_readings("AWS-002", TimeRange { start: 0, end: 253_402_214_399 }).await.expect("delete");
        let a = app.alice("/devices/AWS-002/latest").await;
        assert_eq!((a.status.as_u16(), a.text.as_str()), (200, r#"{"message":"Success","data":[]}"#));
    }
}

on_each_backend! {
    async fn a_late_webhook_reading_does_not_replace_a_newer_one() {
        let options = ServeSettings {
            webhook: WebhookSettings { mode: WebhookMode::Ingest, ..WebhookSettings::default() },
            ..TestApp::settings()
        };
        let app = TestApp::with(options).await;
        let send = |ts: &str, value: f64| {
            serde_json::json!({"event": "sensor-data", "device_id": "AWLR-001", "timestamp": ts,
                               "data": {"AWLR1-batt": value}})
            .to_string()
        };
        assert_eq!(app.webhook(Some("wh-alice-secret"), &send("2026-05-05T00:45:00Z", 91.0)).await.status, 200);
        assert_eq!(app.webhook(Some("wh-alice-secret"), &send("2026-05-05T00:40:00Z", 50.0)).await.status, 200);
        let a = app.alice("/devices/AWLR-001/latest").await;
        assert_eq!(
            a.data()[0],
            serde_json::json!({"id": "AWLR1-batt", "value": 91.0, "unit": "%", "timestamp": "2026-05-05T00:45:00Z"})
        );
        assert_eq!(a.data()[1]["timestamp"], "2026-05-05T00:30:00Z", "the water level keeps its own time");
        // The late reading is stored all the same.
        let data = app.alice("/devices/AWLR-001/data?start=2026-05-05T00:40:00Z&end=2026-05-05T00:40:00Z").await;
        assert_eq!(data.data()[0]["sensors"][0]["value"], 50.0);
    }
}

on_each_backend! {
    async fn latest_requests_count_against_the_callers_quota() {
        let rate_limit = "1/minute".parse().expect("quota");
        let app = TestApp::with(ServeSettings { rate_limit, ..TestApp::settings() }).await;
        assert_eq!(app.alice("/devices/AWLR-001/latest").await.status, 200);
        assert_error(&app.alice("/devices/AWLR-001/latest").await, 429, "To Many Request");
        assert_eq!(app.get("/pk-alice-all/devices/AWLR-001/latest").await.status, 200);
        assert_error(&app.get("/pk-alice-all/devices/AWLR-001/latest").await, 429, "To Many Request");
    }
}
