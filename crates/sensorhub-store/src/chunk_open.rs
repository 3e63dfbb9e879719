//! Merging readings into an hour held as columns ([`Columns`]): what a
//! write does to every hour it touches. The store keeps the hours it wrote
//! last as columns ([`crate::write::hour_cache`]), so that live data (a
//! reading a second appended to its hour) merges without decoding the
//! stored hour again; readings that arrive a little out of order (several
//! senders at once) are merged column by column without spelling each
//! reading out.

use super::{Columns, Row, normalize};

impl Columns {
    /// Merges readings (ascending seconds, each normalized) into the hour:
    /// at a second already held, sensor by sensor, the new values winning.
    /// Returns how many of the readings are new or change what was held.
    pub(crate) fn merge(&mut self, newer: Vec<Row>) -> u64 {
        if newer.first().is_some_and(|r| self.times.last().is_none_or(|last| r.0 > *last)) {
            for (t, pairs) in &newer {
                self.push(*t, pairs);
            }
            return newer.len() as u64;
        }
        let old = std::mem::take(self);
        let mut cursors = vec![0usize; old.columns.len()];
        let (mut before, mut merged) = (Vec::new(), Vec::new());
        let mut changed = 0;
        let mut newer = newer.into_iter().peekable();
        let mut times = old.times.iter().enumerate().peekable();
        loop {
            match (times.peek().map(|(_, t)| **t), newer.peek().map(|r| r.0)) {
                (None, None) => break,
                (Some(t), Some(u)) if t == u => {
                    let (Some((i, _)), Some((_, pairs))) = (times.next(), newer.next()) else { break };
                    old.row(i, &mut cursors, &mut before);
                    merged.clear();
                    merged.extend_from_slice(&before);
                    merged.extend(pairs);
                    normalize(&mut merged);
                    changed += u64::from(!same(&before, &merged));
                    self.push(t, &merged);
                }
                (Some(t), u) if u.is_none_or(|u| t < u) => {
                    let Some((i, _)) = times.next() else { break };
                    old.row(i, &mut cursors, &mut before);
                    self.push(t, &before);
                }
                _ => {
                    let Some((u, pairs)) = newer.next() else { break };
                    changed += 1;
                    self.push(u, &pairs);
                }
            }
        }
        changed
    }

    /// Reading `i`'s pairs into `out` (in idx order), moving each column's
    /// cursor past its value; readings must be asked for in order.
    fn row(&self, i: usize, cursors: &mut [usize], out: &mut Vec<(u8, f64)>) {
        out.clear();
        for (c, at) in self.columns.iter().zip(cursors.iter_mut()) {
            if c.present.get(i).copied().unwrap_or(c.present.is_empty()) {
                out.push((c.idx, c.values[*at]));
                *at += 1;
            }
        }
    }

    /// Values held, for a bound on what is kept of hours.
    pub(crate) fn values_held(&self) -> usize {
        self.times.len() + self.columns.iter().map(|c| c.values.len() + c.present.len() / 8).sum::<usize>()
    }
}

/// Merges a new hour into a stored one ([`merge_rows`] of its readings).
#[cfg(test)]
pub(crate) fn merge(old: &[u8], new: &[u8]) -> Option<(Vec<u8>, u64)> {
    merge_rows(old, super::rows(new)?)
}

/// Merges readings (ascending seconds, each normalized) into a stored
/// hour: the merged hour and how many of its readings are new or changed;
/// `None` if the stored hour is malformed (a stored row is never silently
/// replaced). Writes go through [`Columns::merge`]; this is its tests'
/// way in.
#[cfg(test)]
pub(crate) fn merge_rows(old: &[u8], newer: Vec<Row>) -> Option<(Vec<u8>, u64)> {
    let mut hour = if old.is_empty() { Columns::default() } else { super::columns(old)? };
    let changed = hour.merge(newer);
    Some((hour.encode(), changed))
}

/// Whether two readings hold the same values, bit for bit.
fn same(a: &[(u8, f64)], b: &[(u8, f64)]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.0 == y.0 && x.1.to_bits() == y.1.to_bits())
}
