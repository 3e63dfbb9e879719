//! Faults with nothing acknowledged lost: the server killed with SIGKILL in
//! the middle of webhook ingest under load. After a restart, every reading
//! whose request got a 2xx is stored, with all of its values (no envelope
//! is half-written), on each backend.

use crate::harness::{FIXTURE, ServeProcess, fresh_database};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Clients posting at once.
const CLIENTS: usize = 8;
/// First reading second: 2026-01-01T00:00:00Z.
const T0: i64 = 1_767_225_600;
const SENSORS: [&str; 4] = ["AWLR1-batt", "AWLR1-wl", "AWLR1-sig", "AWLR1-status"];

fn provision(db: &str, dir: &std::path::Path) {
    let file = dir.join("fixture.json");
    std::fs::write(&file, FIXTURE).expect("write fixture");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sensorhub"))
        .args(["apply", file.to_str().expect("utf-8"), "--database", db])
        .env("SENSORHUB_LOG", "warn")
        .output()
        .expect("apply");
    assert!(out.status.success(), "apply: {}", String::from_utf8_lossy(&out.stderr));
}

/// Posts envelope after envelope (each a reading of four values at its own
/// second) until the server goes away; records the seconds acknowledged.
async fn post_until_gone(base: String, client: usize, acked: Arc<Mutex<BTreeSet<i64>>>) {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().expect("client");
    for n in 0i64.. {
        let second = T0 + n * CLIENTS as i64 + client as i64;
        let ts = jiff::Timestamp::from_second(second).expect("time").to_string();
        let sensors: Vec<Value> = SENSORS
            .iter()
            .enumerate()
            .map(|(k, id)| json!({"id": id, "value": (second % 997) as f64 + k as f64 / 4.0}))
            .collect();
        let body =
            json!({"event": "sensor-data", "device_id": "AWLR-001", "timestamp": ts, "data": {"sensors": sensors}});
        let sent = http
            .post(format!("{base}/webhook/sensor-data"))
            .header("X-API-KEY", "wh-alice-secret")
            .json(&body)
            .send()
            .await;
        match sent {
            Ok(r) if r.status().is_success() => {
                acked.lock().expect("lock").insert(second);
            }
            Ok(r) => assert!(r.status().is_server_error(), "only the kill may fail a request: {}", r.status()),
            Err(_) => return,
        }
    }
}

on_each_backend! {
    async fn sigkill_during_ingest_loses_no_acknowledged_reading() {
        let (db, dir, _pg) = fresh_database().await;
        provision(&db, dir.path());
        let mut server = ServeProcess::start(&["--database", &db, "--webhook-mode", "ingest", "--rate-limit", "off"]);
        let acked = Arc::new(Mutex::new(BTreeSet::new()));
        let load: Vec<_> = (0..CLIENTS)
            .map(|c| tokio::spawn(post_until_gone(server.base.clone(), c, acked.clone())))
            .collect();
        // Let the load run, then kill the server mid-write.
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if acked.lock().expect("lock").len() >= 300 {
                break;
            }
        }
        server.child.kill().expect("SIGKILL");
        let _ = server.child.wait();
        for task in load {
            task.await.expect("client task");
        }
        let acked = acked.lock().expect("lock").clone();
        assert!(acked.len() >= 300, "load ran: {} acknowledged", acked.len());

        let restarted = ServeProcess::start(&["--database", &db, "--rate-limit", "off"]);
        let end = T0 + (acked.last().copied().unwrap_or(T0) - T0) + 10 * CLIENTS as i64;
        let url = format!(
            "{}/pk-alice-all/devices/AWLR-001/data?start={}&end={}",
            restarted.base,
            jiff::Timestamp::from_second(T0).expect("t0"),
            jiff::Timestamp::from_second(end).expect("end")
        );
        let body: Value = reqwest::get(url).await.expect("read").json().await.expect("JSON");
        let mut stored: BTreeMap<i64, usize> = BTreeMap::new();
        for r in body["data"].as_array().expect("readings") {
            let second = r["timestamp"].as_str().expect("ts").parse::<jiff::Timestamp>().expect("ts").as_second();
            stored.insert(second, r["sensors"].as_array().expect("sensors").len());
        }
        let lost: Vec<_> = acked.iter().filter(|s| !stored.contains_key(s)).collect();
        assert!(lost.is_empty(), "{} acknowledged readings lost, first {:?}", lost.len(), lost.first());
        let partial: Vec<_> = stored.iter().filter(|(_, n)| **n != SENSORS.len()).collect();
        assert!(partial.is_empty(), "half-written readings: {partial:?}");
        // Unacknowledged requests may or may not have been committed: at most one in flight per client.
        assert!(stored.len() <= acked.len() + CLIENTS, "{} stored, {} acknowledged", stored.len(), acked.len());
    }
}
