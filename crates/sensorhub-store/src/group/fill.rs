//! Filling a group before it is written, where a group costs round trips
//! (PostgreSQL): the committer waits, a bounded time, for as many
//! readings as the recent groups held, or as the last group and the
//! readings that came while it was written.
//!
//! Why: with 8 clients and a write that takes longer than a request's
//! trip, groups fall into two halves that take turns (each client waits
//! for the other half's write and then its own), so a group of 4 pays the
//! whole cost of a write. Readings that came while a group was written
//! tell that halves take turns; waiting for the half just answered, whose
//! next readings are on their way, writes the 8 together: a client then
//! waits for one write and its trip instead of two writes. That pays only
//! while the trip is shorter than the write, so the wait is at most the
//! recent writes' mean time (and never above 2 ms); a lone writer (groups
//! of one) never waits, and a target that no longer comes (a client gone)
//! decays with the groups written without it. On SQLite a group's write
//! is short beside a request's trip, and filling measured slower
//! (bench/RESULTS.md, the twentieth step): its committer takes what is
//! there.
//!
//! The writer begins its transaction with the readings already there and
//! takes the rest once the group has filled ([`super::gather`]): the wait
//! overlaps the first round trip. It is a timer of the committer's
//! runtime, which rounds a deadline up to its millisecond; readings that
//! come end it at once.

use std::time::{Duration, Instant};

/// Groups whose size sets the next target.
const WINDOW: usize = 32;

/// The longest wait, whatever the writes took.
const MOST: Duration = Duration::from_millis(2);

/// The recent groups' sizes and write times.
#[derive(Default)]
pub(super) struct Filling {
    sizes: [usize; WINDOW],
    next: usize,
    /// The last group's size and the readings that came while it was
    /// written, when any came (0 when none did).
    turns: usize,
    /// A moving mean of the writes' time, in microseconds.
    write_us: f64,
}

impl Filling {
    /// How many readings the next group waits for, and until when (from
    /// `since`, when its first reading was taken).
    pub(super) fn goal(&self, since: Instant) -> (usize, Instant) {
        let target = self.sizes.iter().copied().max().unwrap_or(0).max(self.turns);
        let wait = Duration::from_micros(self.write_us as u64).min(MOST);
        (target, since + wait)
    }

    /// Records a group of `size` readings written in `took`, while which
    /// `came` more came.
    pub(super) fn written(&mut self, size: usize, took: Duration, came: usize) {
        self.turns = if came > 0 { size + came } else { 0 };
        self.sizes[self.next] = size;
        self.next = (self.next + 1) % WINDOW;
        let us = took.as_secs_f64() * 1e6;
        self.write_us = if self.write_us == 0.0 { us } else { 0.9 * self.write_us + 0.1 * us };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_goal_follows_the_recent_groups_and_decays() {
        let mut f = Filling::default();
        let now = Instant::now();
        assert_eq!(f.goal(now), (0, now), "nothing written: nothing to wait for");
        f.written(1, Duration::from_micros(600), 0);
        assert_eq!(f.goal(now), (1, now + Duration::from_micros(600)), "a lone writer: its group is full at once");
        f.written(4, Duration::from_micros(600), 0);
        assert_eq!(f.goal(now).0, 4, "the largest recent group");
        f.written(4, Duration::from_micros(600), 3);
        assert_eq!(f.goal(now).0, 7, "halves taking turns: the one written and the one that came meanwhile");
        for _ in 0..WINDOW {
            f.written(2, Duration::from_secs(1), 0);
        }
        let (target, until) = f.goal(now);
        assert_eq!(target, 2, "a size not seen for a window is forgotten");
        assert_eq!(until, now + MOST, "the wait is bounded whatever the writes took");
    }
}
