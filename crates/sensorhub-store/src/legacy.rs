//! The stored hour of schema version 2 and before, read only to upgrade it
//! to the column format ([`crate::chunk`]): the hour's readings in time
//! order, each the offset of its second within the hour (a varint) and its
//! packed values: a LEB128 bit set of sensor idx, then one code per set bit
//! in idx order, `zigzag(n) << 2 | k` for a value that is exactly
//! `n / 10^k` with k in 0..=2, else the code `3` and the eight
//! little-endian bytes of the double.

use crate::StoredValue;
use crate::chunk::{CHUNK_SECONDS, Row};

/// Decimal scales tried, in order: 1, 10, 100.
#[cfg(test)]
const SCALES: [f64; 3] = [1.0, 10.0, 100.0];
/// Code of a raw `f64`.
const RAW: u64 = 3;
/// Largest |n| stored scaled: exact in an `f64`, and below the magnitude
/// (1e16) where JSON printers switch to an exponent.
#[cfg(test)]
const MAX_SCALED: f64 = 1.0e15;

/// Appends the packed form of `values` (pairs of idx and value, any order,
/// idx below 64; a later pair for the same idx wins) to `out`.
#[cfg(test)]
fn encode(values: &[(u8, f64)], out: &mut Vec<u8>) {
    let mut slots = [0f64; 64];
    let mut mask = 0u64;
    for &(idx, v) in values {
        let i = usize::from(idx & 63);
        slots[i] = v;
        mask |= 1 << i;
    }
    write_varint(mask, out);
    let mut m = mask;
    while m != 0 {
        let i = m.trailing_zeros() as usize;
        write_value(slots[i], out);
        m &= m - 1;
    }
}

#[cfg(test)]
fn write_value(v: f64, out: &mut Vec<u8>) {
    for (k, scale) in SCALES.iter().enumerate() {
        let n = (v * scale).round();
        // Decode from the integer, as `StoredValue::to_f64` will (so -0.0 stays raw).
        if n.abs() < MAX_SCALED && ((n as i64) as f64 / scale).to_bits() == v.to_bits() {
            let n = n as i64;
            let zigzag = ((n << 1) ^ (n >> 63)) as u64;
            write_varint((zigzag << 2) | k as u64, out);
            return;
        }
    }
    write_varint(RAW, out);
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends `x` as a LEB128 varint.
#[cfg(test)]
fn write_varint(mut x: u64, out: &mut Vec<u8>) {
    loop {
        let byte = (x & 0x7f) as u8;
        x >>= 7;
        if x == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Reads a varint at the start of `bytes`; returns it and the rest.
fn read_varint(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let mut x = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        x |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((x, &bytes[i + 1..]));
        }
    }
    None
}

fn read_value(bytes: &[u8]) -> Option<(StoredValue, &[u8])> {
    let (code, rest) = read_varint(bytes)?;
    if code == RAW {
        let (raw, rest) = rest.split_first_chunk::<8>()?;
        return Some((StoredValue::Float(f64::from_le_bytes(*raw)), rest));
    }
    let k = (code & 3) as u8;
    if k == 3 {
        return None; // only the bare code 3 means a raw value
    }
    let zigzag = code >> 2;
    let n = ((zigzag >> 1) as i64) ^ -((zigzag & 1) as i64);
    Some((StoredValue::Decimal { n, k }, rest))
}

/// The length of the packed reading at the start of `bytes`.
fn reading_len(bytes: &[u8]) -> Option<usize> {
    let (mask, mut rest) = read_varint(bytes)?;
    for _ in 0..mask.count_ones() {
        let (code, next) = read_varint(rest)?;
        rest = if code == RAW { next.get(8..)? } else { next };
    }
    Some(bytes.len() - rest.len())
}

/// Decodes a packed reading: its bit set, and its values appended to `out`
/// in idx order. `None` if the bytes are not a packed reading.
fn decode_into(bytes: &[u8], out: &mut Vec<StoredValue>) -> Option<u64> {
    let (mask, mut rest) = read_varint(bytes)?;
    for _ in 0..mask.count_ones() {
        let (v, next) = read_value(rest)?;
        out.push(v);
        rest = next;
    }
    rest.is_empty().then_some(mask)
}

/// Decodes a packed reading into (idx, value) pairs in idx order.
fn decode_pairs(bytes: &[u8]) -> Option<Vec<(u8, f64)>> {
    let mut values = Vec::new();
    let mask = decode_into(bytes, &mut values)?;
    let mut m = mask;
    let mut pairs = Vec::with_capacity(values.len());
    for v in values {
        pairs.push((m.trailing_zeros() as u8, v.to_f64()));
        m &= m - 1;
    }
    Some(pairs)
}

/// The readings of a stored hour in the old format.
pub(crate) fn rows(data: &[u8]) -> Option<Vec<Row>> {
    let mut out: Vec<Row> = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let (offset, after) = read_varint(rest)?;
        let len = reading_len(after)?;
        let offset = u16::try_from(offset).ok().filter(|o| i64::from(*o) < CHUNK_SECONDS)?;
        if out.last().is_some_and(|r| r.0 >= offset) {
            return None;
        }
        out.push((offset, decode_pairs(&after[..len])?));
        rest = &after[len..];
    }
    Some(out)
}

/// An hour in the old format, as schema version 2 wrote it (for tests).
#[cfg(test)]
pub(crate) fn encode_hour(rows: &[Row]) -> Vec<u8> {
    let mut out = Vec::new();
    for (offset, pairs) in rows {
        write_varint(u64::from(*offset), &mut out);
        encode(pairs, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_in_idx_order() {
        let mut buf = Vec::new();
        encode(&[(3, 1.5), (0, -2.0), (63, 7.25)], &mut buf);
        assert_eq!(decode_pairs(&buf), Some(vec![(0, -2.0), (3, 1.5), (63, 7.25)]));
    }

    #[test]
    fn short_decimals_take_a_few_bytes() {
        let mut buf = Vec::new();
        encode(&[(0, 92.5), (1, -78.0), (2, 120.4), (3, 0.0)], &mut buf);
        assert_eq!(buf.len(), 1 + 2 + 2 + 2 + 1);
        assert_eq!(decode_pairs(&buf), Some(vec![(0, 92.5), (1, -78.0), (2, 120.4), (3, 0.0)]));
    }

    #[test]
    fn awkward_values_survive_bit_for_bit() {
        let values = [-0.0, 1e-7, 0.1 + 0.2, f64::MAX, f64::MIN_POSITIVE, 1e300, -123456.789, 24.15, 9.0e15, 9.1e15];
        for v in values {
            let mut buf = Vec::new();
            encode(&[(5, v)], &mut buf);
            let got = decode_pairs(&buf).expect("decodes")[0].1;
            assert_eq!(got.to_bits(), v.to_bits(), "{v}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_finite_value_round_trips(v in proptest::num::f64::NORMAL | proptest::num::f64::SUBNORMAL | proptest::num::f64::ZERO,
                                         d in -100_000i64..100_000, k in 0u32..4) {
            let decimal = d as f64 / 10f64.powi(k as i32);
            for x in [v, decimal] {
                let mut buf = Vec::new();
                encode(&[(0, x), (9, -x)], &mut buf);
                let got = decode_pairs(&buf).expect("decodes");
                proptest::prop_assert_eq!(got[0].1.to_bits(), x.to_bits());
                proptest::prop_assert_eq!(got[1].1.to_bits(), (-x).to_bits());
            }
        }
    }

    #[test]
    fn reading_lengths_are_found() {
        let mut buf = Vec::new();
        encode(&[(0, 92.5), (1, 1e-7), (5, -3.0)], &mut buf);
        let len = buf.len();
        buf.extend_from_slice(&[9, 9, 9]);
        assert_eq!(reading_len(&buf), Some(len));
        assert_eq!(reading_len(&buf[..len - 1]), None);
    }

    #[test]
    fn garbage_is_refused() {
        assert_eq!(decode_pairs(&[0x03, 0x0f]), None);
        assert_eq!(decode_pairs(&[0x01, 0x03, 1, 2]), None);
        assert_eq!(decode_pairs(&[0xff; 11]), None);
        assert_eq!(decode_pairs(&[]), None);
    }
}
