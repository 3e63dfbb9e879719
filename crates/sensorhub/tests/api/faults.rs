//! Faults with nothing acknowledged lost: the server killed with SIGKILL in
//! the middle of webhook ingest under load. After a restart, every reading
//! whose request got a 2xx is stored, with all of its values (no envelope
//! is half-written), on each backend.

use crate::harness::{FIXTURE, ServeProcess, fresh_database};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Clients posting at once.
const CLIENTS: usize = 8;
/// First reading second: 2026-01-01T00:00:00Z.
const T0: i64 = 1_767_225_600;
const SENSORS: [&str; 4] = ["AWLR1-batt", "AWLR1-wl", "AWLR1-sig", "AWLR1-status"];

pub(crate) fn provision(db: &str, dir: &std::path::Path) {
    let file = dir.join("fixture.json");
    std::fs::write(&file, FIXTURE).expect("write fixture");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sensorhub"))
        .args(["apply", file.to_str().expect("utf-8"), "--database", db])
        .env("SENSORHUB_LOG", "warn")
        .output()
        .expect("apply");
    assert!(out.status.success(), "apply: {}", String::from_utf8_lossy(&out.stderr));
}

/// AWLR-001's readings from `T0` to `end` as stored: second → values.
async fn stored(base: &str, end: i64) -> BTreeMap<i64, usize> {
    let at = |s: i64| jiff::Timestamp::from_second(s).expect("time");
    let url = format!("{base}/pk-alice-all/devices/AWLR-001/data?start={}&end={}", at(T0), at(end));
    let body: Value = reqwest::get(url).await.expect("read").json().await.expect("JSON");
    let readings = body["data"].as_array().expect("readings");
    readings
        .iter()
        .map(|r| {
            let s = r["timestamp"].as_str().expect("ts").parse::<jiff::Timestamp>().expect("ts").as_second();
            (s, r["sensors"].as_array().expect("sensors").len())
        })
        .collect()
}

/// Posts envelope after envelope (each a reading of four values at its own
/// second) until the server goes away; records the seconds acknowledged.
async fn post_until_gone(base: String, client: usize, acked: Arc<Mutex<BTreeSet<i64>>>) {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().expect("client");
    for n in 0i64.. {
        let second = T0 + n * CLIENTS as i64 + client as i64;
        let ts = jiff::Timestamp::from_second(second).expect("time").to_string();
        let sensors: Vec<Value> = SENSORS
            .iter()
            .enumerate()
            .map(|(k, id)| json!({"id": id, "value": (second % 997) as f64 + k as f64 / 4.0}))
            .collect();
        let body =
            json!({"event": "sensor-data", "device_id": "AWLR-001", "timestamp": ts, "data": {"sensors": sensors}});
        let sent = http
            .post(format!("{base}/webhook/sensor-data"))
            .header("X-API-KEY", "wh-alice-secret")
            .json(&body)
            .send()
            .await;
        match sent {
            Ok(r) if r.status().is_success() => {
                acked.lock().expect("lock").insert(second);
            }
            Ok(r) => assert!(r.status().is_server_error(), "only the kill may fail a request: {}", r.status()),
            Err(_) => return,
        }
    }
}

on_each_backend! {
    async fn sigkill_during_ingest_loses_no_acknowledged_reading() {
        let (db, dir, _pg) = fresh_database().await;
        provision(&db, dir.path());
        let mut server = ServeProcess::start(&["--database", &db, "--webhook-mode", "ingest", "--rate-limit", "off"]);
        let acked = Arc::new(Mutex::new(BTreeSet::new()));
        let load: Vec<_> = (0..CLIENTS)
            .map(|c| tokio::spawn(post_until_gone(server.base.clone(), c, acked.clone())))
            .collect();
        // Let the load run, then kill the server mid-write.
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if acked.lock().expect("lock").len() >= 300 {
                break;
            }
        }
        server.child.kill().expect("SIGKILL");
        let _ = server.child.wait();
        for task in load {
            task.await.expect("client task");
        }
        let acked = acked.lock().expect("lock").clone();
        assert!(acked.len() >= 300, "load ran: {} acknowledged", acked.len());

        let restarted = ServeProcess::start(&["--database", &db, "--rate-limit", "off"]);
        let end = T0 + (acked.last().copied().unwrap_or(T0) - T0) + 10 * CLIENTS as i64;
        let stored = stored(&restarted.base, end).await;
        let lost: Vec<_> = acked.iter().filter(|s| !stored.contains_key(s)).collect();
        assert!(lost.is_empty(), "{} acknowledged readings lost, first {:?}", lost.len(), lost.first());
        let partial: Vec<_> = stored.iter().filter(|(_, n)| **n != SENSORS.len()).collect();
        assert!(partial.is_empty(), "half-written readings: {partial:?}");
        // Unacknowledged requests may or may not have been committed: at most one in flight per client.
        assert!(stored.len() <= acked.len() + CLIENTS, "{} stored, {} acknowledged", stored.len(), acked.len());
    }
}

/// A TCP proxy to PostgreSQL that the test can take down (every open
/// connection cut, new ones refused) and bring back, as a server restart
/// looks to its clients. The shared PostgreSQL itself is not restarted:
/// other tests use it at the same time.
struct PgProxy {
    addr: std::net::SocketAddr,
    down: Arc<std::sync::atomic::AtomicBool>,
    conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl PgProxy {
    async fn start(upstream: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let down = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let (is_down, open) = (down.clone(), conns.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if is_down.load(std::sync::atomic::Ordering::SeqCst) {
                    continue; // dropped: the connection is refused at once
                }
                let upstream = upstream.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                open.lock().expect("lock").push(task.abort_handle());
            }
        });
        Self { addr, down, conns, accept }
    }

    /// Cuts every connection and refuses new ones.
    fn stop(&self) {
        self.down.store(true, std::sync::atomic::Ordering::SeqCst);
        for c in self.conns.lock().expect("lock").drain(..) {
            c.abort();
        }
    }

    fn start_again(&self) {
        self.down.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for PgProxy {
    fn drop(&mut self) {
        self.stop();
        self.accept.abort();
    }
}

/// GET `url`: status and body.
async fn get(http: &reqwest::Client, url: &str) -> (u16, Value) {
    match http.get(url).send().await {
        Ok(r) => {
            let status = r.status().as_u16();
            (status, r.json().await.unwrap_or(Value::Null))
        }
        Err(e) => panic!("the server must answer, even while PostgreSQL is away: {e}"),
    }
}

// Multi-threaded: the proxy must keep serving while the test blocks on
// starting the server process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgresql_outage_gets_error_envelopes_and_the_service_recovers_by_itself() {
    let pg =
        sensorhub_testing::TempDatabase::create(&crate::harness::postgres_admin_url()).await.expect("test database");
    let dir = tempfile::tempdir().expect("dir");
    provision(pg.url(), dir.path());
    let authority = pg.url().split("://").nth(1).and_then(|r| r.split('/').next()).expect("host in URL");
    let host_port = authority.rsplit('@').next().expect("host").to_owned();
    let proxy = PgProxy::start(host_port.clone()).await;
    let url = pg.url().replacen(&host_port, &proxy.addr.to_string(), 1);
    let server = ServeProcess::start(&["--database", &url, "--rate-limit", "off", "--request-timeout", "5"]);
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("client");
    let read = format!(
        "{}/pk-alice-all/devices/AWLR-001/data?start=2026-05-05T00:00:00Z&end=2026-05-06T00:00:00Z",
        server.base
    );
    assert_eq!(get(&http, &read).await.0, 200, "served before the outage");

    proxy.stop();
    for _ in 0..10 {
        let (status, body) = get(&http, &read).await;
        assert!(status == 500 || status == 503, "during the outage: {status} {body}");
        assert!(body["data"].is_null(), "the error envelope: {body}");
        let message = body["message"].as_str().unwrap_or_default();
        assert!(["Internal Server Error", "Service Unavailable"].contains(&message), "{body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ready =
        http.get(format!("{}/readyz", server.base.trim_end_matches("/external/v1"))).send().await.expect("readyz");
    assert_eq!(ready.status(), 503, "not ready while the database is away");

    proxy.start_again();
    let back = std::time::Instant::now();
    loop {
        if get(&http, &read).await.0 == 200 {
            break;
        }
        assert!(back.elapsed() < Duration::from_secs(10), "the service did not recover by itself");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(server);
}

/// A small tmpfs mounted for the test (as root, as CI runs), unmounted on drop.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> Self {
        let dir = tempfile::tempdir().expect("dir");
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("run mount");
        assert!(status.success(), "the disk-full test mounts a small tmpfs and needs root (as CI has)");
        Self { dir }
    }

    /// Fills the disk with a file; returns its path.
    fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let path = self.dir.path().join("filler");
        let mut f = std::fs::File::create(&path).expect("filler");
        let block = vec![0u8; 16 * 1024];
        while f.write_all(&block).is_ok() {}
        let _ = f.sync_all();
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(self.dir.path()).status();
    }
}

/// Posts one envelope (four values at `second`); the status and body.
async fn post(http: &reqwest::Client, base: &str, second: i64) -> (u16, Value) {
    let ts = jiff::Timestamp::from_second(second).expect("time").to_string();
    let sensors: Vec<Value> =
        SENSORS.iter().map(|id| json!({"id": id, "value": (second % 1000) as f64 / 8.0})).collect();
    let body = json!({"event": "sensor-data", "device_id": "AWLR-001", "timestamp": ts, "data": {"sensors": sensors}});
    let r = http
        .post(format!("{base}/webhook/sensor-data"))
        .header("X-API-KEY", "wh-alice-secret")
        .json(&body)
        .send()
        .await
        .expect("the server answers");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_full_disk_refuses_writes_clearly_and_they_resume_when_space_returns() {
    let disk = SmallDisk::mount("2m");
    let db = disk.dir.path().join("full.db").to_str().expect("utf-8").to_owned();
    provision(&db, disk.dir.path());
    let server = ServeProcess::start(&["--database", &db, "--webhook-mode", "ingest", "--rate-limit", "off"]);
    let http = reqwest::Client::new();
    let mut acked = BTreeSet::new();
    let mut second = T0;
    for _ in 0..20 {
        second += 60;
        assert_eq!(post(&http, &server.base, second).await.0, 200);
        acked.insert(second);
    }

    let filler = disk.fill();
    let mut refused = 0;
    for _ in 0..400 {
        second += 3600; // a new hour each: a new row, so the file must grow
        match post(&http, &server.base, second).await {
            (200, _) => {
                acked.insert(second);
            }
            (503, body) => {
                assert_eq!(body, json!({"message": "Service Unavailable"}), "the webhook's envelope");
                refused += 1;
                if refused >= 5 {
                    break;
                }
            }
            (status, body) => panic!("a full disk answers 503, not {status} {body}"),
        }
    }
    assert!(refused >= 5, "writes were refused on the full disk");
    // Reads go on while the disk is full.
    let reads = format!("{}/pk-alice-all/devices", server.base);
    assert_eq!(http.get(&reads).send().await.expect("read").status(), 200);

    std::fs::remove_file(filler).expect("free the space");
    second += 3600;
    assert_eq!(post(&http, &server.base, second).await.0, 200, "writes resume when space returns");
    acked.insert(second);
    drop(server);

    // No corruption: a new process reads every acknowledged reading whole.
    let restarted = ServeProcess::start(&["--database", &db]);
    let stored = stored(&restarted.base, second).await;
    for s in &acked {
        assert_eq!(stored.get(s), Some(&SENSORS.len()), "acknowledged reading at {s} stored whole");
    }
    assert!(stored.values().all(|n| *n == SENSORS.len()), "no half-written reading");
    drop(restarted);
}
