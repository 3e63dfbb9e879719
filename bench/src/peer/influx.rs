//! The peer itself: the profile's readings as line protocol, an `influxd`
//! of its own on loopback, and its HTTP API.

use super::{BATCH_LINES, MEASUREMENT};
use std::fs;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Writes `dir/readings.lp` from `dir/readings.csv` (once): one line per
/// reading, tag `device_id`, one field per sensor named by the sensor id's
/// last part (`STA-01-wl` → `wl`, so that stations share field keys as an
/// InfluxDB user would lay them out), seconds.
pub(super) fn line_protocol(dir: &Path) -> Result<PathBuf, String> {
    let lp = dir.join("readings.lp");
    let csv = dir.join("readings.csv");
    let fresh = |p: &Path| fs::metadata(p).and_then(|m| m.modified()).ok();
    if lp.exists() && fresh(&lp) >= fresh(&csv) {
        return Ok(lp);
    }
    let input = BufReader::with_capacity(1 << 20, fs::File::open(&csv).map_err(|e| e.to_string())?);
    let mut out = BufWriter::with_capacity(1 << 20, fs::File::create(&lp).map_err(|e| e.to_string())?);
    let mut current: Option<(String, String)> = None;
    let mut fields = String::new();
    let mut flush = |key: &Option<(String, String)>, fields: &mut String| -> Result<(), String> {
        if let Some((device, ts)) = key {
            let second = ts.parse::<jiff::Timestamp>().map_err(|e| format!("{ts}: {e}"))?.as_second();
            writeln!(out, "{MEASUREMENT},device_id={device} {fields} {second}").map_err(|e| e.to_string())?;
        }
        fields.clear();
        Ok(())
    };
    for line in input.lines().skip(1) {
        let line = line.map_err(|e| e.to_string())?;
        let mut parts = line.split(',');
        let (Some(device), Some(ts), Some(sensor), Some(value)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(format!("not a reading row: {line}"));
        };
        if current.as_ref().is_none_or(|(d, t)| d != device || t != ts) {
            flush(&current, &mut fields)?;
            current = Some((device.to_owned(), ts.to_owned()));
        }
        if !fields.is_empty() {
            fields.push(',');
        }
        fields.push_str(sensor.rsplit('-').next().unwrap_or(sensor));
        fields.push('=');
        fields.push_str(value);
    }
    flush(&current, &mut fields)?;
    out.flush().map_err(|e| e.to_string())?;
    Ok(lp)
}

/// An `influxd` on loopback with its own directories, stopped when dropped.
pub(super) struct Influx {
    child: Child,
    pub(super) port: u16,
    dir: tempfile::TempDir,
}

impl Influx {
    pub(super) fn start(port: u16, under: &Path) -> Result<Influx, String> {
        let under = under.canonicalize().map_err(|e| e.to_string())?;
        let dir = tempfile::Builder::new().prefix("influx-").tempdir_in(under).map_err(|e| e.to_string())?;
        let d = dir.path().display();
        let config = format!(
            "reporting-disabled = true\nbind-address = \"127.0.0.1:{rpc}\"\n\
             [meta]\n  dir = \"{d}/meta\"\n\
             [data]\n  dir = \"{d}/data\"\n  wal-dir = \"{d}/wal\"\n  query-log-enabled = false\n  \
             cache-snapshot-write-cold-duration = \"2s\"\n\
             [http]\n  bind-address = \"127.0.0.1:{port}\"\n  log-enabled = false\n\
             [monitor]\n  store-enabled = false\n[continuous_queries]\n  enabled = false\n\
             [logging]\n  level = \"warn\"\n",
            rpc = port + 10
        );
        let conf = dir.path().join("influxdb.conf");
        fs::write(&conf, config).map_err(|e| e.to_string())?;
        let log = fs::File::create(dir.path().join("influxd.log")).map_err(|e| e.to_string())?;
        let child = Command::new("influxd")
            .arg("-config")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start influxd (bench/peer installs Debian's influxdb): {e}"))?;
        let influx = Influx { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if http(port, "GET", "/ping", "").is_ok_and(|(status, _)| status == 204) {
                let (status, body) = http(port, "POST", "/query?q=CREATE%20DATABASE%20bench", "")?;
                return if status == 200 { Ok(influx) } else { Err(format!("CREATE DATABASE: {status} {body}")) };
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!("influxd did not come up on port {port}"))
    }

    /// Posts `lp` in batches of [`BATCH_LINES`] lines over one connection; returns the seconds taken.
    pub(super) fn load(&self, lp: &Path) -> Result<f64, String> {
        let text = fs::read(lp).map_err(|e| e.to_string())?;
        let mut conn = TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| e.to_string())?;
        conn.set_nodelay(true).map_err(|e| e.to_string())?;
        let started = Instant::now();
        let mut rest = &text[..];
        while !rest.is_empty() {
            let end = rest
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == b'\n')
                .nth(BATCH_LINES - 1)
                .map_or(rest.len(), |(i, _)| i + 1);
            let (batch, next) = rest.split_at(end);
            rest = next;
            write!(
                conn,
                "POST /write?db=bench&precision=s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n",
                batch.len()
            )
            .map_err(|e| e.to_string())?;
            conn.write_all(batch).map_err(|e| e.to_string())?;
            let head = read_head(&mut conn)?;
            if !head.starts_with("HTTP/1.1 204") {
                return Err(format!("InfluxDB refused a batch: {head}"));
            }
        }
        Ok(started.elapsed().as_secs_f64())
    }

    /// Bytes on disk once the write cache has been written out as TSM files (or 60 s passed).
    pub(super) fn settled_bytes(&self) -> u64 {
        let wal = self.dir.path().join("wal");
        let deadline = Instant::now() + Duration::from_secs(60);
        while du(&wal) > 1 << 20 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(500));
        }
        du(&self.dir.path().join("data")) + du(&wal)
    }
}

impl Drop for Influx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads an HTTP response head (through the blank line) from `conn`.
fn read_head(conn: &mut TcpStream) -> Result<String, String> {
    let mut head = Vec::with_capacity(256);
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match conn.read(&mut byte) {
            Ok(0) => return Err("the connection closed mid-answer".into()),
            Ok(_) => head.push(byte[0]),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

/// One request on its own connection: the status and the body.
fn http(port: u16, method: &str, path: &str, body: &str) -> Result<(u16, String), String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .map_err(|e| e.to_string())?;
    let mut all = String::new();
    s.read_to_string(&mut all).map_err(|e| e.to_string())?;
    let status = all.split(' ').nth(1).and_then(|c| c.parse().ok()).ok_or(format!("no HTTP status: {all}"))?;
    let body = all.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Ok((status, body))
}

/// `SELECT …` as a URL path on InfluxDB's HTTP API.
pub(super) fn influx_query(q: &str) -> String {
    let mut enc = String::new();
    for b in q.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => enc.push(b as char),
            _ => enc.push_str(&format!("%{b:02X}")),
        }
    }
    format!("/query?db=bench&q={enc}")
}

/// Bytes of the files under `dir`.
fn du(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else { return 0 };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => du(&e.path()),
            _ => e.metadata().map_or(0, |m| m.len()),
        })
        .sum()
}
