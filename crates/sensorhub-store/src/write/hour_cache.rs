//! The hours a store wrote last, kept decoded (as [`Columns`]) between
//! transactions, so that live data merges into its hour without decoding
//! the stored hour first: a station sending a reading a second had each
//! one decode, on average, half an hour of readings.
//!
//! The stored row stays the truth: what is kept of an hour is used only
//! when the row the transaction read is byte for byte the one kept with
//! it, so a write by anyone else (another instance, the CLI, a delete or
//! retention) or a transaction that rolled back only costs a decode.
//! Memory is bounded ([`MAX_HOURS`], [`MAX_BYTES`]); when it is full,
//! hours more than one older than the one being kept go (live data has
//! moved on from them; the hour before stays, for stations whose clocks
//! lag the others'), and otherwise the new hour is simply not kept.

use crate::chunk::{self, Columns};
use crate::decide::FastMap;
use std::sync::Mutex;

/// Hours kept at most.
const MAX_HOURS: usize = 4096;
/// Bytes kept at most, over every hour, by estimate (each value with its
/// decimal form, and the stored bytes): a million values of slow-moving
/// decimals.
const MAX_BYTES: usize = 16 << 20;

/// A store's kept hours, by (device, hour).
#[derive(Default)]
pub(crate) struct HourCache {
    kept: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    hours: FastMap<(i64, i64), Hour>,
    /// Sum of the hours' costs.
    held: usize,
    /// No kept hour is older than this.
    oldest: i64,
}

/// One kept hour: its stored bytes and the same readings as columns.
struct Hour {
    stored: Vec<u8>,
    columns: Columns,
    cost: usize,
}

impl HourCache {
    /// The hour `key` as columns to merge into, given the row the
    /// transaction read (`None`: there is none): what is kept when it is
    /// that row byte for byte, else the row decoded; `None` when the row is
    /// malformed. What was kept is handed over (see [`Self::keep`]).
    pub(crate) fn take(&self, key: (i64, i64), stored: Option<&[u8]>) -> Option<Columns> {
        let kept = {
            let mut k = self.lock();
            let hour = k.hours.remove(&key);
            if let Some(h) = &hour {
                k.held -= h.cost;
            }
            hour
        };
        match (stored, kept) {
            (None, _) => Some(Columns::default()),
            (Some([]), _) => Some(Columns::default()),
            (Some(row), Some(hour)) if hour.stored == row => Some(hour.columns),
            (Some(row), _) => chunk::columns(row),
        }
    }

    /// Keeps the hour `key` as written (`stored`, the same readings as
    /// `columns`), if it fits.
    pub(crate) fn keep(&self, key: (i64, i64), stored: &[u8], columns: Columns) {
        let cost = columns.bytes_held() + stored.len();
        let mut k = self.lock();
        if let Some(old) = k.hours.remove(&key) {
            k.held -= old.cost;
        }
        let full = |k: &Kept| k.hours.len() >= MAX_HOURS || k.held + cost > MAX_BYTES;
        let stale = key.1.saturating_sub(1);
        if full(&k) && stale > k.oldest {
            k.hours.retain(|(_, hour), _| *hour >= stale);
            k.held = k.hours.values().map(|h| h.cost).sum();
            k.oldest = k.hours.keys().map(|(_, hour)| *hour).min().unwrap_or(key.1);
        }
        if full(&k) {
            return;
        }
        k.oldest = if k.hours.is_empty() { key.1 } else { k.oldest.min(key.1) };
        k.held += cost;
        k.hours.insert(key, Hour { stored: stored.to_vec(), columns, cost });
    }

    /// The bytes kept now, by the same estimate that bounds them ([`MAX_BYTES`]).
    pub(crate) fn held(&self) -> usize {
        self.lock().held
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hour(seconds: std::ops::Range<u16>) -> (Vec<u8>, Columns) {
        let rows: Vec<chunk::Row> = seconds.map(|t| (t, vec![(0, f64::from(t) / 10.0)])).collect();
        let mut columns = Columns::default();
        columns.merge(rows);
        (columns.encode(), columns)
    }

    #[test]
    fn a_kept_hour_is_used_only_while_the_stored_row_is_the_one_kept() {
        let cache = HourCache::default();
        let (stored, columns) = hour(0..10);
        cache.keep((1, 5), &stored, columns);
        let (other, _) = hour(0..11);
        // Someone else wrote the hour: the row read is decoded, not the kept one.
        let taken = cache.take((1, 5), Some(&other)).expect("decodes");
        assert_eq!(taken.encode(), other);
        // It was handed over: a second take decodes too.
        cache.keep((1, 5), &stored, hour(0..10).1);
        assert_eq!(cache.take((1, 5), Some(&stored)).expect("kept").encode(), stored);
        // A row deleted since: nothing is merged into.
        cache.keep((1, 5), &stored, hour(0..10).1);
        assert_eq!(cache.take((1, 5), None).expect("empty").encode(), Vec::<u8>::new());
        assert!(cache.take((1, 5), Some(&[0x05])).is_none(), "a malformed row is refused");
    }

    #[test]
    fn when_full_older_hours_go_first_and_otherwise_nothing_more_is_kept() {
        let cache = HourCache::default();
        for device in 0..MAX_HOURS as i64 {
            let (stored, columns) = hour(0..2);
            cache.keep((device, 100), &stored, columns);
        }
        let (stored, columns) = hour(0..2);
        cache.keep((-1, 99), &stored, columns.clone());
        assert_eq!(cache.lock().hours.len(), MAX_HOURS, "an older hour is not kept when full");
        assert!(!cache.lock().hours.contains_key(&(-1, 99)));
        cache.keep((-1, 101), &stored, columns.clone());
        assert_eq!(cache.lock().hours.len(), MAX_HOURS, "the hour before the new one stays");
        cache.keep((-1, 102), &stored, columns);
        let k = cache.lock();
        assert_eq!(k.hours.len(), 1, "hours more than one older than the new one went");
        assert_eq!((k.oldest, k.held), (102, k.hours.values().map(|h| h.cost).sum()));
    }

    #[test]
    fn the_bytes_held_are_bounded_too() {
        let cache = HourCache::default();
        let (stored, columns) = hour(0..3600);
        let cost = columns.clone().bytes_held() + stored.len();
        for device in 0..(MAX_BYTES / cost + 10) as i64 {
            cache.keep((device, 100), &stored, columns.clone());
        }
        let k = cache.lock();
        assert!(k.held <= MAX_BYTES && k.held + cost > MAX_BYTES, "{} of {MAX_BYTES}", k.held);
        assert_eq!(k.hours.len(), MAX_BYTES / cost);
    }
}
