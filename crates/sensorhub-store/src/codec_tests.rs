//! Tests of the column coding: round trips of any doubles and random
//! walks, the scaling held to `f64::round`, and damaged bytes refused.

use super::*;
use proptest::prelude::*;

fn round_trip(values: &[f64]) -> Vec<u8> {
    let mut buf = Vec::new();
    encode_column(values, &mut buf);
    let mut r = Reader::new(&buf);
    let mut out = Vec::new();
    decode_column(&mut r, values.len(), &mut out).expect("decodes");
    assert!(r.is_done(), "every byte read");
    for (v, got) in values.iter().zip(&out) {
        assert_eq!(got.to_f64().to_bits(), v.to_bits(), "{v} came back as {got:?}");
        let mut json = Vec::new();
        got.write_json(&mut json);
        assert_eq!(String::from_utf8(json).expect("utf-8"), serde_json::to_string(v).expect("finite"), "{v}");
    }
    buf
}

#[test]
fn awkward_doubles_come_back_bit_for_bit() {
    round_trip(&[-0.0, 0.0, 1e-7, 0.1 + 0.2, f64::MAX, f64::MIN, f64::MIN_POSITIVE, 5e-324, 1e300, -123456.789]);
    round_trip(&[24.15, 9.0e15, 9.1e15, 1e15, 999_999_999_999_999.0, 0.000_001, 1.234_567_8]);
    round_trip(&[f64::MAX]);
    round_trip(&[-0.0, -0.0]);
    round_trip(&[-0.0; 40]);
    round_trip(&[f64::MAX, f64::MIN, f64::MAX, 5e-324, -5e-324]);
}

#[test]
fn decimals_of_any_scale_pack_small() {
    let level: Vec<f64> = (0..60).map(|i| f64::from(1200 + i % 7) / 1000.0).collect();
    assert!(round_trip(&level).len() <= 36, "three decimals, deltas of a few millimetres: 4 bits each");
    let micro: Vec<f64> = (0..60).map(|i| f64::from(i) / 1e6).collect();
    assert!(round_trip(&micro).len() < 70, "six decimals");
    assert_eq!(round_trip(&[12.5; 60]).len(), 3, "a flat line is its first value");
    // A walk of thirds: no decimal form, only the low mantissa bits move.
    let thirds: Vec<f64> = (0..60).map(|i| f64::from(3000 + i % 9) / 3.0).collect();
    let raw = round_trip(&thirds);
    assert_eq!(raw[0], BITS);
    assert!(raw.len() < 60 * 6, "{} bytes for 60 raw doubles", raw.len());
}

#[test]
fn garbage_is_refused_not_panicked_on() {
    let mut out = Vec::new();
    for bytes in [&[][..], &[0x2f], &[0x21, 0x02, 0x01], &[0x21, 0x02, 65, 0], &[XOR, 1, 2], &[BITS, 0, 0], &[0x1d, 0]]
    {
        assert!(decode_column(&mut Reader::new(bytes), 3, &mut out).is_none(), "{bytes:?}");
    }
}

/// `scaled` as it was written first, with `f64::round`: the oracle.
fn scaled_by_round(v: f64, k: u8) -> Option<i64> {
    let n = (v * POW10[usize::from(k)]).round();
    (n.abs() < MAX_DIGITS && ((n as i64) as f64 / POW10[usize::from(k)]).to_bits() == v.to_bits()).then_some(n as i64)
}

/// `decimal_column` as it was written first (two passes): the oracle.
fn decimal_column_by_round(values: &[f64]) -> Option<(u8, Vec<i64>)> {
    let mut k = 0u8;
    for &v in values {
        while scaled_by_round(v, k).is_none() {
            k += 1;
            if k > MAX_K {
                return None;
            }
        }
    }
    let ints: Option<Vec<i64>> = values.iter().map(|&v| scaled_by_round(v, k)).collect();
    Some((k, ints?))
}

#[test]
fn rounding_agrees_with_f64_round_at_the_edges() {
    let edges = [
        0.5,
        -0.5,
        1.5,
        -1.5,
        2.5,
        0.49999999999999994,
        -0.49999999999999994,
        4503599627370495.5,
        999_999_999_999_999.4,
        999_999_999_999_999.6,
        -999_999_999_999_999.6,
        1e15,
        -1e15,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -0.0,
        1e-300,
        -1e-300,
        12.345,
        -12.345,
        0.1,
        0.7,
    ];
    for v in edges {
        for k in 0..=MAX_K {
            assert_eq!(scaled(v, k), scaled_by_round(v, k), "{v} at {k} decimals");
        }
    }
}

fn any_double() -> impl Strategy<Value = f64> {
    prop_oneof![
        proptest::num::f64::NORMAL | proptest::num::f64::SUBNORMAL | proptest::num::f64::ZERO,
        (-10_000_000i64..10_000_000, 0u32..8).prop_map(|(n, k)| n as f64 / 10f64.powi(k as i32)),
        Just(f64::MAX),
        Just(f64::MIN),
        Just(-0.0),
    ]
}

proptest! {
    #[test]
    fn any_column_round_trips(values in proptest::collection::vec(any_double(), 1..200)) {
        round_trip(&values);
    }

    #[test]
    fn random_walks_round_trip(start in -1e6f64..1e6, steps in proptest::collection::vec(-500i64..500, 1..300), k in 0u8..7) {
        let mut n = (start * pow10(k)).round() as i64;
        let values: Vec<f64> = steps.iter().map(|s| { n += s; n as f64 / pow10(k) }).collect();
        round_trip(&values);
    }

    #[test]
    fn scaling_is_the_one_of_f64_round(values in proptest::collection::vec(any_double(), 1..50), k in 0u8..=MAX_K) {
        for &v in &values {
            prop_assert_eq!(scaled(v, k), scaled_by_round(v, k), "{} at {} decimals", v, k);
        }
        prop_assert_eq!(decimal_column(&values), decimal_column_by_round(&values));
    }

    /// A kept form cut to any first values is the form of those values
    /// (decimals that rose, or a form lost, after the cut or before it).
    #[test]
    fn a_form_cut_short_is_the_form_of_what_remains(values in proptest::collection::vec(any_double(), 0..50),
                                                   cut in any::<proptest::sample::Index>()) {
        let m = cut.index(values.len() + 1);
        let mut form = DecimalForm::of(&values);
        form.truncate(&values[..m]);
        prop_assert_eq!(form.get().cloned(), DecimalForm::of(&values[..m]).get().cloned());
        prop_assert_eq!(form.get().cloned(), decimal_column(&values[..m]));
        // And it goes on as if it had only ever taken those.
        let mut again = values[..m].to_vec();
        again.extend_from_slice(&values[m..]);
        for i in m..again.len() {
            form.push(&again[..=i]);
        }
        prop_assert_eq!(form.get().cloned(), decimal_column(&values));
    }

    #[test]
    fn any_bytes_decode_or_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..64), m in 1usize..40) {
        let mut out = Vec::new();
        if decode_column(&mut Reader::new(&bytes), m, &mut out).is_some() {
            prop_assert_eq!(out.len(), m);
            for v in out { prop_assert!(v.to_f64().is_finite()); }
        }
    }

    /// A form whose coding is kept value by value, cut short anywhere and
    /// taken on again, codes its column and sums it up exactly as coding its
    /// values afresh does, at every step: the coding kept as values come is
    /// the coding.
    #[test]
    fn a_kept_coding_is_the_coding_of_its_values(walk in proptest::collection::vec((-3000i64..3000, 0u8..4), 1..120),
                                                 cut in any::<proptest::sample::Index>(),
                                                 odd in any::<proptest::sample::Index>()) {
        // A walk whose decimals rise now and then (and one value without a
        // decimal form, somewhere, in half the cases).
        let mut n = 0i64;
        let mut values: Vec<f64> = walk.iter().map(|&(step, k)| { n += step; n as f64 / pow10(k) }).collect();
        let at = odd.index(2 * values.len());
        if at < values.len() {
            values[at] = 1.0 / 3.0;
        }
        let check = |form: &DecimalForm, values: &[f64]| -> Result<(), TestCaseError> {
            let mut kept = Vec::new();
            let mut fresh = Vec::new();
            match form.write_column(&mut kept) {
                Some(()) => encode_column_as(values, decimal_column(values).as_ref(), &mut fresh),
                None => prop_assert!(decimal_column(values).is_none(), "a form lost only when there is none"),
            }
            prop_assert_eq!(kept, fresh);
            let summary = decimal_column(values).and_then(|(k, ints)| IntsSummary::of(&ints).map(|s| (k, s)));
            prop_assert_eq!(form.summary(), summary);
            Ok(())
        };
        // Kept from the start, as a held hour's is: each push appends to
        // the coding (or, once its decimals rise, leaves it to be built again
        // at the next keep, as the next write does).
        let mut form = DecimalForm::default();
        form.keep_coding();
        for i in 0..values.len() {
            form.push(&values[..=i]);
            check(&form, &values[..=i])?;
            form.keep_coding();
            check(&form, &values[..=i])?;
        }
        let m = cut.index(values.len() + 1);
        form.truncate(&values[..m]);
        check(&form, &values[..m])?;
        form.keep_coding();
        for i in m..values.len() {
            form.push(&values[..=i]);
            check(&form, &values[..=i])?;
            form.keep_coding();
        }
        // Never kept (an hour encoded once): coded afresh.
        let once = DecimalForm::of(&values);
        check(&once, &values)?;
    }
}
