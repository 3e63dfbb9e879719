//! Progress of long commands (`import`, `copy`): a bar with rate and ETA
//! on a terminal (indicatif), and a plain log line every few seconds when
//! stderr is not one (a log file, journald, CI). Work reports into a shared
//! counter; a task draws it, so the work itself never waits on drawing.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::{IsTerminal, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Seconds between two plain progress lines.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Shows the progress of one piece of work until dropped.
pub struct Progress {
    done: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
    bar: Option<ProgressBar>,
}

/// What is counted.
#[derive(Clone, Copy)]
pub enum Unit {
    /// Bytes of an input file.
    Bytes,
    /// Items (hours of readings, …), named.
    Items(&'static str),
}

impl Progress {
    /// Progress of `what` towards `total` (in `unit`).
    pub fn start(what: &'static str, total: u64, unit: Unit) -> Self {
        let done = Arc::new(AtomicU64::new(0));
        let bar = std::io::stderr().is_terminal().then(|| {
            let template = match unit {
                Unit::Bytes => "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}",
                Unit::Items(_) => "{msg} [{bar:30}] {human_pos}/{human_len} {per_sec} ETA {eta}",
            };
            let bar = ProgressBar::new(total).with_message(what);
            if let Ok(style) = ProgressStyle::with_template(template) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar
        });
        let counter = done.clone();
        let drawn = bar.clone();
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let mut tick = tokio::time::interval(if drawn.is_some() { Duration::from_millis(200) } else { LOG_EVERY });
            tick.tick().await;
            loop {
                tick.tick().await;
                let n = counter.load(Ordering::Relaxed);
                match &drawn {
                    Some(bar) => bar.set_position(n),
                    None => log_line(what, n, total, unit, started.elapsed()),
                }
            }
        });
        Self { done, task, bar }
    }

    /// The counter the work adds to.
    pub fn counter(&self) -> Arc<AtomicU64> {
        self.done.clone()
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.task.abort();
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// One plain line: `import: 45% (120.0 of 266.7 MB), 12.1 MB/s, about 12 s left`.
fn log_line(what: &str, done: u64, total: u64, unit: Unit, elapsed: Duration) {
    let rate = done as f64 / elapsed.as_secs_f64().max(1e-3);
    let percent = if total == 0 { 100.0 } else { done as f64 * 100.0 / total as f64 };
    let left = if rate > 0.0 { total.saturating_sub(done) as f64 / rate } else { f64::INFINITY };
    let (amount, per_sec) = match unit {
        Unit::Bytes => {
            (format!("{:.1} of {:.1} MB", done as f64 / 1e6, total as f64 / 1e6), format!("{:.1} MB/s", rate / 1e6))
        }
        Unit::Items(name) => (format!("{done} of {total} {name}"), format!("{rate:.0} {name}/s")),
    };
    tracing::info!("{what}: {percent:.0}% ({amount}), {per_sec}, about {left:.0} s left");
}

/// A reader that adds the bytes it reads to a counter.
pub struct CountingReader<R> {
    inner: R,
    count: Arc<AtomicU64>,
}

impl<R> CountingReader<R> {
    /// Counts the bytes read from `inner` into `count`.
    pub fn new(inner: R, count: Arc<AtomicU64>) -> Self {
        Self { inner, count }
    }
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}
