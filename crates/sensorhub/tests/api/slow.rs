//! Slow and stalled clients are shed by the configured limits while a
//! normal client is served the whole time: hundreds of connections that
//! send half a request head (or nothing), and readers that stop reading a
//! long answer. A slow reader that keeps taking bytes is not cut.

use crate::harness::{ALICE_PASSWORD, TestApp, basic, metric_in};
use sensorhub::config::serve::ServeSettings;
use sensorhub::config::server::ConnectionLimits;
use sensorhub::limiter::RateLimitSetting;
use sensorhub_core::model::{Origin, ReadingInput, ValueInput};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;

const SLOW: usize = 300;

fn limits() -> ConnectionLimits {
    ConnectionLimits {
        header_read_timeout: Duration::from_secs(2),
        keep_alive_timeout: Duration::from_secs(1),
        write_timeout: Duration::from_secs(1),
        max_connections: 4096,
        per_address: 512,
        shutdown_grace: Duration::from_secs(2),
        ..ConnectionLimits::default()
    }
}

async fn app() -> TestApp {
    let options = ServeSettings { rate_limit: RateLimitSetting::Off, ..TestApp::settings() };
    TestApp::with_limits(options, limits()).await
}

fn addr(app: &TestApp) -> String {
    app.root().trim_start_matches("http://").to_owned()
}

/// Waits until the server closes `conn` (EOF or reset), for at most `within`;
/// returns how long that took.
async fn closed_within(conn: &mut TcpStream, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(started + within, conn.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0) | Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => {}
        }
    }
}

/// A value of the `sensorhub_…` metric line starting with `prefix`.
async fn metric(app: &TestApp, prefix: &str) -> f64 {
    let text = app.request(reqwest::Method::GET, &format!("{}/metrics", app.root()), &[], None).await.text;
    metric_in(&text, prefix)
}

#[tokio::test]
async fn half_sent_heads_and_silent_connections_are_closed_while_others_are_served() {
    let app = app().await;
    let addr = addr(&app);
    let mut slow = Vec::with_capacity(SLOW);
    for i in 0..SLOW {
        let mut conn = TcpStream::connect(&addr).await.expect("connect");
        if i % 2 == 0 {
            // Half a head, then nothing (slowloris).
            conn.write_all(b"GET /external/v1/devices HTTP/1.1\r\nHost: x\r\nX-Slow: ").await.expect("write");
        }
        slow.push(conn);
    }
    let opened = Instant::now();
    // A normal client is served, on fresh connections and without a failure,
    // while the slow ones are held and shed.
    let normal = async {
        let mut served = 0;
        while opened.elapsed() < Duration::from_secs(3) {
            let a = app.alice("/devices").await;
            assert_eq!(a.status, 200, "a normal client is served: {}", a.text);
            served += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        served
    };
    let shed = async {
        let mut latest = Duration::ZERO;
        for conn in &mut slow {
            let waited = closed_within(conn, Duration::from_secs(6)).await.expect("a slow connection is closed");
            latest = latest.max(opened.elapsed().max(waited));
        }
        latest
    };
    let (served, latest) = tokio::join!(normal, shed);
    assert!(served >= 20, "the normal client got {served} answers");
    // header-read 2 s (idle 1 s for the silent ones), plus scheduling slack.
    assert!(latest < Duration::from_secs(4), "the last slow connection was closed after {latest:?}");
    let header = metric(&app, "sensorhub_http_connections_closed_total{reason=\"header_timeout\"}").await;
    let idle = metric(&app, "sensorhub_http_connections_closed_total{reason=\"idle\"}").await;
    assert!(header + idle >= SLOW as f64, "closed by header timeout {header}, idle {idle}");
    assert!(header >= (SLOW / 2) as f64, "half-sent heads are closed by the header timeout: {header}");
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_keep_alive_timeout() {
    let app = app().await;
    let mut conn = TcpStream::connect(addr(&app)).await.expect("connect");
    let head = format!(
        "GET /external/v1/devices HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\n\r\n",
        basic("alice", ALICE_PASSWORD)
    );
    // Counted from before the request: the server's timeout starts after its answer, before it is read here.
    let sent = tokio::time::Instant::now();
    conn.write_all(head.as_bytes()).await.expect("write");
    let mut buf = vec![0u8; 65536];
    let n = conn.read(&mut buf).await.expect("read");
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&buf[..n]));
    closed_within(&mut conn, Duration::from_secs(5)).await.expect("the idle connection is closed");
    let waited = sent.elapsed();
    assert!(waited >= Duration::from_secs(1), "not before the keep-alive timeout: {waited:?}");
}

/// The path of the long answer [`add_long_history`] makes.
pub(crate) const LONG_PATH: &str =
    "/external/v1/pk-alice-all/devices/AWLR-001/data?start=2026-01-01T00:00:00Z&end=2026-03-01T00:00:00Z";

/// 60,000 one-minute readings of AWLR-001 (four sensors) from 2026-01-01:
/// an answer of about 12 MB at [`LONG_PATH`], more than the kernel buffers
/// of both ends hold.
pub(crate) async fn add_long_history(app: &TestApp) {
    add_history(app, 1_767_225_600, 60).await; // from 2026-01-01T00:00:00Z
}

/// 60,000 readings of AWLR-001 (four sensors) from `start`, `step` seconds apart.
pub(crate) async fn add_history(app: &TestApp, start: i64, step: i64) {
    let readings = (0..60_000i64)
        .map(|i| ReadingInput {
            device_id: "AWLR-001".into(),
            timestamp: start + i * step,
            values: ["AWLR1-batt", "AWLR1-wl", "AWLR1-sig", "AWLR1-status"]
                .iter()
                .enumerate()
                .map(|(k, s)| ValueInput {
                    sensor_id: (*s).into(),
                    value: (i % 1000) as f64 / 7.0 + k as f64,
                    unit: None,
                })
                .collect(),
            origin: Origin::Item("slow".into()),
        })
        .collect();
    app.add_readings(readings).await;
}

/// [`add_long_history`], and the raw HTTP/1.1 request of its long answer.
async fn long_history(app: &TestApp) -> String {
    add_long_history(app).await;
    format!("GET {LONG_PATH} HTTP/1.1\r\nHost: x\r\n\r\n")
}

/// A connection with a small receive buffer, so that a reader that stops
/// reading stalls the server's writes soon.
async fn small_window(addr: &str) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(16 * 1024).expect("rcvbuf");
    socket.connect(addr.parse().expect("addr")).await.expect("connect")
}

#[tokio::test]
async fn a_reader_that_stops_is_cut_and_a_slow_live_reader_is_not() {
    let app = app().await;
    let request = long_history(&app).await;
    let addr = addr(&app);

    // Stalled readers: read the first bytes, then nothing.
    let mut stalled = Vec::new();
    for _ in 0..20 {
        let mut conn = small_window(&addr).await;
        conn.write_all(request.as_bytes()).await.expect("write");
        let mut first = [0u8; 1024];
        let n = conn.read(&mut first).await.expect("read");
        assert!(first[..n].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&first[..n]));
        stalled.push(conn);
    }
    // A live reader that takes 256 KiB every 100 ms: slower than the server
    // writes, but never silent for the write timeout.
    let mut live = small_window(&addr).await;
    live.write_all(request.as_bytes()).await.expect("write");
    let live_read = async {
        let mut total = 0usize;
        let tail;
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            let mut got = 0;
            while got < buf.len() {
                match live.read(&mut buf[got..]).await.expect("the live reader is not cut") {
                    0 => break,
                    n => got += n,
                }
            }
            total += got;
            if got < buf.len() {
                tail = buf[got.saturating_sub(8)..got].to_vec();
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (total, tail)
    };
    let stalled_cut = async {
        let started = Instant::now();
        // Written is a while; the write guard fires once the buffers are full.
        loop {
            let open = metric(&app, "sensorhub_http_connections ").await;
            let cut = metric(&app, "sensorhub_http_connections_closed_total{reason=\"write_stall\"}").await;
            if cut >= 20.0 {
                return (started.elapsed(), open);
            }
            assert!(started.elapsed() < Duration::from_secs(10), "stalled readers still held: {cut} cut");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let ((total, tail), (cut_after, _)) = tokio::join!(live_read, stalled_cut);
    assert!(total > 8_000_000, "the live reader got the whole answer ({total} bytes)");
    assert!(tail.ends_with(b"0\r\n\r\n"), "the chunked answer ended properly: {tail:?}");
    assert!(cut_after < Duration::from_secs(8), "stalled readers were cut after {cut_after:?}");
    // The service still answers, and nothing is left holding connections.
    assert_eq!(app.alice("/devices").await.status, 200);
    for mut conn in stalled {
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(&mut rest)).await;
        assert!(!rest.ends_with(b"0\r\n\r\n"), "a stalled reader's answer was cut short");
    }
}
