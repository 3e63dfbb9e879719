//! The thread that writes groups of single readings on PostgreSQL: its own
//! single-threaded runtime and its own connection, driven on that thread.
//! A group costs three round trips ([`write::ingest_group`]); on the
//! server's shared runtime each one also waited for the connection's task and the writer's to be
//! woken on other worker threads, about half a millisecond each under load
//! (issue 27). Here the answer wakes the one thread that waits for it.

use super::write;
use crate::alarm::AlarmEvent;
use crate::group::Single;
use crate::{StoreError, StoreResult};
use deadpool_postgres::Pool;
use std::sync::Arc;
use tokio::sync::{Semaphore, mpsc, oneshot};

/// What a written group gives back: each reading's outcome, and the alarm
/// transitions recorded.
type Written = (Vec<StoreResult<()>>, Vec<AlarmEvent>);

/// A group to write, and where its outcome goes.
type Job = (Vec<Single>, oneshot::Sender<StoreResult<Written>>);

/// The writer thread's queue; the thread stops when the last clone is dropped.
#[derive(Clone)]
pub(super) struct GroupWriter {
    jobs: mpsc::Sender<Job>,
}

impl GroupWriter {
    /// Starts the thread. `connect` builds its pool of one connection, on
    /// the thread's runtime (so that the connection is driven there);
    /// `writers` are this process's writer places, shared with every other
    /// write.
    pub(super) fn start(
        connect: impl FnOnce() -> StoreResult<Pool> + Send + 'static,
        writers: Arc<Semaphore>,
        kept: Arc<crate::write::Kept>,
    ) -> StoreResult<Self> {
        let (jobs, mut queue) = mpsc::channel::<Job>(2);
        // The runtime is built on the thread: one dropped in the caller's
        // async context (had the thread not started) would panic.
        let (started, built) = std::sync::mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("sensorhub-pg-writer".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = started.send(Err(e));
                        return;
                    }
                };
                let _ = started.send(Ok(()));
                runtime.block_on(async move {
                    let pool = connect();
                    while let Some((readings, done)) = queue.recv().await {
                        let written = match &pool {
                            Ok(pool) => write_group(pool, &writers, &readings, &kept).await,
                            Err(e) => Err(e.duplicate()),
                        };
                        let _ = done.send(written);
                    }
                });
            })
            .map_err(|e| StoreError::Backend(Box::new(e)))?;
        // Waits only for the thread to build its runtime.
        let built =
            built.recv().map_err(|_| StoreError::Backend("the PostgreSQL writer thread did not start".into()))?;
        built.map_err(|e| StoreError::Backend(Box::new(e)))?;
        Ok(Self { jobs })
    }

    /// Writes `readings` in one transaction on the writer thread.
    pub(super) async fn write(&self, readings: Vec<Single>) -> StoreResult<Written> {
        let gone = || StoreError::Backend("the PostgreSQL writer thread stopped".into());
        let (done, written) = oneshot::channel();
        self.jobs.send((readings, done)).await.map_err(|_| gone())?;
        written.await.map_err(|_| gone())?
    }
}

async fn write_group(
    pool: &Pool,
    writers: &Semaphore,
    readings: &[Single],
    kept: &crate::write::Kept,
) -> StoreResult<Written> {
    let _writer = super::writer_place(writers).await?;
    write::ingest_group(pool.get().await?, readings, kept).await
}
