//! The decisions of the `latest` index (the newest value of each sensor of
//! each device), shared by every backend: which entries a transaction's
//! readings replace, and what a device's entries become when readings are
//! removed. Backends only run the SQL.

use super::{FastMap, malformed};
use crate::chunk;
use crate::{LatestValue, StoreResult, StoredValue};

/// One entry of the index: device `device_pk`'s sensor `idx` last reported
/// `value` (the double's bits) at `second`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LatestRow {
    pub device_pk: i64,
    pub idx: i16,
    pub second: i64,
    pub value: i64,
}

/// An entry as read back from the index: sensor `idx`, `second`, and the
/// value's `bits`.
pub(crate) fn entry(idx: i64, second: i64, bits: i64) -> LatestValue {
    LatestValue {
        idx: usize::try_from(idx).unwrap_or(usize::MAX),
        timestamp: second,
        value: StoredValue::Float(f64::from_bits(bits as u64)),
    }
}

/// Sensor slots per device: idx is below [`sensorhub_core::model::MAX_SENSORS_PER_DEVICE`].
const SLOTS: usize = 64;

/// Each sensor's newest (second, value) per device.
type Slots = [Option<(i64, f64)>; SLOTS];

/// The newest value of each (device, sensor) among the readings of one
/// transaction, gathered in memory so that the index gets one upsert per
/// (device, sensor) however many readings the transaction writes.
#[derive(Default)]
pub(crate) struct Newest {
    devices: FastMap<i64, Box<Slots>>,
}

impl Newest {
    /// Adds a reading of device `pk` at second `ts`; of values at the same
    /// second, the later one wins (as it does in the stored hour).
    pub(crate) fn add(&mut self, pk: i64, ts: i64, pairs: &[(u8, f64)]) {
        let slots = self.devices.entry(pk).or_insert_with(|| Box::new([None; SLOTS]));
        for &(idx, v) in pairs {
            let slot = &mut slots[usize::from(idx) % SLOTS];
            if slot.is_none_or(|(t, _)| ts >= t) {
                *slot = Some((ts, v));
            }
        }
    }

    /// Adds the newest value of each sensor in a stored hour (an upgraded
    /// or copied hour).
    pub(crate) fn add_hour(&mut self, pk: i64, chunk: i64, data: &[u8]) -> StoreResult<()> {
        for (idx, ts, v) in chunk::last_values(chunk, data).ok_or_else(|| malformed(pk, chunk))? {
            self.add(pk, ts, &[(idx, v.to_f64())]);
        }
        Ok(())
    }

    /// The gathered entries, by device and idx; empties the set. Each
    /// replaces the stored entry only when its second is not older.
    pub(crate) fn take(&mut self) -> Vec<LatestRow> {
        let mut rows: Vec<LatestRow> = self
            .devices
            .drain()
            .flat_map(|(device_pk, slots)| {
                slots.into_iter().enumerate().filter_map(move |(idx, slot)| {
                    slot.map(|(second, v)| LatestRow { device_pk, idx: idx as i16, second, value: v.to_bits() as i64 })
                })
            })
            .collect();
        rows.sort_unstable_by_key(|r| (r.device_pk, r.idx));
        rows
    }
}

/// The sensors (a bit set of idx) whose entries must be recomputed.
pub(crate) fn mask_of(idx: impl IntoIterator<Item = i64>) -> u64 {
    idx.into_iter().filter(|i| (0..SLOTS as i64).contains(i)).fold(0, |m, i| m | 1 << i)
}

/// The idx of a bit set, for a query's parameter.
pub(crate) fn idx_of(mut mask: u64) -> Vec<i16> {
    let mut out = Vec::with_capacity(mask.count_ones() as usize);
    while mask != 0 {
        out.push(mask.trailing_zeros() as i16);
        mask &= mask - 1;
    }
    out
}

/// Stored hours a recomputation reads per query.
pub(crate) const SEARCH_BATCH: usize = 64;

/// A recomputation of some of a device's entries from its stored hours,
/// fed the hours newest first: a sensor's entry is the newest value of the
/// first (newest) hour that has it; a sensor found in no hour has none.
pub(crate) struct Search {
    pk: i64,
    wanted: u64,
    found: Vec<LatestRow>,
}

impl Search {
    /// A search for the sensors of device `pk` in bit set `wanted`.
    pub(crate) fn new(pk: i64, wanted: u64) -> Self {
        Self { pk, wanted, found: Vec::new() }
    }

    /// Whether every wanted sensor is found: no older hour matters.
    pub(crate) fn is_done(&self) -> bool {
        self.wanted == 0
    }

    /// Looks at the next (older) stored hour.
    pub(crate) fn hour(&mut self, chunk: i64, data: &[u8]) -> StoreResult<()> {
        for (idx, second, v) in chunk::last_values(chunk, data).ok_or_else(|| malformed(self.pk, chunk))? {
            if self.wanted & (1 << idx) != 0 {
                self.wanted &= !(1 << idx);
                let value = v.to_f64().to_bits() as i64;
                self.found.push(LatestRow { device_pk: self.pk, idx: i16::from(idx), second, value });
            }
        }
        Ok(())
    }

    /// The entries found.
    pub(crate) fn found(self) -> Vec<LatestRow> {
        self.found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hour(rows: &[(u16, Vec<(u8, f64)>)]) -> Vec<u8> {
        crate::format::encode_hour(rows)
    }

    #[test]
    fn a_transaction_keeps_the_newest_value_of_each_sensor() {
        let mut newest = Newest::default();
        newest.add(1, 100, &[(0, 1.0), (2, 5.0)]);
        newest.add(1, 50, &[(0, 9.0)]);
        newest.add(1, 100, &[(2, 6.0)]);
        newest.add(3, 7, &[(1, -0.0)]);
        let rows = newest.take();
        let got: Vec<_> = rows.iter().map(|r| (r.device_pk, r.idx, r.second, f64::from_bits(r.value as u64))).collect();
        assert_eq!(got, [(1, 0, 100, 1.0), (1, 2, 100, 6.0), (3, 1, 7, -0.0)], "older loses, same second replaces");
        assert!(f64::from_bits(rows[2].value as u64).is_sign_negative(), "bits survive");
        assert!(newest.take().is_empty());
    }

    #[test]
    fn a_search_takes_each_sensor_from_the_newest_hour_that_has_it() {
        let mut search = Search::new(4, mask_of([0, 1, 5]));
        search.hour(10, &hour(&[(5, vec![(0, 1.5)]), (9, vec![(0, 2.5)])])).expect("decodes");
        assert!(!search.is_done());
        search.hour(9, &hour(&[(3599, vec![(0, 7.0), (1, 3.25)])])).expect("decodes");
        let found = search.found();
        assert_eq!(found.len(), 2, "idx 5 is in no hour");
        assert_eq!((found[0].idx, found[0].second, f64::from_bits(found[0].value as u64)), (0, 36009, 2.5));
        assert_eq!((found[1].idx, found[1].second), (1, 9 * 3600 + 3599));
        assert_eq!(idx_of(mask_of([0, 63, 5, 64, -1])), [0, 5, 63]);
    }

    #[test]
    fn a_damaged_hour_is_an_error() {
        assert!(Search::new(1, 1).hour(0, &[9, 9]).is_err());
        assert!(Newest::default().add_hour(1, 0, &[]).is_err());
    }

    proptest::proptest! {
        /// Any value goes in and comes back bit for bit, and is printed as
        /// the data endpoint prints it from the stored hour.
        #[test]
        fn values_round_trip_and_print_as_the_data_endpoint(
            v in proptest::num::f64::NORMAL | proptest::num::f64::ZERO | proptest::num::f64::SUBNORMAL,
            d in -10_000_000_000i64..10_000_000_000,
            k in 0u32..13,
        ) {
            for x in [v, d as f64 / 10f64.powi(k as i32)] {
                let mut newest = Newest::default();
                newest.add(1, 0, &[(0, x)]);
                let row = newest.take()[0];
                let back = entry(i64::from(row.idx), row.second, row.value).value;
                proptest::prop_assert_eq!(back.to_f64().to_bits(), x.to_bits());
                let stored = crate::format::decode_hour(&hour(&[(0, vec![(0, x)])])).expect("decodes").values[0];
                let (mut ours, mut theirs) = (Vec::new(), Vec::new());
                back.write_json(&mut ours);
                stored.write_json(&mut theirs);
                proptest::prop_assert_eq!(ours, theirs);
            }
        }
    }
}
