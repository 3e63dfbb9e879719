//! The decisions of the write path, shared by every backend: what one item
//! of a provisioning document changes, how a reading is checked against its
//! device's sensors and gathered by hour, and how an hour merges with what is
//! stored. Backends only run the SQL these decisions call for, so SQLite and
//! PostgreSQL cannot drift apart in behaviour.

pub(crate) mod claim;
mod hours;
pub(crate) mod latest;
pub(crate) mod merge;
pub(crate) mod outbox;
mod provision;
pub(crate) mod subscriptions;

pub(crate) use hours::*;
pub(crate) use provision::*;

use crate::StoreError;
use sensorhub_core::provision::InputError;

/// The write path's maps: keyed by device numbers, hours and the ids of
/// the caller's own devices and sensors, hashed fast (an import looks them
/// up for every value).
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Seconds since the epoch, for `created_at` columns.
pub(crate) fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// A refusal of the input at position `at`.
pub(crate) fn invalid(at: impl Into<String>, msg: impl Into<String>) -> StoreError {
    StoreError::Invalid(InputError::new(at, msg))
}

/// A stored hour that does not decode: never silently replaced.
pub(crate) fn malformed(device_pk: i64, chunk: i64) -> StoreError {
    let at = |s: i64| jiff::Timestamp::from_second(s).map_or_else(|_| s.to_string(), |t| t.to_string());
    let start = chunk.saturating_mul(crate::chunk::CHUNK_SECONDS);
    StoreError::Backend(
        format!(
            "damaged readings of device #{device_pk} in the hour {} to {}: the stored hour does not decode",
            at(start),
            at(start.saturating_add(crate::chunk::CHUNK_SECONDS - 1))
        )
        .into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sensorhub_core::model::{ReadingInput, SensorMeta};
    use std::collections::BTreeSet;

    fn sensor(id: &str, unit: &str) -> SensorMeta {
        SensorMeta { sensor_id: id.into(), name: id.into(), kind: "T".into(), unit: unit.into() }
    }

    #[test]
    fn account_links_keep_what_is_not_given_and_add_owned_devices() {
        let stored: Links = [(1, true), (2, false)].into_iter().collect();
        let owned: BTreeSet<i64> = [3].into_iter().collect();
        assert_eq!(account_links(&stored, &owned, None, None, "a").expect("keep"), stored);
        let links = account_links(&stored, &owned, Some(&[2]), None, "a").expect("listed");
        assert_eq!(links, [(2, false), (3, false)].into_iter().collect(), "owned devices stay visible");
        let links = account_links(&stored, &owned, None, Some(&[2]), "a").expect("writes");
        assert_eq!(links, [(1, false), (2, true)].into_iter().collect());
        let err = account_links(&stored, &owned, Some(&[1]), Some(&[2]), "accounts[0]").expect_err("unseen");
        assert!(err.to_string().starts_with("accounts[0].write[0]"), "{err}");
    }

    #[test]
    fn sensors_are_updated_in_place_and_added_at_the_end() {
        let current = vec![sensor("a", "%"), sensor("b", "cm")];
        let wanted = vec![sensor("b", "m"), sensor("c", "x"), sensor("a", "%")];
        let writes = sensor_writes(&current, &wanted, "devices[0]").expect("ok");
        assert!(matches!(writes[0], SensorWrite::Update { idx: 1, .. }));
        assert!(matches!(writes[1], SensorWrite::Insert { idx: 2, .. }));
        assert_eq!(writes.len(), 2, "an equal sensor is not written");
        let full: Vec<_> = (0..64).map(|i| sensor(&format!("s{i}"), "u")).collect();
        let err = sensor_writes(&full, &[sensor("new", "u")], "devices[3]").expect_err("65th");
        assert!(err.to_string().contains("devices[3].sensors[0]"), "{err}");
    }

    #[test]
    fn sensors_keep_their_idx_across_a_gap() {
        let got = sensors_by_idx([(0, sensor("a", "%")), (2, sensor("c", "cm"))]);
        let ids: Vec<&str> = got.iter().map(|s| s.sensor_id.as_str()).collect();
        assert_eq!(ids, ["a", "", "c"]);
        let device = DeviceSensors::new(1, got);
        let r = ReadingInput {
            device_id: "D".into(),
            timestamp: 0,
            values: vec![sensorhub_core::model::ValueInput { sensor_id: "c".into(), value: 1.0, unit: None }],
            origin: sensorhub_core::model::Origin::Item("t".into()),
        };
        assert_eq!(device.values(&r).expect("known").first().map(|p| p.0), Some(2), "c keeps idx 2");
    }

    #[test]
    fn keys_keep_their_account_and_change_only_when_asked() {
        let stored =
            || Some(StoredKey { id: 7, account_id: 1, scoped: false, revoked: false, devices: BTreeSet::new() });
        assert!(key_write(2, stored(), None, None, "API key id", "k").is_err());
        assert_eq!(key_write(1, stored(), None, None, "API key id", "k").ok(), Some(KeyWrite::Unchanged));
        assert_eq!(
            key_write(1, stored(), None, Some(true), "x", "k").ok(),
            Some(KeyWrite::Update { id: 7, revoked: true })
        );
        let scope: BTreeSet<i64> = [3].into();
        assert_eq!(
            key_write(1, stored(), Some(&scope), None, "x", "k").ok(),
            Some(KeyWrite::Update { id: 7, revoked: false })
        );
        assert_eq!(key_write(1, None, None, None, "x", "k").ok(), Some(KeyWrite::Insert { revoked: false }));
    }
}
