//! `ServeProcess`: the real `sensorhub serve` binary on an ephemeral port,
//! its log kept as it comes, killed on drop.

use std::sync::Arc;

/// A `sensorhub serve` process on an ephemeral port, killed on drop.
pub struct ServeProcess {
    pub child: std::process::Child,
    /// `http://127.0.0.1:PORT/external/v1`
    pub base: String,
    /// What it logged until it was up.
    pub log: String,
    /// What it logged since, as it comes.
    later: Arc<std::sync::Mutex<String>>,
}

impl ServeProcess {
    /// Starts `sensorhub serve --listen 127.0.0.1:0 ARGS` and waits for its address.
    pub fn start(args: &[&str]) -> Self {
        Self::start_with(args, &[])
    }

    /// [`ServeProcess::start`] with environment variables `envs`.
    pub fn start_with(args: &[&str], envs: &[(&str, &str)]) -> Self {
        use std::io::BufRead;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sensorhub"))
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .env("SENSORHUB_LOG", "info")
            .envs(envs.iter().copied())
            .stderr(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("spawn sensorhub serve");
        let mut stderr = std::io::BufReader::new(child.stderr.take().expect("stderr"));
        let mut log = String::new();
        let addr = loop {
            let mut line = String::new();
            assert!(stderr.read_line(&mut line).expect("read") > 0, "server exited: {log}");
            log.push_str(&line);
            if let Some(rest) = line.split("listen=").nth(1) {
                break rest.split_whitespace().next().expect("address").to_owned();
            }
        };
        // Keep draining the log so the server never blocks on a full pipe,
        // and keep it for [`ServeProcess::wait_log`].
        let later = Arc::new(std::sync::Mutex::new(String::new()));
        let keep = later.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while stderr.read_line(&mut line).is_ok_and(|n| n > 0) {
                keep.lock().expect("log lock").push_str(&line);
                line.clear();
            }
        });
        Self { child, base: format!("http://{addr}/external/v1"), log, later }
    }

    /// Waits (at most `limit`) until the log holds `needle`; the whole log then.
    pub async fn wait_log(&self, needle: &str, limit: std::time::Duration) -> String {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let text = format!("{}{}", self.log, self.later.lock().expect("log lock"));
            if text.contains(needle) {
                return text;
            }
            assert!(std::time::Instant::now() < deadline, "{needle:?} not logged within {limit:?}: {text}");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
