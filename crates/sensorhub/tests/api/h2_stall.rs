//! HTTP/2 over HTTPS: a client that shuts one answer's stream window and
//! keeps the connection open is cut after the write timeout, as a stalled
//! HTTP/1.1 reader is; a slow HTTP/2 reader that keeps opening its window
//! gets whole answers, byte for byte what HTTP/1.1 gets, and a quiet live
//! stream beside them is left alone. The client is the
//! h2 crate, so that the windows are the test's to hold shut.

use crate::harness::{ALICE_PASSWORD, TestApp, basic, metric_in};
use crate::slow::{LONG_PATH, add_long_history};
use axum::http::{Request, Response, StatusCode};
use bytes::Bytes;
use h2::RecvStream;
use h2::client::SendRequest;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use sensorhub::config::server::TlsFiles;
use sensorhub::limiter::RateLimitSetting;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A day of the long history: one page of hours, so an answer with its
/// length, rendered as one run (about 300 KB).
const DAY_PATH: &str =
    "/external/v1/pk-alice-all/devices/AWLR-001/data?start=2026-01-10T00:00:00Z&end=2026-01-11T00:00:00Z";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls").join(name)
}

/// The server over HTTPS with a write timeout of a second, and the long
/// history stored.
async fn app() -> TestApp {
    let app = TestApp::builder()
        .configure(|s| {
            s.connections.write_timeout = Duration::from_secs(1);
            s.rate_limit = RateLimitSetting::Off;
            s.tls = Some(TlsFiles { cert: fixture("server-a.pem"), key: fixture("server-a.key") });
        })
        .start()
        .await;
    add_long_history(&app).await;
    app
}

/// An HTTP/2 connection to `app` whose streams open with `window` bytes
/// (the connection's window is wide); the task driving it ends when the
/// connection does.
async fn connect(app: &TestApp, window: u32) -> (SendRequest<Bytes>, JoinHandle<Result<(), h2::Error>>) {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(fixture("ca.pem")).expect("ca.pem") {
        roots.add(cert.expect("a certificate")).expect("a root");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(app.root().trim_start_matches("http://")).await.expect("connect");
    let name = ServerName::try_from("localhost").expect("name");
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.expect("handshake");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]), "HTTP/2 by ALPN");
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(window)
        .initial_connection_window_size(64 << 20)
        .handshake::<_, Bytes>(tls)
        .await
        .expect("HTTP/2 handshake");
    (send, tokio::spawn(conn))
}

/// The head of `GET path`, its body still to be read.
async fn get(send: &SendRequest<Bytes>, path: &str) -> Response<RecvStream> {
    get_as(send, path, None, None).await
}

/// The head of `GET path` with an optional `Authorization` and `Accept-Encoding`.
async fn get_as(
    send: &SendRequest<Bytes>,
    path: &str,
    auth: Option<&str>,
    encoding: Option<&str>,
) -> Response<RecvStream> {
    let mut request = Request::get(format!("https://localhost{path}"));
    if let Some(auth) = auth {
        request = request.header("authorization", auth);
    }
    if let Some(encoding) = encoding {
        request = request.header("accept-encoding", encoding);
    }
    let request = request.body(()).expect("request");
    let (response, _) = send.clone().ready().await.expect("ready").send_request(request, true).expect("send");
    response.await.expect("an answer's head")
}

/// The whole body, each piece's window given back `pause` after it came.
async fn read_all(mut body: RecvStream, pause: Duration) -> Vec<u8> {
    let mut all = Vec::new();
    while let Some(data) = body.data().await {
        let data = data.expect("the answer is not cut");
        all.extend_from_slice(&data);
        tokio::time::sleep(pause).await;
        body.flow_control().release_capacity(data.len()).expect("window");
    }
    all
}

/// The value of the metric line starting with `prefix`, asked over HTTP/2.
async fn metric(send: &SendRequest<Bytes>, prefix: &str) -> f64 {
    let text = read_all(get(send, "/metrics").await.into_body(), Duration::ZERO).await;
    metric_in(&String::from_utf8(text).expect("utf-8"), prefix)
}

#[tokio::test]
async fn an_http2_answer_whose_window_stays_shut_is_cut_and_others_are_served() {
    let app = app().await;
    let (send, conn) = connect(&app, 65_535).await;
    let long = get(&send, LONG_PATH).await;
    let day = get(&send, DAY_PATH).await;
    assert_eq!((long.status(), day.status()), (StatusCode::OK, StatusCode::OK));
    // A small answer behind a window of one byte: hyper is done with its
    // body once it has queued its only frame, which h2 then holds. (Each
    // answer's head is kept: a dropped one would reset its stream.)
    let (tiny, tiny_conn) = connect(&app, 1).await;
    let devices = get(&tiny, "/external/v1/pk-alice-all/devices").await;
    assert_eq!(devices.status(), StatusCode::OK);
    // The same compressed: a streamed answer, whose body ends (hyper asks
    // on and hears it is done) while its data waits behind the window.
    let (zipped, zipped_conn) = connect(&app, 1).await;
    let gzip = get_as(&zipped, "/external/v1/pk-alice-all/devices", None, Some("gzip")).await;
    assert_eq!(gzip.headers().get("content-encoding").map(|v| v.as_bytes()), Some(&b"gzip"[..]));
    assert!(gzip.headers().get("content-length").is_none(), "streamed");
    // No body is read: the windows stay shut. The connections themselves
    // are healthy (their windows are wide, the client tasks answer pings).
    let started = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(10), conn).await;
    assert!(ended.is_ok(), "the connection holding shut streams is still open after 10 s");
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(5), "cut after {waited:?} with a write timeout of 1 s");
    let ended = tokio::time::timeout(Duration::from_secs(5), tiny_conn).await;
    assert!(ended.is_ok(), "the connection holding a small answer's last frame is still open");
    let ended = tokio::time::timeout(Duration::from_secs(5), zipped_conn).await;
    assert!(ended.is_ok(), "the connection holding a streamed answer's end is still open");

    let (other, _conn) = connect(&app, 65_535).await;
    let cut = metric(&other, "sensorhub_http_connections_closed_total{reason=\"write_stall\"}").await;
    assert!(cut >= 3.0, "counted as write stalls: {cut}");
    drop((long, day, devices, gzip));
    let devices = get(&other, "/external/v1/pk-alice-all/devices").await;
    assert_eq!(devices.status(), StatusCode::OK, "the service goes on");
}

#[tokio::test]
async fn a_slow_http2_reader_gets_whole_answers_byte_for_byte_what_http1_gets() {
    let app = app().await;
    let plain = TestApp::builder().configure(|s| s.rate_limit = RateLimitSetting::Off).start().await;
    add_long_history(&plain).await;
    let (send, conn) = connect(&app, 16 << 10).await;
    // A live stream on the same connection, quiet throughout: waiting for
    // events is not waiting for the client.
    let live = get_as(&send, "/external/v1/devices/AWLR-001/stream", Some(&basic("alice", ALICE_PASSWORD)), None).await;
    assert_eq!(live.status(), StatusCode::OK);

    // A window of 16 KiB given back 150 ms after each piece: the day's
    // answer takes seconds, each piece well within the write timeout.
    let day = get(&send, DAY_PATH).await;
    assert_eq!(day.status(), StatusCode::OK);
    let length: usize = day.headers()["content-length"].to_str().expect("ascii").parse().expect("a length");
    let started = Instant::now();
    let body = read_all(day.into_body(), Duration::from_millis(150)).await;
    let took = started.elapsed();
    assert!(took > Duration::from_secs(2), "the read took {took:?}: not slower than the write timeout");
    let http1 = plain.request(reqwest::Method::GET, &format!("{}{DAY_PATH}", plain.root()), &[], None).await;
    assert_eq!(http1.status, 200);
    assert_eq!(body.len(), length, "the length sent is the length of the body");
    assert!(body == http1.text.as_bytes(), "the day over HTTP/2 is the day over HTTP/1.1");

    // The long answer (streamed, without a length), read as fast as it comes.
    let long = get(&send, LONG_PATH).await;
    assert_eq!(long.status(), StatusCode::OK);
    let body = read_all(long.into_body(), Duration::ZERO).await;
    let http1 = plain.request(reqwest::Method::GET, &format!("{}{LONG_PATH}", plain.root()), &[], None).await;
    assert!(body.len() > 8_000_000, "a long answer: {} bytes", body.len());
    assert!(body == http1.text.as_bytes(), "the long answer over HTTP/2 is the same over HTTP/1.1");
    assert!(!conn.is_finished(), "the connection, and its quiet live stream, are still open");
    drop(live);
}
