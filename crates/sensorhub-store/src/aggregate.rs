//! Readings folded into calendar buckets (`interval` and `agg`), as they
//! stream from the store: one bucket's sums at a time, so a year of
//! readings takes no more memory than a day. The same fold serves every
//! backend. Sums of decimals are exact (`0.1 + 0.2` is `0.3`); `min`,
//! `max`, `first` and `last` are stored values, printed as the raw answer
//! prints them.

use crate::{ReadingBatch, ReadingStream, StoredValue, Window};
use futures_util::StreamExt;
use sensorhub_core::bucket::{Agg, Buckets};

/// One sensor's running aggregate within the current bucket.
#[derive(Debug, Clone, Copy)]
struct Running {
    count: u64,
    /// The sum of the decimal values, exactly, in units of `10^-k`.
    decimal_sum: i128,
    k: u8,
    /// Whether `decimal_sum` is still exact (it has not overflowed).
    exact: bool,
    /// The sum of values that are not decimals (and of decimals once the
    /// exact sum overflowed).
    float_sum: f64,
    floats: u64,
    /// The value `min`, `max`, `first` or `last` keeps, and it as a double.
    kept: StoredValue,
    kept_f64: f64,
}

impl Running {
    const EMPTY: Running = Running {
        count: 0,
        decimal_sum: 0,
        k: 0,
        exact: true,
        float_sum: 0.0,
        floats: 0,
        kept: StoredValue::Decimal { n: 0, k: 0 },
        kept_f64: 0.0,
    };

    fn add_to_sum(&mut self, value: StoredValue) {
        if let StoredValue::Decimal { n, k } = value
            && self.exact
        {
            if k > self.k {
                match self.decimal_sum.checked_mul(pow10_i128(k - self.k)) {
                    Some(rescaled) => (self.decimal_sum, self.k) = (rescaled, k),
                    None => return self.lose_exactness(value),
                }
            }
            match i128::from(n).checked_mul(pow10_i128(self.k - k)).and_then(|v| self.decimal_sum.checked_add(v)) {
                Some(sum) => self.decimal_sum = sum,
                None => self.lose_exactness(value),
            }
            return;
        }
        self.float_sum += value.to_f64();
        self.floats += 1;
    }

    /// The exact sum overflowed: it and `value` go on as doubles.
    fn lose_exactness(&mut self, value: StoredValue) {
        self.float_sum += self.decimal_sum as f64 / crate::codec::pow10(self.k) + value.to_f64();
        self.floats += 1;
        (self.decimal_sum, self.exact) = (0, false);
    }

    /// The sum: exact when every value was a decimal and it fits the
    /// stored form, else a double.
    fn sum(&self) -> StoredValue {
        if self.floats == 0 {
            let (mut n, mut k) = (self.decimal_sum, self.k);
            while k > 0 && n % 10 == 0 {
                (n, k) = (n / 10, k - 1);
            }
            if let Ok(n) = i64::try_from(n)
                && n.unsigned_abs() < 1_000_000_000_000_000
            {
                return StoredValue::Decimal { n, k };
            }
        }
        StoredValue::Float(self.decimal_sum as f64 / crate::codec::pow10(self.k) + self.float_sum)
    }

    /// The mean: the exact decimal sum divided by the count where that is
    /// exact in doubles, so it is the correctly rounded mean.
    fn mean(&self) -> StoredValue {
        let count = self.count as f64;
        if self.floats == 0 {
            return StoredValue::Float(self.decimal_sum as f64 / (count * crate::codec::pow10(self.k)));
        }
        StoredValue::Float((self.decimal_sum as f64 / crate::codec::pow10(self.k) + self.float_sum) / count)
    }

    fn value(&self, agg: Agg) -> StoredValue {
        match agg {
            Agg::Count => StoredValue::Decimal { n: i64::try_from(self.count).unwrap_or(i64::MAX), k: 0 },
            Agg::Sum => self.sum(),
            Agg::Mean => self.mean(),
            Agg::Min | Agg::Max | Agg::First | Agg::Last => self.kept,
        }
    }
}

/// `10^k` as an integer, for `k` in `0..=38`.
fn pow10_i128(k: u8) -> i128 {
    10i128.pow(u32::from(k.min(38)))
}

/// Folds readings, given in ascending time order, into buckets.
pub struct Aggregator {
    buckets: Buckets,
    agg: Agg,
    /// The start of the bucket being filled.
    current: Option<i64>,
    /// The sensors with a value in the current bucket.
    mask: u64,
    running: [Running; 64],
}

impl Aggregator {
    /// An aggregator of `agg` over `buckets`.
    pub fn new(buckets: Buckets, agg: Agg) -> Self {
        Self { buckets, agg, current: None, mask: 0, running: [Running::EMPTY; 64] }
    }

    /// Folds `batch` in; each bucket it completes goes to `out` as one
    /// reading at the bucket's start, with a value per sensor measured in it.
    pub fn push(&mut self, batch: &ReadingBatch, out: &mut ReadingBatch) {
        let mut values = batch.values.iter();
        for (&second, &mask) in batch.timestamps.iter().zip(&batch.masks) {
            let start = self.buckets.start_of(second);
            if self.current != Some(start) {
                self.emit(out);
                self.current = Some(start);
            }
            let mut m = mask;
            while m != 0 {
                let idx = m.trailing_zeros() as usize;
                m &= m - 1;
                let Some(&value) = values.next() else { break };
                self.add(idx, value);
            }
        }
    }

    /// Ends the last bucket: it goes to `out`.
    pub fn finish(&mut self, out: &mut ReadingBatch) {
        self.emit(out);
        self.current = None;
    }

    fn add(&mut self, idx: usize, value: StoredValue) {
        let bit = 1u64 << idx;
        let fresh = self.mask & bit == 0;
        self.mask |= bit;
        let r = &mut self.running[idx];
        if fresh {
            *r = Running::EMPTY;
        }
        r.count += 1;
        match self.agg {
            Agg::Count => {}
            Agg::Mean | Agg::Sum => r.add_to_sum(value),
            Agg::First if fresh => r.kept = value,
            Agg::First => {}
            Agg::Last => r.kept = value,
            Agg::Min | Agg::Max => {
                let v = value.to_f64();
                let better = if self.agg == Agg::Min { v < r.kept_f64 } else { v > r.kept_f64 };
                if fresh || better {
                    (r.kept, r.kept_f64) = (value, v);
                }
            }
        }
    }

    fn emit(&mut self, out: &mut ReadingBatch) {
        let Some(start) = self.current else { return };
        if self.mask == 0 {
            return;
        }
        out.timestamps.push(start);
        out.masks.push(self.mask);
        let mut m = self.mask;
        while m != 0 {
            let idx = m.trailing_zeros() as usize;
            m &= m - 1;
            out.values.push(self.running[idx].value(self.agg));
        }
        self.mask = 0;
    }
}

impl Window {
    /// The window with its readings folded by `aggregator`: the first batch
    /// holds the buckets the first readings complete, the rest streams the
    /// others (never an empty batch), the last bucket at the end.
    pub fn aggregated(self, mut aggregator: Aggregator) -> Window {
        let mut first = ReadingBatch::default();
        aggregator.push(&self.first, &mut first);
        if self.complete {
            aggregator.finish(&mut first);
            let rest: ReadingStream = Box::pin(futures_util::stream::empty());
            return Window { device: self.device, first, rest, complete: true };
        }
        let rest = futures_util::stream::unfold(Some((self.rest, aggregator)), |state| async move {
            let (mut rest, mut aggregator) = state?;
            let mut out = ReadingBatch::default();
            loop {
                match rest.next().await {
                    Some(Ok(batch)) => {
                        aggregator.push(&batch, &mut out);
                        if !out.is_empty() {
                            return Some((Ok(out), Some((rest, aggregator))));
                        }
                    }
                    Some(Err(e)) => return Some((Err(e), None)),
                    None => {
                        aggregator.finish(&mut out);
                        return (!out.is_empty()).then_some((Ok(out), None));
                    }
                }
            }
        });
        Window { device: self.device, first, rest: Box::pin(rest), complete: false }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sensorhub_core::bucket::Interval;

    fn dec(n: i64, k: u8) -> StoredValue {
        StoredValue::Decimal { n, k }
    }

    fn fold(agg: Agg, batch: &ReadingBatch) -> ReadingBatch {
        let interval = Interval::parse("1h").unwrap_or_else(|e| panic!("{e}"));
        let mut a = Aggregator::new(Buckets::new(interval, jiff::tz::TimeZone::UTC), agg);
        let mut out = ReadingBatch::default();
        a.push(batch, &mut out);
        a.finish(&mut out);
        out
    }

    fn json(values: &[StoredValue]) -> Vec<String> {
        values
            .iter()
            .map(|v| {
                let mut s = Vec::new();
                v.write_json(&mut s);
                String::from_utf8_lossy(&s).into_owned()
            })
            .collect()
    }

    #[test]
    fn buckets_hold_each_sensors_aggregate() {
        // Hour 0: sensor 0 at 0.1, 0.2 (and sensor 1 at 5 once); hour 1: sensor 0 at 1.25, -2.
        let batch = ReadingBatch {
            timestamps: vec![0, 60, 3600, 3700],
            masks: vec![0b11, 0b01, 0b01, 0b01],
            values: vec![dec(1, 1), dec(5, 0), dec(2, 1), dec(125, 2), StoredValue::Float(-2.0)],
        };
        let cases = [
            (Agg::Sum, vec!["0.3", "5.0", "-0.75"]),
            (Agg::Mean, vec!["0.15", "5.0", "-0.375"]),
            (Agg::Min, vec!["0.1", "5.0", "-2.0"]),
            (Agg::Max, vec!["0.2", "5.0", "1.25"]),
            (Agg::First, vec!["0.1", "5.0", "1.25"]),
            (Agg::Last, vec!["0.2", "5.0", "-2.0"]),
        ];
        for (agg, want) in cases {
            let out = fold(agg, &batch);
            assert_eq!(out.timestamps, vec![0, 3600], "{agg:?}");
            assert_eq!(out.masks, vec![0b11, 0b01], "{agg:?}");
            assert_eq!(json(&out.values), want, "{agg:?}");
        }
        assert_eq!(fold(Agg::Count, &batch).values, vec![dec(2, 0), dec(1, 0), dec(2, 0)]);
    }

    #[test]
    fn exact_sums_overflow_into_doubles() {
        let big = dec(999_999_999_999_999, 0);
        let batch =
            ReadingBatch { timestamps: vec![0, 1, 2], masks: vec![1, 1, 1], values: vec![big, big, dec(1, 15)] };
        let out = fold(Agg::Sum, &batch);
        assert_eq!(out.values.len(), 1);
        assert!((out.values[0].to_f64() - 1.999_999_999_999_998e15).abs() < 1.0, "{:?}", out.values);
        let mean = fold(
            Agg::Mean,
            &ReadingBatch {
                timestamps: vec![0, 1, 2],
                masks: vec![1; 3],
                values: vec![dec(11, 1), dec(12, 1), dec(14, 1)],
            },
        );
        assert_eq!(json(&mean.values), vec!["1.2333333333333334"]);
    }
}
