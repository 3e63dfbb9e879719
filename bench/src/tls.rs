//! `sensorhub-bench tls`: HTTPS against plain HTTP on the same release
//! server and store (the small dataset): the one-day window of the
//! reference station (as S1) and webhook ingest, each with wrk
//! (HTTP/1.1 over TLS; wrk does not verify the test certificate), same
//! connections, same duration. Reported: requests/s of each and the TLS
//! over plain ratio.

use crate::dataset;
use crate::run::{DAY, Server, basic, prepare};
use crate::wrk::{self, WrkResult};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Arguments of `tls`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seconds of load per measurement
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Connections at once
    #[arg(long, default_value_t = 8)]
    connections: u32,
    /// Where the datasets and stores are kept
    #[arg(long, default_value = "bench/data")]
    data: PathBuf,
    /// Where the JSON results go
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
    /// Loopback port of the server (its operations listener takes the next one)
    #[arg(long, default_value_t = 18460)]
    port: u16,
}

/// One protocol's figures.
#[derive(Debug, Serialize)]
pub struct Side {
    /// The day window.
    pub day: WrkResult,
    /// Webhook ingest.
    pub ingest: WrkResult,
}

/// What the scenario measured.
#[derive(Debug, Serialize)]
pub struct Tls {
    pub plain: Side,
    pub tls: Side,
    /// TLS day window requests/s over plain's.
    pub day_ratio: f64,
    /// TLS webhook ingest requests/s over plain's.
    pub ingest_ratio: f64,
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/sensorhub/tests/fixtures/tls").join(name)
}

/// Runs both loads against a server on `port` (`https` or not); readiness
/// is asked on the plain operations listener at `port + 1`.
fn side(bin: &Path, db: &str, args: &Args, https: bool, script: &Path) -> Result<Side, String> {
    let (port, ops) = (args.port, args.port + 1);
    let mut cmd = Command::new(bin);
    cmd.args(["serve", "--rate-limit", "off", "--webhook-mode", "ingest", "--database", db])
        .args(["--listen", &format!("127.0.0.1:{port}"), "--metrics-listen", &format!("127.0.0.1:{ops}")])
        .env("SENSORHUB_LOG", "warn");
    if https {
        cmd.arg("--tls-cert").arg(fixture("server-a.pem")).arg("--tls-key").arg(fixture("server-a.key"));
    }
    let _server = Server::start(&mut cmd, ops)?;
    let scheme = if https { "https" } else { "http" };
    let base = format!("{scheme}://127.0.0.1:{port}/external/v1");
    let auth = wrk::auth_header(Some(&basic(dataset::BENCH_USER.0, dataset::BENCH_USER.1)));
    let day = format!("{base}/devices/{}/data?{DAY}", dataset::REF_DEVICE);
    let hook = format!("{base}/webhook/sensor-data");
    let measure = |url: &str, headers: &[String], script: Option<&Path>| {
        // A second of warm-up (connections, handshakes, the first Argon2 check), not counted.
        wrk::run_with(url, headers, script, args.connections, 1)?;
        wrk::run_with(url, headers, script, args.connections, args.seconds)
    };
    let day = measure(&day, &auth, None)?;
    let ingest = measure(&hook, &[], Some(script))?;
    eprintln!("tls: {scheme}: day {:.0} req/s, ingest {:.0} req/s", day.requests_per_s, ingest.requests_per_s);
    Ok(Side { day, ingest })
}

/// Runs the scenario and writes its figures.
pub fn run(args: Args) -> Result<(Tls, PathBuf), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin = exe.parent().ok_or("no binary directory")?.join("sensorhub");
    let script = args.data.join("tls-ingest.lua");
    wrk::write_ingest_script(&script)?;
    // A fresh store for each side: the ingest load writes the same seconds again.
    let plain = side(&bin, &prepare(&bin, &args.data, dataset::SMALL, 42, None)?.db, &args, false, &script)?;
    let tls = side(&bin, &prepare(&bin, &args.data, dataset::SMALL, 42, None)?.db, &args, true, &script)?;
    let result = Tls {
        day_ratio: tls.day.requests_per_s / plain.day.requests_per_s,
        ingest_ratio: tls.ingest.requests_per_s / plain.ingest.requests_per_s,
        plain,
        tls,
    };
    std::fs::create_dir_all(&args.out).map_err(|e| e.to_string())?;
    let date = jiff::Timestamp::now().strftime("%Y-%m-%dT%H%M%SZ").to_string();
    let path = args.out.join(format!("{date}-tls.json"));
    std::fs::write(&path, serde_json::to_string_pretty(&result).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    Ok((result, path))
}

/// The scenario's figures as text.
pub fn report(t: &Tls) -> String {
    format!(
        "tls (HTTP/1.1 over TLS against plain HTTP, wrk):\n  day window: plain {:.0} req/s, TLS {:.0} req/s ({:.2}x)\n  \
         webhook ingest: plain {:.0} req/s, TLS {:.0} req/s ({:.2}x)",
        t.plain.day.requests_per_s,
        t.tls.day.requests_per_s,
        t.day_ratio,
        t.plain.ingest.requests_per_s,
        t.tls.ingest.requests_per_s,
        t.ingest_ratio,
    )
}
