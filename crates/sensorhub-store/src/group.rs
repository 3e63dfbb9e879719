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
//!
//! The committer is a thread of its own with a single-threaded runtime,
//! where the backend's writer runs: a reading's request wakes it, and its
//! commit wakes the request. On the server's shared runtime a group also
//! went to a committer task and, on SQLite, to a blocking thread and back
//! (bench/RESULTS.md, the twentieth step). Where a group costs round
//! trips, the committer waits a little to fill it ([`fill`]).

mod fill;
mod gather;
mod waiting;

pub(crate) use gather::Gather;
pub(crate) use waiting::IngestWaiting;

use crate::alarm::AlarmEvent;
use crate::observe::Observers;
use crate::{Generations, StoreError, StoreResult};
use sensorhub_core::model::ReadingInput;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// Readings committed in one transaction at most.
const MAX_GROUP: usize = 512;

/// Groups whose alarm transitions the observers have not heard of yet.
const TELLING: usize = 16;

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

/// What a written group gives back: each reading's outcome, and the alarm
/// transitions recorded.
pub(crate) type Written = (Vec<StoreResult<()>>, Vec<AlarmEvent>);

/// Where each reading's outcome goes.
type Answers = Vec<oneshot::Sender<StoreResult<()>>>;

/// A reading waiting for its transaction, and where its outcome goes.
struct Job {
    single: Single,
    done: oneshot::Sender<StoreResult<()>>,
}

/// The committer's queue; the committer's thread stops when this is dropped.
pub(crate) struct GroupCommit {
    queue: mpsc::Sender<Job>,
}

impl GroupCommit {
    /// Starts the committer's thread, named `name`. `setup` runs on it
    /// first (what it builds, a connection's task say, lives on the
    /// thread's runtime) and gives the writer: it takes a group's readings
    /// from a [`Gather`] as they come, stores them in one transaction and
    /// gives each its outcome, in the order taken, or fails as a whole (then
    /// nothing of the group was written). Alarm transitions are told to
    /// `observers` before the readings of their group are answered, in
    /// the order of the groups, on the caller's runtime (an observer may
    /// start tasks there). With `fill`, the committer waits a little for
    /// each group to fill ([`fill`]).
    pub(crate) fn start<W>(
        name: &str,
        fill: bool,
        observers: Arc<Observers>,
        setup: impl FnOnce() -> StoreResult<W> + Send + 'static,
    ) -> StoreResult<Self>
    where
        W: AsyncFn(&mut Gather<'_>) -> StoreResult<Written> + 'static,
    {
        let (queue, mut jobs) = mpsc::channel::<Job>(4 * MAX_GROUP);
        let (tell, told) = mpsc::channel(TELLING);
        tokio::spawn(teller(told, observers));
        // The runtime is built on the thread: one dropped in the caller's
        // async context (had the thread not started) would panic.
        let (started, built) = std::sync::mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name(name.into())
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
                    let write = setup();
                    let mut filling = fill.then(fill::Filling::default);
                    while let Some(first) = jobs.recv().await {
                        let goal = filling.as_ref().map(|f| f.goal(std::time::Instant::now()));
                        let mut gather = Gather::new(&mut jobs, first, goal);
                        let started = std::time::Instant::now();
                        let written = match &write {
                            Ok(write) => write(&mut gather).await,
                            Err(e) => Err(e.duplicate()),
                        };
                        let (answers, waited) = gather.finish();
                        if let Some(filling) = &mut filling {
                            filling.written(answers.len(), started.elapsed().saturating_sub(waited), jobs.len());
                        }
                        match written {
                            Ok((each, events)) if events.is_empty() => answer(answers, each),
                            // The teller answers once the observers heard.
                            Ok((each, events)) => {
                                let _ = tell.send((events, answers, each)).await;
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
            })
            .map_err(|e| StoreError::Backend(Box::new(e)))?;
        // Waits only for the thread to build its runtime.
        let built = built.recv().map_err(|_| StoreError::Backend("the group committer did not start".into()))?;
        built.map_err(|e| StoreError::Backend(Box::new(e)))?;
        Ok(Self { queue })
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

/// Gives each reading of a group its outcome.
fn answer(answers: Answers, each: Vec<StoreResult<()>>) {
    for (answer, outcome) in answers.into_iter().zip(each) {
        let _ = answer.send(outcome);
    }
}

/// Tells the observers of each group's alarm transitions, in order, and
/// then answers the group's readings.
async fn teller(mut told: mpsc::Receiver<(Vec<AlarmEvent>, Answers, Vec<StoreResult<()>>)>, observers: Arc<Observers>) {
    while let Some((events, answers, each)) = told.recv().await {
        observers.alarms(&events).await;
        answer(answers, each);
    }
}
