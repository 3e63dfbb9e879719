//! Each client address's share of the connections: past it a connection is
//! answered 429 in its path's form and closed while the address's other
//! connections go on being served, a place given back is taken again, and
//! the trusted proxies (loopback by default) are not counted.

use crate::harness::{ALICE_PASSWORD, TestApp, basic};
use sensorhub::config::server::parse_networks;
use sensorhub::limiter::RateLimitSetting;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

async fn app(per_address: usize, trusted: &str) -> TestApp {
    let mut settings = TestApp::settings();
    settings.rate_limit = RateLimitSetting::Off;
    settings.connections.per_address = per_address;
    settings.trusted_proxies = parse_networks(trusted).expect("networks");
    TestApp::with(settings).await
}

async fn connect(app: &TestApp) -> TcpStream {
    TcpStream::connect(app.root().trim_start_matches("http://")).await.expect("connect")
}

/// Sends `head` (and `body`) and reads one answer: its head and body as
/// text, or what came before the connection closed.
async fn exchange(conn: &mut TcpStream, head: &str, body: &str) -> String {
    let request = format!("{head}Host: x\r\nContent-Length: {}\r\n\r\n{body}", body.len());
    if conn.write_all(request.as_bytes()).await.is_err() {
        return String::new();
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length: ").map(str::to_owned))
                .and_then(|n| n.trim().parse::<usize>().ok());
            if length.is_some_and(|n| got.len() >= end + 4 + n) {
                return text;
            }
        }
        match tokio::time::timeout_at(deadline, conn.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => return text,
        }
    }
}

fn devices() -> String {
    format!("GET /external/v1/devices HTTP/1.1\r\nAuthorization: {}\r\n", basic("alice", ALICE_PASSWORD))
}

/// True once the server has closed `conn` (EOF or reset) within 3 s.
async fn closed(conn: &mut TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        match tokio::time::timeout_at(deadline, conn.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

/// `n` connections, each served one answer and kept open.
async fn served(app: &TestApp, n: usize) -> Vec<TcpStream> {
    let mut held = Vec::with_capacity(n);
    for i in 0..n {
        let mut conn = connect(app).await;
        let answer = exchange(&mut conn, &devices(), "").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "connection {i} of the address: {answer}");
        held.push(conn);
    }
    held
}

#[tokio::test]
async fn an_address_past_its_share_is_answered_429_and_closed_while_its_others_are_served() {
    // Loopback is not a trusted proxy here: the tests' address counts.
    let app = app(3, "10.0.0.0/8").await;
    let mut held = served(&app, 3).await;
    // The fourth of the address: the read API's 429, as the spec spells it.
    let mut fourth = connect(&app).await;
    let answer = exchange(&mut fourth, &devices(), "").await;
    assert!(answer.starts_with("HTTP/1.1 429"), "past the share: {answer}");
    assert!(answer.ends_with(r#"{"message":"To Many Request","data":null}"#), "{answer}");
    let lower = answer.to_ascii_lowercase();
    assert!(lower.contains("retry-after: 1\r\n") && lower.contains("connection: close\r\n"), "{answer}");
    assert!(closed(&mut fourth).await, "the refused connection is closed");
    // The webhook's and InfluxDB's forms of the same refusal.
    let mut hook = connect(&app).await;
    let answer = exchange(&mut hook, "POST /external/v1/webhook/sensor-data HTTP/1.1\r\n", "{}").await;
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    assert!(answer.ends_with(r#"{"message":"Too Many Requests"}"#), "{answer}");
    let mut influx = connect(&app).await;
    let answer = exchange(&mut influx, "POST /write?db=x HTTP/1.1\r\n", "m v=1").await;
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    assert!(answer.ends_with(r#"{"code":"too many requests","message":"Too Many Requests"}"#), "{answer}");
    // The held connections go on being served.
    for conn in &mut held {
        let answer = exchange(conn, &devices(), "").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "a held connection is still served: {answer}");
    }
    let metrics = exchange(&mut held[0], "GET /metrics HTTP/1.1\r\n", "").await;
    assert!(metrics.contains("sensorhub_http_connections_refused_total 3\n"), "{metrics}");
    // A place given back is taken again.
    drop(held.pop());
    let started = Instant::now();
    loop {
        let mut conn = connect(&app).await;
        let answer = exchange(&mut conn, &devices(), "").await;
        if answer.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
        assert!(started.elapsed() < Duration::from_secs(3), "the place freed was not given back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_trusted_proxies_hold_any_number() {
    // Loopback, the default trusted proxy: a reverse proxy on the same host
    // carries every client's connections.
    let app = app(1, "127.0.0.0/8,::1").await;
    let held = served(&app, 6).await;
    assert_eq!(held.len(), 6, "a proxy is not counted");
}
