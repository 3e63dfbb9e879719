//! Each client address's answers rendered and not yet sent are bounded:
//! past `--max-answer-bytes-per-address`, its next request waits for them
//! to drain and is answered 429 when they do not, while other addresses
//! are served; one that drains in time lets the waiting request through.

use crate::harness::TestApp;
use crate::slow::add_history;
use sensorhub::config::server::parse_networks;
use sensorhub::limiter::RateLimitSetting;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;

/// 60,000 readings a second apart (a dense logger): about 12 MB in one
/// page of hours, of which the first 8 MiB are rendered before a byte goes.
const DENSE: &str =
    "/external/v1/pk-alice-all/devices/AWLR-001/data?start=2026-02-01T00:00:00Z&end=2026-02-01T23:59:59Z";
const DEVICES: &str = "/external/v1/pk-alice-all/devices";

/// A connection from loopback address `source`, with a small receive buffer.
async fn connect_from(app: &TestApp, source: &str) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(16 * 1024).expect("rcvbuf");
    socket.bind(format!("{source}:0").parse().expect("source")).expect("bind");
    socket.connect(app.root().trim_start_matches("http://").parse().expect("addr")).await.expect("connect")
}

async fn send(conn: &mut TcpStream, path: &str) {
    conn.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await.expect("write");
}

/// Reads until the answer's head is in; the head, and what came after it.
async fn head(conn: &mut TcpStream) -> (String, Vec<u8>) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            return (String::from_utf8_lossy(&got[..end]).into_owned(), got[end + 4..].to_vec());
        }
        let n =
            tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf)).await.expect("in time").expect("read");
        assert!(n > 0, "closed before a head: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
}

/// The answer's status line and body (of its Content-Length).
async fn answer(conn: &mut TcpStream) -> (String, String) {
    let (head, mut body) = head(conn).await;
    let length = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length: ").map(|n| n.trim().parse::<usize>()))
        .expect("a sized answer")
        .expect("a length");
    let mut buf = vec![0u8; 64 * 1024];
    while body.len() < length {
        let n =
            tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf)).await.expect("in time").expect("read");
        assert!(n > 0, "closed in the body");
        body.extend_from_slice(&buf[..n]);
    }
    (head.lines().next().unwrap_or_default().to_owned(), String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn an_address_past_its_answer_bytes_waits_then_gets_429_while_others_are_served() {
    let mut settings = TestApp::settings();
    settings.rate_limit = RateLimitSetting::Off;
    // Loopback is not a trusted proxy here: the tests' addresses count.
    settings.trusted_proxies = parse_networks("10.0.0.0/8").expect("networks");
    settings.connections.answer_bytes_per_address = 1 << 20;
    let app = TestApp::with(settings).await;
    add_history(&app, 1_769_904_000, 1).await; // from 2026-02-01T00:00:00Z

    // An answer of about 12 MB that 127.0.0.1 does not read: of its first
    // 8 MiB, the kernel's buffers (4 MiB at most) and hyper's take less
    // than half.
    let mut stalled = connect_from(&app, "127.0.0.1").await;
    send(&mut stalled, DENSE).await;
    let (head, _) = head(&mut stalled).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");

    // Its next request waits for them, then is refused in the read API's form.
    let asked = Instant::now();
    let refused = tokio::spawn({
        let mut conn = connect_from(&app, "127.0.0.1").await;
        async move {
            send(&mut conn, DEVICES).await;
            answer(&mut conn).await
        }
    });
    // Another address is served meanwhile, at once.
    let mut other = connect_from(&app, "127.0.0.2").await;
    let served = Instant::now();
    send(&mut other, DEVICES).await;
    let (status, _) = answer(&mut other).await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(served.elapsed() < Duration::from_secs(2), "another address waited {:?}", served.elapsed());
    let (status, body) = refused.await.expect("ran");
    assert_eq!(
        (status.as_str(), body.as_str()),
        ("HTTP/1.1 429 Too Many Requests", r#"{"message":"To Many Request","data":null}"#)
    );
    assert!(asked.elapsed() >= Duration::from_secs(4), "refused only after waiting: {:?}", asked.elapsed());

    // A request that waits while the answers are read gets through.
    let waiting = tokio::spawn({
        let mut conn = connect_from(&app, "127.0.0.1").await;
        async move {
            send(&mut conn, DEVICES).await;
            let asked = Instant::now();
            (answer(&mut conn).await.0, asked.elapsed())
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    // To the chunked answer's last chunk.
    let mut buf = vec![0u8; 256 * 1024];
    let (mut read, mut tail) = (0, Vec::new());
    while !tail.ends_with(b"\r\n0\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), stalled.read(&mut buf))
            .await
            .expect("in time")
            .expect("read");
        assert!(n > 0, "the stalled answer is whole");
        read += n;
        tail.extend_from_slice(&buf[..n]);
        tail.drain(..tail.len().saturating_sub(16));
    }
    assert!(read > 10_000_000, "the whole answer: {read} bytes");
    let (status, took) = waiting.await.expect("ran");
    assert_eq!(status, "HTTP/1.1 200 OK", "served once its address's answers drained");
    assert!(took < Duration::from_secs(5), "within the wait: {took:?}");

    let mut metrics = connect_from(&app, "127.0.0.2").await;
    send(&mut metrics, "/metrics").await;
    let (_, text) = answer(&mut metrics).await;
    assert!(text.contains("sensorhub_http_answer_bytes_refused_total 1\n"), "{text}");
}
