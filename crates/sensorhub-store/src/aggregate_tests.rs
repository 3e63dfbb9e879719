//! Tests of the calendar fold: buckets, summaries folded like readings,
//! exact sums, and sums past the largest double.

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

proptest::proptest! {
    /// Folding hours from their summaries gives what folding their
    /// readings gives: the same bytes for decimals, the same doubles
    /// up to rounding of sums for other values.
    #[test]
    fn summaries_fold_like_readings(
        hours in proptest::collection::vec(
            (proptest::collection::btree_set(0u16..3600, 16..80), 0u8..4, proptest::bool::ANY, proptest::prelude::any::<u64>()),
            1..6,
        ),
        interval in proptest::sample::select(vec!["1h", "2h", "1d", "30m"]),
        agg in proptest::sample::select(vec![Agg::Mean, Agg::Min, Agg::Max, Agg::Sum, Agg::Count, Agg::First, Agg::Last]),
    ) {
        let interval = Interval::parse(interval).unwrap_or_else(|e| panic!("{e}"));
        let new = || Aggregator::new(Buckets::new(interval, jiff::tz::TimeZone::UTC), agg);
        let (mut by_readings, mut by_stats) = (new(), new());
        let (mut a, mut b) = (ReadingBatch::default(), ReadingBatch::default());
        let mut used_stats = false;
        for (chunk, (seconds, k, floats, seed)) in hours.iter().enumerate() {
            let mut rng = fastrand::Rng::with_seed(*seed);
            let rows: Vec<crate::chunk::Row> = seconds.iter().map(|&t| {
                let mut pairs = Vec::new();
                    for idx in 0u8..3 {
                        if rng.u8(..4) == 0 {
                            continue;
                        }
                        let v = if *floats {
                            rng.f64() * 1e3 - 500.0
                        } else {
                            f64::from(rng.i32(-99_999..99_999)) / 10f64.powi(i32::from(*k))
                        };
                        pairs.push((idx, v));
                    }
                (t, pairs)
            }).filter(|(_, p): &(u16, Vec<(u8, f64)>)| !p.is_empty()).collect();
            let data = crate::chunk::encode(&rows);
            let chunk = chunk as i64 * 2 + 400_000;
            let mut batch = ReadingBatch::default();
            crate::chunk::decode_into(chunk, &data, i64::MIN, i64::MAX, &mut batch, usize::MAX).expect("valid");
            by_readings.push(&batch, &mut a);
            let (first, last) = (chunk * 3600, chunk * 3600 + 3599);
            match crate::stats::decode(&data) {
                Some(stats) if by_stats.one_bucket(first, last) => {
                    used_stats = true;
                    by_stats.push_stats(first, &stats, &mut b);
                }
                _ => by_stats.push(&batch, &mut b),
            }
        }
        by_readings.finish(&mut a);
        by_stats.finish(&mut b);
        proptest::prop_assert_eq!(&a.timestamps, &b.timestamps);
        proptest::prop_assert_eq!(&a.masks, &b.masks);
        let exact = hours.iter().all(|h| !h.2) || !matches!(agg, Agg::Mean | Agg::Sum);
        for (x, y) in a.values.iter().zip(&b.values) {
            if exact {
                proptest::prop_assert_eq!(json(&[*x]), json(&[*y]), "used summaries: {}", used_stats);
            } else {
                let (x, y) = (x.to_f64(), y.to_f64());
                proptest::prop_assert!((x - y).abs() <= 1e-9 * x.abs().max(1.0), "{} vs {}", x, y);
            }
        }
    }
}

#[test]
fn exact_sums_overflow_into_doubles() {
    let big = dec(999_999_999_999_999, 0);
    let batch = ReadingBatch { timestamps: vec![0, 1, 2], masks: vec![1, 1, 1], values: vec![big, big, dec(1, 15)] };
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

#[test]
fn sums_past_the_largest_double_go_on_scaled() {
    let f = StoredValue::Float;
    let batch = |values: Vec<StoredValue>| ReadingBatch {
        timestamps: (0..values.len() as i64).collect(),
        masks: vec![1; values.len()],
        values,
    };
    let huge = batch(vec![f(1.5e308), f(1.7e308), f(1.6e308), dec(3, 0)]);
    let mean = fold(Agg::Mean, &huge).values[0].to_f64();
    assert!((mean / 1.2e308 - 1.0).abs() < 1e-15, "the mean of values near the largest double: {mean}");
    assert_eq!(json(&fold(Agg::Sum, &huge).values), vec!["null"], "a sum past the largest double");
    let back = batch(vec![f(1.5e308), f(1.5e308), f(-1.5e308), dec(25, 1)]);
    assert_eq!(json(&fold(Agg::Sum, &back).values), vec!["1.5e+308"], "a sum that comes back is a number");
    assert_eq!(json(&fold(Agg::Mean, &back).values), vec!["3.75e+307"]);
    let fine = batch(vec![f(0.1), f(0.2), dec(3, 1)]);
    let before = (0.3 + (0.1f64 + 0.2)) / 3.0;
    assert_eq!(json(&fold(Agg::Mean, &fine).values), json(&[f(before)]), "unchanged below the largest double");
}
