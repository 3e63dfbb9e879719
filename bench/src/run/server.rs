//! A release server on loopback for a scenario, what it spends read from
//! /proc, and the few plain requests the scenarios make to it.

use base64::Engine;
use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A server process, stopped when dropped.
pub(crate) struct Server {
    child: Child,
    pub(super) port: u16,
}

impl Server {
    pub(crate) fn start(cmd: &mut Command, port: u16) -> Result<Server, String> {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Err(format!("port {port} is taken: a server left from an earlier run? (--port)"));
        }
        let child = cmd.stdout(Stdio::null()).spawn().map_err(|e| format!("{cmd:?}: {e}"))?;
        let mut server = Server { child, port };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!("the server on port {port} exited: {status}"));
            }
            if get(port, "/healthz", None).is_ok_and(|b| !b.is_empty()) {
                return Ok(server);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!("the server on port {port} did not come up"))
    }

    pub(crate) fn rss(&self, field: &str) -> f64 {
        let status = fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.trim().strip_suffix("kB")?.trim().parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    }

    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The CPU time the server has used so far (user and system), seconds.
    pub(crate) fn cpu_seconds(&self) -> f64 {
        cpu_seconds_of(&format!("/proc/{}/stat", self.child.id()))
    }

    /// The CPU time the store's group-commit thread has used so far
    /// (`sensorhub-sqlite-group` or `sensorhub-pg-group`, truncated to 15
    /// bytes by the kernel), seconds: SQLite's one writer, whose time each
    /// write of readings waits for in turn.
    pub(crate) fn writer_cpu_seconds(&self) -> f64 {
        let task = format!("/proc/{}/task", self.child.id());
        let Ok(threads) = fs::read_dir(&task) else { return 0.0 };
        threads
            .flatten()
            .filter(|t| {
                fs::read_to_string(t.path().join("comm"))
                    .is_ok_and(|c| c.starts_with("sensorhub-sqlit") || c.starts_with("sensorhub-pg-gr"))
            })
            .map(|t| cpu_seconds_of(&t.path().join("stat").to_string_lossy()))
            .sum()
    }

    /// The bytes the server has caused to be written to storage so far
    /// (`write_bytes` of `/proc/PID/io`: file pages it dirtied, the WAL's
    /// and the database's; not its sockets).
    pub(crate) fn written_bytes(&self) -> Result<f64, String> {
        let path = format!("/proc/{}/io", self.child.id());
        let io = fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
        io.lines()
            .find_map(|l| l.strip_prefix("write_bytes:")?.trim().parse::<f64>().ok())
            .ok_or_else(|| format!("{path}: no write_bytes"))
    }

    /// Resets the peak RSS (VmHWM) so that the next reading is this scenario's.
    pub(crate) fn reset_peak(&self) {
        let _ = fs::write(format!("/proc/{}/clear_refs", self.child.id()), "5");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain HTTP/1.0 GET (the body ends with the connection); returns the body.
pub(crate) fn get(port: u16, path: &str, auth: Option<&str>) -> Result<Vec<u8>, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    let auth = auth.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n{auth}\r\n").map_err(|e| e.to_string())?;
    let mut all = Vec::new();
    s.read_to_end(&mut all).map_err(|e| e.to_string())?;
    let split = all.windows(4).position(|w| w == b"\r\n\r\n").ok_or("no HTTP header")?;
    if !all.starts_with(b"HTTP/1.0 200") && !all.starts_with(b"HTTP/1.1 200") {
        return Err(String::from_utf8_lossy(&all[..split]).into_owned());
    }
    Ok(all[split + 4..].to_vec())
}

pub(crate) fn basic(user: &str, password: &str) -> String {
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")))
}

/// The CPU time (user and system, seconds) of the process whose `stat` is
/// at `path` (`/proc/self/stat`: the bench's own); 0 when it cannot be read.
pub(crate) fn cpu_seconds_of(path: &str) -> f64 {
    let stat = fs::read_to_string(path).unwrap_or_default();
    // The fields after the command's name, which may hold spaces.
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime, in clock ticks (100 a second on Linux).
    (ticks(11) + ticks(12)) / 100.0
}
