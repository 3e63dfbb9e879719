//! Writes of readings under way, counted for the background writers that
//! give way to them ([`crate::store::ReadingWrites::ingest_waiting`]): the
//! same count on both backends, kept by each around its ingest and imports,
//! and how long none has been ([`IngestWaiting::quiet`]).

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Where the times of [`IngestWaiting::quiet`] are counted from.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Microseconds from [`EPOCH`] to now, at least 1 (0 is "never").
fn micros() -> u64 {
    u64::try_from(EPOCH.elapsed().as_micros()).unwrap_or(u64::MAX).max(1)
}

/// How many writes of readings (single readings waiting for or in a group,
/// imports) are under way, and when the last one ended.
#[derive(Debug, Default)]
pub(crate) struct IngestWaiting {
    count: AtomicUsize,
    /// [`micros`] when a write last ended; 0 if none has.
    ended: AtomicU64,
}

impl IngestWaiting {
    /// Counts one write from now until the guard is dropped (it returned,
    /// or its future was dropped).
    pub(crate) fn enter(&self) -> Counted<'_> {
        self.count.fetch_add(1, Ordering::Relaxed);
        Counted(self)
    }

    /// The writes under way now: a counter read.
    pub(crate) fn now(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// How long no write has been under way: zero while one is,
    /// [`Duration::MAX`] if none ever was.
    pub(crate) fn quiet(&self) -> Duration {
        if self.now() > 0 {
            return Duration::ZERO;
        }
        match self.ended.load(Ordering::Relaxed) {
            0 => Duration::MAX,
            ended => Duration::from_micros(micros().saturating_sub(ended)),
        }
    }
}

/// One write counted in an [`IngestWaiting`].
pub(crate) struct Counted<'a>(&'a IngestWaiting);

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        // The end is noted before the count drops, so that no reader sees
        // no write under way and an end older than this one.
        self.0.ended.store(micros(), Ordering::Relaxed);
        self.0.count.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_is_counted_until_its_guard_goes() {
        let waiting = IngestWaiting::default();
        let one = waiting.enter();
        let two = waiting.enter();
        assert_eq!(waiting.now(), 2);
        drop(one);
        assert_eq!(waiting.now(), 1);
        drop(two);
        assert_eq!(waiting.now(), 0);
    }

    #[test]
    fn quiet_is_the_time_since_the_last_write_ended() {
        let waiting = IngestWaiting::default();
        assert_eq!(waiting.quiet(), Duration::MAX, "no write yet");
        let one = waiting.enter();
        assert_eq!(waiting.quiet(), Duration::ZERO, "one under way");
        drop(one);
        let just = waiting.quiet();
        std::thread::sleep(Duration::from_millis(5));
        let later = waiting.quiet();
        assert!(just < Duration::from_millis(5) && later >= Duration::from_millis(5), "{just:?} then {later:?}");
    }
}
