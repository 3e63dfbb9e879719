//! The floor: nginx serving sensorhub's exact bytes from files.

use std::fs;
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// nginx serving the files under its directory's `www`, stopped when dropped.
pub(super) struct Nginx {
    child: Child,
    dir: tempfile::TempDir,
}

impl Nginx {
    pub(super) fn start(port: u16, under: &Path) -> Result<Nginx, String> {
        let under = under.canonicalize().map_err(|e| e.to_string())?;
        let dir = tempfile::Builder::new().prefix("nginx-").tempdir_in(under).map_err(|e| e.to_string())?;
        let d = dir.path().display();
        fs::create_dir_all(dir.path().join("www")).map_err(|e| e.to_string())?;
        let config = format!(
            // Workers as root when the bench runs as root (as CI does): as nobody
            // they could not read a private checkout. Run by another user,
            // nginx ignores the line and its workers keep that user.
            "daemon off;\nuser root;\nworker_processes auto;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n  access_log off;\n  sendfile on;\n  tcp_nopush on;\n  keepalive_requests 1000000;\n  \
             client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  \
             uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  \
             server {{\n    listen 127.0.0.1:{port};\n    root {d}/www;\n    default_type application/json;\n  }}\n}}\n"
        );
        let conf = dir.path().join("nginx.conf");
        fs::write(&conf, config).map_err(|e| e.to_string())?;
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Err(format!("port {port} is taken: an nginx left from an earlier run? (--port)"));
        }
        let child = Command::new("nginx")
            .arg("-c")
            .arg(&conf)
            .arg("-p")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start nginx (bench/peer installs it): {e}"))?;
        let nginx = Nginx { child, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return Err(format!("nginx did not come up on port {port}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(nginx)
    }

    /// Serves `bytes` at `/{name}`.
    pub(super) fn put(&self, name: &str, bytes: &[u8]) -> Result<(), String> {
        fs::write(self.dir.path().join("www").join(name), bytes).map_err(|e| e.to_string())
    }
}

impl Drop for Nginx {
    /// SIGTERM, not SIGKILL: a killed master leaves its workers listening.
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !matches!(self.child.try_wait(), Ok(Some(_))) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
