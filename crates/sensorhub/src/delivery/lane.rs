//! The threads delivery attempts run on: a runtime of their own whose
//! threads are in the idle scheduling class (Linux's `SCHED_IDLE`) unless
//! `--webhook-priority normal`, so the CPU an attempt takes (opening the
//! secret, signing, the HTTP exchange) is what ingest and reads leave: a
//! thread of the server's that wakes (the store's writer back from its
//! `fsync`, a request's handler) takes the core from an attempt at once.
//! The worker's waits for a lull in ingest (yielding.rs: a look every
//! millisecond while readings wait) tick here too. On two cores, 0.2 of a
//! core of other work in short bursts beside a saturating webhook ingest
//! took 0.13 of its rate; in the idle class, about none (bench/RESULTS.md,
//! the thirty-seventh step). The worker's claims and outcome records stay
//! on the server's runtime (the store runs them on its blocking threads):
//! a transaction that holds the writer never waits on an idle thread.
//!
//! On a machine whose cores are all busy, attempts wait for a free moment
//! (deliveries fall behind and the backlog gauge rises); they are never
//! lost, and catch up when the load eases.

use super::yielding::{INGEST_QUIET, IngestFirst};
use sensorhub_store::Store;
use std::future::Future;
use std::sync::Arc;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinError;

/// The attempts' runtime; it stops when its last clone is dropped.
#[derive(Clone)]
pub struct Lane {
    handle: Handle,
    _stop: Arc<oneshot::Sender<()>>,
}

impl Lane {
    /// Starts `threads` threads, in the idle scheduling class if `idle`.
    pub fn start(threads: usize, idle: bool) -> Result<Self, String> {
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
        Ok(Self { handle, _stop: Arc::new(stop) })
    }

    /// The lane's runtime, to spawn on.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Waits while readings wait for `store`'s writer, as `turn` allows
    /// (yielding.rs), its steps ticking on the lane.
    pub async fn give_way(&self, turn: &mut IngestFirst, store: &Arc<dyn Store>) {
        let (mut waiting, store) = (*turn, store.clone());
        let waited = self.run(async move {
            waiting.wait(|| store.ingest_quiet() < INGEST_QUIET).await;
            waiting
        });
        if let Ok(waited) = waited.await {
            *turn = waited;
        }
    }

    /// Runs `f` on the lane's threads.
    pub async fn run<F>(&self, f: F) -> Result<F::Output, JoinError>
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
        let kept = lane.clone();
        drop(lane);
        assert_eq!(kept.run(async { 7 }).await.expect("a clone keeps it running"), 7);
    }
}
