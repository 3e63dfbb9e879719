//! The packed form of the values measured by one device at one second:
//! a LEB128 bit set of sensor idx, then one little-endian `f64` per set bit
//! in idx order. Four values take 33 bytes instead of four rows.

/// Appends the packed form of `values` (pairs of idx and value, any order,
/// idx below 64; a later pair for the same idx wins) to `out`.
pub fn encode(values: &[(u8, f64)], out: &mut Vec<u8>) {
    let mut slots = [0f64; 64];
    let mut mask = 0u64;
    for &(idx, v) in values {
        let i = usize::from(idx & 63);
        slots[i] = v;
        mask |= 1 << i;
    }
    write_mask(mask, out);
    let mut m = mask;
    while m != 0 {
        let i = m.trailing_zeros() as usize;
        out.extend_from_slice(&slots[i].to_le_bytes());
        m &= m - 1;
    }
}

fn write_mask(mut mask: u64, out: &mut Vec<u8>) {
    loop {
        let byte = (mask & 0x7f) as u8;
        mask >>= 7;
        if mask == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Reads the bit set at the start of `bytes`; returns it and the rest.
fn read_mask(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let mut mask = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        mask |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((mask, &bytes[i + 1..]));
        }
    }
    None
}

/// Decodes a packed reading: its bit set, and its values appended to `out`
/// in idx order. `None` if the bytes are not a packed reading.
pub fn decode_into(bytes: &[u8], out: &mut Vec<f64>) -> Option<u64> {
    let (mask, rest) = read_mask(bytes)?;
    let n = mask.count_ones() as usize;
    if rest.len() != n * 8 {
        return None;
    }
    out.extend(rest.chunks_exact(8).map(|c| {
        let mut b = [0u8; 8];
        b.copy_from_slice(c);
        f64::from_le_bytes(b)
    }));
    Some(mask)
}

/// Decodes a packed reading into (idx, value) pairs in idx order.
pub fn decode_pairs(bytes: &[u8]) -> Option<Vec<(u8, f64)>> {
    let mut values = Vec::new();
    let mask = decode_into(bytes, &mut values)?;
    let mut m = mask;
    let mut pairs = Vec::with_capacity(values.len());
    for v in values {
        pairs.push((m.trailing_zeros() as u8, v));
        m &= m - 1;
    }
    Some(pairs)
}

/// Merges two packed readings: the values of `new` replace those of `old`
/// for the same sensor; the others are kept. Malformed `old` is replaced.
pub fn merge(old: &[u8], new: &[u8]) -> Option<Vec<u8>> {
    let newer = decode_pairs(new)?;
    let mut all = decode_pairs(old).unwrap_or_default();
    all.extend(newer);
    let mut out = Vec::with_capacity(old.len().max(new.len()) + 8);
    encode(&all, &mut out);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_in_idx_order() {
        let mut buf = Vec::new();
        encode(&[(3, 1.5), (0, -2.0), (63, 7.25)], &mut buf);
        assert_eq!(buf.len(), 10 + 24);
        assert_eq!(decode_pairs(&buf), Some(vec![(0, -2.0), (3, 1.5), (63, 7.25)]));
    }

    #[test]
    fn four_values_take_33_bytes() {
        let mut buf = Vec::new();
        encode(&[(0, 1.0), (1, 2.0), (2, 3.0), (3, 4.0)], &mut buf);
        assert_eq!(buf.len(), 33);
    }

    #[test]
    fn merge_replaces_same_sensor_and_keeps_others() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        encode(&[(0, 1.0), (1, 2.0)], &mut a);
        encode(&[(1, 20.0), (2, 30.0)], &mut b);
        let m = merge(&a, &b).expect("valid");
        assert_eq!(decode_pairs(&m), Some(vec![(0, 1.0), (1, 20.0), (2, 30.0)]));
    }

    #[test]
    fn garbage_is_refused() {
        assert_eq!(decode_pairs(&[0x03, 1, 2]), None);
        assert_eq!(decode_pairs(&[0xff; 11]), None);
        assert_eq!(decode_pairs(&[]), None);
    }
}
