//! The scenarios: a release `sensorhub` on loopback, loaded by `wrk` for a
//! fixed time at fixed concurrency, with the server's RSS read from /proc.

use crate::dataset::{self, Scale};
use crate::wrk::{self, WrkResult};
use serde::Serialize;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

mod report;
mod server;
mod store;
pub use report::{save, table};
pub(crate) use server::{Server, basic, cpu_seconds_of, get};
pub(crate) use store::{generate_profile, import_into, prepare};
use store::{prepare_as, sh};

/// Arguments of `run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Store for the ingest (S5) and scale (S6) scenarios: small, medium or large
    /// (with small, S6 is skipped: it compares the small store with a bigger one)
    #[arg(long, default_value = "medium")]
    scale: String,
    /// Seed of the generated data
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Seconds each load scenario runs
    #[arg(long, default_value_t = 10)]
    duration: u64,
    /// Where datasets and stores are kept
    #[arg(long, default_value = "bench/data")]
    data: PathBuf,
    /// Where the JSON results go
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
    /// First of the two loopback ports used (S6 runs two servers side by side)
    #[arg(long, default_value_t = 18400)]
    port: u16,
    /// Data shapes to run the storage scenarios on (bytes per value, import,
    /// S1, S2 for each): a comma-separated list of regular, field,
    /// irregular, raw, sparse, wide, flatline, or `all`; none by default
    #[arg(long, default_value = "")]
    profiles: String,
    /// Days of data per profile station (S2 reads the last 30)
    #[arg(long, default_value_t = 30)]
    profile_days: i64,
    /// Run on PostgreSQL: a server URL whose user may create databases
    /// (e.g. postgres://postgres@127.0.0.1:5432/test); each store is a new
    /// database, dropped at the end. S1 also runs on SQLite, for comparison.
    #[arg(long)]
    database: Option<String>,
}

impl Args {
    /// Where the JSON results go.
    pub fn out_dir(&self) -> PathBuf {
        self.out.clone()
    }
}

/// One load scenario's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Load {
    /// What it measures.
    pub what: String,
    /// Concurrent connections.
    pub connections: u32,
    /// Figures from wrk.
    #[serde(flatten)]
    pub wrk: WrkResult,
    /// Server peak RSS during the scenario, MiB.
    pub peak_rss_mib: f64,
}

/// The ingest scenario's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Ingest {
    /// Store scale.
    pub scale: String,
    /// Values imported.
    pub values: u64,
    /// Wall time of `sensorhub import`, seconds.
    pub seconds: f64,
    /// Values per second.
    pub values_per_s: f64,
    /// Database file size after import.
    pub bytes: u64,
    /// Bytes on disk per stored value.
    pub bytes_per_value: f64,
}

/// One data shape's storage figures.
#[derive(Debug, Clone, Serialize)]
pub struct ProfileResult {
    /// Profile name.
    pub name: String,
    /// Its import (values, time, bytes on disk).
    pub ingest: Ingest,
    /// S1 on its first device: the last day.
    pub s1: WrkResult,
    /// S2 on its first device: the last 30 days.
    pub s2: WrkResult,
}

/// What durability costs (S9), SQLite only.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Durability {
    /// Webhook ingest requests/s with synchronous=FULL.
    pub ingest_full: f64,
    /// Webhook ingest requests/s with synchronous=NORMAL.
    pub ingest_normal: f64,
    /// Import values/s of the small dataset with synchronous=FULL.
    pub import_full: f64,
    /// Import values/s of the small dataset with synchronous=NORMAL.
    pub import_normal: f64,
}

/// A target and whether this run met it.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    /// Which.
    pub name: String,
    /// Measured.
    pub value: f64,
    /// Limit.
    pub limit: String,
    /// Met or not.
    pub met: bool,
}

/// A whole run.
#[derive(Debug, Serialize)]
pub struct Results {
    /// UTC time of the run.
    pub date: String,
    /// `git rev-parse HEAD`.
    pub commit: String,
    /// CPUs, model and memory.
    pub machine: String,
    /// Options.
    pub scale: String,
    /// `sqlite` or `postgres`.
    pub backend: String,
    /// Seed.
    pub seed: u64,
    /// Seconds per load scenario.
    pub duration_s: u64,
    /// Server RSS at rest, MiB.
    pub idle_rss_mib: f64,
    /// S1-S4, S7 (and S6's second S1).
    pub loads: Vec<(String, Load)>,
    /// S5.
    pub ingest: Ingest,
    /// S6: S1's p50 on the small store and on the `scale` store, ms.
    pub scale_p50_ms: Option<(f64, f64)>,
    /// S9: ingest and import with synchronous FULL and NORMAL (SQLite).
    pub durability: Option<Durability>,
    /// The storage scenarios of each data shape (`--profiles`).
    pub profiles: Vec<ProfileResult>,
    /// The targets.
    pub targets: Vec<Target>,
}

/// Slow connections held during S8.
const SLOW_CONNECTIONS: usize = 2000;

/// The scenario URLs on the generated data.
pub(crate) const DAY: &str = "start=2025-12-01T00:00:00Z&end=2025-12-01T23:59:59Z";
const MONTH: &str = "start=2025-12-01T00:00:00Z&end=2025-12-30T23:59:59Z";
const YEAR: &str = "start=2025-01-01T00:00:00Z&end=2025-12-31T23:59:59Z";

fn load(
    server: &Server,
    what: &str,
    path: &str,
    auth: Option<&str>,
    connections: u32,
    secs: u64,
) -> Result<Load, String> {
    load_with(server, what, path, &wrk::auth_header(auth), None, connections, secs)
}

/// [`load`], with the requests made by a wrk Lua `script`.
fn load_with(
    server: &Server,
    what: &str,
    path: &str,
    headers: &[String],
    script: Option<&Path>,
    connections: u32,
    secs: u64,
) -> Result<Load, String> {
    let url = format!("http://127.0.0.1:{}{path}", server.port);
    // A second of warm-up (connections, caches, the first Argon2 check), not counted.
    wrk::run_with(&url, headers, script, connections, 1)?;
    server.reset_peak();
    let wrk = wrk::run_with(&url, headers, script, connections, secs)?;
    let peak = server.rss("VmHWM:");
    eprintln!("  {what}: {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms", wrk.requests_per_s, wrk.p50_ms, wrk.p99_ms);
    Ok(Load { what: what.into(), connections, wrk, peak_rss_mib: peak })
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("model name")?.split(':').nth(1).map(|m| m.trim().to_owned()))
        .unwrap_or_else(|| "unknown CPU".into());
    let mem = fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:")?.trim().strip_suffix("kB")?.trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0 / 1024.0);
    format!("{cpus} CPUs ({model}), {mem:.0} GiB")
}

/// Runs every scenario and writes the results.
pub fn run(args: Args) -> Result<Results, String> {
    let scale = Scale::named(&args.scale).ok_or(format!("unknown scale {:?}", args.scale))?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin_dir = exe.parent().ok_or("no binary directory")?;
    let sensorhub = bin_dir.join("sensorhub");
    let floor = bin_dir.join("sensorhub-floor");
    let secs = args.duration;

    let pg = args.database.as_deref();
    let small = prepare(&sensorhub, &args.data, dataset::SMALL, args.seed, pg)?;
    let big = if scale == dataset::SMALL { None } else { Some(prepare(&sensorhub, &args.data, scale, args.seed, pg)?) };
    let port = args.port;
    let serve_on = |db: &str, port: u16| {
        let mut cmd = Command::new(&sensorhub);
        cmd.args(["serve", "--rate-limit", "off", "--listen", &format!("127.0.0.1:{port}"), "--database"])
            .arg(db)
            .env("SENSORHUB_LOG", "warn");
        Server::start(&mut cmd, port)
    };
    let serve = |db: &str| serve_on(db, port);

    let bench_auth = basic(dataset::BENCH_USER.0, dataset::BENCH_USER.1);
    let fifty_auth = basic(dataset::FIFTY_USER.0, dataset::FIFTY_USER.1);
    let s1_path = format!("/external/v1/devices/{}/data?{DAY}", dataset::REF_DEVICE);
    let mut loads = Vec::new();
    let server = serve(&small.db)?;
    std::thread::sleep(Duration::from_millis(300));
    let idle = server.rss("VmRSS:");
    eprintln!("server idle RSS {idle:.1} MiB; scenarios of {secs} s each");
    // S7 first, on a fresh process: its peak against the idle RSS.
    let s7_path = format!("/external/v1/{}/devices/{}/data?{YEAR}", dataset::BENCH_KEY, dataset::REF_DEVICE);
    server.reset_peak();
    let url = format!("http://127.0.0.1:{port}{s7_path}");
    let s7 = wrk::run(&url, None, 8, secs.max(5))?;
    let s7_peak = server.rss("VmHWM:");
    eprintln!("  data-365d x 8 clients: {:.1} req/s, peak RSS {s7_peak:.1} MiB", s7.requests_per_s);
    let s7 = Load { what: "data-365d x 8 clients (memory)".into(), connections: 8, wrk: s7, peak_rss_mib: s7_peak };
    let s1_body = get(port, &s1_path, Some(&bench_auth))?;
    loads.push(("S1".into(), load(&server, "data-1d (1,440 readings, Basic)", &s1_path, Some(&bench_auth), 16, secs)?));
    // Issue 13: S1 compressed, S1 as CSV, a year of daily means, latest values.
    for encoding in ["zstd", "gzip"] {
        let headers = [wrk::auth_header(Some(&bench_auth)), vec![format!("Accept-Encoding: {encoding}")]].concat();
        let what = format!("data-1d, Accept-Encoding: {encoding}");
        loads.push((format!("S1-{encoding}"), load_with(&server, &what, &s1_path, &headers, None, 16, secs)?));
    }
    let csv_path = format!("{s1_path}&format=csv");
    loads.push(("S10".into(), load(&server, "csv-1d (1,440 rows, Basic)", &csv_path, Some(&bench_auth), 16, secs)?));
    let latest_path = format!("/external/v1/devices/{}/latest", dataset::REF_DEVICE);
    loads.push((
        "latest".into(),
        load(&server, "latest (4 sensors, Basic)", &latest_path, Some(&bench_auth), 16, secs)?,
    ));
    let daily_path = format!("{s7_path}&interval=1d&agg=mean");
    loads.push(("S8-agg".into(), load(&server, "year-daily (365 daily means, key)", &daily_path, None, 8, secs)?));
    // S8: S1 again while 2,000 slow connections are held (re-opened as they are shed).
    let hostile = crate::hostile::Slowloris::hold(port, SLOW_CONNECTIONS)?;
    let what = "data-1d while 2,000 slowloris connections are held";
    loads.push(("S8".into(), load(&server, what, &s1_path, Some(&bench_auth), 16, secs)?));
    eprintln!("  slow connections shed and re-opened during S8: {}", hostile.reopened());
    drop(hostile);
    let s2_path = format!("/external/v1/{}/devices/{}/data?{MONTH}", dataset::BENCH_KEY, dataset::REF_DEVICE);
    loads.push(("S2".into(), load(&server, "data-30d (43,200 readings, public key)", &s2_path, None, 4, secs)?));
    loads.push((
        "S3".into(),
        load(&server, "devices (50, Basic)", "/external/v1/devices", Some(&fifty_auth), 16, secs)?,
    ));
    let s3p = format!("/external/v1/{}/devices", dataset::FIFTY_KEY);
    loads.push(("S3-key".into(), load(&server, "devices (50, public key)", &s3p, None, 16, secs)?));
    loads.push(("S7".into(), s7));
    drop(server);

    let body_file = args.data.join("s1-body.json");
    fs::write(&body_file, &s1_body).map_err(|e| e.to_string())?;
    let floor_server = Server::start(
        Command::new(&floor).arg("--listen").arg(format!("127.0.0.1:{port}")).arg("--body").arg(&body_file),
        port,
    )?;
    loads.push((
        "S4".into(),
        load(&floor_server, "floor (S1's bytes, pre-rendered)", &s1_path, Some(&bench_auth), 16, secs)?,
    ));
    drop(floor_server);

    // S9: what durability costs. Webhook ingest (one reading of two values
    // per POST, 8 connections) and the small import, with every commit on
    // disk (synchronous=FULL, the default) and without (NORMAL).
    let mut durability = None;
    if pg.is_none() {
        let script = args.data.join("ingest.lua");
        wrk::write_ingest_script(&script)?;
        let mut rates = Vec::new();
        for (name, options) in [("S9", ""), ("S9-normal", "?synchronous=normal")] {
            let store = prepare_as(&sensorhub, &args.data, dataset::SMALL, args.seed, None, "ingest.db", options)?;
            let mut cmd = Command::new(&sensorhub);
            cmd.args(["serve", "--rate-limit", "off", "--webhook-mode", "ingest"])
                .args(["--listen", &format!("127.0.0.1:{port}"), "--database"])
                .arg(format!("{}{options}", store.db))
                .env("SENSORHUB_LOG", "warn");
            let server = Server::start(&mut cmd, port)?;
            let sync = if options.is_empty() { "FULL" } else { "NORMAL" };
            let what = format!("webhook ingest, synchronous={sync}");
            let l = load_with(&server, &what, "/external/v1/webhook/sensor-data", &[], Some(&script), 8, secs)?;
            rates.push((l.wrk.requests_per_s, store.ingest.values_per_s));
            eprintln!("  import with synchronous={sync}: {:.0} values/s", store.ingest.values_per_s);
            loads.push((name.into(), l));
        }
        if let [full, normal] = rates[..] {
            durability = Some(Durability {
                ingest_full: full.0,
                ingest_normal: normal.0,
                import_full: full.1,
                import_normal: normal.1,
            });
        }
    }

    // On PostgreSQL, S1 again on the SQLite small store: the backends compared in one run.
    if pg.is_some() {
        let sqlite = prepare(&sensorhub, &args.data, dataset::SMALL, args.seed, None)?;
        let server = serve(&sqlite.db)?;
        let what = "data-1d (1,440 readings, Basic) on SQLite";
        loads.push(("S1-sqlite".into(), load(&server, what, &s1_path, Some(&bench_auth), 16, secs)?));
        let what = "data-30d (43,200 readings, public key) on SQLite";
        loads.push(("S2-sqlite".into(), load(&server, what, &s2_path, None, 4, secs)?));
        let what = "data-365d x 8 clients on SQLite";
        loads.push(("S7-sqlite".into(), load(&server, what, &s7_path, None, 8, secs.max(5))?));
    }

    // S6: the small and the big store side by side, measured in turns so
    // that drift on a noisy machine hits both alike.
    let scale_p50 = match &big {
        Some(store) => {
            let small_server = serve_on(&small.db, port)?;
            let big_server = serve_on(&store.db, port + 1)?;
            let (mut small_p50, mut big_p50) = (Vec::new(), Vec::new());
            let mut last = None;
            for _ in 0..2 {
                let what = "data-1d on the small store (S6)";
                small_p50.push(load(&small_server, what, &s1_path, Some(&bench_auth), 16, secs)?.wrk.p50_ms);
                let what = format!("data-1d on the {} store (S6)", scale.name);
                let l = load(&big_server, &what, &s1_path, Some(&bench_auth), 16, secs)?;
                big_p50.push(l.wrk.p50_ms);
                last = Some(l);
            }
            if let Some(l) = last {
                loads.push(("S6".into(), l));
            }
            let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
            Some((mean(&small_p50), mean(&big_p50)))
        }
        None => None,
    };
    let profiles = run_profiles(&args, &sensorhub, pg)?;
    let ingest = big.map_or(small.ingest, |b| b.ingest);
    let find = |k: &str| loads.iter().find(|(n, _)| n == k).map(|(_, l)| l.clone());
    let (s1, s3, s3k, s4, s7) = (find("S1"), find("S3"), find("S3-key"), find("S4"), find("S7"));
    let mut targets = Vec::new();
    let mut target = |name: &str, value: f64, limit: &str, met: bool| {
        targets.push(Target { name: name.into(), value, limit: limit.into(), met });
    };
    if let (Some(s1), Some(s8)) = (&s1, find("S8")) {
        let r = s8.wrk.requests_per_s / s1.wrk.requests_per_s;
        target("S8 req/s (2,000 slow connections held) / S1 req/s", r, ">= 0.8", r >= 0.8);
    }
    if let (Some(s1), Some(lite)) = (&s1, find("S1-sqlite")) {
        let r = s1.wrk.requests_per_s / lite.wrk.requests_per_s;
        target("S1 PostgreSQL req/s / SQLite req/s", r, ">= 0.5", r >= 0.5);
    }
    for (pg_name, lite_name) in [("S2", "S2-sqlite"), ("S7", "S7-sqlite")] {
        if let (Some(on_pg), Some(lite)) = (find(pg_name), find(lite_name)) {
            let r = lite.wrk.requests_per_s / on_pg.wrk.requests_per_s;
            target(&format!("{pg_name} SQLite req/s / PostgreSQL req/s"), r, "<= 2", r <= 2.0);
        }
    }
    if let (Some(s1), Some(s4)) = (&s1, &s4) {
        let r = s1.wrk.requests_per_s / s4.wrk.requests_per_s;
        target("S1 req/s / S4 req/s", r, ">= 0.25", r >= 0.25);
    }
    if let Some((small_p50, big_p50)) = scale_p50 {
        let r = big_p50 / small_p50;
        target(&format!("S6 p50 {} / p50 small", scale.name), r, "<= 1.3", r <= 1.3);
    }
    if let Some(s7) = &s7 {
        let r = s7.peak_rss_mib / idle;
        target("S7 peak RSS / idle RSS", r, "<= 2", r <= 2.0);
        target("S7 peak RSS MiB", s7.peak_rss_mib, "<= 200", s7.peak_rss_mib <= 200.0);
    }
    if let (Some(b), Some(k)) = (&s3, &s3k) {
        let r = b.wrk.requests_per_s / k.wrk.requests_per_s;
        target("S3 Basic req/s / S3 key req/s", r, ">= 0.9", r >= 0.9);
    }
    if let (Some(year), Some(s7)) = (find("S8-agg"), &s7) {
        let r = year.wrk.requests_per_s / s7.wrk.requests_per_s;
        target("year-daily (S8-agg) req/s / S7 req/s", r, ">= 20", r >= 20.0);
    }
    if let (Some(latest), Some(s3)) = (find("latest"), &s3) {
        let r = latest.wrk.requests_per_s / s3.wrk.requests_per_s;
        target("latest req/s / S3 req/s", r, ">= 1", r >= 1.0);
    }
    if let (Some(s1), Some(csv)) = (&s1, find("S10")) {
        let r = csv.wrk.requests_per_s / s1.wrk.requests_per_s;
        target("csv-1d (S10) req/s / S1 req/s", r, "1/1.2 ..= 1.2", (1.0 / 1.2..=1.2).contains(&r));
    }
    for encoding in ["zstd", "gzip"] {
        if let (Some(s1), Some(z)) = (&s1, find(&format!("S1-{encoding}"))) {
            let per_answer = |l: &Load| l.wrk.mb_per_s * 1e6 / l.wrk.requests_per_s;
            let r = per_answer(&z) / per_answer(s1);
            target(&format!("S1 {encoding} wire bytes / identity"), r, "<= 0.15", r <= 0.15);
            let cost = z.wrk.requests_per_s / s1.wrk.requests_per_s;
            target(&format!("S1 {encoding} req/s / identity (reported)"), cost, "reported", true);
        }
    }
    let (min_ingest, min_text) = if pg.is_some() { (5e5, ">= 500,000") } else { (1e6, ">= 1,000,000") };
    target("S5 values/s", ingest.values_per_s, min_text, ingest.values_per_s >= min_ingest);
    target("S5 bytes/value", ingest.bytes_per_value, "<= 12", ingest.bytes_per_value <= 12.0);
    let commit = sh(Command::new("git").args(["rev-parse", "--short", "HEAD"])).unwrap_or_default().trim().to_owned();
    Ok(Results {
        date: jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        commit,
        machine: machine(),
        scale: scale.name.into(),
        backend: if pg.is_some() { "postgres" } else { "sqlite" }.into(),
        seed: args.seed,
        duration_s: secs,
        idle_rss_mib: idle,
        loads,
        ingest,
        scale_p50_ms: scale_p50,
        durability,
        profiles,
        targets,
    })
}

/// Generates (once) and imports each profile of `--profiles`, then runs
/// S1 (the last day) and S2 (the last 30 days) of its first device.
fn run_profiles(args: &Args, bin: &Path, pg: Option<&str>) -> Result<Vec<ProfileResult>, String> {
    let names: Vec<&str> = match args.profiles.trim() {
        "" => Vec::new(),
        "all" => crate::profiles::ALL.to_vec(),
        list => list.split(',').map(str::trim).collect(),
    };
    let mut out = Vec::new();
    for name in names {
        let (dir, generated) = generate_profile(&args.data, name, args.seed, args.profile_days)?;
        let store = import_into(bin, &dir, generated.counts.values, name, pg, "store.db", "")?;
        let mut cmd = Command::new(bin);
        cmd.args(["serve", "--rate-limit", "off", "--listen", &format!("127.0.0.1:{}", args.port), "--database"])
            .arg(&store.db)
            .env("SENSORHUB_LOG", "warn");
        let server = Server::start(&mut cmd, args.port)?;
        let at = |s: i64| jiff::Timestamp::from_second(s).map(|t| t.to_string()).unwrap_or_default();
        let window = |days: i64| {
            format!(
                "/external/v1/{}/devices/{}/data?start={}&end={}",
                dataset::BENCH_KEY,
                generated.device,
                at(dataset::END - days * 86_400),
                at(dataset::END - 1)
            )
        };
        let s1 = load(&server, &format!("{name}: data-1d"), &window(1), None, 16, args.duration)?.wrk;
        let s2 = load(&server, &format!("{name}: data-30d"), &window(30), None, 4, args.duration)?.wrk;
        out.push(ProfileResult { name: name.into(), ingest: store.ingest, s1, s2 });
    }
    Ok(out)
}
