//! Readings folded into calendar buckets (`interval` and `agg`), as they
//! stream from the store: one bucket's sums at a time, so a year of
//! readings takes no more memory than a day. The same fold serves every
//! backend. Sums of decimals are exact (`0.1 + 0.2` is `0.3`); `min`,
//! `max`, `first` and `last` are stored values, printed as the raw answer
//! prints them.

use crate::chunk::{CHUNK_SECONDS, chunk_of};
use crate::stats::{SensorStats, Sum};
use crate::{ReadingBatch, Scope, Store, StoreResult, StoredHour, StoredValue, Window};
use sensorhub_core::bucket::{Agg, Buckets};
use sensorhub_core::time::TimeRange;
use std::sync::Arc;

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
    /// exact sum overflowed); times [`SCALE`] once `scaled`.
    float_sum: f64,
    floats: u64,
    /// Whether the sum of doubles went past the largest double, and went on
    /// scaled down.
    scaled: bool,
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
        scaled: false,
        kept: StoredValue::Decimal { n: 0, k: 0 },
        kept_f64: 0.0,
    };

    fn add_to_sum(&mut self, value: StoredValue) {
        match value {
            StoredValue::Decimal { n, k } => self.add_decimal(n, k),
            StoredValue::Float(v) => self.add_float(v),
        }
    }

    /// Adds `n / 10^k`, exactly while the sum fits.
    fn add_decimal(&mut self, n: i64, k: u8) {
        if !self.exact {
            return self.add_float(n as f64 / crate::codec::pow10(k));
        }
        if k == self.k {
            match self.decimal_sum.checked_add(i128::from(n)) {
                Some(sum) => self.decimal_sum = sum,
                None => self.lose_exactness(n, k),
            }
            return;
        }
        if k > self.k {
            match self.decimal_sum.checked_mul(pow10_i128(k - self.k)) {
                Some(rescaled) => (self.decimal_sum, self.k) = (rescaled, k),
                None => return self.lose_exactness(n, k),
            }
        }
        match i128::from(n).checked_mul(pow10_i128(self.k - k)).and_then(|v| self.decimal_sum.checked_add(v)) {
            Some(sum) => self.decimal_sum = sum,
            None => self.lose_exactness(n, k),
        }
    }

    /// Adds a double; a sum that would pass the largest double goes on
    /// scaled by [`SCALE`] (values that large make a sum no smaller value
    /// moves), so that the mean of values near it is still a number.
    fn add_float(&mut self, v: f64) {
        self.floats += 1;
        if self.scaled {
            self.float_sum += v * SCALE;
            return;
        }
        let sum = self.float_sum + v;
        if sum.is_finite() || !v.is_finite() {
            self.float_sum = sum;
        } else {
            (self.float_sum, self.scaled) = (self.float_sum * SCALE + v * SCALE, true);
        }
    }

    /// The exact sum overflowed: it and `n / 10^k` go on as doubles.
    fn lose_exactness(&mut self, n: i64, k: u8) {
        self.add_float(self.decimal_sum as f64 / crate::codec::pow10(self.k) + n as f64 / crate::codec::pow10(k));
        (self.decimal_sum, self.exact) = (0, false);
    }

    /// The decimal sum plus the sum of doubles, and the factor it is scaled
    /// by ([`SCALE`] once the doubles' sum passed the largest double, else 1).
    fn scaled_total(&self) -> (f64, f64) {
        let decimals = self.decimal_sum as f64 / crate::codec::pow10(self.k);
        if self.scaled { (decimals * SCALE + self.float_sum, SCALE) } else { (decimals + self.float_sum, 1.0) }
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
        let (total, scale) = self.scaled_total();
        StoredValue::Float(total / scale)
    }

    /// The mean: the exact decimal sum divided by the count where that is
    /// exact in doubles, so it is the correctly rounded mean.
    fn mean(&self) -> StoredValue {
        let count = self.count as f64;
        if self.floats == 0 {
            return StoredValue::Float(self.decimal_sum as f64 / (count * crate::codec::pow10(self.k)));
        }
        let (total, scale) = self.scaled_total();
        StoredValue::Float(total / count / scale)
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

/// 2^-64: what a sum of doubles past the largest double is scaled by. A
/// power of two, so scaling rounds nothing (for values above 1e-288).
const SCALE: f64 = 1.0 / 18_446_744_073_709_551_616.0;

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

    /// Whether seconds `first..=last` lie in one bucket.
    pub fn one_bucket(&mut self, first: i64, last: i64) -> bool {
        self.buckets.start_of(last) == self.buckets.start_of(first)
    }

    /// Folds in an hour's summaries, for an hour starting at `start` that
    /// lies wholly in one bucket ([`Aggregator::one_bucket`]) and in the
    /// range: the same result as its readings one by one.
    pub fn push_stats(&mut self, start: i64, stats: &[SensorStats], out: &mut ReadingBatch) {
        let bucket = self.buckets.start_of(start);
        if self.current != Some(bucket) {
            self.emit(out);
            self.current = Some(bucket);
        }
        for s in stats {
            let idx = usize::from(s.idx & 63);
            let bit = 1u64 << idx;
            let fresh = self.mask & bit == 0;
            self.mask |= bit;
            let r = &mut self.running[idx];
            if fresh {
                *r = Running::EMPTY;
            }
            r.count += s.count;
            match self.agg {
                Agg::Count => {}
                Agg::Mean | Agg::Sum => match s.sum {
                    Sum::Decimal { n, k } => r.add_decimal(n, k),
                    Sum::Float(v) => r.add_float(v),
                },
                Agg::First if fresh => r.kept = s.first,
                Agg::First => {}
                Agg::Last => r.kept = s.last,
                Agg::Min | Agg::Max => {
                    let candidate = if self.agg == Agg::Min { s.min } else { s.max };
                    let v = candidate.to_f64();
                    let better = if self.agg == Agg::Min { v < r.kept_f64 } else { v > r.kept_f64 };
                    if fresh || better {
                        (r.kept, r.kept_f64) = (candidate, v);
                    }
                }
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

/// Stored hours an aggregated read fetches per round trip.
const HOURS_PER_FETCH: usize = 512;

/// The device `device_id` visible in `scope` with its readings in `range`
/// folded by `aggregator`, read hour by hour: an hour wholly inside one
/// bucket and the range is folded from its summaries, any other hour from
/// its readings. The first batch is read before this returns (so a failing
/// store is a 500, not a cut-off 200); `None` if the device is not visible.
pub async fn aggregated_window(
    store: Arc<dyn Store>,
    scope: Scope,
    device_id: &str,
    range: TimeRange,
    aggregator: Aggregator,
) -> StoreResult<Option<Window>> {
    let Some(device) = store.find_device(scope, device_id).await? else { return Ok(None) };
    let mut fold = HourFold {
        store,
        device_pk: device.pk,
        next: chunk_of(range.start),
        last: chunk_of(range.end),
        range,
        aggregator,
        done: false,
    };
    let first = fold.next_batch().await?;
    let complete = fold.done;
    let rest = futures_util::stream::unfold(fold, |mut fold| async move {
        if fold.done {
            return None;
        }
        let batch = fold.next_batch().await;
        if batch.is_err() {
            fold.done = true;
        }
        Some((batch, fold))
    });
    Ok(Some(Window { device, first, rest: Box::pin(rest), complete }))
}

/// The state of an aggregated read between fetches.
struct HourFold {
    store: Arc<dyn Store>,
    device_pk: i64,
    /// The next hour to fetch, and the last one.
    next: i64,
    last: i64,
    range: TimeRange,
    aggregator: Aggregator,
    done: bool,
}

impl HourFold {
    /// The buckets completed by the next fetches (at least one bucket, or
    /// the end); the last bucket when the hours run out.
    async fn next_batch(&mut self) -> StoreResult<ReadingBatch> {
        let mut out = ReadingBatch::default();
        while out.is_empty() && !self.done {
            let hours = self.store.read_hours(self.device_pk, self.next, self.last, HOURS_PER_FETCH).await?;
            for hour in &hours {
                self.fold_hour(hour, &mut out)?;
            }
            match hours.last() {
                Some(h) if hours.len() == HOURS_PER_FETCH && h.chunk < self.last => self.next = h.chunk + 1,
                _ => {
                    self.aggregator.finish(&mut out);
                    self.done = true;
                }
            }
        }
        Ok(out)
    }

    fn fold_hour(&mut self, hour: &StoredHour, out: &mut ReadingBatch) -> StoreResult<()> {
        let (first, last) = (hour.chunk * CHUNK_SECONDS, hour.chunk * CHUNK_SECONDS + CHUNK_SECONDS - 1);
        let inside = first >= self.range.start && last <= self.range.end;
        if inside
            && self.aggregator.one_bucket(first, last)
            && let Some(stats) = crate::stats::decode(&hour.data)
        {
            self.aggregator.push_stats(first, &stats, out);
            return Ok(());
        }
        let mut batch = ReadingBatch::default();
        crate::chunk::decode_into(hour.chunk, &hour.data, self.range.start, self.range.end, &mut batch, usize::MAX)
            .ok_or_else(|| crate::decide::malformed(self.device_pk, hour.chunk))?;
        self.aggregator.push(&batch, out);
        Ok(())
    }
}

#[cfg(test)]
#[path = "aggregate_tests.rs"]
mod tests;
