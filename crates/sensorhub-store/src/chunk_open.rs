//! Merging readings into an hour held as columns ([`Columns`]): what a
//! write does to every hour it touches. The store keeps the hours it wrote
//! last as columns ([`crate::write::hour_cache`]), so that live data (a
//! reading a second appended to its hour) merges without decoding the
//! stored hour again; readings that arrive a little out of order (several
//! senders at once) spell out and re-merge only the held readings after
//! the first of them.

use super::{ColumnIn, Columns, Row, normalize};

impl ColumnIn {
    /// How many of the first `p` readings have this sensor.
    fn count_before(&self, p: usize) -> usize {
        if self.present.is_empty() { p } else { self.present[..p].iter().filter(|x| **x).count() }
    }
}

impl Columns {
    /// Merges readings (ascending seconds, each normalized) into the hour:
    /// at a second already held, sensor by sensor, the new values winning.
    /// Returns how many of the readings are new or change what was held.
    /// The held readings before the first new one stay as they are; those
    /// after it (few, when readings arrive a little out of order) are
    /// spelled out and merged with the new ones.
    pub(crate) fn merge(&mut self, newer: Vec<Row>) -> u64 {
        let Some(first) = newer.first().map(|r| r.0) else { return 0 };
        let older = self.split_off(self.times.partition_point(|t| *t < first));
        let mut changed = 0;
        let mut merged = Vec::new();
        let (mut a, mut b) = (older.into_iter().peekable(), newer.into_iter().peekable());
        loop {
            match (a.peek().map(|r| r.0), b.peek().map(|r| r.0)) {
                (None, None) => break,
                (Some(t), Some(u)) if t == u => {
                    let (Some((_, before)), Some((_, pairs))) = (a.next(), b.next()) else { break };
                    merged.clear();
                    merged.extend_from_slice(&before);
                    merged.extend(pairs);
                    normalize(&mut merged);
                    changed += u64::from(!same(&before, &merged));
                    self.push(t, &merged);
                }
                (Some(t), u) if u.is_none_or(|u| t < u) => {
                    let Some((_, before)) = a.next() else { break };
                    self.push(t, &before);
                }
                _ => {
                    let Some((u, pairs)) = b.next() else { break };
                    changed += 1;
                    self.push(u, &pairs);
                }
            }
        }
        changed
    }

    /// The readings from the `p`th on, spelled out, leaving the hour
    /// holding the first `p`: it encodes as if only they had been pushed
    /// (a presence list may stay spelled out with every reading present).
    fn split_off(&mut self, p: usize) -> Vec<Row> {
        let n = self.times.len();
        if p >= n {
            return Vec::new();
        }
        let mut cursors: Vec<usize> = self.columns.iter().map(|c| c.count_before(p)).collect();
        let mut rows = Vec::with_capacity(n - p);
        for i in p..n {
            let mut pairs = Vec::new();
            self.row(i, &mut cursors, &mut pairs);
            rows.push((self.times[i], pairs));
        }
        self.times.truncate(p);
        for c in &mut self.columns {
            let m = c.count_before(p);
            c.values.truncate(m);
            c.present.truncate(p);
            c.decimal.truncate(&c.values);
        }
        self.columns.retain(|c| !c.values.is_empty());
        rows
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

    /// Keeps each decimal column's coding in step with its values from now
    /// on ([`crate::codec::DecimalForm::keep_coding`]): for an hour that
    /// stays held across writes, so that each encodes only what came since.
    pub(crate) fn keep_coding(&mut self) {
        for c in &mut self.columns {
            c.decimal.keep_coding();
        }
    }

    /// Bytes held (by estimate: each value's room with its decimal form),
    /// for a bound on what is kept of hours.
    pub(crate) fn bytes_held(&self) -> usize {
        let columns: usize = self
            .columns
            .iter()
            .map(|c| 8 * c.values.capacity() + c.decimal.bytes_held() + c.present.capacity() + 96)
            .sum();
        2 * self.times.capacity() + columns
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
