//! Readings of one device over one hour, stored as one row in a column
//! format (format 1):
//!
//! ```text
//! format  u8 = 1
//! n       varint: readings, 1..=3600
//! times   the first reading's second in the hour (varint), the step to the
//!         second (varint), then the change of each next step
//!         (delta-of-delta) as varint tokens: odd = a run of (t >> 1) + 1
//!         unchanged steps, even = a change of zigzag(t >> 1)
//! mask    varint: the bit set of sensor idx that have any value
//! columns one per set bit, in idx order: a presence byte (0: every
//!         reading has the sensor; 1: a bitmap of n bits follows), then
//!         the present values coded as in [`crate::codec`]
//! ```
//!
//! Hours of at least [`crate::stats::MIN_READINGS`] readings are stored with
//! per-sensor summaries in front (format 2, [`crate::stats`]), for
//! aggregated reads; every reader here takes either format.
//!
//! A one-minute station takes 24 rows a day, a window reads few rows, and a
//! sensor's values sit together, so a decimal column of a slow-moving level
//! costs about a byte per value and a flat line almost nothing.

use crate::ReadingBatch;
use crate::StoredValue;
use crate::codec::{self, Reader};

/// Seconds covered by one row.
pub const CHUNK_SECONDS: i64 = 3600;

/// First byte of a stored hour in this format.
const FORMAT: u8 = 1;

/// The row (hour number) holding second `ts`.
pub fn chunk_of(ts: i64) -> i64 {
    ts.div_euclid(CHUNK_SECONDS)
}

/// A reading spelled out: its second within the hour and its (sensor idx,
/// value) pairs in ascending idx order, each idx once.
pub(crate) type Row = (u16, Vec<(u8, f64)>);

/// Sorts a reading's pairs by idx; of pairs with the same idx the last wins.
pub(crate) fn normalize(pairs: &mut Vec<(u8, f64)>) {
    pairs.sort_by_key(|p| p.0);
    pairs.dedup_by(|later, earlier| {
        let same = later.0 == earlier.0;
        if same {
            *earlier = *later;
        }
        same
    });
}

/// One sensor's column of an hour being written: which readings have it
/// (empty: all of them) and their values in time order.
#[derive(Clone)]
struct ColumnIn {
    idx: u8,
    present: Vec<bool>,
    values: Vec<f64>,
    /// The values' decimal form, kept as they come.
    decimal: codec::DecimalForm,
}

impl ColumnIn {
    fn push_value(&mut self, v: f64) {
        self.values.push(v);
        self.decimal.push(&self.values);
    }
}

/// An hour being written, as columns: what a write merges readings into
/// ([`open`]) and encodes.
#[derive(Clone, Default)]
pub(crate) struct Columns {
    times: Vec<u16>,
    /// In ascending idx order.
    columns: Vec<ColumnIn>,
}

impl Columns {
    /// Appends a reading later than every one held (pairs in idx order).
    fn push(&mut self, t: u16, pairs: &[(u8, f64)]) {
        let n = self.times.len();
        self.times.push(t);
        let mut p = pairs.iter().peekable();
        for c in &mut self.columns {
            while p.next_if(|x| x.0 < c.idx).is_some() {}
            let value = p.next_if(|x| x.0 == c.idx).map(|x| x.1);
            if value.is_none() && c.present.is_empty() {
                c.present = vec![true; n];
            }
            if !c.present.is_empty() {
                c.present.push(value.is_some());
            }
            if let Some(v) = value {
                c.push_value(v);
            }
        }
        // Sensors this hour has not seen yet.
        for &(idx, v) in pairs {
            if let Err(at) = self.columns.binary_search_by_key(&idx, |c| c.idx) {
                let mut present = vec![false; n + 1];
                present[n] = true;
                let present = if n == 0 { Vec::new() } else { present };
                let mut column = ColumnIn { idx, present, values: Vec::new(), decimal: codec::DecimalForm::default() };
                column.push_value(v);
                self.columns.insert(at, column);
            }
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let n = self.times.len();
        if n == 0 {
            return out;
        }
        // Each column's decimal form, kept as its values came with its
        // summary and its coding: the column is copied out, not coded again.
        if n >= crate::stats::MIN_READINGS {
            let columns: Vec<crate::stats::Column<'_>> = self
                .columns
                .iter()
                .filter(|c| !c.values.is_empty())
                .map(|c| (c.idx, &c.values[..], c.decimal.summary()))
                .collect();
            crate::stats::encode(&columns, &mut out);
        }
        out.push(FORMAT);
        codec::write_varint(n as u64, &mut out);
        encode_times(&self.times, &mut out);
        let mask = self.columns.iter().filter(|c| !c.values.is_empty()).fold(0u64, |m, c| m | 1 << (c.idx & 63));
        codec::write_varint(mask, &mut out);
        for c in self.columns.iter().filter(|c| !c.values.is_empty()) {
            if c.values.len() == n {
                out.push(0);
            } else {
                out.push(1);
                let mut bitmap = vec![0u8; n.div_ceil(8)];
                for (i, _) in c.present.iter().enumerate().filter(|(_, p)| **p) {
                    bitmap[i / 8] |= 1 << (i % 8);
                }
                out.extend_from_slice(&bitmap);
            }
            if c.decimal.write_column(&mut out).is_none() {
                codec::encode_column_as(&c.values, None, &mut out);
            }
        }
        out
    }
}

/// Encodes readings (ascending seconds below [`CHUNK_SECONDS`], pairs as
/// [`normalize`] leaves them) as a stored hour; empty for no readings.
pub(crate) fn encode(rows: &[Row]) -> Vec<u8> {
    let mut columns = Columns::default();
    for (t, pairs) in rows {
        columns.push(*t, pairs);
    }
    columns.encode()
}

fn encode_times(times: &[u16], out: &mut Vec<u8>) {
    codec::write_varint(u64::from(times[0]), out);
    let Some(second) = times.get(1) else { return };
    let mut step = i64::from(*second) - i64::from(times[0]);
    codec::write_varint(step as u64, out);
    let mut zeros = 0u64;
    for w in times[1..].windows(2) {
        let next = i64::from(w[1]) - i64::from(w[0]);
        if next == step {
            zeros += 1;
            continue;
        }
        if zeros > 0 {
            codec::write_varint((zeros - 1) << 1 | 1, out);
            zeros = 0;
        }
        codec::write_varint(codec::zigzag(next - step) << 1, out);
        step = next;
    }
    if zeros > 0 {
        codec::write_varint((zeros - 1) << 1 | 1, out);
    }
}

/// The seconds of a stored hour, leaving `r` at its sensor mask.
fn decode_times(r: &mut Reader<'_>) -> Option<Vec<u16>> {
    if r.byte()? != FORMAT {
        return None;
    }
    let n = r.count(CHUNK_SECONDS as usize).filter(|n| *n > 0)?;
    let mut times = Vec::with_capacity(n);
    let mut t = i64::try_from(r.varint()?).ok()?;
    let mut step = 0i64;
    loop {
        if !(0..CHUNK_SECONDS).contains(&t) {
            return None;
        }
        times.push(t as u16);
        if times.len() == n {
            return Some(times);
        }
        if times.len() == 1 {
            step = i64::try_from(r.varint()?).ok()?;
        } else {
            let token = r.varint()?;
            if token & 1 == 1 {
                // A run of unchanged steps; the first one is taken below.
                let run = usize::try_from(token >> 1).ok()?.checked_add(1)?;
                if times.len() + run > n || step <= 0 {
                    return None;
                }
                for _ in 1..run {
                    t += step;
                    if t >= CHUNK_SECONDS {
                        return None;
                    }
                    times.push(t as u16);
                }
            } else {
                step = step.checked_add(codec::unzigzag(token >> 1))?;
            }
        }
        if step <= 0 {
            return None;
        }
        t += step;
    }
}

/// One sensor's column of a decoded hour.
struct Column<'a> {
    idx: u8,
    /// Which readings have the sensor (`None`: all of them).
    bitmap: Option<&'a [u8]>,
    /// How many do.
    present: usize,
}

impl Column<'_> {
    fn has(&self, i: usize) -> bool {
        self.bitmap.is_none_or(|b| b[i / 8] & (1 << (i % 8)) != 0)
    }
}

/// A stored hour decoded: its seconds, its columns, and every column's
/// values one after the other.
struct Decoded<'a> {
    times: Vec<u16>,
    columns: Vec<Column<'a>>,
}

/// Decodes a stored hour, appending every column's values to `values`.
fn decode<'a>(data: &'a [u8], values: &mut Vec<StoredValue>) -> Option<Decoded<'a>> {
    let mut r = Reader::new(crate::stats::body(data)?);
    let times = decode_times(&mut r)?;
    let n = times.len();
    let mask = r.varint()?;
    let mut columns = Vec::with_capacity(mask.count_ones() as usize);
    let mut m = mask;
    while m != 0 {
        let idx = m.trailing_zeros() as u8;
        m &= m - 1;
        let bitmap = match r.byte()? {
            0 => None,
            1 => Some(r.take(n.div_ceil(8))?),
            _ => return None,
        };
        let present = match bitmap {
            None => n,
            // Bits past the last reading must be clear.
            Some(b) if n % 8 != 0 && b[n / 8] >> (n % 8) != 0 => return None,
            Some(b) => b.iter().map(|x| x.count_ones() as usize).sum(),
        };
        if present == 0 {
            return None;
        }
        codec::decode_column(&mut r, present, values)?;
        columns.push(Column { idx, bitmap, present });
    }
    r.is_done().then_some(Decoded { times, columns })
}

impl Decoded<'_> {
    /// Walks the readings in time order, calling `f` with each one's index,
    /// mask and values (in idx order) until it returns `false`.
    fn walk(&self, values: &[StoredValue], mut f: impl FnMut(usize, u64, &[StoredValue]) -> bool) {
        let mut cursor = Vec::with_capacity(self.columns.len());
        let mut next = 0;
        for c in &self.columns {
            cursor.push(next);
            next += c.present;
        }
        let mut picked = Vec::with_capacity(self.columns.len());
        for i in 0..self.times.len() {
            picked.clear();
            let mut mask = 0u64;
            for (c, at) in self.columns.iter().zip(cursor.iter_mut()) {
                if c.has(i) {
                    mask |= 1 << c.idx;
                    picked.push(values[*at]);
                    *at += 1;
                }
            }
            if !f(i, mask, &picked) {
                return;
            }
        }
    }
}

/// Decodes a stored hour into rows.
pub(crate) fn rows(data: &[u8]) -> Option<Vec<Row>> {
    let mut values = Vec::new();
    let d = decode(data, &mut values)?;
    let mut out = Vec::with_capacity(d.times.len());
    d.walk(&values, |i, mut mask, vals| {
        let mut pairs = Vec::with_capacity(mask.count_ones() as usize);
        for v in vals {
            pairs.push((mask.trailing_zeros() as u8, v.to_f64()));
            mask &= mask - 1;
        }
        out.push((d.times[i], pairs));
        true
    });
    Some(out)
}

/// A stored hour as columns of doubles, to merge into.
pub(crate) fn columns(data: &[u8]) -> Option<Columns> {
    let mut values = Vec::new();
    let d = decode(data, &mut values)?;
    let n = d.times.len();
    let mut at = 0;
    let mut columns = Vec::with_capacity(d.columns.len());
    for c in &d.columns {
        let present = match c.bitmap {
            None => Vec::new(),
            Some(_) => (0..n).map(|i| c.has(i)).collect(),
        };
        let values: Vec<f64> = values[at..at + c.present].iter().map(|v| v.to_f64()).collect();
        let decimal = codec::DecimalForm::of(&values);
        columns.push(ColumnIn { idx: c.idx, present, values, decimal });
        at += c.present;
    }
    Some(Columns { times: d.times, columns })
}

/// A stored hour written before summaries existed, again with them:
/// `Some(None)` when it needs nothing (it has them, or too few readings
/// for them), `None` when it is malformed. The readings come back bit for
/// bit (the columns' round trip is property-tested).
pub(crate) fn with_summaries(data: &[u8]) -> Option<Option<Vec<u8>>> {
    if data.first() == Some(&crate::stats::FORMAT) {
        return Some(None);
    }
    if reading_count(data)? < crate::stats::MIN_READINGS as u64 {
        return Some(None);
    }
    Some(Some(columns(data)?.encode()))
}

/// How many readings a stored hour holds (read from its header only).
pub(crate) fn reading_count(data: &[u8]) -> Option<u64> {
    let mut r = Reader::new(crate::stats::body(data)?);
    (r.byte()? == FORMAT).then_some(())?;
    r.count(CHUNK_SECONDS as usize).filter(|n| *n > 0).map(|n| n as u64)
}

/// The last second of a stored hour that holds a reading.
pub fn last_second(chunk: i64, data: &[u8]) -> Option<i64> {
    let times = decode_times(&mut Reader::new(crate::stats::body(data)?))?;
    times.last().map(|t| chunk * CHUNK_SECONDS + i64::from(*t))
}

/// Each sensor's newest value in a stored hour: (idx, second, value) in idx
/// order. `None` if the hour is malformed.
pub(crate) fn last_values(chunk: i64, data: &[u8]) -> Option<Vec<(u8, i64, StoredValue)>> {
    let base = chunk * CHUNK_SECONDS;
    let mut values = Vec::new();
    let d = decode(data, &mut values)?;
    let mut out = Vec::with_capacity(d.columns.len());
    let mut end = 0;
    for c in &d.columns {
        end += c.present;
        let i = (0..d.times.len()).rev().find(|&i| c.has(i))?;
        out.push((c.idx, base + i64::from(d.times[i]), values[end - 1]));
    }
    Some(out)
}

/// Appends the readings of a stored hour within `from..=end` to `batch`, up
/// to `limit` readings in the batch. `None` if the hour is malformed. (The
/// window's hot path: values go straight from the columns to the batch.)
pub fn decode_into(chunk: i64, data: &[u8], from: i64, end: i64, batch: &mut ReadingBatch, limit: usize) -> Option<()> {
    let base = chunk * CHUNK_SECONDS;
    let mut values = Vec::new();
    let d = decode(data, &mut values)?;
    let mut cursor = Vec::with_capacity(d.columns.len());
    let mut next = 0;
    for c in &d.columns {
        cursor.push(next);
        next += c.present;
    }
    for (i, t) in d.times.iter().enumerate() {
        let ts = base + i64::from(*t);
        if ts > end || batch.len() >= limit {
            break;
        }
        let keep = ts >= from;
        let mut mask = 0u64;
        for (c, at) in d.columns.iter().zip(cursor.iter_mut()) {
            if c.has(i) {
                if keep {
                    mask |= 1 << c.idx;
                    batch.values.push(values[*at]);
                }
                *at += 1;
            }
        }
        if keep {
            batch.timestamps.push(ts);
            batch.masks.push(mask);
        }
    }
    Some(())
}

/// Removes the readings at seconds within `from..=end` from a stored hour.
/// Returns what remains (empty when nothing does), and how many readings
/// and values were removed; `None` if the hour is malformed.
pub fn remove_range(chunk: i64, data: &[u8], from: i64, end: i64) -> Option<(Vec<u8>, u64, u64)> {
    let base = chunk * CHUNK_SECONDS;
    let (mut readings, mut values) = (0, 0);
    let mut kept = rows(data)?;
    kept.retain(|(t, pairs)| {
        let gone = (from..=end).contains(&(base + i64::from(*t)));
        if gone {
            readings += 1;
            values += pairs.len() as u64;
        }
        !gone
    });
    Some((encode(&kept), readings, values))
}

#[path = "chunk_open.rs"]
pub(crate) mod open;

#[cfg(test)]
#[path = "chunk_tests.rs"]
mod tests;
