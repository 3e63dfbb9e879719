//! Summaries of a stored hour, kept at its front (format 2) so that an
//! aggregated read of hours that lie wholly inside one bucket folds a few
//! numbers per sensor instead of decoding every reading:
//!
//! ```text
//! format  u8 = 2
//! length  varint: bytes of the summaries
//! mask    varint: the sensors summarised (the hour's sensors)
//! per sensor, in idx order:
//!   count varint
//!   kind  u8: 0 = decimals, 1 = doubles
//!   0:    k (u8), then zigzag varints: first, min - first, max - first,
//!         last - first, sum - count * first (all in units of 10^-k)
//!   1:    first, min, max, last, sum as little-endian doubles
//! hour    the hour in format 1 (crate::chunk)
//! ```
//!
//! Only hours of at least `MIN_READINGS` readings carry them: a sparse
//! hour decodes cheaply, and summaries would cost it more than they save.
//! With slow-moving decimals a sensor's summary takes 6 to 10 bytes.

use crate::StoredValue;
use crate::codec::{self, IntsSummary, Reader};

/// First byte of a stored hour with summaries.
pub(crate) const FORMAT: u8 = 2;

/// The fewest readings an hour has for summaries to be kept.
pub(crate) const MIN_READINGS: usize = 16;

/// A sensor's sum over an hour: exact for decimals.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sum {
    /// Exactly `n / 10^k`.
    Decimal {
        /// The digits.
        n: i64,
        /// Digits after the decimal point.
        k: u8,
    },
    /// A sum of doubles.
    Float(f64),
}

/// One sensor's summary of an hour.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SensorStats {
    /// The sensor's idx.
    pub idx: u8,
    /// How many values.
    pub count: u64,
    /// The earliest value.
    pub first: StoredValue,
    /// The smallest value.
    pub min: StoredValue,
    /// The largest value.
    pub max: StoredValue,
    /// The latest value.
    pub last: StoredValue,
    /// The sum.
    pub sum: Sum,
}

/// A column as [`encode`] sums it up: its sensor idx, its values and, for a
/// decimal column, its decimals and the summary of its integers.
pub(crate) type Column<'a> = (u8, &'a [f64], Option<(u8, IntsSummary)>);

/// Appends the summaries of an hour's columns (sensor idx, its values in
/// time order and, for a decimal column, its decimals and the summary of
/// its integers, [`codec::DecimalForm::summary`]; idx ascending, each with
/// at least one value).
pub(crate) fn encode(columns: &[Column<'_>], out: &mut Vec<u8>) {
    let mut block = Vec::with_capacity(12 * columns.len());
    let mask = columns.iter().fold(0u64, |m, (idx, _, _)| m | 1 << (idx & 63));
    codec::write_varint(mask, &mut block);
    for (_, values, decimal) in columns {
        codec::write_varint(values.len() as u64, &mut block);
        if !decimal.is_some_and(|(k, s)| encode_decimals(k, &s, &mut block)) {
            block.push(1);
            let first = values.first().copied().unwrap_or(0.0);
            let last = values.last().copied().unwrap_or(0.0);
            let (min, max) = values.iter().fold((first, first), |(lo, hi), &v| (lo.min(v), hi.max(v)));
            for v in [first, min, max, last, values.iter().sum()] {
                block.extend_from_slice(&f64::to_le_bytes(v));
            }
        }
    }
    out.push(FORMAT);
    codec::write_varint(block.len() as u64, out);
    out.extend_from_slice(&block);
}

/// Appends the summary of a decimal column (integers summed up in `s`, at
/// `k` decimals); `false` (nothing written) if the sum does not fit.
fn encode_decimals(k: u8, s: &IntsSummary, out: &mut Vec<u8>) -> bool {
    let Ok(rest) = i64::try_from(s.sum - i128::from(s.first) * s.count as i128) else { return false };
    out.push(0);
    out.push(k);
    for v in [s.first, s.min - s.first, s.max - s.first, s.last - s.first, rest] {
        codec::write_varint(codec::zigzag(v), out);
    }
    true
}

/// The hour in format 1 within a stored hour of either format; `None` if
/// the summaries' length runs past the end.
pub(crate) fn body(data: &[u8]) -> Option<&[u8]> {
    if data.first() != Some(&FORMAT) {
        return Some(data);
    }
    let mut r = Reader::new(&data[1..]);
    let len = usize::try_from(r.varint()?).ok()?;
    let at = data.len().checked_sub(r.remaining())?;
    data.get(at.checked_add(len)?..)
}

/// The summaries of a stored hour; `None` if it has none or they are malformed.
pub fn decode(data: &[u8]) -> Option<Vec<SensorStats>> {
    if data.first() != Some(&FORMAT) {
        return None;
    }
    let mut r = Reader::new(&data[1..]);
    let len = usize::try_from(r.varint()?).ok()?;
    let mut r = Reader::new(r.take(len)?);
    let mask = r.varint()?;
    let mut out = Vec::with_capacity(mask.count_ones() as usize);
    let mut m = mask;
    while m != 0 {
        let idx = m.trailing_zeros() as u8;
        m &= m - 1;
        let count = r.varint().filter(|c| (1..=3600).contains(c))?;
        let stats = match r.byte()? {
            0 => {
                let k = r.byte().filter(|k| *k <= 15)?;
                let mut next = || r.varint().map(codec::unzigzag);
                let first = next()?;
                let at = |d: i64| first.checked_add(d).filter(|n| n.unsigned_abs() < 1_000_000_000_000_000);
                let (min, max, last) = (at(next()?)?, at(next()?)?, at(next()?)?);
                let sum = i64::try_from(i128::from(first) * i128::from(count) + i128::from(next()?)).ok()?;
                let value = |n| decimal(n, k);
                SensorStats {
                    idx,
                    count,
                    first: value(first),
                    min: value(min),
                    max: value(max),
                    last: value(last),
                    sum: Sum::Decimal { n: sum, k },
                }
            }
            1 => {
                let mut next = || r.take(8).and_then(|b| b.first_chunk::<8>()).map(|b| f64::from_le_bytes(*b));
                let (first, min, max, last, sum) = (next()?, next()?, next()?, next()?, next()?);
                // A sum past the largest double: the hour is folded from
                // its readings, whose sum goes on scaled.
                if ![first, min, max, last, sum].iter().all(|v| v.is_finite()) {
                    return None;
                }
                let f = StoredValue::Float;
                SensorStats {
                    idx,
                    count,
                    first: f(first),
                    min: f(min),
                    max: f(max),
                    last: f(last),
                    sum: Sum::Float(sum),
                }
            }
            _ => return None,
        };
        out.push(stats);
    }
    r.is_done().then_some(out)
}

/// `n / 10^k` with as few decimals as hold it (the stored form's rule).
fn decimal(mut n: i64, mut k: u8) -> StoredValue {
    while k > 0 && n % 10 == 0 {
        (n, k) = (n / 10, k - 1);
    }
    StoredValue::Decimal { n, k }
}
