//! The after-commit seam: whoever reacts to stored readings or alarm
//! transitions (live streams, MQTT) registers an [`AfterCommit`] with
//! [`crate::ReadingWrites::observe`], and every write of readings (webhook
//! ingest, MQTT batches, `import`, `apply`) and every write that records
//! transitions tells it what it committed, once it has committed, on both
//! backends. Nothing wraps the store to intercept its writes.

use crate::alarm::AlarmEvent;
use crate::{ImportReport, PartialImport, ReadingSource, StoreResult};
use async_trait::async_trait;
use sensorhub_core::model::ReadingInput;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

/// Readings of one write that observers are shown; a write of more (a
/// bulk import) shows its first this many and counts the rest.
pub const OBSERVED_PER_WRITE: usize = 10_000;

/// Reacts to readings, and to the alarm transitions they (or anything
/// else) caused, once their transaction has committed.
#[async_trait]
pub trait AfterCommit: Send + Sync {
    /// `readings` were committed, in the order written, and `left_out`
    /// more of the same write that are not shown ([`OBSERVED_PER_WRITE`]).
    async fn committed(&self, readings: &[ReadingInput], left_out: usize);

    /// Alarm transitions were committed, in the order recorded.
    async fn alarms(&self, _events: &[AlarmEvent]) {}
}

/// A store's observers.
#[derive(Default)]
pub(crate) struct Observers(RwLock<Vec<Arc<dyn AfterCommit>>>);

impl Observers {
    /// Adds `observer`.
    pub(crate) fn add(&self, observer: Arc<dyn AfterCommit>) {
        self.0.write().unwrap_or_else(PoisonError::into_inner).push(observer);
    }

    fn current(&self) -> Vec<Arc<dyn AfterCommit>> {
        self.0.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// `value`, once the observers heard of the alarm transitions its
    /// committed write recorded.
    pub(crate) async fn after<T>(&self, (value, events): (T, Vec<AlarmEvent>)) -> T {
        self.alarms(&events).await;
        value
    }

    /// Tells the observers of committed alarm transitions.
    pub(crate) async fn alarms(&self, events: &[AlarmEvent]) {
        if events.is_empty() {
            return;
        }
        for observer in self.current() {
            observer.alarms(events).await;
        }
    }

    async fn tell(&self, readings: &[ReadingInput], left_out: usize) {
        for observer in self.current() {
            observer.committed(readings, left_out).await;
        }
    }

    /// Writes one reading with `write` and tells the observers once it is
    /// committed.
    pub(crate) async fn one<F>(&self, reading: ReadingInput, write: impl FnOnce(ReadingInput) -> F) -> StoreResult<()>
    where
        F: Future<Output = StoreResult<()>>,
    {
        let shown = (!self.current().is_empty()).then(|| reading.clone());
        write(reading).await?;
        if let Some(reading) = shown {
            self.tell(std::slice::from_ref(&reading), 0).await;
        }
        Ok(())
    }

    /// Writes `readings` with `write` (which may fail as a whole) and
    /// tells the observers once they are committed.
    pub(crate) async fn all<R, F>(
        &self,
        readings: Vec<ReadingInput>,
        write: impl FnOnce(Vec<ReadingInput>) -> F,
    ) -> StoreResult<R>
    where
        F: Future<Output = StoreResult<R>>,
    {
        let shown: Vec<ReadingInput> = match self.current().is_empty() {
            true => Vec::new(),
            false => readings.iter().take(OBSERVED_PER_WRITE).cloned().collect(),
        };
        let left_out = readings.len().saturating_sub(shown.len());
        let report = write(readings).await?;
        if !shown.is_empty() {
            self.tell(&shown, left_out).await;
        }
        Ok(report)
    }

    /// Imports `source` with `write` (all or nothing) and tells the
    /// observers what it committed.
    pub(crate) async fn import<F>(
        &self,
        source: ReadingSource,
        write: impl FnOnce(ReadingSource) -> F,
    ) -> StoreResult<ImportReport>
    where
        F: Future<Output = StoreResult<ImportReport>>,
    {
        let (source, tap) = self.tap(source);
        let report = write(source).await?;
        self.tapped(tap, u64::MAX).await;
        Ok(report)
    }

    /// Imports `source` in steps with `write` and tells the observers what
    /// was committed, also when a later step failed.
    pub(crate) async fn import_batched<F>(
        &self,
        source: ReadingSource,
        write: impl FnOnce(ReadingSource) -> F,
    ) -> Result<ImportReport, PartialImport>
    where
        F: Future<Output = Result<ImportReport, PartialImport>>,
    {
        let (source, tap) = self.tap(source);
        let result = write(source).await;
        // What was committed before an error is a prefix of the input.
        let committed = match &result {
            Ok(_) => u64::MAX,
            Err(partial) => partial.committed.readings,
        };
        self.tapped(tap, committed).await;
        result
    }

    /// `source`, recording what it yields when anyone observes.
    fn tap(&self, source: ReadingSource) -> (ReadingSource, Option<Tap>) {
        if self.current().is_empty() {
            return (source, None);
        }
        let tap = Tap::default();
        (tap.wrap(source), Some(tap))
    }

    /// Tells the observers the first `committed` readings `tap` recorded.
    async fn tapped(&self, tap: Option<Tap>, committed: u64) {
        let Some(tap) = tap else { return };
        let (mut readings, seen) = tap.take();
        let n = usize::try_from(committed).unwrap_or(usize::MAX).min(seen);
        readings.truncate(n);
        if n > 0 {
            self.tell(&readings, n - readings.len()).await;
        }
    }
}

/// What an import read from its source: the first [`OBSERVED_PER_WRITE`]
/// readings, and how many there were.
#[derive(Clone, Default)]
struct Tap(Arc<Mutex<(Vec<ReadingInput>, usize)>>);

impl Tap {
    /// `source`, recording each reading it yields.
    fn wrap(&self, source: ReadingSource) -> ReadingSource {
        let tap = self.clone();
        Box::new(source.inspect(move |item| {
            if let Ok(reading) = item {
                let mut seen = tap.0.lock().unwrap_or_else(PoisonError::into_inner);
                if seen.1 < OBSERVED_PER_WRITE {
                    seen.0.push(reading.clone());
                }
                seen.1 += 1;
            }
        }))
    }

    fn take(&self) -> (Vec<ReadingInput>, usize) {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sensorhub_core::model::{Origin, ValueInput};

    #[derive(Default)]
    struct Seen(Mutex<Vec<(Vec<i64>, usize)>>);

    #[async_trait]
    impl AfterCommit for Seen {
        async fn committed(&self, readings: &[ReadingInput], left_out: usize) {
            let seconds = readings.iter().map(|r| r.timestamp).collect();
            self.0.lock().unwrap_or_else(PoisonError::into_inner).push((seconds, left_out));
        }
    }

    fn reading(second: i64) -> ReadingInput {
        let values = vec![ValueInput { sensor_id: "s".into(), value: 1.0, unit: None }];
        ReadingInput { device_id: "D".into(), timestamp: second, values, origin: Origin::Item("t".into()) }
    }

    fn seen(observer: &Seen) -> Vec<(Vec<i64>, usize)> {
        std::mem::take(&mut *observer.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    #[tokio::test]
    async fn observers_hear_of_commits_only() {
        let observers = Observers::default();
        let observer = Arc::new(Seen::default());
        observers.add(observer.clone());
        observers.one(reading(1), |_| async { Ok(()) }).await.expect("one");
        let refused = observers.one(reading(2), |_| async { Err(crate::StoreError::NotFound("x".into())) }).await;
        assert!(refused.is_err());
        assert_eq!(seen(&observer), [(vec![1], 0)], "a refused write is not told");

        let many: Vec<ReadingInput> = (0..OBSERVED_PER_WRITE as i64 + 5).map(reading).collect();
        observers.all(many, |_| async { Ok(()) }).await.expect("all");
        let told = seen(&observer);
        assert_eq!((told[0].0.len(), told[0].1), (OBSERVED_PER_WRITE, 5), "a bulk write is shown in part");

        let source: ReadingSource = Box::new((10..13).map(|s| Ok(reading(s))));
        let report = observers
            .import_batched(source, |source| async move {
                let read = source.count() as u64;
                let committed = ImportReport { readings: 2, values: 2 };
                assert_eq!(read, 3);
                Err(PartialImport { committed, error: crate::StoreError::NotFound("third".into()) })
            })
            .await;
        assert!(report.is_err());
        assert_eq!(seen(&observer), [(vec![10, 11], 0)], "what was committed before the error");
    }

    #[tokio::test]
    async fn without_observers_nothing_is_copied() {
        let observers = Observers::default();
        let source: ReadingSource = Box::new((0..3).map(|s| Ok(reading(s))));
        let (_, tap) = observers.tap(source);
        assert!(tap.is_none());
    }
}
