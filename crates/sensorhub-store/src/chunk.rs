//! Readings of one device over one hour, stored as one row: the entries in
//! time order, each the offset of its second within the hour (a varint)
//! followed by its packed reading ([`crate::packed`]). A one-minute station
//! takes 24 rows a day instead of 1,440, so a window reads few rows and the
//! per-row cost of the database is paid once per hour of data.

use crate::ReadingBatch;
use crate::packed;

/// Seconds covered by one row.
pub const CHUNK_SECONDS: i64 = 3600;

/// The row (hour number) holding second `ts`.
pub fn chunk_of(ts: i64) -> i64 {
    ts.div_euclid(CHUNK_SECONDS)
}

/// The entries of a chunk: (offset in seconds, packed reading), in order.
fn entries(data: &[u8]) -> Option<Vec<(u16, &[u8])>> {
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let (offset, after) = packed::read_varint(rest)?;
        let len = packed::reading_len(after)?;
        let offset = u16::try_from(offset).ok().filter(|o| i64::from(*o) < CHUNK_SECONDS)?;
        out.push((offset, &after[..len]));
        rest = &after[len..];
    }
    Some(out)
}

/// Appends one entry to a chunk being built (offsets must ascend).
pub fn push_entry(out: &mut Vec<u8>, offset: u16, reading: &[u8]) {
    packed::write_varint(u64::from(offset), out);
    out.extend_from_slice(reading);
}

/// Merges two chunks of the same hour: readings at the same second are
/// merged sensor by sensor, `new`'s values winning. `None` if either is
/// malformed (a stored row is never silently replaced).
pub fn merge(old: &[u8], new: &[u8]) -> Option<Vec<u8>> {
    let newer = entries(new)?;
    let older = entries(old)?;
    let mut out = Vec::with_capacity(old.len() + new.len());
    let (mut i, mut j) = (0, 0);
    while i < older.len() || j < newer.len() {
        match (older.get(i), newer.get(j)) {
            (Some(a), Some(b)) if a.0 == b.0 => {
                push_entry(&mut out, a.0, &packed::merge(a.1, b.1)?);
                i += 1;
                j += 1;
            }
            (Some(a), Some(b)) if a.0 < b.0 => {
                push_entry(&mut out, a.0, a.1);
                i += 1;
            }
            (Some(a), None) => {
                push_entry(&mut out, a.0, a.1);
                i += 1;
            }
            (_, Some(b)) => {
                push_entry(&mut out, b.0, b.1);
                j += 1;
            }
            (None, None) => break,
        }
    }
    Some(out)
}

/// How many seconds of `merged` are absent from `old` or differ from it.
pub fn changed_seconds(old: &[u8], merged: &[u8]) -> Option<u64> {
    let old = entries(old)?;
    let mut changed = 0;
    for (offset, reading) in entries(merged)? {
        match old.binary_search_by_key(&offset, |(o, _)| *o) {
            Ok(i) if old[i].1 == reading => {}
            _ => changed += 1,
        }
    }
    Some(changed)
}

/// The last second of a chunk that holds a reading.
pub fn last_second(chunk: i64, data: &[u8]) -> Option<i64> {
    entries(data)?.last().map(|(o, _)| chunk * CHUNK_SECONDS + i64::from(*o))
}

/// Appends the readings of a chunk within `from..=end` to `batch`, up to
/// `limit` readings in the batch. `None` if the chunk is malformed.
pub fn decode_into(chunk: i64, data: &[u8], from: i64, end: i64, batch: &mut ReadingBatch, limit: usize) -> Option<()> {
    let base = chunk * CHUNK_SECONDS;
    let mut rest = data;
    while !rest.is_empty() && batch.len() < limit {
        let (offset, after) = packed::read_varint(rest)?;
        let len = packed::reading_len(after)?;
        let ts = base + i64::try_from(offset).ok().filter(|o| *o < CHUNK_SECONDS)?;
        rest = &after[len..];
        if ts < from {
            continue;
        }
        if ts > end {
            break;
        }
        let mask = packed::decode_into(&after[..len], &mut batch.values)?;
        batch.timestamps.push(ts);
        batch.masks.push(mask);
    }
    Some(())
}

/// Removes the readings at seconds within `from..=end` from a chunk.
/// Returns what remains (empty when nothing does), and how many readings
/// and values were removed; `None` if the chunk is malformed.
pub fn remove_range(chunk: i64, data: &[u8], from: i64, end: i64) -> Option<(Vec<u8>, u64, u64)> {
    let base = chunk * CHUNK_SECONDS;
    let mut kept = Vec::with_capacity(data.len());
    let (mut readings, mut values) = (0, 0);
    let mut scratch = Vec::new();
    for (offset, reading) in entries(data)? {
        let ts = base + i64::from(offset);
        if (from..=end).contains(&ts) {
            scratch.clear();
            packed::decode_into(reading, &mut scratch)?;
            readings += 1;
            values += scratch.len() as u64;
        } else {
            push_entry(&mut kept, offset, reading);
        }
    }
    Some((kept, readings, values))
}

/// A reading spelled out: its second and its (sensor idx, value) pairs.
#[cfg(test)]
pub type DecodedReading = (i64, Vec<(u8, crate::StoredValue)>);

/// Decodes a whole chunk, for tests.
#[cfg(test)]
pub fn readings(chunk: i64, data: &[u8]) -> Option<Vec<DecodedReading>> {
    let mut out = Vec::new();
    for (offset, reading) in entries(data)? {
        let mut values = Vec::new();
        let mut m = packed::decode_into(reading, &mut values)?;
        let mut pairs = Vec::new();
        for v in values {
            pairs.push((m.trailing_zeros() as u8, v));
            m &= m - 1;
        }
        out.push((chunk * CHUNK_SECONDS + i64::from(offset), pairs));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// A damaged chunk (any bytes) decodes or is refused, never panics,
        /// and never yields a reading outside its hour or the window.
        #[test]
        fn fuzz_chunk_decoding_never_panics(data in proptest::collection::vec(proptest::num::u8::ANY, 0..512),
                                            chunk in 0i64..10_000_000, from in 0i64..36_000_000_000, span in 0i64..10_000,
                                            limit in 0usize..64) {
            let mut batch = ReadingBatch::default();
            let end = from + span;
            if decode_into(chunk, &data, from, end, &mut batch, limit).is_some() {
                proptest::prop_assert!(batch.len() <= limit.max(1));
                for t in &batch.timestamps {
                    proptest::prop_assert!((from..=end).contains(t));
                    proptest::prop_assert!((chunk * CHUNK_SECONDS..(chunk + 1) * CHUNK_SECONDS).contains(t));
                }
            }
            let _ = last_second(chunk, &data);
            let mut values = Vec::new();
            let _ = packed::decode_into(&data, &mut values);
            let _ = packed::decode_pairs(&data);
        }
    }

    fn chunk(entries: &[(u16, &[(u8, f64)])]) -> Vec<u8> {
        let mut out = Vec::new();
        for (offset, values) in entries {
            let mut reading = Vec::new();
            packed::encode(values, &mut reading);
            push_entry(&mut out, *offset, &reading);
        }
        out
    }

    fn plain(data: &[u8]) -> Vec<(i64, Vec<(u8, f64)>)> {
        readings(0, data)
            .expect("valid")
            .into_iter()
            .map(|(ts, v)| (ts, v.into_iter().map(|(i, x)| (i, x.to_f64())).collect()))
            .collect()
    }

    #[test]
    fn merging_interleaves_and_merges_the_same_second() {
        let old = chunk(&[(0, &[(0, 1.0)]), (120, &[(0, 3.0), (1, 4.0)])]);
        let new = chunk(&[(60, &[(0, 2.0)]), (120, &[(1, 40.0)]), (3599, &[(2, 9.5)])]);
        let merged = merge(&old, &new).expect("valid");
        assert_eq!(
            plain(&merged),
            vec![(0, vec![(0, 1.0)]), (60, vec![(0, 2.0)]), (120, vec![(0, 3.0), (1, 40.0)]), (3599, vec![(2, 9.5)]),]
        );
        assert_eq!(merge(&merged, &new), Some(merged.clone()), "merging again changes nothing");
        assert_eq!(changed_seconds(&old, &merged), Some(3), "60 and 3599 are new, 120 changed");
        assert_eq!(changed_seconds(&merged, &merged), Some(0));
        assert_eq!(last_second(10, &merged), Some(36_000 + 3599));
    }

    #[test]
    fn decoding_honours_bounds_and_limits() {
        let data = chunk(&[(0, &[(0, 1.0)]), (60, &[(0, 2.0)]), (120, &[(0, 3.0)]), (180, &[(0, 4.0)])]);
        let mut batch = ReadingBatch::default();
        decode_into(2, &data, 7200 + 60, 7200 + 180, &mut batch, 2).expect("valid");
        assert_eq!(batch.timestamps, vec![7260, 7320]);
        let mut rest = ReadingBatch::default();
        decode_into(2, &data, 7321, 7200 + 120, &mut rest, 10).expect("valid");
        assert!(rest.is_empty());
    }

    #[test]
    fn malformed_chunks_are_refused() {
        assert_eq!(entries(&[0x05]), None);
        assert!(merge(&[], &[0xff, 0xff, 0x7f]).is_none(), "an offset past the hour");
        assert!(merge(&[0x05], &[]).is_none(), "a malformed stored row is not replaced");
        assert_eq!(chunk_of(-1), -1);
        assert_eq!(chunk_of(3599), 0);
    }
}
