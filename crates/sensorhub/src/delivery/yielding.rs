//! Ingest first: the delivery worker's bookkeeping (its claims and its
//! outcome records, both write transactions) waits while readings wait for
//! the store's writer or are being written
//! ([`sensorhub_store::ReadingWrites::ingest_waiting`]: SQLite's one writer,
//! or PostgreSQL's group committer, whose groups the claims' rows slow on
//! shared cores). Waiting is bounded, so a saturating ingest still leaves
//! deliveries a share: each waiter holds a budget that fills at a share of
//! the time that passes (`--webhook-ingest-first`, 90 %), up to
//! [`YIELD_BURST`], and waiting spends it. Over time the worker yields at
//! most that share of its time, and never longer than `YIELD_BURST / (1 -
//! share)` in one go (half a second at 90 %); deliveries fall behind under
//! a saturating ingest and catch up when it eases.
//!
//! Ingest counts as waiting until none of it has been under way for
//! [`INGEST_QUIET`]: under a saturating load the store's count of writes
//! falls to 0 for moments between them (every client between its answer
//! and its next request), and a worker that looked only at the count went
//! ahead in those moments, so that it yielded little of its share
//! (bench/RESULTS.md, the thirty-second step).

use sensorhub_store::Store;
use std::time::Duration;
use tokio::time::Instant;

/// The most yielding saved up.
pub const YIELD_BURST: Duration = Duration::from_millis(50);
/// How often a waiter looks whether ingest still waits.
const STEP: Duration = Duration::from_millis(1);
/// How long no write of readings must have been under way for ingest to
/// count as not waiting ([`sensorhub_store::ReadingWrites::ingest_quiet`]).
pub const INGEST_QUIET: Duration = Duration::from_millis(1);

/// The yielding budget of one writer of the worker (claims, or records).
#[derive(Debug, Clone, Copy)]
pub struct IngestFirst {
    /// The share of the time that passes added to the budget (below 1).
    share: f64,
    budget: Duration,
    at: Instant,
}

impl IngestFirst {
    /// A full budget, filled at `percent` (0 to 99) of the time.
    pub fn new(percent: u8) -> Self {
        Self::starting(percent, Instant::now())
    }

    fn starting(percent: u8, at: Instant) -> Self {
        Self { share: f64::from(percent.min(99)) / 100.0, budget: YIELD_BURST, at }
    }

    /// Adds what the time until `now` earned.
    fn earn(&mut self, now: Instant) {
        self.budget = (self.budget + now.saturating_duration_since(self.at).mul_f64(self.share)).min(YIELD_BURST);
        self.at = self.at.max(now);
    }

    /// Whether the budget at `now` allows another step of yielding.
    fn may_yield(&mut self, now: Instant) -> bool {
        self.earn(now);
        self.share > 0.0 && self.budget >= STEP
    }

    /// Spends the time from `from` to `to`, yielded.
    fn spend(&mut self, from: Instant, to: Instant) {
        self.earn(to);
        self.budget = self.budget.saturating_sub(to.saturating_duration_since(from));
    }

    /// Waits while `ingest_waiting` (the store's
    /// [`sensorhub_store::ReadingWrites::ingest_quiet`] below
    /// [`INGEST_QUIET`]) holds and the budget lasts; returns how long it waited.
    pub async fn wait(&mut self, ingest_waiting: impl Fn() -> bool) -> Duration {
        let started = Instant::now();
        while ingest_waiting() && self.may_yield(Instant::now()) {
            let before = Instant::now();
            tokio::time::sleep(STEP).await;
            self.spend(before, Instant::now());
        }
        started.elapsed()
    }

    /// Waits while readings wait for `store`'s writer, as the budget allows.
    pub async fn give_way(&mut self, store: &dyn Store) {
        self.wait(|| store.ingest_quiet() < INGEST_QUIET).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker under a saturating ingest: it yields whenever it may, and
    /// each time it may not, it writes for `work`. Returns the share of
    /// the time it yielded and its longest wait.
    fn saturated(percent: u8, work: Duration) -> (f64, Duration) {
        let start = Instant::now();
        let mut turn = IngestFirst::starting(percent, start);
        let (mut now, mut yielded, mut longest, mut current) = (start, Duration::ZERO, Duration::ZERO, Duration::ZERO);
        while now < start + Duration::from_secs(60) {
            if turn.may_yield(now) {
                turn.spend(now, now + STEP);
                now += STEP;
                yielded += STEP;
                current += STEP;
                longest = longest.max(current);
            } else {
                now += work;
                current = Duration::ZERO;
            }
        }
        (yielded.as_secs_f64() / (now - start).as_secs_f64(), longest)
    }

    #[test]
    fn a_saturating_ingest_leaves_the_worker_its_share_and_no_wait_is_long() {
        for percent in [50, 90, 99] {
            let share = f64::from(percent) / 100.0;
            let most = YIELD_BURST.div_f64(1.0 - share) + STEP;
            for work in [Duration::from_micros(100), Duration::from_millis(1), Duration::from_millis(20)] {
                let (yielded, longest) = saturated(percent, work);
                assert!(yielded <= share + 0.01, "{percent} %, {work:?}: yielded {yielded}");
                assert!(yielded >= share / 2.0, "{percent} %, {work:?}: it does yield ({yielded})");
                assert!(longest <= most, "{percent} %, {work:?}: waited {longest:?} in one go");
            }
        }
        assert!(saturated(0, Duration::from_millis(1)).0 < 1e-9, "0 %: never");
    }

    #[tokio::test]
    async fn with_no_ingest_waiting_it_does_not_wait() {
        let mut turn = IngestFirst::new(90);
        assert!(turn.wait(|| false).await < STEP);
    }
}
