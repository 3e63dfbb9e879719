//! `sensorhub-bench alarms`: what alarms cost and how fast they go out.
//!
//! 1. Ingest: webhook POSTs of the small fleet's readings (each station in
//!    turn, current times, values that move through the bands) on two
//!    release servers, one without rules and one with 5 rules on every
//!    device (two level rules, a rate rule, two silence rules), measured
//!    alternately; the ratio (target ≥ 0.9). MQTT is measured the same way
//!    by `sensorhub-bench mqtt --alarms`.
//! 2. Latency: from the webhook's 200 to the signed `alarm.raised` at a
//!    receiver on 127.0.0.1, readings paced at `--rate` per second, every
//!    other one of a station raising (target p99 ≤ 1 s at 1,000/s).
//! 3. Silence: `--silent` devices with a silence rule each fall silent
//!    together; the server's CPU while nothing is due (target < 1% of a
//!    core) and how long after the rule's time they are all raised (target
//!    within 10 s).

use crate::closed_loop::load;
use crate::dataset::{self, Station};
use crate::run::Server;
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The sealing key of the latency scenario's subscription.
const SECRET_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
/// The silence rule's time in the silence scenario, seconds.
const SILENT_FOR: i64 = 20;

/// Arguments of `alarms`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seconds of load per ingest measurement (each side measured twice)
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Clients posting at once
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Readings per second of the latency scenario
    #[arg(long, default_value_t = 1000)]
    rate: u64,
    /// Seconds of the latency scenario
    #[arg(long, default_value_t = 10)]
    latency_seconds: u64,
    /// Devices with a silence rule in the silence scenario (0: skip it)
    #[arg(long, default_value_t = 10_000)]
    silent: usize,
    /// Where the databases are kept
    #[arg(long, default_value = "bench/data")]
    data: PathBuf,
    /// Where the JSON results go
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
    /// Loopback ports of the servers (this and the next two)
    #[arg(long, default_value_t = 18460)]
    port: u16,
}

/// What the scenario measured.
#[derive(Debug, Serialize)]
pub struct Alarms {
    /// Webhook ingest without rules, readings/s (mean of two runs).
    pub ingest_none_rps: f64,
    /// Webhook ingest with 5 rules on every device, readings/s (mean of two).
    pub ingest_rules_rps: f64,
    /// `ingest_rules_rps / ingest_none_rps` (target ≥ 0.9).
    pub ratio: f64,
    /// Transitions the ruled server recorded during its runs.
    pub transitions: u64,
    /// Readings/s offered in the latency scenario.
    pub rate: u64,
    /// `alarm.raised` deliveries timed.
    pub raised: usize,
    /// From the webhook's 200 to the delivery's arrival, ms.
    pub latency_p50_ms: f64,
    pub latency_p99_ms: f64,
    pub latency_max_ms: f64,
    /// Devices of the silence scenario.
    pub silent_devices: usize,
    /// The server's CPU while nothing is due, % of one core.
    pub idle_cpu_percent: f64,
    /// Seconds after the rules' time until every device was raised.
    pub all_raised_after_s: f64,
}

/// Runs `sensorhub ARGS --database DB`.
fn sensorhub(exe: &Path, db: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new(exe)
        .args(args)
        .arg("--database")
        .arg(db)
        .env("SENSORHUB_LOG", "warn")
        .env("SENSORHUB_SECRET_KEY", SECRET_KEY)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("sensorhub {args:?}: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Five rules of station `s`: bands and a rise on its first sensor after
/// the battery, bands below on its battery, silence of the device and of a sensor.
fn rules(s: &Station) -> serde_json::Value {
    let ids = s.sensor_ids();
    let (batt, watched) = (&ids[0], &ids[1]);
    serde_json::json!([
        {"name": "bands", "sensor": watched, "direction": "above", "deadband": 2,
         "levels": [{"name": "L4", "at": 60}, {"name": "L3", "at": 90}, {"name": "L2", "at": 160}, {"name": "L1", "at": 210}]},
        {"name": "rising", "sensor": watched, "rise": 40, "within": "30m"},
        {"name": "battery", "sensor": batt, "direction": "below", "levels": [{"name": "low", "at": 20}, {"name": "flat", "at": 10}]},
        {"name": "silent", "no_data_for": "30m"},
        {"name": "quiet-sensor", "sensor": watched, "no_data_for": "1h"}
    ])
}

/// The fleet's provisioning, with `rules` on every device when asked.
fn provision(stations: &[Station], with_rules: bool) -> serde_json::Value {
    let mut doc = dataset::provision(stations);
    if with_rules && let Some(devices) = doc["devices"].as_array_mut() {
        for (d, s) in devices.iter_mut().zip(stations) {
            d["alarms"] = rules(s);
        }
    }
    doc
}

/// Reading `k` of the fleet: station `k % n` at second `base + k / n`, its
/// watched value moving through the bands (and its battery steady).
fn envelope(stations: &[Station], base: i64, k: u64, high: Option<bool>) -> (String, i64, String) {
    let s = &stations[(k % stations.len() as u64) as usize];
    let second = base + (k / stations.len() as u64) as i64;
    let ids = s.sensor_ids();
    let watched = match high {
        Some(true) => 100.0,
        Some(false) => 20.0,
        None => 40.0 + ((k / stations.len() as u64) % 200) as f64,
    };
    let mut data = serde_json::Map::new();
    for (i, id) in ids.iter().enumerate() {
        let v = match i {
            0 => 90.0,
            1 => watched,
            _ => (k % 50) as f64 + 0.125,
        };
        data.insert(id.clone(), serde_json::json!(v));
    }
    let ts = jiff::Timestamp::from_second(second).map_or_else(|_| String::new(), |t| t.to_string());
    let body =
        serde_json::json!({"event": "sensor-data", "device_id": s.id, "timestamp": ts, "data": data}).to_string();
    (body, second, s.id.clone())
}

/// Posts `body` to the webhook; the time its 200 came.
async fn post(port: u16, body: &str) -> Result<Instant, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| e.to_string())?;
    let request = format!(
        "POST /external/v1/webhook/sensor-data HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-API-KEY: {}\r\nContent-Length: {}\r\n\r\n{body}",
        dataset::BENCH_WEBHOOK_KEY,
        body.len()
    );
    s.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).await.map_err(|e| e.to_string())?;
    if answer.get(9..12) != Some(b"200") {
        return Err(format!("the webhook refused: {}", String::from_utf8_lossy(&answer)));
    }
    Ok(Instant::now())
}

/// A server over `db` on `port`, ingesting, delivering with the key.
fn serve(bin: &Path, db: &Path, port: u16) -> Result<Server, String> {
    Server::start(
        Command::new(bin)
            .args(["serve", "--rate-limit", "off", "--webhook-mode", "ingest", "--webhook-allow-private"])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .arg("--database")
            .arg(db)
            .env("SENSORHUB_LOG", "warn")
            .env("SENSORHUB_SECRET_KEY", SECRET_KEY),
        port,
    )
}

/// A fresh database of `name` provisioned with `doc`.
fn database(bin: &Path, dir: &Path, name: &str, doc: &serde_json::Value) -> Result<PathBuf, String> {
    let db = dir.join(format!("{name}.db"));
    let file = dir.join(format!("{name}.json"));
    std::fs::write(&file, doc.to_string()).map_err(|e| e.to_string())?;
    sensorhub(bin, &db, &["apply", file.to_str().ok_or("path")?])?;
    Ok(db)
}

/// Runs the scenario and writes its figures.
pub fn run(args: Args) -> Result<(Alarms, PathBuf), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin = exe.parent().ok_or("no binary directory")?.join("sensorhub");
    let dir = args.data.join("alarms");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let stations: Arc<Vec<Station>> = Arc::new(dataset::stations(dataset::SMALL, 42));
    let plain = database(&bin, &dir, "plain", &provision(&stations, false))?;
    let ruled = database(&bin, &dir, "ruled", &provision(&stations, true))?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;

    // 1. Ingest, alternating the two servers.
    let base = jiff::Timestamp::now().as_second() - 3000;
    let (mut none, mut with) = (Vec::new(), Vec::new());
    for round in 0..2u64 {
        // Each round's readings come after the last round's, on both servers.
        let first = round * args.seconds * 20_000;
        for (db, port, figures) in [(&plain, args.port, &mut none), (&ruled, args.port + 1, &mut with)] {
            let _server = serve(&bin, db, port)?;
            let st = stations.clone();
            let rps = rt.block_on(load(args.clients, args.seconds, first, move |k| {
                let (body, _, _) = envelope(&st, base, k, None);
                async move { post(port, &body).await.map(|_| ()) }
            }))?;
            figures.push(rps);
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let (ingest_none_rps, ingest_rules_rps) = (mean(&none), mean(&with));
    let transitions = count_transitions(&bin, &ruled, &stations)?;

    // 2. Latency, on the ruled database, delivering to a receiver here.
    let (url, arrivals) = rt.block_on(receiver())?;
    sensorhub(
        &bin,
        &ruled,
        &[
            "subscription",
            "add",
            "--account",
            dataset::BENCH_USER.0,
            "--url",
            &url,
            "--allow-http",
            "--events",
            "alarms",
        ],
    )?;
    let latencies = {
        let _server = serve(&bin, &ruled, args.port + 2)?;
        rt.block_on(latency(args.port + 2, stations.clone(), args.rate, args.latency_seconds, arrivals))?
    };
    let pct = |p: f64| latencies.get(((latencies.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(0.0);

    // 3. Silence.
    let (idle_cpu_percent, all_raised_after_s) =
        if args.silent > 0 { silence(&bin, &dir, args.silent, args.port + 2)? } else { (0.0, 0.0) };

    let result = Alarms {
        ingest_none_rps,
        ingest_rules_rps,
        ratio: ingest_rules_rps / ingest_none_rps.max(1e-9),
        transitions,
        rate: args.rate,
        raised: latencies.len(),
        latency_p50_ms: pct(0.5),
        latency_p99_ms: pct(0.99),
        latency_max_ms: latencies.last().copied().unwrap_or(0.0),
        silent_devices: args.silent,
        idle_cpu_percent,
        all_raised_after_s,
    };
    std::fs::create_dir_all(&args.out).map_err(|e| e.to_string())?;
    let date = jiff::Timestamp::now().strftime("%Y-%m-%dT%H%M%SZ").to_string();
    let path = args.out.join(format!("{date}-alarms.json"));
    std::fs::write(&path, serde_json::to_string_pretty(&result).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    Ok((result, path))
}

/// How many transitions the database recorded: the events of every station, read through a server.
fn count_transitions(bin: &Path, db: &Path, stations: &[Station]) -> Result<u64, String> {
    let port = 18469;
    let _server = serve(bin, db, port)?;
    let mut n = 0;
    let start = jiff::Timestamp::from_second(0).map_err(|e| e.to_string())?;
    for s in stations {
        let path = format!("/external/v1/{}/devices/{}/alarms/events?start={start}", dataset::BENCH_KEY, s.id);
        let body = crate::run::get(port, &path, None)?;
        let text = String::from_utf8_lossy(&body);
        n += text.matches("\"transition\"").count() as u64;
    }
    Ok(n)
}

/// The receiver of alarm deliveries: when each `alarm.raised` arrived, by device and reading time.
type Arrivals = Arc<Mutex<HashMap<(String, String), Instant>>>;

async fn receiver() -> Result<(String, Arrivals), String> {
    let arrivals: Arrivals = Arc::default();
    let seen = arrivals.clone();
    let app = axum::Router::new().route(
        "/alarms",
        axum::routing::post(move |body: axum::body::Bytes| {
            let now = Instant::now();
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body)
                && v["event"] == "alarm.raised"
                && let (Some(d), Some(t)) = (v["device_id"].as_str(), v["timestamp"].as_str())
                && let Ok(mut map) = seen.lock()
            {
                map.entry((d.to_owned(), t.to_owned())).or_insert(now);
            }
            async { axum::http::StatusCode::NO_CONTENT }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((format!("http://{addr}/alarms"), arrivals))
}

/// A raising reading (device and time) and when its 200 came.
type Answered = ((String, String), Instant);

/// Posts readings at `rate` per second for `seconds`, each station's going
/// high and low in turn (each high one raises); the latencies (ms, sorted)
/// from each raising reading's 200 to its delivery's arrival.
async fn latency(
    port: u16,
    stations: Arc<Vec<Station>>,
    rate: u64,
    seconds: u64,
    arrivals: Arrivals,
) -> Result<Vec<f64>, String> {
    let base = jiff::Timestamp::now().as_second() - 1200;
    let answered: Arc<Mutex<Vec<Answered>>> = Arc::default();
    let total = rate * seconds;
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(total as usize);
    for k in 0..total {
        let due = started + Duration::from_secs_f64(k as f64 / rate as f64);
        tokio::time::sleep_until(due.into()).await;
        let high = (k / stations.len() as u64).is_multiple_of(2);
        let (body, second, device) = envelope(&stations, base, k, Some(high));
        let answered = answered.clone();
        tasks.push(tokio::spawn(async move {
            let at = post(port, &body).await?;
            if high && let Ok(mut a) = answered.lock() {
                let ts = jiff::Timestamp::from_second(second).map_or_else(|_| String::new(), |t| t.to_string());
                a.push(((device, ts), at));
            }
            Ok::<_, String>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    // Deliveries of the last readings may still be on their way.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let answered = answered.lock().map_err(|e| e.to_string())?.clone();
    let arrived = arrivals.lock().map_err(|e| e.to_string())?.clone();
    let mut out: Vec<f64> = answered
        .iter()
        .filter_map(|(key, at)| arrived.get(key).map(|got| got.saturating_duration_since(*at).as_secs_f64() * 1000.0))
        .collect();
    out.sort_by(f64::total_cmp);
    Ok(out)
}

/// `n` devices with a silence rule each, one reading each imported before
/// the server starts; its CPU while nothing is due, and how long after the
/// rule's time (from the start) every device is raised.
fn silence(bin: &Path, dir: &Path, n: usize, port: u16) -> Result<(f64, f64), String> {
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
    let server = serve(bin, &db, port)?;
    let started = Instant::now();
    let cpu = |pid: u32| -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
        let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
        (ticks(11) + ticks(12)) / 100.0
    };
    // Let the start settle, then measure 10 s of nothing due.
    std::thread::sleep(Duration::from_secs(3));
    let (before, at) = (cpu(server.pid()), Instant::now());
    std::thread::sleep(Duration::from_secs(10));
    let idle = (cpu(server.pid()) - before) / at.elapsed().as_secs_f64() * 100.0;
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

/// The figures as one paragraph.
pub fn report(r: &Alarms) -> String {
    format!(
        "webhook ingest with 5 alarm rules on every device: {:.0} readings/s against {:.0} without ({:.2}x; target >= 0.9; {} transitions recorded); webhook 200 to signed alarm.raised at {} readings/s: {} timed, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (target p99 <= 1000 ms); {} devices falling silent: {:.2}% of a core while nothing is due (target < 1%), all raised {:.1} s after their time (target <= 10 s)",
        r.ingest_rules_rps,
        r.ingest_none_rps,
        r.ratio,
        r.transitions,
        r.rate,
        r.raised,
        r.latency_p50_ms,
        r.latency_p99_ms,
        r.latency_max_ms,
        r.silent_devices,
        r.idle_cpu_percent,
        r.all_raised_after_s
    )
}
