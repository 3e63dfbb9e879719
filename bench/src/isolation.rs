//! The isolation part of `sensorhub-bench live` (issue 23), on a server of
//! its own with `--max-connections 600` and the default stream caps:
//! - a flood: `--flood` stream requests at once with one public key from
//!   one address, while `/healthz` and another caller's `latest` are timed
//!   (they must keep answering: streams have a budget and per-caller and
//!   per-address caps, and a refused stream's connection is closed);
//! - a revocation: streams of that key are held open, the key is revoked
//!   with `sensorhub key revoke` (another process, as an operator does), and
//!   the time from the command's return to each stream's end is taken.

use crate::dataset;
use crate::run::Server;
use crate::stats::percentile;
use serde::Serialize;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The connection cap of the isolation server (the scenario).
const MAX_CONNECTIONS: &str = "600";

/// What the isolation phase measured.
#[derive(Debug, Serialize)]
pub struct Isolation {
    /// Stream requests sent at once with one key from one address.
    pub flood: usize,
    /// Of them, streams the server opened.
    pub flood_open: usize,
    /// Of them, refused with 429.
    pub flood_refused: usize,
    /// `/healthz` during the flood, ms.
    pub healthz_p50_ms: f64,
    /// `/healthz` during the flood, ms.
    pub healthz_max_ms: f64,
    /// Another key's `latest` during the flood, ms.
    pub latest_p50_ms: f64,
    /// Streams held open when their key was revoked.
    pub revoked_streams: usize,
    /// From `key revoke` returning to a stream's end, ms.
    pub revoke_p50_ms: f64,
    /// From `key revoke` returning to the last stream's end, ms.
    pub revoke_max_ms: f64,
}

/// Sends a GET and reads the whole answer (HTTP/1.0: the server closes).
async fn get(port: u16, path: &str) -> Result<Vec<u8>, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| e.to_string())?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).await.map_err(|e| e.to_string())?;
    Ok(answer)
}

/// Opens a public stream of the reference station with `key`: the
/// connection when it answered 200, else `None` (the status line read).
async fn open(port: u16, key: &str) -> Result<Option<TcpStream>, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| e.to_string())?;
    let path = format!("/external/v1/{key}/devices/{}/stream", dataset::REF_DEVICE);
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut head = [0u8; 256];
    let n = s.read(&mut head).await.map_err(|e| e.to_string())?;
    match &head[..n.min(12)] {
        b"HTTP/1.0 200" | b"HTTP/1.1 200" => Ok(Some(s)),
        b"HTTP/1.0 429" | b"HTTP/1.1 429" => Ok(None),
        other => Err(format!("stream answered {}", String::from_utf8_lossy(other))),
    }
}

/// Times `GET path` `n` times, 20 ms apart; sorted latencies in ms.
async fn timed(port: u16, path: &str, n: usize) -> Result<Vec<f64>, String> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(5), get(port, path))
            .await
            .map_err(|_| format!("{path} did not answer within 5 s"))??;
        if !answer.starts_with(b"HTTP/1.0 200") && !answer.starts_with(b"HTTP/1.1 200") {
            return Err(format!("{path}: {}", String::from_utf8_lossy(&answer[..answer.len().min(80)])));
        }
        out.push(started.elapsed().as_secs_f64() * 1000.0);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    out.sort_by(f64::total_cmp);
    Ok(out)
}

/// Reads `s` until the server ends it.
async fn until_end(mut s: TcpStream) {
    let mut chunk = [0u8; 1024];
    while s.read(&mut chunk).await.is_ok_and(|n| n > 0) {}
}

/// Runs the phase against `db` (provisioned by the live scenario) on
/// `port`; `other` is a station the `fifty` key sees (the other caller).
pub fn run(sensorhub: &Path, db: &Path, port: u16, flood: usize, other: &str) -> Result<Isolation, String> {
    let mut cmd = Command::new(sensorhub);
    cmd.args(["serve", "--rate-limit", "off", "--max-connections", MAX_CONNECTIONS])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .arg("--database")
        .arg(db)
        .env("SENSORHUB_LOG", "warn");
    let server = Server::start(&mut cmd, port)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let result = rt.block_on(async {
        let opening: Vec<_> = (0..flood).map(|_| tokio::spawn(open(port, dataset::BENCH_KEY))).collect();
        let latest = format!("/external/v1/{}/devices/{other}/latest", dataset::FIFTY_KEY);
        let healthz = timed(port, "/healthz", 50).await?;
        let latest = timed(port, &latest, 20).await?;
        let mut held = Vec::new();
        let mut refused = 0;
        for task in opening {
            match task.await.map_err(|e| e.to_string())?? {
                Some(s) => held.push(s),
                None => refused += 1,
            }
        }
        let flood_open = held.len();
        drop(held);
        // Revocation: the key's streams, then `key revoke` from another process.
        let mut streams = Vec::new();
        while let Some(s) = open(port, dataset::BENCH_KEY).await? {
            streams.push(s);
            if streams.len() == 30 {
                break;
            }
        }
        let revoked_streams = streams.len();
        let revoke = Command::new(sensorhub)
            .args(["key", "revoke", dataset::BENCH_KEY, "--database"])
            .arg(db)
            .env("SENSORHUB_LOG", "warn")
            .output()
            .map_err(|e| e.to_string())?;
        if !revoke.status.success() {
            return Err(format!("key revoke failed: {}", String::from_utf8_lossy(&revoke.stderr)));
        }
        let revoked_at = Instant::now();
        let ends: Vec<_> = streams
            .into_iter()
            .map(|s| {
                tokio::spawn(async move {
                    until_end(s).await;
                    revoked_at.elapsed().as_secs_f64() * 1000.0
                })
            })
            .collect();
        let mut revoke_ms = Vec::new();
        for end in ends {
            let ms = tokio::time::timeout(Duration::from_secs(30), end)
                .await
                .map_err(|_| "a revoked key's stream was still open after 30 s".to_owned())?
                .map_err(|e| e.to_string())?;
            revoke_ms.push(ms);
        }
        revoke_ms.sort_by(f64::total_cmp);
        Ok::<_, String>(Isolation {
            flood,
            flood_open,
            flood_refused: refused,
            healthz_p50_ms: percentile(&healthz, 0.5),
            healthz_max_ms: healthz.last().copied().unwrap_or(f64::NAN),
            latest_p50_ms: percentile(&latest, 0.5),
            revoked_streams,
            revoke_p50_ms: percentile(&revoke_ms, 0.5),
            revoke_max_ms: revoke_ms.last().copied().unwrap_or(f64::NAN),
        })
    });
    drop(server);
    result
}

/// The phase's figures as text.
pub fn report(i: &Isolation) -> String {
    format!(
        "isolation (--max-connections {MAX_CONNECTIONS}, default stream caps): {} stream requests with one key from one \
         address: {} open, {} refused (429); meanwhile /healthz p50 {:.2} ms, max {:.2} ms, another key's latest \
         p50 {:.2} ms\n{} open streams of a key revoked by `sensorhub key revoke`: ended {:.0} ms (p50), {:.0} ms (max) \
         after the command returned",
        i.flood,
        i.flood_open,
        i.flood_refused,
        i.healthz_p50_ms,
        i.healthz_max_ms,
        i.latest_p50_ms,
        i.revoked_streams,
        i.revoke_p50_ms,
        i.revoke_max_ms,
    )
}
