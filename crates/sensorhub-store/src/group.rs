//! Group commit for single readings (webhook ingest), on both backends:
//! readings that arrive while a transaction is being written wait for the
//! next one, and each transaction takes every reading waiting then (up to
//! [`MAX_GROUP`]). A durable commit costs an fsync (and on PostgreSQL a
//! round trip); shared by the readings of a group, it costs each of them a
//! fraction. Every reading is answered only after the transaction that
//! holds it has committed, and a reading that is refused (an unknown
//! sensor) is refused alone: the others of its group are stored. The
//! backend gives the function that writes a group, through the same
//! reading writer as `import`.

use crate::{Generations, StoreError, StoreResult};
use sensorhub_core::model::ReadingInput;
use std::future::Future;
use tokio::sync::{mpsc, oneshot};

/// Readings committed in one transaction at most.
const MAX_GROUP: usize = 512;

/// One reading of a group, and the generations it may be written at.
#[derive(Debug)]
pub(crate) struct Single {
    /// The reading.
    pub(crate) reading: ReadingInput,
    /// When set, the reading is written only if the store's generations
    /// are still these in its transaction; else it is refused with
    /// [`StoreError::Stale`] ([`crate::store::ReadingWrites::ingest_at`]).
    pub(crate) at: Option<Generations>,
}

/// A reading waiting for its transaction, and where its outcome goes.
struct Job {
    single: Single,
    done: oneshot::Sender<StoreResult<()>>,
}

/// The committer's queue; the committer stops when this is dropped.
pub(crate) struct GroupCommit {
    queue: mpsc::Sender<Job>,
}

impl GroupCommit {
    /// Starts the committer. `write_group` stores readings in one
    /// transaction and gives each its outcome, or fails as a whole (then
    /// nothing of the group was written).
    pub(crate) fn start<F, Fut>(write_group: F) -> Self
    where
        F: Fn(Vec<Single>) -> Fut + Send + 'static,
        Fut: Future<Output = StoreResult<Vec<StoreResult<()>>>> + Send,
    {
        let (queue, mut jobs) = mpsc::channel::<Job>(4 * MAX_GROUP);
        tokio::spawn(async move {
            while let Some(first) = jobs.recv().await {
                let mut group = vec![first];
                while group.len() < MAX_GROUP {
                    match jobs.try_recv() {
                        Ok(job) => group.push(job),
                        Err(_) => break,
                    }
                }
                let (readings, answers): (Vec<_>, Vec<_>) = group.into_iter().map(|j| (j.single, j.done)).unzip();
                match write_group(readings).await {
                    Ok(each) => {
                        for (answer, outcome) in answers.into_iter().zip(each) {
                            let _ = answer.send(outcome);
                        }
                    }
                    // Nothing of the group was written: each reading gets the cause.
                    Err(e) => {
                        for answer in answers {
                            let _ = answer.send(Err(e.duplicate()));
                        }
                    }
                }
            }
        });
        Self { queue }
    }

    /// Stores `reading` in the next group (only at generations `at`, when
    /// given); returns once it is committed.
    pub(crate) async fn write(&self, reading: ReadingInput, at: Option<Generations>) -> StoreResult<()> {
        let (done, outcome) = oneshot::channel();
        let gone = || StoreError::Backend("the group committer stopped".into());
        self.queue.send(Job { single: Single { reading, at }, done }).await.map_err(|_| gone())?;
        outcome.await.map_err(|_| gone())?
    }
}
