//! HTTPS without a proxy (issue 26): the real binary with `--tls-cert` and
//! `--tls-key`, asked by curl (a client nobody here wrote) trusting the
//! test CA: HTTP/2 and HTTP/1.1 by ALPN, a SIGHUP that swaps the
//! certificate for the next handshake while an open stream goes on, a
//! handshake that never comes closed by the header read timeout, a key
//! that does not match refused at start, and a connection past its
//! address's share closed before its handshake.

use crate::faults::provision;
use crate::harness::{ALICE_PASSWORD, ServeProcess};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls").join(name)
}

/// What curl got for `path` with `args`: (HTTP version, status, the server
/// certificate's subject, body).
fn curl(base: &str, path: &str, args: &[&str]) -> (String, u16, String, String) {
    let out = Command::new("curl")
        .args(["-sS", "-v", "--cacert"])
        .arg(fixture("ca.pem"))
        .args(["-u", &format!("alice:{ALICE_PASSWORD}"), "-w", "\n%{http_version} %{http_code}"])
        .args(args)
        .arg(format!("{base}{path}"))
        .output()
        .expect("curl");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "curl failed: {stderr}");
    let (body, tail) = stdout.rsplit_once('\n').expect("the -w line");
    let (version, status) = tail.split_once(' ').expect("version and status");
    let subject = stderr.lines().find_map(|l| l.trim().strip_prefix("*  subject: ")).unwrap_or_default().to_owned();
    (version.to_owned(), status.parse().expect("status"), subject, body.to_owned())
}

/// The binary serving HTTPS with `cert` and `key`, over a database
/// provisioned in `dir` (its path returned too), with `extra` flags.
fn serve_tls(dir: &Path, cert: &Path, key: &Path, extra: &[&str]) -> (String, ServeProcess) {
    let db = dir.join("tls.db").to_str().expect("utf-8").to_owned();
    provision(&db, dir);
    let (cert, key) = (cert.to_str().expect("utf-8"), key.to_str().expect("utf-8"));
    let mut args = vec!["--database", &db, "--tls-cert", cert, "--tls-key", key];
    args.extend_from_slice(extra);
    let server = ServeProcess::start(&args);
    (db, server)
}

fn install(dir: &Path, which: &str) {
    std::fs::copy(fixture(&format!("server-{which}.pem")), dir.join("cert.pem")).expect("cert");
    std::fs::copy(fixture(&format!("server-{which}.key")), dir.join("key.pem")).expect("key");
}

#[tokio::test]
async fn https_speaks_http2_and_http1_and_a_sighup_swaps_the_certificate_under_an_open_stream() {
    let dir = tempfile::tempdir().expect("dir");
    install(dir.path(), "a");
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let (_, server) = serve_tls(dir.path(), &cert, &key, &["--webhook-mode", "ingest"]);
    let base = server.base.replace("http://127.0.0.1", "https://localhost");
    let (version, status, subject, body) = curl(&base, "/devices", &["--http2"]);
    assert_eq!((version.as_str(), status), ("2", 200), "{body}");
    assert!(subject.contains("sensorhub test server a"), "{subject}");
    assert!(body.starts_with(r#"{"message":"Success","data":[{"device_id":"AWLR-001""#), "{body}");
    let (version, status, _, _) = curl(&base, "/devices", &["--http1.1"]);
    assert_eq!((version.as_str(), status), ("1.1", 200));

    // A stream opened on the first certificate.
    let mut stream = Command::new("curl")
        .args(["-sS", "-N", "--http2", "--cacert"])
        .arg(fixture("ca.pem"))
        .args(["-u", &format!("alice:{ALICE_PASSWORD}")])
        .arg(format!("{base}/devices/AWLR-001/stream"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("curl stream");
    let mut events = BufReader::new(stream.stdout.take().expect("stdout"));
    let mut line = String::new();
    events.read_line(&mut line).expect("the stream begins");
    assert_eq!(line.trim(), "retry: 2000");

    install(dir.path(), "b");
    let hup = Command::new("kill").args(["-HUP", &server.child.id().to_string()]).status().expect("kill");
    assert!(hup.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, status, subject, _) = curl(&base, "/devices", &["--http2"]);
        assert_eq!(status, 200);
        if subject.contains("sensorhub test server b") {
            break;
        }
        assert!(Instant::now() < deadline, "still {subject} after the SIGHUP");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The stream opened before the swap still delivers.
    let envelope =
        r#"{"event":"sensor-data","device_id":"AWLR-001","timestamp":"2026-06-01T08:00:00Z","data":{"AWLR1-wl":7.5}}"#;
    let (_, status, _, body) = curl(
        &base,
        "/webhook/sensor-data",
        &["-H", "X-API-KEY: wh-alice-secret", "-H", "Content-Type: application/json", "--data", envelope],
    );
    assert_eq!(status, 200, "{body}");
    let got = tokio::task::spawn_blocking(move || {
        let mut seen = String::new();
        while !seen.contains("7.5") {
            let mut line = String::new();
            if events.read_line(&mut line).expect("read") == 0 {
                break;
            }
            seen.push_str(&line);
        }
        seen
    });
    let seen = tokio::time::timeout(Duration::from_secs(10), got).await.expect("an event in time").expect("reader");
    assert!(seen.contains(r#""value":7.5"#), "the open stream got the reading: {seen}");
    let _ = stream.kill();
    let _ = stream.wait();
}

#[tokio::test]
async fn a_handshake_that_never_comes_is_cut_and_a_mismatched_key_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let (cert, key) = (fixture("server-a.pem"), fixture("server-a.key"));
    let (db, server) = serve_tls(dir.path(), &cert, &key, &["--header-read-timeout", "1"]);
    let addr = server.base.trim_start_matches("http://").split('/').next().expect("address").to_owned();
    let mut silent = std::net::TcpStream::connect(&addr).expect("connect");
    silent.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let mut buf = [0u8; 16];
    assert!(matches!(silent.read(&mut buf), Ok(0) | Err(_)), "a client that never says hello is closed");
    let _ = silent.write_all(b"x");

    let wrong = Command::new(env!("CARGO_BIN_EXE_sensorhub"))
        .args(["serve", "--listen", "127.0.0.1:0", "--database", &db, "--tls-cert"])
        .arg(fixture("server-a.pem"))
        .arg("--tls-key")
        .arg(fixture("server-b.key"))
        .env("SENSORHUB_LOG", "warn")
        .output()
        .expect("run");
    let said = String::from_utf8_lossy(&wrong.stderr);
    assert!(!wrong.status.success() && said.contains("do not belong together"), "{said}");
}

/// Over HTTPS a connection past its address's share is closed before any
/// handshake (one would cost more than the refusal saves), and served
/// again once the address holds less.
#[tokio::test]
async fn past_its_address_share_a_tls_connection_is_closed_unanswered() {
    let dir = tempfile::tempdir().expect("dir");
    let (cert, key) = (fixture("server-a.pem"), fixture("server-a.key"));
    // Loopback is no trusted proxy here: the tests' address counts.
    let untrusted = ["--client-ip-header", "X-Forwarded-For", "--trusted-proxies", "10.0.0.0/8"];
    let (_, server) =
        serve_tls(dir.path(), &cert, &key, &[&["--max-connections-per-address", "1"][..], &untrusted].concat());
    let addr = server.base.trim_start_matches("http://").split('/').next().expect("address").to_owned();
    let port = addr.rsplit(':').next().expect("port").to_owned();
    let base = format!("https://localhost:{port}/external/v1");
    let resolve = format!("localhost:{port}:127.0.0.1");
    let held = std::net::TcpStream::connect(&addr).expect("connect");
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let refused = Command::new("curl")
        .args(["-sS", "--max-time", "5", "--resolve", &resolve, "--cacert"])
        .arg(fixture("ca.pem"))
        .args(["-u", &format!("alice:{ALICE_PASSWORD}")])
        .arg(format!("{base}/devices"))
        .output()
        .expect("curl");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "the second connection of the address is refused: {said}");
    assert!(started.elapsed() < Duration::from_secs(4), "closed at once, not timed out: {said}");
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let ok = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5", "--resolve", &resolve, "--cacert"])
            .arg(fixture("ca.pem"))
            .args(["-u", &format!("alice:{ALICE_PASSWORD}")])
            .arg(format!("{base}/devices"))
            .output()
            .expect("curl");
        if String::from_utf8_lossy(&ok.stdout) == "200" {
            break;
        }
        assert!(Instant::now() < deadline, "not served once the held connection closed");
        std::thread::sleep(Duration::from_millis(100));
    }
}
