//! `sensorhub-bench alarms`: what alarms cost and how fast they go out.
//!
//! 1. Ingest: webhook POSTs of the small fleet's readings (each station in
//!    turn, current times, values that move through the bands) on two
//!    release servers, one without rules and one with 5 rules on every
//!    device (two level rules, a rate rule, two silence rules), measured
//!    alternately; the ratio (target ≥ 0.9), and each server's CPU time a
//!    reading (steadier than the ratio when the bench's own clients share
//!    the two cores). Then the same for MQTT: QoS 1
//!    publishes of the same readings through a Mosquitto of the bench's own,
//!    as fast as the broker takes them, on two fresh databases.
//! 2. Latency: from the webhook's 200 to the signed `alarm.raised` at a
//!    receiver on 127.0.0.1, readings paced at `--rate` per second, every
//!    other one of a station raising (target p99 ≤ 1 s at 1,000/s).
//! 3. Silence: `--silent` devices with a silence rule each fall silent
//!    together; the server's CPU while nothing is due (target < 1% of a
//!    core) and how long after the rule's time they are all raised (target
//!    within 10 s).

mod ingest;
mod latency;
mod silence;

use crate::dataset::{self, Station};
// The sealing key and the command runner of the deliveries' bench.
use crate::hooks::{SECRET_KEY, sensorhub};
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
    /// Only the MQTT ingest comparison (to profile it), no other phase
    #[arg(long)]
    mqtt_only: bool,
    /// Where the databases are kept
    #[arg(long, default_value = "bench/data")]
    data: PathBuf,
    /// Where the JSON results go
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
    /// Loopback ports of the servers and the broker (this and the next three)
    #[arg(long, default_value_t = 18460)]
    port: u16,
}

/// What the scenario measured.
#[derive(Debug, serde::Serialize)]
pub struct Alarms {
    /// Webhook ingest without rules, readings/s (mean of two runs).
    pub ingest_none_rps: f64,
    /// Webhook ingest with 5 rules on every device, readings/s (mean of two).
    pub ingest_rules_rps: f64,
    /// `ingest_rules_rps / ingest_none_rps` (target ≥ 0.9).
    pub ratio: f64,
    /// The webhook server's CPU per reading without rules and with, µs.
    pub ingest_none_cpu_us: f64,
    pub ingest_rules_cpu_us: f64,
    /// MQTT ingest without rules, readings/s (mean of two runs).
    pub mqtt_none_rps: f64,
    /// MQTT ingest with 5 rules on every device, readings/s (mean of two).
    pub mqtt_rules_rps: f64,
    /// `mqtt_rules_rps / mqtt_none_rps` (target ≥ 0.9).
    pub mqtt_ratio: f64,
    /// The MQTT server's CPU per reading without rules and with, µs.
    pub mqtt_none_cpu_us: f64,
    pub mqtt_rules_cpu_us: f64,
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
    // Ingest: a national network of 10,000 stations. Every reading must be
    // recent enough to move its rules (within the backfill horizon) and not
    // in the future, and each station takes at most one a second; with this
    // many stations a round's readings stay a few per station, as when
    // stations report every minute or so (few stations sending many seconds
    // each in one burst is another shape: see RESULTS.md).
    let fleet = dataset::Scale { name: "alarms", devices: 10_000, days: 1 };
    let stations: Arc<Vec<Station>> = Arc::new(dataset::stations(fleet, 42));
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;

    // 1. Ingest, alternating the two servers, by webhook, then by MQTT on fresh databases.
    let base = jiff::Timestamp::now().as_second() - 3000;
    let ingest = ingest::Ingest { bin: &bin, dir: &dir, stations: stations.clone(), base, rt: &rt };
    let (webhook_none, webhook_rules, transitions) = if args.mqtt_only {
        (ingest::Side::default(), ingest::Side::default(), 0)
    } else {
        let plain = database(&bin, &dir, "plain", &provision(&stations, false))?;
        let ruled = database(&bin, &dir, "ruled", &provision(&stations, true))?;
        let (none, rules) = ingest.webhook(&plain, &ruled, args.port, args.clients, args.seconds)?;
        (none, rules, ingest::count_transitions(&bin, &ruled, &stations, base - 60, args.port + 2)?)
    };
    let (quiet, noisy) = (
        database(&bin, &dir, "mqtt-plain", &provision(&stations, false))?,
        database(&bin, &dir, "mqtt-ruled", &provision(&stations, true))?,
    );
    let (mqtt_none, mqtt_rules) = ingest.mqtt(&quiet, &noisy, args.port, args.seconds)?;
    let ingest_figures = Alarms {
        ingest_none_rps: webhook_none.rps,
        ingest_rules_rps: webhook_rules.rps,
        ratio: webhook_rules.rps / webhook_none.rps.max(1e-9),
        ingest_none_cpu_us: webhook_none.cpu_us,
        ingest_rules_cpu_us: webhook_rules.cpu_us,
        mqtt_none_rps: mqtt_none.rps,
        mqtt_rules_rps: mqtt_rules.rps,
        mqtt_ratio: mqtt_rules.rps / mqtt_none.rps.max(1e-9),
        mqtt_none_cpu_us: mqtt_none.cpu_us,
        mqtt_rules_cpu_us: mqtt_rules.cpu_us,
        transitions,
        ..Alarms::none(args.rate)
    };
    if args.mqtt_only {
        return write(&args.out, ingest_figures);
    }

    // 2. Latency: the medium fleet (501 stations) on a fresh ruled database,
    // delivering to a receiver here.
    let medium: Arc<Vec<Station>> = Arc::new(dataset::stations(dataset::MEDIUM, 42));
    let timed = database(&bin, &dir, "latency", &provision(&medium, true))?;
    let (url, arrivals) = rt.block_on(latency::receiver())?;
    let user = dataset::BENCH_USER.0;
    let add = ["subscription", "add", "--account", user, "--url", &url, "--allow-http", "--events", "alarms"];
    sensorhub(&bin, &timed, &add)?;
    let latencies = {
        let _server = ingest::serve(&bin, &timed, args.port + 2)?;
        rt.block_on(latency::latency(args.port + 2, medium, args.rate, args.latency_seconds, arrivals))?
    };
    let pct = |p: f64| latencies.get(((latencies.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(0.0);

    // 3. Silence.
    let (idle_cpu_percent, all_raised_after_s) =
        if args.silent > 0 { silence::silence(&bin, &dir, args.silent, args.port + 2)? } else { (0.0, 0.0) };

    let result = Alarms {
        raised: latencies.len(),
        latency_p50_ms: pct(0.5),
        latency_p99_ms: pct(0.99),
        latency_max_ms: latencies.last().copied().unwrap_or(0.0),
        silent_devices: args.silent,
        idle_cpu_percent,
        all_raised_after_s,
        ..ingest_figures
    };
    write(&args.out, result)
}

impl Alarms {
    /// Nothing measured yet.
    fn none(rate: u64) -> Self {
        Alarms {
            ingest_none_rps: 0.0,
            ingest_rules_rps: 0.0,
            ratio: 0.0,
            ingest_none_cpu_us: 0.0,
            ingest_rules_cpu_us: 0.0,
            mqtt_none_rps: 0.0,
            mqtt_rules_rps: 0.0,
            mqtt_ratio: 0.0,
            mqtt_none_cpu_us: 0.0,
            mqtt_rules_cpu_us: 0.0,
            transitions: 0,
            rate,
            raised: 0,
            latency_p50_ms: 0.0,
            latency_p99_ms: 0.0,
            latency_max_ms: 0.0,
            silent_devices: 0,
            idle_cpu_percent: 0.0,
            all_raised_after_s: 0.0,
        }
    }
}

/// Writes `result` as JSON under `out`; returns it with the file's path.
fn write(out: &Path, result: Alarms) -> Result<(Alarms, PathBuf), String> {
    std::fs::create_dir_all(out).map_err(|e| e.to_string())?;
    let date = jiff::Timestamp::now().strftime("%Y-%m-%dT%H%M%SZ").to_string();
    let path = out.join(format!("{date}-alarms.json"));
    std::fs::write(&path, serde_json::to_string_pretty(&result).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    Ok((result, path))
}

/// How much more `with` is than `without`, percent.
fn more(with: f64, without: f64) -> f64 {
    (with / without.max(1e-9) - 1.0) * 100.0
}

/// The figures as one paragraph.
pub fn report(r: &Alarms) -> String {
    format!(
        "webhook ingest with 5 alarm rules on every device: {:.0} readings/s against {:.0} without ({:.2}x; target >= 0.9; {} transitions recorded; server CPU {:.1} us a reading against {:.1}, {:+.0}%); MQTT ingest: {:.0} readings/s against {:.0} ({:.2}x; target >= 0.9; server CPU {:.1} us a reading against {:.1}, {:+.0}%); webhook 200 to signed alarm.raised at {} readings/s: {} timed, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (target p99 <= 1000 ms); {} devices falling silent: {:.2}% of a core while nothing is due (target < 1%), all raised {:.1} s after their time (target <= 10 s)",
        r.ingest_rules_rps,
        r.ingest_none_rps,
        r.ratio,
        r.transitions,
        r.ingest_rules_cpu_us,
        r.ingest_none_cpu_us,
        more(r.ingest_rules_cpu_us, r.ingest_none_cpu_us),
        r.mqtt_rules_rps,
        r.mqtt_none_rps,
        r.mqtt_ratio,
        r.mqtt_rules_cpu_us,
        r.mqtt_none_cpu_us,
        more(r.mqtt_rules_cpu_us, r.mqtt_none_cpu_us),
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
