//! `sensorhub-bench lineproto`: InfluxDB line protocol ingest beside the
//! webhook's, on one release server (SQLite, the small fleet). The same
//! station-shaped reading (an AWLR station's four sensors, noisy values
//! with three decimals) goes in three ways: a webhook POST per reading, a
//! line-protocol POST per point (a datalogger), and line-protocol POSTs of
//! 1,000 points across the fleet's water-level stations (Telegraf's
//! default batch), each client on a keep-alive connection of its own; and
//! the webhook once more with a new connection per reading (the figure
//! earlier runs recorded), and last the webhook across the fleet: each
//! POST one reading of the next water-level station, so that a group
//! commit holds many stations' readings, as a real fleet's do. Reported:
//! readings/s and values/s of each. With `--database postgres://...` the
//! webhook's two loads (one station, the fleet) run once more against a
//! fresh database on that PostgreSQL server (issue 27 asks 8,000 readings/s
//! there and 16,000 on SQLite); `--database-delay-us N` puts a relay
//! between the two that passes each chunk on N us after it arrived (a database on
//! another machine, where each round trip a write makes counts).

use crate::closed_loop::{load, load_each};
use crate::dataset;
use crate::keepalive::Conn;
use crate::run::Server;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Arguments of `lineproto`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seconds of load per measurement
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Clients posting at once, each on its connection (one reading or
    /// point per request; issue 27's webhook targets are for 8)
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Points per batched line-protocol request
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Clients posting batches at once
    #[arg(long, default_value_t = 4)]
    batch_clients: usize,
    /// Where the database is kept
    #[arg(long, default_value = "bench/data")]
    data: PathBuf,
    /// Where the JSON results go
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
    /// Loopback port of the server
    #[arg(long, default_value_t = 18450)]
    port: u16,
    /// Also load the webhook against PostgreSQL (a server URL whose user may create databases)
    #[arg(long)]
    database: Option<String>,
    /// With `--database`, pass each chunk between sensorhub and PostgreSQL
    /// on this long after it arrived, as if the database ran on another machine
    #[arg(long, default_value_t = 0)]
    database_delay_us: u64,
}

/// What the scenario measured.
#[derive(Debug, Serialize)]
pub struct LineProto {
    /// Webhook POSTs of one reading (4 values), readings/s, each client on
    /// a keep-alive connection.
    pub webhook_rps: f64,
    /// The server's CPU time a reading of that load, us (`/proc/PID/stat`).
    pub webhook_cpu_us: f64,
    /// Bytes of file pages the server dirtied a reading of that load (the
    /// WAL's and the database's; `write_bytes` of `/proc/PID/io`).
    pub webhook_disk_bytes: f64,
    /// The same with a new connection per reading (HTTP/1.0), readings/s.
    pub webhook_per_connection_rps: f64,
    /// Line-protocol POSTs of one point (4 fields), points/s.
    pub line_single_rps: f64,
    /// Line-protocol POSTs of `batch` points, points/s.
    pub line_batch_points_per_s: f64,
    /// Points per batched request.
    pub batch: usize,
    /// Values per reading or point.
    pub values_per_reading: usize,
    /// Webhook POSTs of one reading each, round the fleet's water-level
    /// stations (a group commit holds many stations' readings), readings/s,
    /// on keep-alive connections.
    pub webhook_fleet_rps: f64,
    /// The water-level stations the fleet's load goes round.
    pub fleet_stations: usize,
    /// The server's CPU time a reading of the fleet's load, us.
    pub webhook_fleet_cpu_us: f64,
    /// Bytes of file pages the server dirtied a reading of the fleet's load.
    pub webhook_fleet_disk_bytes: f64,
    /// Webhook POSTs of one reading against PostgreSQL, readings/s (with
    /// `--database`), on keep-alive connections.
    pub postgres_webhook_rps: Option<f64>,
    /// The fleet's webhook load against PostgreSQL (with `--database`).
    pub postgres_webhook_fleet_rps: Option<f64>,
    /// The durable-commit floor on SQLite ([`crate::commit_floor`]): rows
    /// acknowledged a second with as many clients waiting, on the same disk.
    pub sqlite_commit_floor: f64,
    /// The same on the PostgreSQL server (with `--database`).
    pub postgres_commit_floor: Option<f64>,
    /// Clients posting one reading or point per request at once.
    pub clients: usize,
}

/// A value with three noisy decimals, as loggers send them.
fn noisy(k: u64, base: f64) -> String {
    let jitter = ((k.wrapping_mul(2_654_435_761) % 1000) as f64) / 1000.0;
    format!("{:.3}", base + jitter + (k % 97) as f64 * 0.137)
}

/// Sends one POST and checks that it answered `want`.
async fn post(port: u16, path: &str, headers: &str, body: &str, want: &[u8]) -> Result<(), String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| e.to_string())?;
    let request =
        format!("POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n{headers}Content-Length: {}\r\n\r\n{body}", body.len());
    s.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).await.map_err(|e| e.to_string())?;
    if answer.get(9..12).is_none_or(|status| status != want) {
        return Err(format!("{path} refused: {}", String::from_utf8_lossy(&answer)));
    }
    Ok(())
}

/// The reference station's reading `k` as the webhook's envelope.
fn envelope(k: u64) -> String {
    station_envelope(dataset::REF_DEVICE, "REF", k, 1_700_000_000 + k as i64)
}

/// Reading `k` of station `device` (sensor prefix `prefix`) at `second`
/// as the webhook's envelope.
fn station_envelope(device: &str, prefix: &str, k: u64, second: i64) -> String {
    let ts = jiff::Timestamp::from_second(second).map_or_else(|_| String::new(), |t| t.to_string());
    format!(
        r#"{{"event":"sensor-data","device_id":"{device}","timestamp":"{ts}","data":{{"{prefix}-batt":{},"{prefix}-sig":{},"{prefix}-wl":{},"{prefix}-alert":{}}}}}"#,
        noisy(k, 90.0),
        noisy(k, -80.0),
        noisy(k, 120.0),
        k % 4
    )
}

/// Point `k` of station `device` (sensor prefix `prefix`) as a line.
fn line(device: &str, prefix: &str, k: u64, second: i64) -> String {
    format!(
        "{device} {prefix}-batt={},{prefix}-sig={},{prefix}-wl={},{prefix}-alert={}i {second}\n",
        noisy(k, 90.0),
        noisy(k, -80.0),
        noisy(k, 120.0),
        k % 4
    )
}

/// Runs the scenario and writes its figures.
pub fn run(args: Args) -> Result<(LineProto, PathBuf), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin = exe.parent().ok_or("no binary directory")?.join("sensorhub");
    let dir = args.data.join("lineproto");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let db = dir.join("lineproto.db");
    let provision = dir.join("provision.json");
    let stations = dataset::stations(dataset::SMALL, 42);
    std::fs::write(&provision, dataset::provision(&stations).to_string()).map_err(|e| e.to_string())?;
    let port = args.port;
    let server = serve(&bin, &provision, db.to_str().ok_or("non-UTF-8 data path")?, port)?;
    let awlr: Arc<Vec<(String, String)>> =
        Arc::new(stations.iter().filter(|s| s.kind == "AWLR").map(|s| (s.id.clone(), s.prefix.clone())).collect());
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let webhook_headers = format!("Content-Type: application/json\r\nX-API-KEY: {}\r\n", dataset::BENCH_WEBHOOK_KEY);
    let line_headers = format!("Authorization: Token {}\r\n", dataset::BENCH_WEBHOOK_KEY);
    let write = "/api/v2/write?org=bench&bucket=bench&precision=s";
    // Webhook POSTs of reading `body(k)`, each client on its keep-alive
    // connection: readings/s, and the server's CPU time (us) and bytes of
    // file pages dirtied a reading.
    type Body = Arc<dyn Fn(u64) -> String + Send + Sync>;
    let webhooks = |server: &Server, port: u16, body: Body| -> Result<(f64, f64, f64), String> {
        let headers = webhook_headers.clone();
        let (cpu, written, started) = (server.cpu_seconds(), server.written_bytes()?, Instant::now());
        let rps = rt.block_on(load_each(
            args.clients,
            args.seconds,
            0,
            move || Conn::new(port),
            move |mut conn, k| {
                let (headers, body) = (headers.clone(), body(k));
                async move {
                    conn.post("/external/v1/webhook/sensor-data", &headers, &body, 200).await?;
                    Ok(conn)
                }
            },
        ))?;
        let readings = (rps * started.elapsed().as_secs_f64()).max(1.0);
        let cpu_us = (server.cpu_seconds() - cpu) * 1e6 / readings;
        Ok((rps, cpu_us, (server.written_bytes()? - written) / readings))
    };
    let one_station: Body = Arc::new(envelope);
    // Reading `k` goes to station `k mod n`, each station one a minute.
    let stations = awlr.clone();
    let fleet: Body = Arc::new(move |k| {
        let (device, prefix) = &stations[(k % stations.len() as u64) as usize];
        station_envelope(device, prefix, k, 1_710_000_000 + (k / stations.len() as u64) as i64 * 60)
    });
    let (webhook_rps, webhook_cpu_us, webhook_disk_bytes) = webhooks(&server, port, one_station.clone())?;
    let headers = line_headers.clone();
    let line_single_rps = rt.block_on(load_each(
        args.clients,
        args.seconds,
        10_000_000,
        move || Conn::new(port),
        move |mut conn, k| {
            let headers = headers.clone();
            async move {
                let body = line(dataset::REF_DEVICE, "REF", k, 1_700_000_000 + k as i64);
                conn.post(write, &headers, &body, 204).await?;
                Ok(conn)
            }
        },
    ))?;
    let batch = args.batch.max(1);
    let (awlr_batch, headers) = (awlr.clone(), line_headers);
    let batches = rt.block_on(load_each(
        args.batch_clients,
        args.seconds,
        0,
        move || Conn::new(port),
        move |mut conn, b| {
            let (awlr, headers) = (awlr_batch.clone(), headers.clone());
            async move {
                let mut body = String::with_capacity(batch * 96);
                for i in 0..batch as u64 {
                    let k = b * batch as u64 + i;
                    let (device, prefix) = &awlr[(k % awlr.len() as u64) as usize];
                    // Each station one point a minute, moving on with each batch.
                    let second = 1_690_000_000 + (k / awlr.len() as u64) as i64 * 60;
                    body.push_str(&line(device, prefix, k, second));
                }
                conn.post(write, &headers, &body, 204).await?;
                Ok(conn)
            }
        },
    ))?;
    // Last, so that the line protocol's figures are taken on the database
    // they always were.
    let headers = webhook_headers.clone();
    let webhook_per_connection_rps = rt.block_on(load(args.clients, args.seconds, 20_000_000, move |k| {
        let headers = headers.clone();
        async move { post(port, "/external/v1/webhook/sensor-data", &headers, &envelope(k), b"200").await }
    }))?;
    let (webhook_fleet_rps, webhook_fleet_cpu_us, webhook_fleet_disk_bytes) = webhooks(&server, port, fleet.clone())?;
    drop(server);
    let sqlite_commit_floor = crate::commit_floor::sqlite(&dir.join("floor.db"), args.clients, args.seconds)?;
    let (mut postgres_commit_floor, mut postgres_webhook_fleet_rps) = (None, None);
    let postgres_webhook_rps = match &args.database {
        Some(url) => {
            let temp = rt.block_on(sensorhub_testing::TempDatabase::create(url)).map_err(|e| e.to_string())?;
            let database = match args.database_delay_us {
                0 => temp.url().to_owned(),
                us => {
                    let (_, target) = crate::relay::via(temp.url(), 0)?;
                    let relay = crate::relay::start(target, std::time::Duration::from_micros(us))?;
                    crate::relay::via(temp.url(), relay)?.0
                }
            };
            let server = serve(&bin, &provision, &database, port + 1)?;
            let (rps, _, _) = webhooks(&server, port + 1, one_station)?;
            postgres_webhook_fleet_rps = Some(webhooks(&server, port + 1, fleet)?.0);
            drop(server);
            postgres_commit_floor =
                Some(rt.block_on(crate::commit_floor::postgres(&database, args.clients, args.seconds))?);
            Some(rps)
        }
        None => None,
    };
    let result = LineProto {
        webhook_rps,
        webhook_cpu_us,
        webhook_disk_bytes,
        webhook_per_connection_rps,
        webhook_fleet_rps,
        fleet_stations: awlr.len(),
        webhook_fleet_cpu_us,
        webhook_fleet_disk_bytes,
        postgres_webhook_rps,
        postgres_webhook_fleet_rps,
        sqlite_commit_floor,
        postgres_commit_floor,
        clients: args.clients,
        line_single_rps,
        line_batch_points_per_s: batches * batch as f64,
        batch,
        values_per_reading: 4,
    };
    std::fs::create_dir_all(&args.out).map_err(|e| e.to_string())?;
    let date = jiff::Timestamp::now().strftime("%Y-%m-%dT%H%M%SZ").to_string();
    let path = args.out.join(format!("{date}-lineproto.json"));
    std::fs::write(&path, serde_json::to_string_pretty(&result).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    Ok((result, path))
}

/// Provisions the small fleet into `database` and starts a release server on it.
fn serve(bin: &Path, provision: &Path, database: &str, port: u16) -> Result<Server, String> {
    let applied = Command::new(bin)
        .args(["apply", provision.to_str().ok_or("path")?, "--database", database])
        .env("SENSORHUB_LOG", "warn")
        .status()
        .map_err(|e| e.to_string())?;
    if !applied.success() {
        return Err("sensorhub apply failed".into());
    }
    Server::start(
        Command::new(bin)
            .args([
                "serve",
                "--rate-limit",
                "off",
                "--webhook-mode",
                "ingest",
                "--listen",
                &format!("127.0.0.1:{port}"),
            ])
            .args(["--database", database])
            .env("SENSORHUB_LOG", "warn"),
        port,
    )
}

/// The figures as one paragraph.
pub fn report(r: &LineProto) -> String {
    let v = r.values_per_reading as f64;
    let postgres = r.postgres_webhook_rps.map_or_else(String::new, |rps| {
        let floor = r.postgres_commit_floor.unwrap_or(f64::NAN);
        let fleet = r.postgres_webhook_fleet_rps.unwrap_or(f64::NAN);
        format!(
            "; webhook on PostgreSQL {rps:.0} readings/s ({:.2}x SQLite; target 8,000), its durable-commit floor {floor:.0}/s ({:.2} of it), round the fleet {fleet:.0} readings/s ({:.2} of the floor)",
            rps / r.webhook_rps.max(1e-9),
            rps / floor,
            fleet / floor
        )
    });
    format!(
        "ingest of station readings ({} values each, {} clients, keep-alive): webhook {:.0} readings/s ({:.0} values/s; target 16,000; the server's CPU {:.0} us and {:.0} bytes of file pages dirtied a reading; {:.0} with a connection per reading; {:.0} round the fleet's {} water-level stations, the server's CPU {:.0} us and {:.0} bytes dirtied a reading), SQLite's durable-commit floor {:.0}/s ({:.2} of it); line protocol one point per request {:.0} points/s ({:.0} values/s, {:.2}x the webhook); line protocol {} points per request {:.0} points/s ({:.0} values/s){postgres}",
        r.values_per_reading,
        r.clients,
        r.webhook_rps,
        r.webhook_rps * v,
        r.webhook_cpu_us,
        r.webhook_disk_bytes,
        r.webhook_per_connection_rps,
        r.webhook_fleet_rps,
        r.fleet_stations,
        r.webhook_fleet_cpu_us,
        r.webhook_fleet_disk_bytes,
        r.sqlite_commit_floor,
        r.webhook_rps / r.sqlite_commit_floor.max(1e-9),
        r.line_single_rps,
        r.line_single_rps * v,
        r.line_single_rps / r.webhook_rps.max(1e-9),
        r.batch,
        r.line_batch_points_per_s,
        r.line_batch_points_per_s * v
    )
}
