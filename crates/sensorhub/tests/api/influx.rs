//! InfluxDB line protocol in: the v2 and v1 write endpoints store points
//! as readings under the webhook's rules and grants, all or nothing, with
//! InfluxDB-shaped answers (204; `{"code", "message"}` naming the line),
//! gzip bodies bounded once inflated. The real clients (Python's
//! influxdb-client, the `influx` CLI) are driven by `clients.rs`.

use crate::harness::TestApp;
use reqwest::Method;
use std::io::Write;

const KEY: &str = "wh-alice-secret";
/// 2026-05-06T07:00:00Z (the fixture has readings on the 5th).
const T: i64 = 1_778_050_800;

async fn write(app: &TestApp, path_and_query: &str, headers: &[(&str, &str)], body: Vec<u8>) -> crate::harness::Answer {
    let url = format!("{}{path_and_query}", app.root());
    app.request(Method::POST, &url, headers, Some(body.into())).await
}

/// AWLR-001's readings of 2026-05-06 as (RFC 3339 UTC, [(sensor, value)]).
async fn stored(app: &TestApp) -> Vec<(String, Vec<(String, f64)>)> {
    let a = app.alice("/devices/AWLR-001/data?start=2026-05-06T00:00:00Z&end=2026-05-06T23:59:59Z&tz=UTC").await;
    assert_eq!(a.status, 200, "{}", a.text);
    a.body["data"]
        .as_array()
        .expect("readings")
        .iter()
        .map(|r| {
            let sensors = r["sensors"].as_array().expect("sensors");
            let values = sensors
                .iter()
                .map(|s| (s["id"].as_str().unwrap_or_default().to_owned(), s["value"].as_f64().unwrap_or(f64::NAN)))
                .collect();
            (r["timestamp"].as_str().unwrap_or_default().to_owned(), values)
        })
        .collect()
}

on_each_backend! {
    async fn v2_writes_with_a_token_store_readings_the_data_endpoint_returns() {
        let app = TestApp::start().await;
        let body = format!(
            "AWLR-001 AWLR1-wl=123.5,AWLR1-batt=91i {}\n\
             # a comment, then a blank line\n\n\
             water,device=AWLR-001,site=Katulampa AWLR1-wl=124.25 {}\n",
            T * 1_000_000_000,
            (T + 60) * 1_000_000_000 + 999
        );
        let token = format!("Token {KEY}");
        let a = write(&app, "/api/v2/write?org=o&bucket=b", &[("Authorization", &token)], body.into_bytes()).await;
        assert_eq!(a.status, 204, "{}", a.text);
        let got = stored(&app).await;
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].1.contains(&("AWLR1-wl".to_owned(), 123.5)) && got[0].1.contains(&("AWLR1-batt".to_owned(), 91.0)));
        assert_eq!(got[1].1, [("AWLR1-wl".to_owned(), 124.25)], "the device tag names the device; a fraction of a second is dropped");
    }

    async fn v1_writes_take_the_key_as_password_or_p_and_gzip_bodies() {
        let app = TestApp::start().await;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(format!("AWLR-001 AWLR1-wl=10 {}\n", T * 1000).as_bytes()).expect("gzip");
        let body = gz.finish().expect("gzip");
        let basic = crate::harness::basic("anyone", KEY);
        let a = write(&app, "/write?db=x&precision=ms", &[("Authorization", &basic), ("Content-Encoding", "gzip")], body).await;
        assert_eq!(a.status, 204, "{}", a.text);
        let a = write(&app, &format!("/write?db=x&u=me&p={KEY}&precision=s"), &[], format!("AWLR-001 AWLR1-wl=11 {}", T + 120).into_bytes()).await;
        assert_eq!(a.status, 204, "{}", a.text);
        assert_eq!(stored(&app).await.len(), 2);

        // Two gzip members back to back (`cat a.gz b.gz`): both are read.
        let member = |line: String| {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            gz.write_all(line.as_bytes()).expect("gzip");
            gz.finish().expect("gzip")
        };
        let mut two = member(format!("AWLR-001 AWLR1-wl=12 {}\n", T + 240));
        two.extend(member(format!("AWLR-001 AWLR1-wl=13 {}\n", T + 360)));
        let gzip = [("Authorization", basic.as_str()), ("Content-Encoding", "gzip")];
        let a = write(&app, "/write?db=x&precision=s", &gzip, two).await;
        assert_eq!(a.status, 204, "{}", a.text);
        assert_eq!(stored(&app).await.len(), 4, "the second member's point is stored too");
        // A member and then bytes that are not one: refused, nothing stored.
        let mut junk = member(format!("AWLR-001 AWLR1-wl=14 {}\n", T + 480));
        junk.extend_from_slice(b"not gzip at all");
        let a = write(&app, "/write?db=x&precision=s", &gzip, junk).await;
        assert_eq!(a.status, 400, "{}", a.text);
        assert_eq!(stored(&app).await.len(), 4, "a body refused stores nothing");
    }

    async fn a_bad_line_stores_nothing_and_is_named_as_influxdb_clients_expect() {
        let app = TestApp::start().await;
        let token = format!("Token {KEY}");
        let auth = [("Authorization", token.as_str())];
        for (body, says) in [
            (format!("AWLR-001 AWLR1-wl=1 {T}\nAWLR-001 AWLR1-wl=\"high\" {T}"), "line 2: field \"AWLR1-wl\" is a string, not a number"),
            (format!("AWLR-001 AWLR1-wl=1 {T}\nAWLR-001 nope=1 {T}"), "line 2: field \"nope\": sensor \"nope\" is not registered"),
            (format!("SECRET-9 S9-wl=1 {T}"), "line 1: device \"SECRET-9\" is not one of this key's devices"),
            (format!("AWLR-001 AWLR1-wl=1 {}", T + 86_400 * 365), "line 1:"),
            ("AWLR-001 AWLR1-wl=abc".to_owned(), "line 1: field \"AWLR1-wl\": \"abc\" is not a number"),
        ] {
            let a = write(&app, "/api/v2/write?precision=s", &auth, body.into_bytes()).await;
            assert_eq!(a.status, 400, "{}", a.text);
            assert_eq!(a.body["code"], "invalid", "{}", a.text);
            let message = a.body["message"].as_str().unwrap_or_default();
            assert!(message.starts_with(says) || message.contains(says), "{message} (wanted {says})");
        }
        assert!(stored(&app).await.is_empty(), "a refused write stores nothing");
        let a = write(&app, "/api/v2/write?precision=d", &auth, b"AWLR-001 AWLR1-wl=1".to_vec()).await;
        assert_eq!((a.status.as_u16(), a.body["code"].as_str()), (400, Some("invalid")));
    }

    async fn keys_and_sizes_are_checked_with_influxdb_shaped_answers() {
        let app = TestApp::start().await;
        let line = format!("AWLR-001 AWLR1-wl=1 {T}");
        let a = write(&app, "/api/v2/write?precision=s", &[], line.clone().into_bytes()).await;
        assert_eq!((a.status.as_u16(), a.body["code"].as_str()), (401, Some("unauthorized")), "{}", a.text);
        let a = write(&app, "/api/v2/write?precision=s", &[("Authorization", "Token wh-carol-old")], line.clone().into_bytes()).await;
        assert_eq!(a.status, 401, "a revoked key");
        let a = write(&app, "/api/v2/write?precision=s", &[("Authorization", "Token wh-bob-disabled-account")], line.clone().into_bytes()).await;
        assert_eq!(a.status, 401, "a disabled account's key");
        // A bomb: 64 MiB of zeros gzip to ~64 KiB; inflated past --max-body-bytes.
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&vec![b'0'; 64 << 20]).expect("gzip");
        let bomb = gz.finish().expect("gzip");
        let token = format!("Token {KEY}");
        let a = write(&app, "/api/v2/write", &[("Authorization", &token), ("Content-Encoding", "gzip")], bomb).await;
        assert_eq!((a.status.as_u16(), a.body["code"].as_str()), (413, Some("request too large")), "{}", a.text);
        let a = app.request(Method::GET, &format!("{}/api/v2/write", app.root()), &[], None).await;
        assert_eq!(a.status, 405);
    }
}

/// A Python with `influxdb-client` (PyPI, pinned): a virtual environment
/// under the target directory, made on first use.
fn python_with_influxdb_client() -> std::path::PathBuf {
    const PINNED: &str = "influxdb-client==1.50.0";
    let venv = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("influx-venv");
    let python = venv.join("bin/python");
    let ready = venv.join(PINNED);
    let _lock = VENV.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if !ready.exists() {
        let made =
            std::process::Command::new("python3").arg("-m").arg("venv").arg(&venv).status().expect("python3 -m venv");
        assert!(made.success(), "python3 -m venv {}", venv.display());
        let pip =
            std::process::Command::new(venv.join("bin/pip")).args(["install", "-q", PINNED]).status().expect("pip");
        assert!(pip.success(), "pip install {PINNED} (PyPI must be reachable)");
        std::fs::write(&ready, "").expect("mark the venv ready");
    }
    python
}

static VENV: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Writes with Python's influxdb-client (v2 API, as integrators use it):
/// `lines` at second precision; prints `ok` or `status <code> <body>`.
const PYTHON_WRITE: &str = r#"
import sys
from influxdb_client import InfluxDBClient, WritePrecision
from influxdb_client.client.write_api import SYNCHRONOUS
from influxdb_client.rest import ApiException
url, token, lines = sys.argv[1], sys.argv[2], sys.argv[3]
with InfluxDBClient(url=url, token=token, org="station-org") as client:
    try:
        client.write_api(write_options=SYNCHRONOUS).write(bucket="awlr", record=lines.split("\n"), write_precision=WritePrecision.S)
        print("ok")
    except ApiException as e:
        print("status", e.status, e.body)
"#;

/// Runs Debian's `influx` CLI against 127.0.0.1:`port` with `password`, database `awlr`.
async fn influx(port: &str, password: &str, args: &[&str]) -> std::process::Output {
    let mut cmd = std::process::Command::new("influx");
    cmd.args(["-host", "127.0.0.1", "-port", port, "-username", "station", "-password", password, "-database", "awlr"]);
    cmd.args(args);
    tokio::task::spawn_blocking(move || cmd.output())
        .await
        .expect("join")
        .expect("Debian's influxdb-client (the influx CLI): .ci/services installs it")
}

on_each_backend! {
    async fn pythons_influxdb_client_writes_readings_and_reads_refusals() {
        let app = TestApp::start().await;
        let python = tokio::task::spawn_blocking(python_with_influxdb_client).await.expect("venv");
        let root = app.root();
        let run = |lines: String| {
            let (python, root) = (python.clone(), root.clone());
            async move {
                let out = tokio::task::spawn_blocking(move || {
                    std::process::Command::new(&python).args(["-c", PYTHON_WRITE, &root, KEY, &lines]).output()
                })
                .await
                .expect("join")
                .expect("run python");
                assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
                String::from_utf8_lossy(&out.stdout).trim().to_owned()
            }
        };
        let said = run(format!("AWLR-001 AWLR1-wl=201.5,AWLR1-batt=88i {T}\nAWLR-001 AWLR1-wl=202 {}", T + 60)).await;
        assert_eq!(said, "ok");
        let got = stored(&app).await;
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].1.contains(&("AWLR1-wl".to_owned(), 201.5)));
        let said = run(format!("AWLR-001 AWLR1-wl=\"x\" {}", T + 120)).await;
        assert!(said.starts_with("status 400") && said.contains("line 1") && said.contains("\"invalid\""), "{said}");
    }

    async fn the_influx_cli_inserts_readings() {
        let app = TestApp::start().await;
        let port = app.root().rsplit(':').next().unwrap_or_default().to_owned();
        let insert = format!("INSERT AWLR-001 AWLR1-wl=150.25,AWLR1-sig=-70 {T}");
        let out = influx(&port, KEY, &["-precision", "s", "-execute", &insert]).await;
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && !said.contains("ERR"), "{said}");
        let got = stored(&app).await;
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(got[0].1.contains(&("AWLR1-wl".to_owned(), 150.25)) && got[0].1.contains(&("AWLR1-sig".to_owned(), -70.0)));
        let bad = influx(&port, "wrong", &["-execute", "INSERT AWLR-001 AWLR1-wl=1"]).await;
        let said = format!("{}{}", String::from_utf8_lossy(&bad.stdout), String::from_utf8_lossy(&bad.stderr));
        assert!(said.contains("unauthorized") || !bad.status.success(), "a wrong key is refused: {said}");
    }
}
