//! Tests of the stored hour's column format: round trips of arbitrary
//! readings, merges, cuts, and damaged bytes.

use super::open::merge;
use super::*;
use proptest::prelude::*;

fn hour(entries: &[(u16, &[(u8, f64)])]) -> Vec<u8> {
    let rows: Vec<Row> = entries.iter().map(|(t, p)| (*t, p.to_vec())).collect();
    encode(&rows)
}

fn bits(rows: &[Row]) -> Vec<(u16, Vec<(u8, u64)>)> {
    rows.iter().map(|(t, p)| (*t, p.iter().map(|(i, v)| (*i, v.to_bits())).collect())).collect()
}

/// Readings as the write path hands them over: ascending seconds, each
/// with normalized pairs, values of every kind.
fn any_rows() -> impl Strategy<Value = Vec<Row>> {
    let value = prop_oneof![
        4 => (-2_000_000i64..2_000_000, 0u32..7).prop_map(|(n, k)| n as f64 / 10f64.powi(k as i32)),
        1 => proptest::num::f64::NORMAL | proptest::num::f64::SUBNORMAL | proptest::num::f64::ZERO,
        1 => prop_oneof![Just(-0.0), Just(f64::MAX), Just(f64::MIN), Just(1e300), Just(5e-324)],
    ];
    let pairs = proptest::collection::vec((0u8..64, value), 0..12);
    proptest::collection::btree_map(0u16..3600, pairs, 1..120).prop_map(|m| {
        m.into_iter()
            .map(|(t, mut p)| {
                normalize(&mut p);
                (t, p)
            })
            .collect()
    })
}

proptest! {
    #[test]
    fn any_readings_round_trip_bit_for_bit(input in any_rows()) {
        let data = encode(&input);
        prop_assert_eq!(bits(&rows(&data).expect("decodes")), bits(&input));
        let mut batch = ReadingBatch::default();
        decode_into(7, &data, i64::MIN, i64::MAX, &mut batch, usize::MAX).expect("decodes");
        prop_assert_eq!(batch.len(), input.len());
        let values: Vec<u64> = input.iter().flat_map(|r| r.1.iter().map(|p| p.1.to_bits())).collect();
        let got: Vec<u64> = batch.values.iter().map(|v| v.to_f64().to_bits()).collect();
        prop_assert_eq!(got, values);
        prop_assert_eq!(last_second(7, &data), input.last().map(|r| 7 * CHUNK_SECONDS + i64::from(r.0)));
    }

    #[test]
    fn an_hour_in_the_old_format_converts_bit_for_bit(input in any_rows()) {
        let old = crate::legacy::encode_hour(&input);
        let converted = crate::legacy::rows(&old).expect("old decodes");
        prop_assert_eq!(bits(&rows(&encode(&converted)).expect("decodes")), bits(&input));
    }

    /// A damaged hour (any bytes) decodes or is refused, never panics,
    /// and never yields a reading outside its hour or the window.
    #[test]
    fn damaged_hours_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512),
                                 chunk in 0i64..10_000_000, from in 0i64..36_000_000_000, span in 0i64..10_000,
                                 limit in 0usize..64) {
        let mut batch = ReadingBatch::default();
        let end = from + span;
        if decode_into(chunk, &data, from, end, &mut batch, limit).is_some() {
            prop_assert!(batch.len() <= limit.max(1));
            for t in &batch.timestamps {
                prop_assert!((from..=end).contains(t));
                prop_assert!((chunk * CHUNK_SECONDS..(chunk + 1) * CHUNK_SECONDS).contains(t));
            }
        }
        let _ = last_second(chunk, &data);
        let _ = rows(&data);
        let _ = merge(&data, &data);
        let _ = merge(&data, &encode(&[(3599, vec![(1, 1.0)])]));
        let _ = crate::legacy::rows(&data);
    }

    /// Damage to a real hour: every byte flipped in turn.
    #[test]
    fn flipped_bytes_never_panic(input in any_rows(), at in any::<prop::sample::Index>(), flip in 1u8..=255) {
        let mut data = encode(&input);
        let i = at.index(data.len());
        data[i] ^= flip;
        let mut batch = ReadingBatch::default();
        let _ = decode_into(0, &data, 0, CHUNK_SECONDS, &mut batch, usize::MAX);
        let _ = rows(&data);
    }
}

#[test]
fn merging_interleaves_and_merges_the_same_second() {
    let old = hour(&[(0, &[(0, 1.0)]), (120, &[(0, 3.0), (1, 4.0)])]);
    let new = hour(&[(60, &[(0, 2.0)]), (120, &[(1, 40.0)]), (3599, &[(2, 9.5)])]);
    let (merged, changed) = merge(&old, &new).expect("valid");
    assert_eq!(
        rows(&merged).expect("valid"),
        vec![(0, vec![(0, 1.0)]), (60, vec![(0, 2.0)]), (120, vec![(0, 3.0), (1, 40.0)]), (3599, vec![(2, 9.5)])]
    );
    assert_eq!(changed, 3, "60 and 3599 are new, 120 changed");
    assert_eq!(merge(&merged, &new), Some((merged.clone(), 0)), "merging again changes nothing");
    assert_eq!(last_second(10, &merged), Some(36_000 + 3599));
}

proptest! {
    /// Live data: readings appended one at a time, some sensors missing,
    /// new sensors appearing, give the hour encoded from all of them.
    #[test]
    fn appending_is_encoding_the_whole(input in any_rows()) {
        let mut stored = Vec::new();
        for (i, row) in input.iter().enumerate() {
            let (merged, changed) = merge(&stored, &encode(std::slice::from_ref(row))).expect("valid");
            prop_assert_eq!(changed, 1);
            prop_assert_eq!(bits(&rows(&merged).expect("decodes")), bits(&input[..=i]));
            stored = merged;
        }
        prop_assert_eq!(stored, encode(&input));
    }
}

/// The merge spelled out reading by reading: what a merge must give, and
/// how many of `new`'s readings are new or change what was there.
fn merged_by_reading(old: &[Row], new: &[Row]) -> (Vec<Row>, u64) {
    let mut all: std::collections::BTreeMap<u16, Vec<(u8, f64)>> = old.iter().cloned().collect();
    let mut changed = 0;
    for (t, pairs) in new {
        match all.get_mut(t) {
            None => {
                changed += 1;
                all.insert(*t, pairs.clone());
            }
            Some(before) => {
                let mut merged = before.clone();
                merged.extend(pairs.iter().copied());
                normalize(&mut merged);
                changed += u64::from(bits(&[(0, merged.clone())]) != bits(&[(0, before.clone())]));
                *before = merged;
            }
        }
    }
    (all.into_iter().collect(), changed)
}

proptest! {
    /// Any readings merged into any stored hour (interleaved, the same
    /// seconds, new sensors) give the hour encoded from the readings
    /// merged one by one; and an hour kept as columns between merges (the
    /// store's cache of hours, built by merges rather than decoded) merges
    /// to the same bytes as the stored hour decoded each time.
    #[test]
    fn any_merge_is_the_readings_merged(old in any_rows(), new in any_rows(), cut in any::<prop::sample::Index>()) {
        let (want, want_changed) = merged_by_reading(&old, &new);
        let (merged, changed) = merge(&encode(&old), &encode(&new)).expect("valid");
        prop_assert_eq!(changed, want_changed);
        prop_assert_eq!(&merged, &encode(&want));

        let (first, second) = new.split_at(cut.index(new.len() + 1));
        let (stored, _) = super::open::merge_rows(&encode(&old), first.to_vec()).expect("valid");
        let (stored, _) = super::open::merge_rows(&stored, second.to_vec()).expect("valid");
        let mut kept = Columns::default();
        prop_assert_eq!(kept.merge(old.clone()), old.len() as u64);
        kept.merge(first.to_vec());
        kept.merge(second.to_vec());
        prop_assert_eq!(kept.encode(), stored.clone());
        prop_assert_eq!(stored, merged);
    }
}

#[test]
fn decoding_honours_bounds_and_limits() {
    let data = hour(&[(0, &[(0, 1.0)]), (60, &[(0, 2.0)]), (120, &[(0, 3.0)]), (180, &[(0, 4.0)])]);
    let mut batch = ReadingBatch::default();
    decode_into(2, &data, 7200 + 60, 7200 + 180, &mut batch, 2).expect("valid");
    assert_eq!(batch.timestamps, vec![7260, 7320]);
    let mut rest = ReadingBatch::default();
    decode_into(2, &data, 7321, 7200 + 120, &mut rest, 10).expect("valid");
    assert!(rest.is_empty());
}

#[test]
fn cutting_a_range_keeps_the_rest() {
    let data = hour(&[(0, &[(0, 1.0), (1, 2.0)]), (60, &[(0, 2.0)]), (120, &[(0, 3.0)])]);
    let (kept, readings, values) = remove_range(1, &data, 3600, 3600 + 60).expect("valid");
    assert_eq!((readings, values), (2, 3));
    assert_eq!(rows(&kept).expect("valid"), vec![(120, vec![(0, 3.0)])]);
    let (gone, ..) = remove_range(1, &data, 0, i64::MAX).expect("valid");
    assert!(gone.is_empty(), "nothing left: the row goes");
}

#[test]
fn a_regular_hour_is_small() {
    // A one-minute station with a slow level (three decimals) and a flat battery.
    let rows: Vec<Row> = (0..60u16).map(|i| (i * 60, vec![(0, f64::from(1200 + i % 5) / 1000.0), (1, 12.6)])).collect();
    let data = encode(&rows);
    let body = crate::stats::body(&data).expect("valid");
    assert!(body.len() < 60, "{} bytes for 120 values", body.len());
    // The summaries in front: 2 sensors of slow decimals.
    assert!(data.len() - body.len() <= 3 + 2 * 10, "{} bytes of summaries", data.len() - body.len());
    assert_eq!(bits(&super::rows(&data).expect("valid")), bits(&rows));
}

#[test]
fn dense_hours_carry_summaries_sparse_ones_do_not() {
    let dense: Vec<Row> =
        (0..16u16).map(|i| (i * 60, vec![(0, f64::from(i) * 0.5 - 2.0), (3, 1e300 / f64::from(i + 1))])).collect();
    let data = encode(&dense);
    let stats = crate::stats::decode(&data).expect("summaries");
    assert_eq!(stats.len(), 2);
    let (level, big) = (&stats[0], &stats[1]);
    assert_eq!((level.idx, level.count), (0, 16));
    assert_eq!([level.first, level.min, level.max, level.last].map(crate::StoredValue::to_f64), [-2.0, -2.0, 5.5, 5.5]);
    assert_eq!(level.sum, crate::stats::Sum::Decimal { n: 280, k: 1 }, "28.0 exactly");
    assert_eq!((big.idx, big.first.to_f64(), big.max.to_f64(), big.min.to_f64()), (3, 1e300, 1e300, 1e300 / 16.0));
    assert!(matches!(big.sum, crate::stats::Sum::Float(_)));
    assert_eq!(bits(&rows(&data).expect("valid")), bits(&dense), "the readings behind them are intact");
    let sparse = encode(&dense[..15]);
    assert_eq!(crate::stats::decode(&sparse), None);
    assert_eq!(sparse[0], FORMAT);
    // Summaries whose length runs past the end, or garbage inside them.
    assert_eq!(rows(&[2, 9, 0]), None);
    assert_eq!(crate::stats::decode(&[2, 3, 1, 1, 7]), None);
}

proptest::proptest! {
    /// Any bytes after a format-2 byte: refused or read, never a panic.
    #[test]
    fn fuzz_summaries_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80)) {
        let mut data = vec![crate::stats::FORMAT];
        data.extend_from_slice(&bytes);
        let _ = crate::stats::decode(&data);
        let _ = rows(&data);
    }
}

#[test]
fn malformed_hours_are_refused() {
    assert_eq!(rows(&[]), None);
    assert_eq!(rows(&[FORMAT]), None);
    assert_eq!(rows(&[FORMAT, 1, 0x90, 0x1c, 0]), None, "a second past the hour");
    assert_eq!(rows(&[2, 1, 0, 0]), None, "an unknown format");
    assert!(merge(&[], &[0xff, 0xff, 0x7f]).is_none());
    assert!(merge(&[0x05], &hour(&[(0, &[(0, 1.0)])])).is_none(), "a malformed stored row is not replaced");
    assert_eq!(chunk_of(-1), -1);
    assert_eq!(chunk_of(3599), 0);
}
