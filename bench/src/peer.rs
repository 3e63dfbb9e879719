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
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

/// Bytes of the files under `dir`.
fn du(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else { return 0 };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => du(&e.path()),
            _ => e.metadata().map_or(0, |m| m.len()),
        })
        .sum()
}

/// Writes `dir/readings.lp` from `dir/readings.csv` (once): one line per
/// reading, tag `device_id`, one field per sensor named by the sensor id's
/// last part (`STA-01-wl` → `wl`, so that stations share field keys as an
/// InfluxDB user would lay them out), seconds.
fn line_protocol(dir: &Path) -> Result<PathBuf, String> {
    let lp = dir.join("readings.lp");
    let csv = dir.join("readings.csv");
    let fresh = |p: &Path| fs::metadata(p).and_then(|m| m.modified()).ok();
    if lp.exists() && fresh(&lp) >= fresh(&csv) {
        return Ok(lp);
    }
    let input = BufReader::with_capacity(1 << 20, fs::File::open(&csv).map_err(|e| e.to_string())?);
    let mut out = BufWriter::with_capacity(1 << 20, fs::File::create(&lp).map_err(|e| e.to_string())?);
    let mut current: Option<(String, String)> = None;
    let mut fields = String::new();
    let mut flush = |key: &Option<(String, String)>, fields: &mut String| -> Result<(), String> {
        if let Some((device, ts)) = key {
            let second = ts.parse::<jiff::Timestamp>().map_err(|e| format!("{ts}: {e}"))?.as_second();
            writeln!(out, "{MEASUREMENT},device_id={device} {fields} {second}").map_err(|e| e.to_string())?;
        }
        fields.clear();
        Ok(())
    };
    for line in input.lines().skip(1) {
        let line = line.map_err(|e| e.to_string())?;
        let mut parts = line.split(',');
        let (Some(device), Some(ts), Some(sensor), Some(value)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(format!("not a reading row: {line}"));
        };
        if current.as_ref().is_none_or(|(d, t)| d != device || t != ts) {
            flush(&current, &mut fields)?;
            current = Some((device.to_owned(), ts.to_owned()));
        }
        if !fields.is_empty() {
            fields.push(',');
        }
        fields.push_str(sensor.rsplit('-').next().unwrap_or(sensor));
        fields.push('=');
        fields.push_str(value);
    }
    flush(&current, &mut fields)?;
    out.flush().map_err(|e| e.to_string())?;
    Ok(lp)
}

/// An `influxd` on loopback with its own directories, stopped when dropped.
struct Influx {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Influx {
    fn start(port: u16, under: &Path) -> Result<Influx, String> {
        let under = under.canonicalize().map_err(|e| e.to_string())?;
        let dir = tempfile::Builder::new().prefix("influx-").tempdir_in(under).map_err(|e| e.to_string())?;
        let d = dir.path().display();
        let config = format!(
            "reporting-disabled = true\nbind-address = \"127.0.0.1:{rpc}\"\n\
             [meta]\n  dir = \"{d}/meta\"\n\
             [data]\n  dir = \"{d}/data\"\n  wal-dir = \"{d}/wal\"\n  query-log-enabled = false\n  \
             cache-snapshot-write-cold-duration = \"2s\"\n\
             [http]\n  bind-address = \"127.0.0.1:{port}\"\n  log-enabled = false\n\
             [monitor]\n  store-enabled = false\n[continuous_queries]\n  enabled = false\n\
             [logging]\n  level = \"warn\"\n",
            rpc = port + 10
        );
        let conf = dir.path().join("influxdb.conf");
        fs::write(&conf, config).map_err(|e| e.to_string())?;
        let log = fs::File::create(dir.path().join("influxd.log")).map_err(|e| e.to_string())?;
        let child = Command::new("influxd")
            .arg("-config")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start influxd (bench/peer installs Debian's influxdb): {e}"))?;
        let influx = Influx { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if http(port, "GET", "/ping", "").is_ok_and(|(status, _)| status == 204) {
                let (status, body) = http(port, "POST", "/query?q=CREATE%20DATABASE%20bench", "")?;
                return if status == 200 { Ok(influx) } else { Err(format!("CREATE DATABASE: {status} {body}")) };
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!("influxd did not come up on port {port}"))
    }

    /// Posts `lp` in batches of [`BATCH_LINES`] lines over one connection; returns the seconds taken.
    fn load(&self, lp: &Path) -> Result<f64, String> {
        let text = fs::read(lp).map_err(|e| e.to_string())?;
        let mut conn = TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| e.to_string())?;
        conn.set_nodelay(true).map_err(|e| e.to_string())?;
        let started = Instant::now();
        let mut rest = &text[..];
        while !rest.is_empty() {
            let end = rest
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == b'\n')
                .nth(BATCH_LINES - 1)
                .map_or(rest.len(), |(i, _)| i + 1);
            let (batch, next) = rest.split_at(end);
            rest = next;
            write!(
                conn,
                "POST /write?db=bench&precision=s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n",
                batch.len()
            )
            .map_err(|e| e.to_string())?;
            conn.write_all(batch).map_err(|e| e.to_string())?;
            let head = read_head(&mut conn)?;
            if !head.starts_with("HTTP/1.1 204") {
                return Err(format!("InfluxDB refused a batch: {head}"));
            }
        }
        Ok(started.elapsed().as_secs_f64())
    }

    /// Bytes on disk once the write cache has been written out as TSM files (or 60 s passed).
    fn settled_bytes(&self) -> u64 {
        let wal = self.dir.path().join("wal");
        let deadline = Instant::now() + Duration::from_secs(60);
        while du(&wal) > 1 << 20 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(500));
        }
        du(&self.dir.path().join("data")) + du(&wal)
    }
}

impl Drop for Influx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads an HTTP response head (through the blank line) from `conn`.
fn read_head(conn: &mut TcpStream) -> Result<String, String> {
    let mut head = Vec::with_capacity(256);
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match conn.read(&mut byte) {
            Ok(0) => return Err("the connection closed mid-answer".into()),
            Ok(_) => head.push(byte[0]),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

/// One request on its own connection: the status and the body.
fn http(port: u16, method: &str, path: &str, body: &str) -> Result<(u16, String), String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .map_err(|e| e.to_string())?;
    let mut all = String::new();
    s.read_to_string(&mut all).map_err(|e| e.to_string())?;
    let status = all.split(' ').nth(1).and_then(|c| c.parse().ok()).ok_or(format!("no HTTP status: {all}"))?;
    let body = all.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Ok((status, body))
}

/// nginx serving the files under its directory's `www`, stopped when dropped.
struct Nginx {
    child: Child,
    dir: tempfile::TempDir,
}

impl Nginx {
    fn start(port: u16, under: &Path) -> Result<Nginx, String> {
        let under = under.canonicalize().map_err(|e| e.to_string())?;
        let dir = tempfile::Builder::new().prefix("nginx-").tempdir_in(under).map_err(|e| e.to_string())?;
        let d = dir.path().display();
        fs::create_dir_all(dir.path().join("www")).map_err(|e| e.to_string())?;
        let config = format!(
            // Workers as root when the bench runs as root (as CI does): as nobody
            // they could not read a private checkout. Run by another user,
            // nginx ignores the line and its workers keep that user.
            "daemon off;\nuser root;\nworker_processes auto;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n  access_log off;\n  sendfile on;\n  tcp_nopush on;\n  keepalive_requests 1000000;\n  \
             client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  \
             uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  \
             server {{\n    listen 127.0.0.1:{port};\n    root {d}/www;\n    default_type application/json;\n  }}\n}}\n"
        );
        let conf = dir.path().join("nginx.conf");
        fs::write(&conf, config).map_err(|e| e.to_string())?;
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Err(format!("port {port} is taken: an nginx left from an earlier run? (--port)"));
        }
        let child = Command::new("nginx")
            .arg("-c")
            .arg(&conf)
            .arg("-p")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start nginx (bench/peer installs it): {e}"))?;
        let nginx = Nginx { child, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return Err(format!("nginx did not come up on port {port}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(nginx)
    }

    /// Serves `bytes` at `/{name}`.
    fn put(&self, name: &str, bytes: &[u8]) -> Result<(), String> {
        fs::write(self.dir.path().join("www").join(name), bytes).map_err(|e| e.to_string())
    }
}

impl Drop for Nginx {
    /// SIGTERM, not SIGKILL: a killed master leaves its workers listening.
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !matches!(self.child.try_wait(), Ok(Some(_))) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `SELECT …` as a URL path on InfluxDB's HTTP API.
fn influx_query(q: &str) -> String {
    let mut enc = String::new();
    for b in q.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => enc.push(b as char),
            _ => enc.push_str(&format!("%{b:02X}")),
        }
    }
    format!("/query?db=bench&q={enc}")
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
