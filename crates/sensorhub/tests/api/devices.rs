//! The device lists (spec 4.1, 4.3).

use crate::harness::{TestApp, assert_error};
use serde_json::json;

fn alice_devices() -> serde_json::Value {
    json!([
        {"device_id": "AWLR-001", "name": "Kali Code", "type": "AWLR", "lat": -7.7829, "long": 110.3671,
         "interval_seconds": 900, "last_update_at": "2026-05-05T00:30:00Z",
         "sensors": [
            {"sensor_id": "AWLR1-batt", "name": "Battery Level", "type": "BATTERY", "unit": "%"},
            {"sensor_id": "AWLR1-wl", "name": "Water Level", "type": "FLUID_LEVEL", "unit": "cm"},
            {"sensor_id": "AWLR1-sig", "name": "Cellular Signal", "type": "CELLULAR_SIGNAL", "unit": "dBm"},
            {"sensor_id": "AWLR1-status", "name": "Alert Level", "type": "ALERT_LEVEL", "unit": "."}
         ]},
        {"device_id": "AWS-002", "name": "Stasiun Cuaca Bantul", "type": "AWS", "lat": -7.8881, "long": 110.3289,
         "interval_seconds": 600, "last_update_at": "2026-05-04T23:00:00Z",
         "sensors": [
            {"sensor_id": "AWS2-temp", "name": "Air Temperature", "type": "AIR_TEMPERATURE", "unit": "°C"},
            {"sensor_id": "AWS2-hum", "name": "Air Humidity", "type": "AIR_HUMIDITY", "unit": "%RH"},
            {"sensor_id": "AWS2-rain", "name": "Rainfall", "type": "RAIN_FALL", "unit": "mm"},
            {"sensor_id": "AWS2-wind", "name": "Wind Speed", "type": "WIND_SPEED", "unit": "m/s"},
            {"sensor_id": "AWS2-batt", "name": "Battery Level", "type": "BATTERY", "unit": "%"}
         ]}
    ])
}

on_each_backend! {
    async fn basic_list_is_the_accounts_devices_ordered_by_id() {
        let app = TestApp::start().await;
        let a = app.alice("/devices").await;
        assert_eq!(a.status, 200);
        assert_eq!(a.headers["content-type"], "application/json");
        assert_eq!(a.body, json!({"message": "Success", "data": alice_devices()}));
    }
}

on_each_backend! {
    async fn public_list_with_an_unscoped_key_equals_the_accounts() {
        let app = TestApp::start().await;
        let a = app.get("/pk-alice-all/devices").await;
        assert_eq!(a.status, 200);
        assert_eq!(a.body, json!({"message": "Success", "data": alice_devices()}));
    }
}

on_each_backend! {
    async fn a_scoped_key_sees_only_its_devices() {
        let app = TestApp::start().await;
        let a = app.get("/pk-alice-awlr/devices").await;
        assert_eq!(a.status, 200);
        let ids: Vec<_> = a.data().as_array().expect("array").iter().map(|d| d["device_id"].clone()).collect();
        assert_eq!(ids, vec![json!("AWLR-001")]);
    }
}

on_each_backend! {
    async fn no_devices_is_an_empty_array_and_no_reading_is_null() {
        let app = TestApp::start().await;
        let a = app.get_as("carol", "carol-pass", "/devices").await;
        assert_eq!(a.status, 200);
        assert_eq!(a.text, r#"{"message":"Success","data":[]}"#);
        let a = app.get("/pk-carol/devices").await;
        assert_eq!(a.text, r#"{"message":"Success","data":[]}"#);

        app.store
            .apply(
                sensorhub_core::provision::parse_json(
                    r#"{"devices":[{"device_id":"NEW-1","name":"n","type":"AWS","lat":1,"long":2,"interval_seconds":60}],
                        "accounts":[{"username":"carol","devices":["NEW-1"]}]}"#,
                )
                .expect("valid"),
                vec![],
            )
            .await
            .expect("apply");
        let a = app.get("/pk-carol/devices").await;
        assert_eq!(a.data()[0]["last_update_at"], serde_json::Value::Null);
        assert_eq!(a.data()[0]["sensors"], json!([]));
    }
}

on_each_backend! {
    async fn unknown_revoked_and_disabled_keys_are_forbidden() {
        let app = TestApp::start().await;
        for key in ["pk-nope", "pk-alice-old", "pk-bob", "PK-ALICE-ALL"] {
            assert_error(&app.get(&format!("/{key}/devices")).await, 403, "Forbidden");
            assert_error(&app.get(&format!("/{key}/devices/AWLR-001/data")).await, 403, "Forbidden");
        }
    }
}

on_each_backend! {
    async fn unknown_paths_are_json_404() {
        let app = TestApp::start().await;
        for path in ["/nope", "/devices/", "/pk-alice-all/devices/AWLR-001", "/devices/AWLR-001/data/x"] {
            assert_error(&app.alice(path).await, 404, "Not Found");
        }
    }
}
