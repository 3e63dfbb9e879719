//! The silence phase: many devices falling silent together.

use super::{SILENT_FOR, database, sensorhub};
use crate::dataset;
use std::path::Path;
use std::time::{Duration, Instant};

/// `n` devices with a silence rule each, one reading each imported before
/// the server starts; its CPU while nothing is due, and how long after the
/// rule's time (from the start) every device is raised.
pub(super) fn silence(bin: &Path, dir: &Path, n: usize, port: u16) -> Result<(f64, f64), String> {
    let devices: Vec<_> = (0..n)
        .map(|i| {
            serde_json::json!({"device_id": format!("Q-{i:05}"), "name": "quiet", "type": "AWS", "lat": 0, "long": 0,
            "interval_seconds": 60, "owner": dataset::BENCH_USER.0,
            "sensors": [{"sensor_id": format!("Q{i}-t"), "name": "T", "type": "T", "unit": "."}],
            "alarms": [{"name": "silent", "no_data_for": format!("{SILENT_FOR}s")}]})
        })
        .collect();
    let ids: Vec<String> = (0..n).map(|i| format!("Q-{i:05}")).collect();
    let doc = serde_json::json!({"accounts": [{"username": dataset::BENCH_USER.0, "password": dataset::BENCH_USER.1,
        "devices": ids, "api_keys": [{"id": dataset::BENCH_KEY}]}], "devices": devices});
    let db = database(bin, dir, "silent", &doc)?;
    let csv = dir.join("silent.csv");
    let now = jiff::Timestamp::now().as_second();
    let mut text = String::from("device_id,timestamp,sensor_id,value\n");
    for i in 0..n {
        let ts = jiff::Timestamp::from_second(now).map_or_else(|_| String::new(), |t| t.to_string());
        text.push_str(&format!("Q-{i:05},{ts},Q{i}-t,1\n"));
    }
    std::fs::write(&csv, text).map_err(|e| e.to_string())?;
    sensorhub(bin, &db, &["import", csv.to_str().ok_or("path")?])?;
    let server = super::ingest::serve(bin, &db, port)?;
    let started = Instant::now();
    // Let the start settle, then measure 10 s of nothing due.
    std::thread::sleep(Duration::from_secs(3));
    let (before, at) = (server.cpu_seconds(), Instant::now());
    std::thread::sleep(Duration::from_secs(10));
    let idle = (server.cpu_seconds() - before) / at.elapsed().as_secs_f64() * 100.0;
    let deadline = started + Duration::from_secs(SILENT_FOR as u64 + 60);
    loop {
        let body = crate::run::get(port, &format!("/external/v1/{}/alarms", dataset::BENCH_KEY), None)?;
        let active = String::from_utf8_lossy(&body).matches("\"state\":\"active\"").count();
        if active >= n {
            return Ok((idle, started.elapsed().as_secs_f64() - SILENT_FOR as f64));
        }
        if Instant::now() > deadline {
            return Err(format!("only {active} of {n} silent devices raised after {} s", SILENT_FOR + 60));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
