//! Runs `wrk` and reads its report.

use serde::Serialize;
use std::process::Command;

/// What one wrk run measured.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct WrkResult {
    /// Requests per second.
    pub requests_per_s: f64,
    /// Median latency, ms.
    pub p50_ms: f64,
    /// 99th percentile latency, ms.
    pub p99_ms: f64,
    /// Response bytes per second, MB (10^6).
    pub mb_per_s: f64,
    /// Requests completed.
    pub requests: u64,
    /// Non-2xx answers and socket errors.
    pub errors: u64,
}

/// The webhook load: each request a new reading of `REF-1MIN` (two values
/// with three decimals), a minute after the thread's previous one.
pub(crate) const INGEST_LUA: &str = r#"
local threads = 0
setup = function(thread) threads = threads + 1; thread:set("tid", threads) end
local n = 0
request = function()
  n = n + 1
  local ts = os.date("!%Y-%m-%dT%H:%M:%SZ", 1700000000 + (n * 2 + tid) * 60)
  local body = string.format('{"event":"sensor-data","device_id":"REF-1MIN","timestamp":"%s",'
    .. '"data":{"sensors":[{"id":"REF-wl","value":%d.%03d},{"id":"REF-batt","value":12.%03d}]}}',
    ts, 100 + n % 400, n % 1000, (n * 7) % 1000)
  return wrk.format("POST", nil, {["Content-Type"] = "application/json", ["X-API-KEY"] = "{webhook_key}"}, body)
end
"#;

/// Writes [`INGEST_LUA`] for the bench's webhook key to `path`.
pub(crate) fn write_ingest_script(path: &std::path::Path) -> Result<(), String> {
    let text = INGEST_LUA.replace("{webhook_key}", crate::dataset::BENCH_WEBHOOK_KEY);
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Loads `url` for `secs` seconds with `connections` connections on two threads.
pub fn run(url: &str, auth: Option<&str>, connections: u32, secs: u64) -> Result<WrkResult, String> {
    run_with(url, &auth_header(auth), None, connections, secs)
}

/// The `Authorization` header line of `auth`, if any.
pub fn auth_header(auth: Option<&str>) -> Vec<String> {
    auth.map(|a| format!("Authorization: {a}")).into_iter().collect()
}

/// [`run`] with `headers` (`Name: value` lines), and the requests made by
/// the Lua `script` when one is given.
pub fn run_with(
    url: &str,
    headers: &[String],
    script: Option<&std::path::Path>,
    connections: u32,
    secs: u64,
) -> Result<WrkResult, String> {
    run_threads(url, headers, script, 2, connections, secs)
}

/// [`run_with`] on `threads` wrk threads.
pub fn run_threads(
    url: &str,
    headers: &[String],
    script: Option<&std::path::Path>,
    threads: u32,
    connections: u32,
    secs: u64,
) -> Result<WrkResult, String> {
    let mut cmd = Command::new("wrk");
    cmd.arg(format!("-t{threads}")).args([
        &format!("-c{connections}"),
        &format!("-d{secs}s"),
        "--latency",
        "--timeout",
        "30s",
    ]);
    for h in headers {
        cmd.args(["-H", h]);
    }
    if let Some(s) = script {
        cmd.arg("-s").arg(s);
    }
    let out = cmd.arg(url).output().map_err(|e| format!("cannot run wrk (bench/run installs it): {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("wrk failed: {text}{}", String::from_utf8_lossy(&out.stderr)));
    }
    let r = parse(&text).ok_or_else(|| format!("cannot read wrk's report:\n{text}"))?;
    if r.errors > 0 {
        return Err(format!("{} errors or non-2xx answers during the run:\n{text}", r.errors));
    }
    Ok(r)
}

/// `1.23ms`, `456.00us`, `1.02s` in milliseconds.
fn duration_ms(s: &str) -> Option<f64> {
    let (num, factor) = if let Some(n) = s.strip_suffix("us") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60_000.0)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1000.0)
    } else {
        return None;
    };
    num.parse::<f64>().ok().map(|v| v * factor)
}

/// `123.45MB` (wrk counts in 1024s) in MB of 10^6 bytes.
fn size_mb(s: &str) -> Option<f64> {
    let units = [("GB", 1024f64.powi(3)), ("MB", 1024f64.powi(2)), ("KB", 1024.0), ("B", 1.0)];
    let (num, factor) = units.iter().find_map(|(u, f)| s.strip_suffix(u).map(|n| (n, *f)))?;
    num.parse::<f64>().ok().map(|v| v * factor / 1e6)
}

/// Reads wrk's report (with `--latency`).
pub fn parse(text: &str) -> Option<WrkResult> {
    let mut r = WrkResult::default();
    let mut completed = false;
    for line in text.lines().map(str::trim) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["50%", v] => r.p50_ms = duration_ms(v)?,
            ["99%", v] => r.p99_ms = duration_ms(v)?,
            ["Requests/sec:", v] => r.requests_per_s = v.parse().ok()?,
            ["Transfer/sec:", v] => r.mb_per_s = size_mb(v)?,
            [n, "requests", "in", ..] => {
                r.requests = n.parse().ok()?;
                completed = true;
            }
            ["Non-2xx", "or", "3xx", "responses:", n] => r.errors += n.parse::<u64>().ok()?,
            ["Socket", "errors:", rest @ ..] => {
                r.errors += rest.iter().filter_map(|w| w.trim_end_matches(',').parse::<u64>().ok()).sum::<u64>();
            }
            _ => {}
        }
    }
    // A run may complete no request (a very long one on a slow machine).
    completed.then_some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_report() {
        let text = "Running 2s test @ http://127.0.0.1:18400/x
  2 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.02ms  458.24us   8.65ms   77.69%
    Req/Sec     7.86k   500.00     8.50k    70.00%
  Latency Distribution
     50%  980.00us
     75%    1.20ms
     90%    1.50ms
     99%    2.51ms
  31289 requests in 2.00s, 1.21GB read
  Socket errors: connect 0, read 2, write 0, timeout 1
Requests/sec:  15644.13
Transfer/sec:    603.55MB
";
        let r = parse(text).expect("parses");
        assert_eq!(r.requests, 31289);
        assert!((r.p50_ms - 0.98).abs() < 1e-9);
        assert!((r.p99_ms - 2.51).abs() < 1e-9);
        assert!((r.requests_per_s - 15644.13).abs() < 1e-9);
        assert!((r.mb_per_s - 603.55 * 1.048576).abs() < 1e-6);
        assert_eq!(r.errors, 3);
    }
}
