//! The webhook receiver (spec 4.5): authentication, field-level 400s, 413,
//! 405, simulate mode and its received list, ingest mode.

use crate::harness::{ALICE_PASSWORD, TestApp};
use reqwest::Method;
use sensorhub::config::serve::ServeSettings;
use sensorhub::config::server::WebhookMode;
use sensorhub::config::server::WebhookSettings;
use serde_json::json;

const KEY: &str = "wh-alice-secret";

fn envelope(device: &str, ts: &str, data: serde_json::Value) -> String {
    json!({"event": "sensor-data", "device_id": device, "timestamp": ts, "data": data,
           "metadata": {"firmware": "2.1.0"}})
    .to_string()
}

fn ingest_app() -> ServeSettings {
    ServeSettings {
        webhook: WebhookSettings { mode: WebhookMode::Ingest, ..WebhookSettings::default() },
        ..TestApp::settings()
    }
}

on_each_backend! {
    async fn a_valid_envelope_is_received() {
        let app = TestApp::start().await;
        let body = envelope("AWLR-001", "2026-05-05T07:00:00+07:00", json!({"AWLR1-batt": 91.5}));
        let a = app.webhook(Some(KEY), &body).await;
        assert_eq!(a.status, 200);
        assert_eq!(a.text, r#"{"message":"Data received successfully"}"#);
        assert_eq!(a.headers["content-type"], "application/json");
    }
}

on_each_backend! {
    async fn missing_wrong_revoked_and_disabled_keys_are_401() {
        let app = TestApp::start().await;
        let body = envelope("AWLR-001", "2026-05-05T00:00:00Z", json!({}));
        for key in [None, Some("wrong"), Some("wh-carol-old"), Some("wh-bob-disabled-account"), Some("")] {
            let a = app.webhook(key, &body).await;
            assert_eq!(a.status, 401, "{key:?}");
            assert_eq!(a.text, r#"{"message":"Unauthorized"}"#, "{key:?}");
            assert!(a.headers.get("www-authenticate").is_none(), "the webhook does not use Basic");
        }
    }
}

on_each_backend! {
    async fn each_bad_envelope_is_400_naming_the_field() {
        let app = TestApp::start().await;
        let ts = "2026-05-05T00:00:00Z";
        let cases = [
            ("", "empty"),
            ("{\"event\":", "not valid JSON"),
            ("[1,2]", "not an array"),
            (r#"{"device_id":"D","timestamp":"2026-05-05T00:00:00Z","data":{}}"#, "event is required"),
            (r#"{"event":"x","timestamp":"2026-05-05T00:00:00Z","data":{}}"#, "device_id is required"),
            (r#"{"event":"x","device_id":"D","data":{}}"#, "timestamp is required"),
            (r#"{"event":"x","device_id":"D","timestamp":"2026-05-05T00:00:00Z"}"#, "data is required"),
            (r#"{"event":1,"device_id":"D","timestamp":"2026-05-05T00:00:00Z","data":{}}"#, "event must be a string"),
            (
                r#"{"event":"x","device_id":["D"],"timestamp":"2026-05-05T00:00:00Z","data":{}}"#,
                "device_id must be a string",
            ),
            (r#"{"event":"x","device_id":"D","timestamp":"05/05/2026","data":{}}"#, "timestamp must be an RFC 3339"),
            (
                r#"{"event":"x","device_id":"D","timestamp":"2026-05-05T00:00:00Z","data":[1]}"#,
                "data must be a JSON object",
            ),
            (
                r#"{"event":"x","device_id":"D","timestamp":"2026-05-05T00:00:00Z","data":{},"metadata":"m"}"#,
                "metadata must be",
            ),
        ];
        for (body, expected) in cases {
            let a = app.webhook(Some(KEY), body).await;
            assert_eq!(a.status, 400, "{body}: {}", a.text);
            assert_eq!(a.body["message"], "Bad Request");
            assert!(a.body["detail"].as_str().is_some_and(|d| d.contains(expected)), "{body}: {}", a.text);
            assert!(a.body.get("data").is_none(), "webhook bodies have no data: {}", a.text);
        }
        let _ = ts;
    }
}

on_each_backend! {
    async fn other_content_types_are_415() {
        let app = TestApp::start().await;
        let url = format!("{}/webhook/sensor-data", app.base);
        let body = envelope("AWLR-001", "2026-05-05T00:00:00Z", json!({}));
        let headers = [("X-API-KEY", KEY), ("Content-Type", "text/plain")];
        let a = app.request(Method::POST, &url, &headers, Some(body.into())).await;
        assert_eq!(a.status, 415);
        assert_eq!(a.body["message"], "Unsupported Media Type");
    }
}

on_each_backend! {
    async fn bodies_over_the_limit_are_413_declared_or_streamed() {
        let app = TestApp::with(ServeSettings {
            webhook: WebhookSettings { mode: WebhookMode::Simulate, max_body_bytes: 1024, ..WebhookSettings::default() },
            ..TestApp::settings()
        })
        .await;
        let big = envelope("AWLR-001", "2026-05-05T00:00:00Z", json!({"pad": "x".repeat(2000)}));
        let a = app.webhook(Some(KEY), &big).await;
        assert_eq!(a.status, 413);
        assert_eq!(a.text, r#"{"message":"Payload Too Large"}"#);

        let chunks: Vec<Result<String, std::io::Error>> = (0..64).map(|_| Ok("x".repeat(100))).collect();
        let streamed = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
        let url = format!("{}/webhook/sensor-data", app.base);
        let a = app.request(Method::POST, &url, &[("X-API-KEY", KEY)], Some(streamed)).await;
        assert_eq!(a.status, 413, "a chunked body without a length is cut off too");

        let small = envelope("AWLR-001", "2026-05-05T00:00:00Z", json!({"AWLR1-batt": 1}));
        assert_eq!(app.webhook(Some(KEY), &small).await.status, 200);
    }
}

on_each_backend! {
    async fn other_methods_are_405() {
        let app = TestApp::start().await;
        let url = format!("{}/webhook/sensor-data", app.base);
        for method in [Method::GET, Method::PUT, Method::DELETE] {
            let a = app.request(method.clone(), &url, &[("X-API-KEY", KEY)], None).await;
            assert_eq!(a.status, 405, "{method}");
            assert_eq!(a.headers["allow"], "POST");
            assert_eq!(a.text, r#"{"message":"Method Not Allowed"}"#);
        }
        let received = format!("{url}/received");
        let a = app.request(Method::POST, &received, &[("X-API-KEY", KEY)], None).await;
        assert_eq!((a.status.as_u16(), a.text.as_str()), (405, r#"{"message":"Method Not Allowed"}"#));
        assert_eq!(a.headers["allow"], "GET, HEAD");
    }
}

on_each_backend! {
    async fn simulate_stores_nothing_and_lists_what_arrived_newest_first() {
        let app = TestApp::start().await;
        let first =
            envelope("AWLR-001", "2026-06-01T00:00:00Z", json!({"AWLR1-batt": 90, "AWLR1-nope": 1, "AWLR1-wl": "high"}));
        let second = envelope("SECRET-9", "2026-06-01T00:10:00Z", json!({"sensors": [{"id": "S9-wl", "value": 3}]}));
        assert_eq!(app.webhook(Some(KEY), &first).await.status, 200);
        assert_eq!(app.webhook(Some(KEY), &second).await.status, 200);
        // Nothing became a reading.
        let a = app.alice("/devices/AWLR-001/data?start=2026-06-01T00:00:00Z&end=2026-06-02T00:00:00Z").await;
        assert_eq!(a.text, r#"{"message":"Success","data":[]}"#);

        let url = format!("{}/webhook/sensor-data/received", app.base);
        let list = app.request(Method::GET, &url, &[("X-API-KEY", KEY)], None).await;
        assert_eq!(list.status, 200, "{}", list.text);
        assert_eq!(list.body["message"], "Success");
        let items = list.body["data"].as_array().expect("array");
        assert_eq!(items.len(), 2);
        assert_eq!(items[0]["envelope"]["device_id"], "SECRET-9", "newest first");
        assert!(items[0]["received_at"].as_str().is_some_and(|t| t.ends_with('Z')));
        let warnings = |i: usize| {
            items[i]["warnings"]
                .as_array()
                .expect("warnings")
                .iter()
                .map(|w| w.as_str().unwrap_or_default().to_owned())
                .collect::<Vec<_>>()
        };
        assert!(warnings(0).iter().any(|w| w.contains("not one of this account's devices")), "{:?}", warnings(0));
        let w1 = warnings(1);
        assert!(w1.iter().any(|w| w.contains("\"AWLR1-nope\" is not registered")), "{w1:?}");
        assert!(w1.iter().any(|w| w.contains("data.AWLR1-wl is a string, not a number")), "{w1:?}");
        assert_eq!(items[1]["envelope"]["metadata"]["firmware"], "2.1.0");

        let carol = app.request(Method::GET, &url, &[("X-API-KEY", "wh-carol-secret")], None).await;
        assert_eq!(carol.text, r#"{"message":"Success","data":[]}"#, "each account sees its own envelopes");
        let nobody = app.request(Method::GET, &url, &[], None).await;
        assert_eq!(nobody.status, 401);
    }
}

on_each_backend! {
    async fn ingest_writes_exactly_one_reading() {
        let app = TestApp::with(ingest_app()).await;
        let body = envelope("AWLR-001", "2026-06-01T07:00:00+07:00", json!({"AWLR1-batt": 88.5, "AWLR1-wl": 130}));
        assert_eq!(app.webhook(Some(KEY), &body).await.status, 200);
        assert_eq!(app.webhook(Some(KEY), &body).await.status, 200, "a retry is idempotent");
        // A fraction of a second (JavaScript's toISOString) is dropped: readings are kept to the second.
        let list =
            envelope("AWLR-001", "2026-06-01T00:15:00.123Z", json!({"sensors": [{"id": "AWLR1-sig", "value": -70}]}));
        assert_eq!(app.webhook(Some(KEY), &list).await.status, 200);
        let a = app.alice("/devices/AWLR-001/data?start=2026-06-01T00:00:00Z&end=2026-06-02T00:00:00Z").await;
        assert_eq!(
            a.data(),
            &json!([
                {"timestamp": "2026-06-01T00:00:00Z", "sensors": [
                    {"id": "AWLR1-batt", "value": 88.5, "unit": "%"}, {"id": "AWLR1-wl", "value": 130.0, "unit": "cm"}]},
                {"timestamp": "2026-06-01T00:15:00Z", "sensors": [{"id": "AWLR1-sig", "value": -70.0, "unit": "dBm"}]}
            ])
        );
    }
}

on_each_backend! {
    async fn ingest_refuses_unknown_sensors_and_devices_writing_nothing() {
        let app = TestApp::with(ingest_app()).await;
        let window = "/devices/AWLR-001/data?start=2026-06-01T00:00:00Z&end=2026-06-02T00:00:00Z";
        let bad = envelope("AWLR-001", "2026-06-01T00:00:00Z", json!({"AWLR1-batt": 88.5, "AWLR1-nope": 1}));
        let a = app.webhook(Some(KEY), &bad).await;
        assert_eq!(a.status, 400);
        assert!(a.body["detail"].as_str().is_some_and(|d| d.contains("\"AWLR1-nope\" is not registered")), "{}", a.text);
        let not_number =
            envelope("AWLR-001", "2026-06-01T00:00:00Z", json!({"sensors": [{"id": "AWLR1-batt", "value": "88"}]}));
        let a = app.webhook(Some(KEY), &not_number).await;
        assert!(
            a.body["detail"].as_str().is_some_and(|d| d.contains("data.sensors[0].value must be a number")),
            "{}",
            a.text
        );
        let twice = envelope(
            "AWLR-001",
            "2026-06-01T00:00:00Z",
            json!({"sensors": [{"id": "AWLR1-batt", "value": 1}, {"id": "AWLR1-batt", "value": 2}]}),
        );
        let a = app.webhook(Some(KEY), &twice).await;
        assert!(a.body["detail"].as_str().is_some_and(|d| d.contains("given more than once")), "{}", a.text);
        // The same in the flat form, where JSON keeps only the last member.
        let flat_twice = r#"{"event":"sensor-data","device_id":"AWLR-001","timestamp":"2026-06-01T00:00:00Z",
            "data":{"AWLR1-batt":1,"AWLR1-batt":2}}"#;
        let a = app.webhook(Some(KEY), flat_twice).await;
        assert_eq!(a.status, 400, "{}", a.text);
        assert!(a.body["detail"].as_str().is_some_and(|d| d.contains("data.AWLR1-batt: sensor")), "{}", a.text);
        let ancient = envelope("AWLR-001", "0000-01-01T00:00:00Z", json!({"AWLR1-batt": 1}));
        assert_eq!(app.webhook(Some(KEY), &ancient).await.status, 400);
        assert_eq!(app.alice(window).await.text, r#"{"message":"Success","data":[]}"#, "nothing was written");

        let hidden = envelope("SECRET-9", "2026-06-01T00:00:00Z", json!({"S9-wl": 1}));
        let a = app.webhook(Some(KEY), &hidden).await;
        assert_eq!(a.status, 404);
        assert_eq!(a.text, r#"{"message":"Device not found"}"#);
        assert_eq!(app.get_as("alice", ALICE_PASSWORD, window).await.data(), &json!([]));
    }
}

on_each_backend! {
    async fn seeing_a_device_does_not_let_a_key_write_it() {
        let app = TestApp::with(ingest_app()).await;
        let window = "/devices/AWS-002/data?start=2026-06-01T00:00:00Z&end=2026-06-02T00:00:00Z";
        // carol is shown alice's station, read-only.
        app.apply(r#"{"accounts":[{"username":"carol","devices":["AWS-002"]}]}"#).await;
        let body = envelope("AWS-002", "2026-06-01T00:00:00Z", json!({"AWS2-temp": -99}));
        let a = app.webhook(Some("wh-carol-secret"), &body).await;
        assert_eq!(a.status, 403, "{}", a.text);
        assert_eq!(a.body["message"], "Forbidden");
        assert!(a.body["detail"].as_str().is_some_and(|d| d.contains("may read device \"AWS-002\" but not write")), "{}", a.text);
        assert_eq!(app.alice(window).await.data(), &json!([]), "nothing was written");
        // The owner writes; a write grant lets carol write too.
        assert_eq!(app.webhook(Some(KEY), &body).await.status, 200);
        app.apply(r#"{"accounts":[{"username":"carol","write":["AWS-002"]}]}"#).await;
        let carol = envelope("AWS-002", "2026-06-01T00:10:00Z", json!({"AWS2-temp": 24.5}));
        assert_eq!(app.webhook(Some("wh-carol-secret"), &carol).await.status, 200);
        assert_eq!(app.alice(window).await.data().as_array().map(Vec::len), Some(2));
    }
}

// A key's device and write permission are kept between requests: every
// change reaches the next request all the same.
on_each_backend! {
    async fn a_changed_grant_or_sensor_holds_at_the_next_request() {
        let app = TestApp::with(ingest_app()).await;
        app.apply(r#"{"accounts":[{"username":"carol","devices":["AWS-002"],"write":["AWS-002"]}]}"#).await;
        let at = |minute: u32| format!("2026-06-01T00:{minute:02}:00Z");
        let temp = |minute| envelope("AWS-002", &at(minute), json!({"AWS2-temp": 20}));
        assert_eq!(app.webhook(Some("wh-carol-secret"), &temp(1)).await.status, 200);
        assert_eq!(app.webhook(Some("wh-carol-secret"), &temp(2)).await.status, 200, "asked again");
        app.apply(r#"{"accounts":[{"username":"carol","write":[]}]}"#).await;
        assert_eq!(app.webhook(Some("wh-carol-secret"), &temp(3)).await.status, 403, "the grant taken away");
        app.apply(r#"{"accounts":[{"username":"carol","write":["AWS-002"]}]}"#).await;
        assert_eq!(app.webhook(Some("wh-carol-secret"), &temp(4)).await.status, 200, "granted again");
        let gust = envelope("AWS-002", &at(5), json!({"AWS2-gust": 12.5}));
        assert_eq!(app.webhook(Some("wh-carol-secret"), &gust).await.status, 400, "no such sensor yet");
        let sensors = [
            ("AWS2-temp", "Air Temperature", "AIR_TEMPERATURE", "°C"),
            ("AWS2-hum", "Air Humidity", "AIR_HUMIDITY", "%RH"),
            ("AWS2-rain", "Rainfall", "RAIN_FALL", "mm"),
            ("AWS2-wind", "Wind Speed", "WIND_SPEED", "m/s"),
            ("AWS2-batt", "Battery Level", "BATTERY", "%"),
            ("AWS2-gust", "Wind Gust", "WIND_SPEED", "m/s"),
        ]
        .map(|(id, name, kind, unit)| format!(r#"{{"sensor_id":"{id}","name":"{name}","type":"{kind}","unit":"{unit}"}}"#))
        .join(",");
        app.apply(
            &format!(
                r#"{{"devices":[{{"device_id":"AWS-002","name":"Stasiun Cuaca Bantul","type":"AWS","lat":-7.8881,
                    "long":110.3289,"interval_seconds":600,"owner":"alice","sensors":[{sensors}]}}]}}"#
            ),
        )
        .await;
        assert_eq!(app.webhook(Some("wh-carol-secret"), &gust).await.status, 200, "the sensor added");
        let window = "/devices/AWS-002/data?start=2026-06-01T00:00:00Z&end=2026-06-02T00:00:00Z";
        assert_eq!(app.alice(window).await.data().as_array().map(Vec::len), Some(4));
    }
}

// In ingest mode a webhook key's answer is kept between readings and
// confirmed when the reading is written: a key revoked or its account
// disabled since is refused at the next request all the same, whatever
// its body, and nothing of it is written.
on_each_backend! {
    async fn a_kept_key_revoked_or_disabled_is_refused_at_the_next_request() {
        let app = TestApp::with(ingest_app()).await;
        app.apply(r#"{"accounts":[{"username":"carol","devices":["AWS-002"],"write":["AWS-002"]}]}"#).await;
        let temp = |minute: u32| envelope("AWS-002", &format!("2026-06-01T00:{minute:02}:00Z"), json!({"AWS2-temp": 20}));
        let carol = async |body: String| app.webhook(Some("wh-carol-secret"), &body).await;
        assert_eq!(carol(temp(1)).await.status, 200);
        assert_eq!(carol(temp(2)).await.status, 200, "on the kept answer");
        let key = |revoked: bool| {
            format!(r#"{{"accounts":[{{"username":"carol","webhook_keys":[{{"key":"wh-carol-secret","revoked":{revoked}}}]}}]}}"#)
        };
        app.apply(&key(true)).await;
        // The first request after the revocation comes on the kept answer.
        assert_eq!(carol("{".into()).await.status, 401, "a bad body from a revoked key: still 401");
        let a = carol(temp(3)).await;
        assert_eq!(a.status, 401, "the key revoked");
        assert_eq!(a.text, r#"{"message":"Unauthorized"}"#);
        app.apply(&key(false)).await;
        assert_eq!(carol(temp(4)).await.status, 200, "active again");
        app.apply(&key(true)).await;
        assert_eq!(carol(temp(7)).await.status, 401, "revoked again, on a kept answer: nothing written");
        app.apply(&key(false)).await;
        assert_eq!(carol(temp(4)).await.status, 200, "active again");
        assert_eq!(carol("{".into()).await.status, 400, "a bad body from a valid key");
        app.apply(r#"{"accounts":[{"username":"carol","disabled":true}]}"#).await;
        assert_eq!(carol(temp(5)).await.status, 401, "the account disabled");
        app.apply(r#"{"accounts":[{"username":"carol","disabled":false}]}"#).await;
        assert_eq!(carol(temp(6)).await.status, 200, "enabled again");
        let window = "/devices/AWS-002/data?start=2026-06-01T00:00:00Z&end=2026-06-02T00:00:00Z";
        let minutes: Vec<String> =
            app.alice(window).await.data().as_array().expect("list").iter().map(|r| r["timestamp"].to_string()).collect();
        assert_eq!(minutes, ["01", "02", "04", "06"].map(|m| format!("\"2026-06-01T00:{m}:00Z\"")), "nothing refused was written");
    }
}

on_each_backend! {
    async fn readings_from_the_future_are_refused() {
        let app = TestApp::with(ingest_app()).await;
        let at = |secs: i64| {
            let now = jiff::Timestamp::now().as_second();
            jiff::Timestamp::from_second(now + secs).expect("ts").to_string()
        };
        let soon = envelope("AWLR-001", &at(300), json!({"AWLR1-batt": 90}));
        assert_eq!(app.webhook(Some(KEY), &soon).await.status, 200, "within the 10-minute skew");
        for (ts, expected) in [
            (at(3600), "ahead of the server's clock"),
            ("9999-12-29T23:59:59Z".to_owned(), "ahead of the server's clock"),
            ("9999-12-31T23:59:59Z".to_owned(), "must be an RFC 3339 date-time"),
        ] {
            let a = app.webhook(Some(KEY), &envelope("AWLR-001", &ts, json!({"AWLR1-batt": 1}))).await;
            assert_eq!(a.status, 400, "{ts}: {}", a.text);
            assert!(a.body["detail"].as_str().is_some_and(|d| d.contains(expected)), "{ts}: {}", a.text);
        }
        let devices = app.alice("/devices").await;
        let last = devices.data()[0]["last_update_at"].as_str().expect("AWLR-001 has a reading").to_owned();
        assert!(last.as_str() < "2100", "no far-future reading dominates last_update_at: {last}");
    }
}
