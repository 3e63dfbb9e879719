//! `sensorhub-bench live`: live streams at capacity. A release server over
//! the small fleet's provisioning (no history) holds `--streams` idle
//! Server-Sent Event streams of the reference station; reported are its RSS
//! per idle stream ((RSS with the streams − RSS before) / streams) and, while
//! they stay open, the ingest-to-event latency: from the moment a webhook
//! POST of a reading is sent to the moment each stream has its event
//! (p50/p99 over every stream and event, so the fan-out to all streams is in
//! the figure).

use crate::dataset;
use crate::run::{Server, basic};
use crate::stats::percentile;
use serde::Serialize;
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Arguments of `live`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Streams held open at once
    #[arg(long, default_value_t = 2000)]
    streams: usize,
    /// Readings ingested (one webhook POST each) while the streams are open
    #[arg(long, default_value_t = 500)]
    events: u64,
    /// Readings ingested per second
    #[arg(long, default_value_t = 20)]
    rate: u64,
    /// Where the database and results are kept
    #[arg(long, default_value = "bench/data")]
    data: PathBuf,
    /// Where the JSON results go
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
    /// Loopback port of the server (the isolation phase's server uses the next one)
    #[arg(long, default_value_t = 18430)]
    port: u16,
    /// Stream requests sent at once with one key in the isolation phase
    #[arg(long, default_value_t = 800)]
    flood: usize,
}

/// What the scenario measured.
#[derive(Debug, Serialize)]
pub struct Live {
    /// Streams open.
    pub streams: usize,
    /// Server RSS before the streams, MiB.
    pub rss_before_mib: f64,
    /// Server RSS with the streams open and idle, MiB.
    pub rss_streams_mib: f64,
    /// (RSS with − RSS before) / streams, KiB.
    pub rss_per_stream_kib: f64,
    /// Readings ingested.
    pub events: u64,
    /// Events received over all streams (target: events × streams).
    pub received: u64,
    /// Ingest-to-event latency, ms.
    pub p50_ms: f64,
    /// Ingest-to-event latency, ms.
    pub p99_ms: f64,
    /// Ingest-to-event latency, ms.
    pub max_ms: f64,
    /// Webhook POST latency (to its 200), p50, ms.
    pub ingest_p50_ms: f64,
    /// The isolation phase (issue 23).
    pub isolation: crate::isolation::Isolation,
}

/// When each reading (by its value) was sent, and every latency measured.
#[derive(Default)]
struct Clock {
    sent: Mutex<HashMap<u64, Instant>>,
    latencies: Mutex<Vec<f64>>,
}

/// Opens one stream with HTTP/1.0 (the body is then the raw event text)
/// and waits for its first bytes.
async fn open(port: u16, auth: &str) -> Result<TcpStream, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| e.to_string())?;
    let path = format!("/external/v1/devices/{}/stream", dataset::REF_DEVICE);
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nAuthorization: {auth}\r\n\r\n");
    s.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
    let mut head = [0u8; 512];
    let n = s.read(&mut head).await.map_err(|e| e.to_string())?;
    if !head[..n].starts_with(b"HTTP/1.0 200") && !head[..n].starts_with(b"HTTP/1.1 200") {
        return Err(format!("stream refused: {}", String::from_utf8_lossy(&head[..n])));
    }
    Ok(s)
}

/// Reads a stream's events, recording each one's latency, until `expected` arrived.
async fn read_events(mut s: TcpStream, clock: Arc<Clock>, expected: u64) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut got = 0;
    while got < expected {
        let Ok(n) = s.read(&mut chunk).await else { return };
        if n == 0 {
            return;
        }
        let now = Instant::now();
        buf.extend_from_slice(&chunk[..n]);
        while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
            let block = String::from_utf8_lossy(&buf[..end]).into_owned();
            buf.drain(..end + 2);
            let Some(value) = block.split("\"value\":").nth(1) else { continue };
            let Some(k) = value.split(['.', ',', '}']).next().and_then(|v| v.parse::<u64>().ok()) else { continue };
            let sent = clock.sent.lock().ok().and_then(|m| m.get(&k).copied());
            if let (Some(sent), Ok(mut l)) = (sent, clock.latencies.lock()) {
                l.push(now.duration_since(sent).as_secs_f64() * 1000.0);
            }
            got += 1;
        }
    }
}

/// Sends one webhook POST of reading `k` (value `k`) and waits for its answer.
async fn ingest(port: u16, k: u64) -> Result<(), String> {
    post_reading(port, 1_790_000_000 + k as i64 * 60, k).await
}

/// Sends one webhook POST of the reference station's water level `value`
/// at `second` and waits for its answer (also the webhook bench's load).
pub(crate) async fn post_reading(port: u16, second: i64, value: u64) -> Result<(), String> {
    let body = reading_envelope(second, value)?;
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| e.to_string())?;
    let request = format!(
        "POST /external/v1/webhook/sensor-data HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         X-API-KEY: {}\r\nContent-Length: {}\r\n\r\n{body}",
        dataset::BENCH_WEBHOOK_KEY,
        body.len()
    );
    s.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).await.map_err(|e| e.to_string())?;
    if !answer.starts_with(b"HTTP/1.0 200") && !answer.starts_with(b"HTTP/1.1 200") {
        return Err(format!("ingest refused: {}", String::from_utf8_lossy(&answer)));
    }
    Ok(())
}

/// The webhook envelope of the reference station's water level `value` at `second`.
pub(crate) fn reading_envelope(second: i64, value: u64) -> Result<String, String> {
    let ts = jiff::Timestamp::from_second(second).map_err(|e| e.to_string())?;
    Ok(format!(
        r#"{{"event":"sensor-data","device_id":"{}","timestamp":"{ts}","data":{{"REF-wl":{value}}}}}"#,
        dataset::REF_DEVICE
    ))
}

/// The webhook body of reading `k` of the reference station, a second
/// after the bench's epoch each: its water level alone, or (`full`) its
/// four sensors with values that change in their last digits, as a
/// logger's do.
pub(crate) fn reading_body(k: u64, full: bool) -> Result<String, String> {
    let second = 1_700_000_000 + k as i64;
    if !full {
        return reading_envelope(second, k);
    }
    let ts = jiff::Timestamp::from_second(second).map_err(|e| e.to_string())?;
    let (batt, wl) =
        (12.0 + (k * 7 % 1000) as f64 / 1000.0, 100.0 + (k % 400) as f64 + (k * 13 % 1000) as f64 / 1000.0);
    Ok(format!(
        r#"{{"event":"sensor-data","device_id":"{}","timestamp":"{ts}","data":{{"sensors":[{{"id":"REF-batt","value":{batt}}},{{"id":"REF-sig","value":-{}}},{{"id":"REF-wl","value":{wl}}},{{"id":"REF-alert","value":{}}}]}}}}"#,
        dataset::REF_DEVICE,
        50 + k % 40,
        u8::from(k.is_multiple_of(97)),
    ))
}

/// The number of open streams the server reports.
async fn open_streams(port: u16) -> Option<usize> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").await.ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).await.ok()?;
    text.lines().find_map(|l| l.strip_prefix("sensorhub_live_streams ")?.trim().parse().ok())
}

/// Runs the scenario and writes its figures.
pub fn run(args: Args) -> Result<(Live, PathBuf), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let sensorhub = exe.parent().ok_or("no binary directory")?.join("sensorhub");
    let dir = args.data.join("live");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let db = dir.join("live.db");
    let provision = dir.join("provision.json");
    let stations = dataset::stations(dataset::SMALL, 42);
    std::fs::write(&provision, dataset::provision(&stations).to_string()).map_err(|e| e.to_string())?;
    let applied = Command::new(&sensorhub)
        .arg("apply")
        .arg(&provision)
        .arg("--database")
        .arg(&db)
        .env("SENSORHUB_LOG", "warn")
        .output()
        .map_err(|e| e.to_string())?;
    if !applied.status.success() {
        return Err(format!("apply failed: {}", String::from_utf8_lossy(&applied.stderr)));
    }
    let port = args.port;
    let mut cmd = Command::new(&sensorhub);
    cmd.args(["serve", "--rate-limit", "off", "--webhook-mode", "ingest", "--listen", &format!("127.0.0.1:{port}")])
        // One user holds every stream here: lift the per-caller and per-address caps.
        .args(["--max-streams-per-caller", "1000000", "--max-streams-per-address", "1000000"])
        .arg("--database")
        .arg(&db)
        .env("SENSORHUB_LOG", "warn");
    let server = Server::start(&mut cmd, port)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let auth = basic(dataset::BENCH_USER.0, dataset::BENCH_USER.1);
    let clock = Arc::new(Clock::default());
    let (streams, events) = (args.streams, args.events);
    let result = rt.block_on(async {
        // One stream first, so that the login is verified and cached and
        // the process is warm before the baseline.
        drop(open(port, &auth).await?);
        ingest(port, 0).await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let rss_before_mib = server.rss("VmRSS:");
        let mut opened = Vec::with_capacity(streams);
        for _ in 0..streams {
            opened.push(open(port, &auth).await?);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while open_streams(port).await != Some(streams) {
            if Instant::now() > deadline {
                return Err(format!("the server never reported {streams} open streams"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let rss_streams_mib = server.rss("VmRSS:");
        eprintln!("live: {streams} streams open, RSS {rss_before_mib:.1} → {rss_streams_mib:.1} MiB");
        let readers: Vec<_> = opened.into_iter().map(|s| tokio::spawn(read_events(s, clock.clone(), events))).collect();
        let mut posts = Vec::with_capacity(events as usize);
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / args.rate.max(1) as f64));
        for k in 1..=events {
            tick.tick().await;
            let started = Instant::now();
            if let Ok(mut sent) = clock.sent.lock() {
                sent.insert(k, started);
            }
            ingest(port, k).await?;
            posts.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        let all = futures_join(readers, Duration::from_secs(30)).await;
        posts.sort_by(f64::total_cmp);
        Ok::<_, String>((rss_before_mib, rss_streams_mib, percentile(&posts, 0.5), all))
    });
    drop(server);
    let (rss_before_mib, rss_streams_mib, ingest_p50_ms, complete) = result?;
    let other = stations.get(1).map_or(dataset::REF_DEVICE, |s| s.id.as_str());
    let isolation = crate::isolation::run(&sensorhub, &db, port + 1, args.flood, other)?;
    let mut latencies = clock.latencies.lock().map_err(|_| "poisoned")?.clone();
    latencies.sort_by(f64::total_cmp);
    if !complete {
        eprintln!("live: some streams did not get every event within 30 s");
    }
    let live = Live {
        streams,
        rss_before_mib,
        rss_streams_mib,
        rss_per_stream_kib: (rss_streams_mib - rss_before_mib) * 1024.0 / streams.max(1) as f64,
        events,
        received: latencies.len() as u64,
        p50_ms: percentile(&latencies, 0.5),
        p99_ms: percentile(&latencies, 0.99),
        max_ms: latencies.last().copied().unwrap_or(f64::NAN),
        ingest_p50_ms,
        isolation,
    };
    std::fs::create_dir_all(&args.out).map_err(|e| e.to_string())?;
    let date = jiff::Timestamp::now().strftime("%Y-%m-%dT%H%M%SZ").to_string();
    let path = args.out.join(format!("{date}-live.json"));
    let json = serde_json::to_string_pretty(&live).map_err(|e| e.to_string())?;
    std::fs::write(&path, json).map_err(|e| e.to_string())?;
    Ok((live, path))
}

/// Waits for every reader, at most `limit`; whether all finished.
async fn futures_join(readers: Vec<tokio::task::JoinHandle<()>>, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    let mut all = true;
    for r in readers {
        let abort = r.abort_handle();
        if tokio::time::timeout_at(deadline, r).await.is_err() {
            abort.abort();
            all = false;
        }
    }
    all
}

/// The scenario's figures as text.
pub fn report(l: &Live) -> String {
    format!(
        "live: {} idle streams: RSS {:.1} → {:.1} MiB, {:.1} KiB per stream\n\
         {} readings ingested while open ({} events received of {}): ingest-to-event p50 {:.2} ms, p99 {:.2} ms, \
         max {:.2} ms (webhook POST p50 {:.2} ms)",
        l.streams,
        l.rss_before_mib,
        l.rss_streams_mib,
        l.rss_per_stream_kib,
        l.events,
        l.received,
        l.events * l.streams as u64,
        l.p50_ms,
        l.p99_ms,
        l.max_ms,
        l.ingest_p50_ms,
    ) + "\n"
        + &crate::isolation::report(&l.isolation)
}
