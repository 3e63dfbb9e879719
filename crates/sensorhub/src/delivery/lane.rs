//! The threads delivery attempts run on: a runtime of their own whose
//! threads are in the idle scheduling class (Linux's `SCHED_IDLE`) unless
//! `--webhook-priority normal`, so the CPU an attempt takes (opening the
//! secret, signing, the HTTP exchange) is what ingest and reads leave: a
//! thread of the server's that wakes (the store's writer back from its
//! `fsync`, a request's handler) takes the core from an attempt at once.
//! The worker's loop and its recorder run here too, with their waits for a
//! lull in ingest (yielding.rs: a look every millisecond while readings
//! wait): an attempt that ends wakes a thread of the lane, not one of the
//! server's that would take the core from the next attempt (with the loop
//! on the server's runtime, a drain ran at 0.75-0.9 of the rate the normal
//! class gave it: bench/RESULTS.md, the thirty-eighth step). On two
//! cores, 0.2 of a core of other work in short bursts beside a saturating
//! webhook ingest took 0.13 of its rate; in the idle class, about none
//! (bench/RESULTS.md, the thirty-seventh step). The worker's claims and
//! outcome records are sent home, to the server's runtime
//! ([`Lane::at_home`]; the store runs them on its blocking threads): a
//! transaction that holds the writer never waits on an idle thread.
//!
//! On a machine whose cores are all busy, attempts wait for a free moment
//! (deliveries fall behind and the backlog gauge rises); they are never
//! lost, and catch up when the load eases.

use std::future::Future;
use std::sync::Arc;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinError;

/// The attempts' runtime; it stops when its last clone is dropped.
#[derive(Clone)]
pub struct Lane {
    handle: Handle,
    /// The server's runtime, which started the lane.
    home: Handle,
    _stop: Arc<oneshot::Sender<()>>,
}

impl Lane {
    /// Starts `threads` threads, in the idle scheduling class if `idle`;
    /// called on the server's runtime, which becomes the lane's home.
    pub fn start(threads: usize, idle: bool) -> Result<Self, String> {
        let home = Handle::try_current().map_err(|e| format!("the webhook attempts' runtime: {e}"))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("sensorhub-deliver")
            .enable_all()
            .on_thread_start(move || {
                if idle {
                    lower_priority();
                }
            })
            .build()
            .map_err(|e| format!("the webhook attempts' runtime: {e}"))?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        // The runtime is dropped on a thread of its own, outside any runtime.
        std::thread::Builder::new()
            .name("sensorhub-deliver-rt".into())
            .spawn(move || {
                runtime.block_on(async {
                    let _ = stopped.await;
                });
                runtime.shutdown_background();
            })
            .map_err(|e| format!("the webhook attempts' runtime: {e}"))?;
        Ok(Self { handle, home, _stop: Arc::new(stop) })
    }

    /// The lane's runtime, to spawn on.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Starts `f` on the lane's threads, in the background, for as long
    /// as the server's runtime lives: a task of the lane that holds the
    /// lane (the worker's loop) would otherwise keep it running after the
    /// server's runtime is gone.
    pub fn spawn<F>(&self, f: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        // Dropped with the server's runtime's tasks, which ends `f`.
        let (alive, gone) = oneshot::channel::<()>();
        drop(self.home.spawn(async move {
            let _alive = alive;
            std::future::pending::<()>().await;
        }));
        drop(self.handle.spawn(async move {
            tokio::select! {
                () = f => {}
                _ = gone => {}
            }
        }));
    }

    /// Runs `f` on the server's runtime: for the store's work, which may
    /// hold the writer and must not wait on a thread of the idle class.
    pub async fn at_home<F>(&self, f: F) -> Result<F::Output, JoinError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.home.spawn(f).await
    }

    /// Runs `f` on the lane's threads and waits for it (for tests: the
    /// worker spawns on the lane).
    #[cfg(test)]
    async fn run<F>(&self, f: F) -> Result<F::Output, JoinError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(f).await
    }
}

/// Puts the calling thread in the idle scheduling class.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        use thread_priority::unix::{NormalThreadSchedulePolicy, ThreadSchedulePolicy};
        use thread_priority::{ThreadPriority, set_thread_priority_and_policy, thread_native_id};
        let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
        if let Err(e) = set_thread_priority_and_policy(thread_native_id(), ThreadPriority::Min, idle) {
            tracing::warn!(error = ?e, "a webhook attempts' thread stays in the normal scheduling class");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The calling thread's scheduling policy (Linux: 0 normal, 5 idle).
    fn policy() -> Option<i64> {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
        // Field 41; the fields after the command's closing parenthesis start at field 3.
        stat.rsplit_once(')')?.1.split_whitespace().nth(41 - 3)?.parse().ok()
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn attempts_run_on_threads_of_the_idle_class_unless_asked_otherwise() {
        let lane = Lane::start(2, true).expect("lane");
        assert_eq!(lane.run(async { policy() }).await.expect("ran"), Some(5), "SCHED_IDLE");
        let normal = Lane::start(1, false).expect("lane");
        assert_eq!(normal.run(async { policy() }).await.expect("ran"), Some(0), "SCHED_OTHER");
        assert_eq!(policy(), Some(0), "the caller's own thread is left as it was");
        let on_lane = lane.clone();
        let home = lane.run(async move { on_lane.at_home(async { policy() }).await }).await.expect("ran");
        assert_eq!(home.expect("ran at home"), Some(0), "work the lane sends home runs in the normal class");
        let kept = lane.clone();
        drop(lane);
        assert_eq!(kept.run(async { 7 }).await.expect("a clone keeps it running"), 7);
    }

    #[test]
    fn work_spawned_on_the_lane_ends_with_the_servers_runtime() {
        use std::sync::mpsc::{RecvTimeoutError, channel};
        let home = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let (alive, watch) = channel::<()>();
        let lane = home.block_on(async { Lane::start(1, true) }).expect("lane");
        let held = lane.clone();
        lane.spawn(async move {
            // Holds the lane, as the worker's loop does, and never ends by itself.
            let (_held, _alive) = (held, alive);
            std::future::pending::<()>().await;
        });
        drop(lane);
        assert_eq!(watch.recv_timeout(Duration::from_millis(200)), Err(RecvTimeoutError::Timeout), "it runs");
        drop(home);
        assert_eq!(watch.recv_timeout(Duration::from_secs(10)), Err(RecvTimeoutError::Disconnected), "it ended");
    }
}
