//! Writes of readings under way, counted for the background writers that
//! give way to them ([`crate::store::ReadingWrites::ingest_waiting`]): the
//! same count on both backends, kept by each around its ingest and imports.

use std::sync::atomic::{AtomicUsize, Ordering};

/// How many writes of readings (single readings waiting for or in a group,
/// imports) are under way.
#[derive(Debug, Default)]
pub(crate) struct IngestWaiting(AtomicUsize);

impl IngestWaiting {
    /// Counts one write from now until the guard is dropped (it returned,
    /// or its future was dropped).
    pub(crate) fn enter(&self) -> Counted<'_> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Counted(&self.0)
    }

    /// The writes under way now: a counter read.
    pub(crate) fn now(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// One write counted in an [`IngestWaiting`].
pub(crate) struct Counted<'a>(&'a AtomicUsize);

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
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
}
