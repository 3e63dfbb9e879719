//! `sensorhub-bench soak`: a bounded soak. A release server on the small
//! store takes mixed load for a fixed time (reads of a day of a station by
//! Basic auth, the station and day drawn at random, and webhook readings
//! of the fleet's stations in turn, round the week they hold: each from
//! its own wrk, `soak_load.rs`), while its RSS, open file descriptors and
//! the bytes its bounded caches hold are sampled every few seconds.
//! Reported: the samples, the mean RSS of the first window after warm-up
//! (a minute, or until the caches are first full if that is later) and of
//! the last window (target: last ≤ 1.1 × first), and the error answers
//! (target: 0).

use crate::dataset;
use crate::run::{Server, basic, prepare};
use crate::soak_load;
use crate::wrk::{self, WrkResult};
use serde::Serialize;
use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// Arguments of `soak`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Minutes of load (CI runs a fraction of one)
    #[arg(long, default_value_t = 10.0)]
    minutes: f64,
    /// Seconds between two samples of RSS and file descriptors
    #[arg(long, default_value_t = 5)]
    every: u64,
    /// Seed of the generated data
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Where datasets and stores are kept
    #[arg(long, default_value = "bench/data")]
    data: PathBuf,
    /// Where the JSON results go
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
    /// Loopback port of the server
    #[arg(long, default_value_t = 18420)]
    port: u16,
}

/// One sample of the server process.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sample {
    /// Seconds since the load began.
    pub at_s: f64,
    /// Resident memory, MiB.
    pub rss_mib: f64,
    /// Open file descriptors.
    pub fds: usize,
    /// What the server's bounded caches held (`sensorhub_memory_cache_bytes`), MiB.
    pub caches_mib: f64,
}

/// What a soak measured.
#[derive(Debug, Serialize)]
pub struct Soak {
    /// Seconds of load.
    pub seconds: u64,
    /// Reads of one day (Basic auth).
    pub reads: WrkResult,
    /// Webhook ingest of new readings.
    pub ingest: WrkResult,
    /// Every sample.
    pub samples: Vec<Sample>,
    /// Seconds of warm-up left out of the first window: a window, or until
    /// the caches were first full ([`Soak::caches_full_s`]) if later and a
    /// window is left before the last.
    pub warm_up_s: f64,
    /// When the bounded caches first let go of a part of what they held
    /// (the kept hours, which fill at the ingest's pace, at their bound):
    /// memory that grows until then is the caches filling, not a leak.
    pub caches_full_s: Option<f64>,
    /// Mean RSS of the first window after warm-up, MiB.
    pub first_rss_mib: f64,
    /// Mean RSS of the last window, MiB.
    pub last_rss_mib: f64,
    /// Most file descriptors seen.
    pub max_fds: usize,
}

fn sample(pid: u32, port: u16, server: &Server, started: Instant) -> Sample {
    let fds = fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    Sample { at_s: started.elapsed().as_secs_f64(), rss_mib: server.rss("VmRSS:"), fds, caches_mib: caches_mib(port) }
}

/// The bytes the server's bounded caches hold, from its metrics, MiB (0 if
/// they cannot be read).
fn caches_mib(port: u16) -> f64 {
    let Ok(text) = crate::run::get(port, "/metrics", None) else { return 0.0 };
    let text = String::from_utf8_lossy(&text);
    let bytes: f64 = text
        .lines()
        .filter(|l| l.starts_with("sensorhub_memory_cache_bytes{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    bytes / (1024.0 * 1024.0)
}

/// The first sample at which the caches held at least 2 MiB less than at
/// the one before: the kept hours' first eviction at their bound (the
/// rendered hours, which fill within seconds, let go an entry at a time).
fn caches_full(samples: &[Sample]) -> Option<f64> {
    samples.windows(2).find(|w| w[1].caches_mib + 2.0 <= w[0].caches_mib).map(|w| w[1].at_s)
}

fn mean_rss(samples: &[Sample], from: f64, to: f64) -> f64 {
    let window: Vec<f64> = samples.iter().filter(|s| s.at_s >= from && s.at_s < to).map(|s| s.rss_mib).collect();
    if window.is_empty() { 0.0 } else { window.iter().sum::<f64>() / window.len() as f64 }
}

/// Runs the soak and writes its figures.
pub fn run(args: Args) -> Result<(Soak, PathBuf), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let sensorhub = exe.parent().ok_or("no binary directory")?.join("sensorhub");
    let store = prepare(&sensorhub, &args.data, dataset::SMALL, args.seed, None)?;
    let secs = ((args.minutes * 60.0).round() as u64).max(8);
    let port = args.port;
    let mut cmd = Command::new(&sensorhub);
    cmd.args(["serve", "--rate-limit", "off", "--webhook-mode", "ingest", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--database")
        .arg(&store.db)
        .env("SENSORHUB_LOG", "warn");
    let server = Server::start(&mut cmd, port)?;
    let pid = server.pid();
    let stations = dataset::stations(dataset::SMALL, args.seed);
    let (script, read_script) = (args.data.join("soak-ingest.lua"), args.data.join("soak-reads.lua"));
    fs::write(&script, soak_load::ingest(&stations)).map_err(|e| e.to_string())?;
    fs::write(&read_script, soak_load::reads(&stations)).map_err(|e| e.to_string())?;
    let auth = basic(dataset::BENCH_USER.0, dataset::BENCH_USER.1);
    let read_url = format!("http://127.0.0.1:{port}/");
    let ingest_url = read_url.clone();
    eprintln!("soak: {secs} s of reads and webhook ingest, sampling every {} s", args.every);
    let started = Instant::now();
    let reads = std::thread::spawn(move || {
        wrk::run_with(&read_url, &wrk::auth_header(Some(&auth)), Some(&read_script), 8, secs)
    });
    let ingest_script = script.clone();
    let ingest = std::thread::spawn(move || wrk::run_with(&ingest_url, &[], Some(&ingest_script), 4, secs));
    let mut samples = vec![sample(pid, port, &server, started)];
    while !(reads.is_finished() && ingest.is_finished()) {
        std::thread::sleep(
            Duration::from_secs(args.every).min(Duration::from_secs(secs / 8).max(Duration::from_secs(1))),
        );
        if !(reads.is_finished() && ingest.is_finished()) {
            let s = sample(pid, port, &server, started);
            eprintln!(
                "  {:>6.0} s  RSS {:>7.1} MiB  caches {:>5.1} MiB  fds {:>4}",
                s.at_s, s.rss_mib, s.caches_mib, s.fds
            );
            samples.push(s);
        }
    }
    let reads = reads.join().map_err(|_| "the read load panicked")??;
    let ingest = ingest.join().map_err(|_| "the ingest load panicked")??;
    // Windows of a minute on a full soak; a quarter of the run on a short one.
    let window = (secs as f64 / 4.0).min(60.0);
    let caches_full = caches_full(&samples);
    let warm_up = match caches_full {
        Some(at) if at + 2.0 * window <= secs as f64 => at.max(window),
        _ => window,
    };
    let soak = Soak {
        seconds: secs,
        first_rss_mib: mean_rss(&samples, warm_up, warm_up + window),
        last_rss_mib: mean_rss(&samples, secs as f64 - window, f64::INFINITY),
        max_fds: samples.iter().map(|s| s.fds).max().unwrap_or(0),
        warm_up_s: warm_up,
        caches_full_s: caches_full,
        reads,
        ingest,
        samples,
    };
    fs::create_dir_all(&args.out).map_err(|e| e.to_string())?;
    let date = jiff::Timestamp::now().strftime("%Y-%m-%dT%H%M%SZ").to_string();
    let path = args.out.join(format!("{date}-soak.json"));
    fs::write(&path, serde_json::to_string_pretty(&soak).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    Ok((soak, path))
}

/// The soak's figures as text.
pub fn report(s: &Soak) -> String {
    let ratio = if s.first_rss_mib > 0.0 { s.last_rss_mib / s.first_rss_mib } else { f64::NAN };
    let errors = s.reads.errors + s.ingest.errors;
    let met = |ok: bool| if ok { "met" } else { "NOT met" };
    format!(
        "soak of {} s: reads {:.0} req/s (p99 {:.2} ms), webhook ingest {:.0} req/s (p99 {:.2} ms)\n\
         caches first full at {}; RSS first window after {:.0} s warm-up {:.1} MiB, last window {:.1} MiB: ratio {ratio:.3} (target <= 1.1: {})\n\
         file descriptors at most {}; error answers {errors} (target 0: {})",
        s.seconds,
        s.reads.requests_per_s,
        s.reads.p99_ms,
        s.ingest.requests_per_s,
        s.ingest.p99_ms,
        s.caches_full_s.map_or_else(|| "no sample".to_string(), |at| format!("{at:.0} s")),
        s.warm_up_s,
        s.first_rss_mib,
        s.last_rss_mib,
        met(ratio <= 1.1),
        s.max_fds,
        met(errors == 0),
    )
}
