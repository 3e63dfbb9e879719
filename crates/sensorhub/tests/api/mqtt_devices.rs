//! MQTT ingest follows changes to devices made while stations publish: a
//! device registered, or given a sensor, by `apply` has its next message
//! stored, not refused (and acknowledged, so never sent again) by what
//! the writer remembered of it. Against a real Mosquitto and the real
//! server, on each backend.

use crate::cli::{ok, run};
use crate::harness::{FIXTURE, ServeProcess};
use crate::mqtt::{Broker, Publisher, T0, client_id, metric, provisioned, serve};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// A reading at `T0 + n` minutes of `sensors`.
fn reading(n: i64, sensors: &[(&str, f64)]) -> String {
    let ts = jiff::Timestamp::from_second(T0 + n * 60).expect("time").to_string();
    let sensors: Vec<Value> = sensors.iter().map(|(id, value)| json!({"id": id, "value": value})).collect();
    json!({"timestamp": ts, "sensors": sensors}).to_string()
}

/// Waits (at most 5 s, half of what the writer remembers a device for)
/// until the metric `series` reads `n`.
async fn wait_metric(server: &ServeProcess, series: &str, n: f64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = metric(server, series).await;
        if now == n {
            return;
        }
        assert!(Instant::now() < deadline, "{series} is {now}, not {n}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A document that registers NEW-1 (alice's, one sensor) and gives
/// AWLR-001 a rain gauge, the fixture's devices otherwise.
fn changes() -> String {
    let fixture: Value = serde_json::from_str(FIXTURE).expect("fixture");
    let devices = fixture["devices"].as_array().expect("devices");
    let mut awlr = devices.iter().find(|d| d["device_id"] == "AWLR-001").expect("AWLR-001").clone();
    let mut new = awlr.clone();
    let gauge = json!({"sensor_id": "AWLR1-rain", "name": "Rainfall", "type": "RAIN_FALL", "unit": "mm"});
    awlr["sensors"].as_array_mut().expect("sensors").push(gauge);
    new["device_id"] = json!("NEW-1");
    new["sensors"] = json!([{"sensor_id": "NEW1-wl", "name": "Water Level", "type": "WATER_LEVEL", "unit": "cm"}]);
    json!({"devices": [awlr, new]}).to_string()
}

on_each_backend! {
    async fn a_device_registered_or_given_a_sensor_while_it_publishes_is_stored_at_once() {
        let broker = Broker::start();
        let (db, dir, _pg) = provisioned().await;
        let server = serve(&db, &broker, &client_id("devices"), &[]).await;
        let publisher = Publisher::connect(broker.port, &client_id("pub"));
        let outcome = |o: &str| format!("sensorhub_mqtt_messages_total{{outcome=\"{o}\"}}");

        let first = Instant::now();
        publisher.publish("sensorhub/NEW-1/readings", reading(0, &[("NEW1-wl", 1.5)])).await;
        wait_metric(&server, &outcome("unknown_device"), 1.0).await;
        publisher.publish("sensorhub/AWLR-001/readings", reading(0, &[("AWLR1-wl", 100.0), ("AWLR1-rain", 2.5)])).await;
        wait_metric(&server, &outcome("unknown_sensor"), 1.0).await;

        let file = dir.path().join("changes.json");
        std::fs::write(&file, changes()).expect("write");
        ok(&run(&db, &["apply", file.to_str().expect("utf-8")], ""));
        // Within the 10 s the writer remembers a device for, or this test tells nothing.
        assert!(first.elapsed() < Duration::from_secs(8), "too slow to tell: {:?}", first.elapsed());
        publisher.publish("sensorhub/NEW-1/readings", reading(1, &[("NEW1-wl", 1.75)])).await;
        publisher.publish("sensorhub/AWLR-001/readings", reading(1, &[("AWLR1-wl", 101.0), ("AWLR1-rain", 3.0)])).await;
        publisher.wait_acked(4).await;
        wait_metric(&server, &outcome("stored"), 2.0).await;
        assert_eq!(metric(&server, &outcome("unknown_device")).await, 1.0, "NEW-1 is known now");
        assert_eq!(metric(&server, &outcome("unknown_sensor")).await, 1.0, "AWLR1-rain is known now");
        let url = format!(
            "{}/pk-alice-all/devices/AWLR-001/data?start=2026-01-01T00:01:00Z&end=2026-01-01T00:01:00Z",
            server.base
        );
        let body: Value = reqwest::get(url).await.expect("read").json().await.expect("JSON");
        let ids: Vec<&str> = body["data"][0]["sensors"].as_array().expect("sensors").iter().filter_map(|s| s["id"].as_str()).collect();
        assert_eq!(ids, ["AWLR1-wl", "AWLR1-rain"], "{body}");
    }
}
