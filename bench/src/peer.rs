//! InfluxDB 1.6 beside sensorhub in one run (`sensorhub-bench peer`): each
//! profile is loaded into both — InfluxDB by line protocol in 5,000-line
//! batches over one keep-alive connection, sensorhub by `import` — and on
//! the first profile the same four reads (the last day, the last 30 days
//! raw, 30 days of hourly means, the latest values) run against each, with
//! nginx serving sensorhub's exact day and month bytes as the floor. Every
//! write and read figure of issue 27 is a ratio inside this run.

use crate::run::{self, Server};
use crate::wrk::{self, WrkResult};
use serde::Serialize;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

mod influx;
mod nginx;
use influx::{Influx, influx_query, line_protocol};
use nginx::Nginx;

/// Arguments of `peer`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Profiles loaded into both stores, comma-separated; the reads run on the first
    #[arg(long, default_value = "stations,field,regular")]
    profiles: String,
    /// Days of data per station
    #[arg(long, default_value_t = 30)]
    days: i64,
    /// Seconds each read runs
    #[arg(long, default_value_t = 10)]
    duration: u64,
    /// Connections of each read (wrk -t1, as in the issue)
    #[arg(long, default_value_t = 8)]
    connections: u32,
    /// Seed of the generated data
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Where datasets and stores are kept
    #[arg(long, default_value = "bench/data")]
    data: PathBuf,
    /// Where the JSON results go
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
    /// First of four loopback ports: sensorhub, InfluxDB, nginx, sensorhub on PostgreSQL
    #[arg(long, default_value_t = 18600)]
    port: u16,
    /// Also run sensorhub's reads on PostgreSQL (a server URL whose user may create databases)
    #[arg(long)]
    database: Option<String>,
}

/// Lines per InfluxDB write request.
const BATCH_LINES: usize = 5_000;
/// The measurement every line is written to.
const MEASUREMENT: &str = "readings";

/// One profile's load into both stores.
#[derive(Debug, Serialize)]
pub struct Load {
    /// Profile name.
    pub profile: String,
    /// Values loaded.
    pub values: u64,
    /// InfluxDB: values per second over the whole line-protocol load.
    pub influx_values_per_s: f64,
    /// InfluxDB: bytes on disk per value (data and WAL, after its cache was written out).
    pub influx_bytes_per_value: f64,
    /// sensorhub `import` on SQLite: values per second.
    pub sqlite_values_per_s: f64,
    /// sensorhub on SQLite: bytes on disk per value.
    pub sqlite_bytes_per_value: f64,
    /// sensorhub `import` on PostgreSQL, when `--database` was given.
    pub postgres_values_per_s: Option<f64>,
}

/// One read against one server.
#[derive(Debug, Serialize)]
pub struct Read1 {
    /// Which read (day, month, hourly, latest).
    pub read: String,
    /// Which server (influxdb, sensorhub, sensorhub-postgres, floor).
    pub server: String,
    /// Bytes of one answer.
    pub bytes: usize,
    /// wrk's figures.
    #[serde(flatten)]
    pub wrk: WrkResult,
    /// sensorhub's peak RSS during the read, MiB (0 for the others).
    pub peak_rss_mib: f64,
}

/// A whole run.
#[derive(Debug, Serialize)]
pub struct Peer {
    /// UTC time of the run.
    pub date: String,
    /// `git rev-parse HEAD`.
    pub commit: String,
    /// `influxd version`.
    pub influxdb: String,
    /// The loads, one per profile.
    pub loads: Vec<Load>,
    /// The profile the reads ran on, and its device.
    pub read_on: (String, String),
    /// The reads.
    pub reads: Vec<Read1>,
}

fn sh(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{cmd:?}: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn rfc3339(second: i64) -> String {
    jiff::Timestamp::from_second(second).map(|t| t.to_string()).unwrap_or_default()
}

/// Runs the loads and the reads and writes the results.
pub fn run(args: Args) -> Result<(Peer, PathBuf), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let sensorhub = exe.parent().ok_or("no binary directory")?.join("sensorhub");
    let influxdb = sh(Command::new("influxd").arg("version"))?;
    fs::create_dir_all(&args.data).map_err(|e| e.to_string())?;
    let pg = args.database.as_deref();
    let names: Vec<&str> = args.profiles.split(',').map(str::trim).filter(|n| !n.is_empty()).collect();
    let first = *names.first().ok_or("--profiles names none")?;

    let mut loads = Vec::new();
    let mut kept = None;
    for name in &names {
        let (dir, generated) = run::generate_profile(&args.data, name, args.seed, args.days)?;
        let lp = line_protocol(&dir)?;
        let values = generated.counts.values;
        // The first profile's InfluxDB stays up for the reads.
        let influx = Influx::start(if *name == first { args.port + 1 } else { args.port + 5 }, &args.data)?;
        eprintln!("InfluxDB: loading {name} ({values} values) in {BATCH_LINES}-line batches");
        let seconds = influx.load(&lp)?;
        let influx_bytes = influx.settled_bytes();
        let sqlite = run::import_into(&sensorhub, &dir, values, name, None, "store.db", "")?;
        let postgres = match pg {
            Some(server) => Some(run::import_into(&sensorhub, &dir, values, name, Some(server), "", "")?),
            None => None,
        };
        let load = Load {
            profile: (*name).to_owned(),
            values,
            influx_values_per_s: values as f64 / seconds,
            influx_bytes_per_value: influx_bytes as f64 / values as f64,
            sqlite_values_per_s: sqlite.ingest.values_per_s,
            sqlite_bytes_per_value: sqlite.ingest.bytes_per_value,
            postgres_values_per_s: postgres.as_ref().map(|p| p.ingest.values_per_s),
        };
        eprintln!(
            "  {name}: InfluxDB {:.0} values/s, sensorhub {:.0} ({:.2}x)",
            load.influx_values_per_s,
            load.sqlite_values_per_s,
            load.sqlite_values_per_s / load.influx_values_per_s
        );
        loads.push(load);
        if *name == first {
            kept = Some((influx, generated.device, sqlite, postgres));
        }
    }
    let (influx, device, sqlite, postgres) = kept.ok_or("no profile to read")?;
    let reads = reads(&args, &sensorhub, influx, &device, &sqlite.db, postgres.as_ref().map(|p| p.db.as_str()))?;
    let date = jiff::Timestamp::now().strftime("%Y-%m-%dT%H%M%SZ").to_string();
    let commit = sh(Command::new("git").args(["rev-parse", "--short", "HEAD"])).unwrap_or_default();
    let peer = Peer { date, commit, influxdb, loads, read_on: (first.to_owned(), device), reads };
    fs::create_dir_all(&args.out).map_err(|e| e.to_string())?;
    let path = args.out.join(format!("{}-peer.json", peer.date));
    fs::write(&path, serde_json::to_string_pretty(&peer).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    Ok((peer, path))
}

/// The four reads against InfluxDB, sensorhub (and on PostgreSQL), and the floor.
fn reads(
    args: &Args,
    sensorhub: &Path,
    influx: Influx,
    device: &str,
    sqlite: &str,
    postgres: Option<&str>,
) -> Result<Vec<Read1>, String> {
    let end = crate::dataset::END;
    let (day, month) = (end - 86_400, end - 30 * 86_400);
    let window = |from: i64| format!("start={}&end={}", rfc3339(from), rfc3339(end - 1));
    let data = |from: i64, extra: &str| {
        format!("/external/v1/{}/devices/{device}/data?{}{extra}", crate::dataset::BENCH_KEY, window(from))
    };
    let sensorhub_paths = [
        ("day", data(day, "")),
        ("month", data(month, "")),
        ("hourly", data(month, "&interval=1h&agg=mean")),
        ("latest", format!("/external/v1/{}/devices/{device}/latest", crate::dataset::BENCH_KEY)),
    ];
    let range = |from: i64| format!("time >= '{}' AND time <= '{}'", rfc3339(from), rfc3339(end - 1));
    let influx_paths = [
        ("day", influx_query(&format!("SELECT * FROM {MEASUREMENT} WHERE device_id = '{device}' AND {}", range(day)))),
        (
            "month",
            influx_query(&format!("SELECT * FROM {MEASUREMENT} WHERE device_id = '{device}' AND {}", range(month))),
        ),
        (
            "hourly",
            influx_query(&format!(
                "SELECT mean(*) FROM {MEASUREMENT} WHERE device_id = '{device}' AND {} GROUP BY time(1h)",
                range(month)
            )),
        ),
        ("latest", influx_query(&format!("SELECT last(*) FROM {MEASUREMENT} WHERE device_id = '{device}'"))),
    ];
    let mut out = Vec::new();
    let mut measure = |read: &str, server: &str, port: u16, path: &str, rss: Option<&Server>| -> Result<(), String> {
        let bytes = run::get(port, path, None)?.len();
        let url = format!("http://127.0.0.1:{port}{path}");
        wrk::run_threads(&url, &[], None, 1, args.connections, 1)?;
        if let Some(s) = rss {
            s.reset_peak();
        }
        let wrk = wrk::run_threads(&url, &[], None, 1, args.connections, args.duration)?;
        let peak_rss_mib = rss.map_or(0.0, |s| s.rss("VmHWM:"));
        eprintln!("  {read} on {server}: {:.0} req/s, p99 {:.2} ms, {bytes} bytes", wrk.requests_per_s, wrk.p99_ms);
        out.push(Read1 { read: read.into(), server: server.into(), bytes, wrk, peak_rss_mib });
        Ok(())
    };

    for (read, path) in &influx_paths {
        measure(read, "influxdb", influx.port, path, None)?;
    }
    drop(influx);

    let serve = |db: &str, port: u16| {
        let mut cmd = Command::new(sensorhub);
        cmd.args(["serve", "--rate-limit", "off", "--listen", &format!("127.0.0.1:{port}"), "--database"])
            .arg(db)
            .env("SENSORHUB_LOG", "warn");
        Server::start(&mut cmd, port)
    };
    let server = serve(sqlite, args.port)?;
    let nginx = Nginx::start(args.port + 2, &args.data)?;
    for (read, path) in &sensorhub_paths {
        if matches!(*read, "day" | "month") {
            nginx.put(&format!("{read}.json"), &run::get(args.port, path, None)?)?;
        }
        measure(read, "sensorhub", args.port, path, Some(&server))?;
    }
    drop(server);
    for read in ["day", "month"] {
        measure(read, "floor", args.port + 2, &format!("/{read}.json"), None)?;
    }
    drop(nginx);
    if let Some(db) = postgres {
        let server = serve(db, args.port + 3)?;
        for (read, path) in &sensorhub_paths {
            measure(read, "sensorhub-postgres", args.port + 3, path, Some(&server))?;
        }
    }
    Ok(out)
}

/// The figures as a terminal table, with the ratios.
pub fn report(p: &Peer) -> String {
    let mut t = format!("peer run {} (commit {}), {}\n\nloads\n", p.date, p.commit, p.influxdb);
    t += &format!(
        "{:<10} {:>10} {:>14} {:>14} {:>7} {:>14} {:>10} {:>10}\n",
        "profile", "values", "InfluxDB v/s", "sensorhub v/s", "ratio", "PostgreSQL v/s", "Influx B/v", "SQLite B/v"
    );
    for l in &p.loads {
        t += &format!(
            "{:<10} {:>10} {:>14.0} {:>14.0} {:>6.2}x {:>14} {:>10.2} {:>10.2}\n",
            l.profile,
            l.values,
            l.influx_values_per_s,
            l.sqlite_values_per_s,
            l.sqlite_values_per_s / l.influx_values_per_s,
            l.postgres_values_per_s.map_or("-".into(), |v| format!("{v:.0}")),
            l.influx_bytes_per_value,
            l.sqlite_bytes_per_value
        );
    }
    t += &format!("\nreads on {} device {} (wrk -t1)\n", p.read_on.0, p.read_on.1);
    t += &format!(
        "{:<8} {:<19} {:>10} {:>10} {:>9} {:>10} {:>9}\n",
        "read", "server", "bytes", "req/s", "p99 ms", "MB/s", "peak MiB"
    );
    for r in &p.reads {
        t += &format!(
            "{:<8} {:<19} {:>10} {:>10.0} {:>9.2} {:>10.1} {:>9.1}\n",
            r.read, r.server, r.bytes, r.wrk.requests_per_s, r.wrk.p99_ms, r.wrk.mb_per_s, r.peak_rss_mib
        );
    }
    let rate = |read: &str, server: &str| {
        p.reads.iter().find(|r| r.read == read && r.server == server).map(|r| r.wrk.requests_per_s)
    };
    t += "\nratios\n";
    for read in ["day", "month", "hourly", "latest"] {
        if let (Some(s), Some(i)) = (rate(read, "sensorhub"), rate(read, "influxdb")) {
            t += &format!("{read:<8} sensorhub / InfluxDB {:.2}x\n", s / i);
        }
    }
    for read in ["day", "month"] {
        if let (Some(s), Some(f)) = (rate(read, "sensorhub"), rate(read, "floor")) {
            t += &format!("{read:<8} sensorhub / floor {:.2} (target >= 0.8)\n", s / f);
        }
        if let (Some(s), Some(pg)) = (rate(read, "sensorhub"), rate(read, "sensorhub-postgres")) {
            t += &format!("{read:<8} SQLite / PostgreSQL {:.2} (target <= 1.5)\n", s / pg);
        }
    }
    let peak = p.reads.iter().map(|r| r.peak_rss_mib).fold(0.0, f64::max);
    t += &format!("peak RSS during sensorhub's reads {peak:.1} MiB (target <= 64)\n");
    t
}
