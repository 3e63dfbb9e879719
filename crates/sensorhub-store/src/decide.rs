//! The decisions of the write path, shared by every backend: what one item
//! of a provisioning document changes, how a reading is checked against its
//! device's sensors and gathered by hour, and how an hour merges with what is
//! stored. Backends only run the SQL these decisions call for, so SQLite and
//! PostgreSQL cannot drift apart in behaviour.

pub(crate) mod claim;
pub(crate) mod latest;
pub(crate) mod outbox;
pub(crate) mod subscriptions;

use crate::chunk::{self, CHUNK_SECONDS, chunk_of};
use crate::{Changes, StoreError, StoreResult};
use sensorhub_core::model::{MAX_SENSORS_PER_DEVICE, ReadingInput, SensorMeta};
use sensorhub_core::provision::{AccountSpec, InputError};
use sensorhub_core::secret::{hash_password, verify_password};
use std::collections::{BTreeMap, BTreeSet};

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

/// Outcome of making one item true.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Change {
    Created,
    Updated,
    Unchanged,
}

impl Change {
    /// Marks an unchanged item as updated (a part of it changed).
    pub(crate) fn touch(&mut self) {
        if *self == Change::Unchanged {
            *self = Change::Updated;
        }
    }
}

impl Changes {
    pub(crate) fn count(&mut self, c: Change) {
        match c {
            Change::Created => self.created += 1,
            Change::Updated => self.updated += 1,
            Change::Unchanged => {}
        }
    }
}

/// One sensor write that makes a device's sensor list true.
#[derive(Debug)]
pub(crate) enum SensorWrite<'a> {
    /// The sensor at `idx` gets new metadata.
    Update { idx: usize, sensor: &'a SensorMeta },
    /// A new sensor at `idx`.
    Insert { idx: usize, sensor: &'a SensorMeta },
}

/// The writes that add or update `wanted` over `current` (sensors by idx).
/// Sensors not listed are kept: stored readings refer to them.
pub(crate) fn sensor_writes<'a>(
    current: &[SensorMeta],
    wanted: &'a [SensorMeta],
    at: &str,
) -> StoreResult<Vec<SensorWrite<'a>>> {
    let mut current = current.to_vec();
    let mut out = Vec::new();
    for (j, s) in wanted.iter().enumerate() {
        match current.iter().position(|c| c.sensor_id == s.sensor_id) {
            Some(idx) if current[idx] == *s => {}
            Some(idx) => {
                current[idx] = s.clone();
                out.push(SensorWrite::Update { idx, sensor: s });
            }
            None => {
                let idx = current.len();
                if idx >= MAX_SENSORS_PER_DEVICE {
                    return Err(invalid(format!("{at}.sensors[{j}]"), "the device already has 64 sensors"));
                }
                current.push(s.clone());
                out.push(SensorWrite::Insert { idx, sensor: s });
            }
        }
    }
    Ok(out)
}

/// An account row as the write path needs it.
pub(crate) struct StoredAccount {
    pub id: i64,
    pub password_hash: String,
    pub disabled: bool,
}

/// What to write for an account of a provisioning document.
pub(crate) enum AccountWrite {
    Insert { password_hash: String, disabled: bool },
    Update { id: i64, password_hash: Option<String>, disabled: Option<bool> },
    Unchanged { id: i64 },
}

/// Decides an account's write. A password equal to the stored one (checked
/// with Argon2) is not re-hashed, so applying a file twice changes nothing.
pub(crate) fn account_write(a: &AccountSpec, stored: Option<StoredAccount>, at: &str) -> StoreResult<AccountWrite> {
    let hash = |p: &str| hash_password(p).map_err(|e| StoreError::Backend(Box::new(e)));
    Ok(match stored {
        None => {
            let password_hash = match (&a.password, &a.password_hash) {
                (Some(p), _) => hash(p)?,
                (None, Some(h)) => h.clone(),
                (None, None) => return Err(invalid(format!("{at}.password"), "a new account needs a password")),
            };
            AccountWrite::Insert { password_hash, disabled: a.disabled.unwrap_or(false) }
        }
        Some(s) => {
            let password_hash = match (&a.password, &a.password_hash) {
                (Some(p), _) if !verify_password(p, &s.password_hash) => Some(hash(p)?),
                (None, Some(h)) if *h != s.password_hash => Some(h.clone()),
                _ => None,
            };
            let disabled = a.disabled.filter(|d| *d != s.disabled);
            if password_hash.is_some() || disabled.is_some() {
                AccountWrite::Update { id: s.id, password_hash, disabled }
            } else {
                AccountWrite::Unchanged { id: s.id }
            }
        }
    })
}

/// An account's links to the devices it sees: device number → whether it
/// has a write grant on it.
pub(crate) type Links = BTreeMap<i64, bool>;

/// Decides an account's device links. `listed` (its `devices`, when given)
/// is exactly the set it sees, with the devices it owns (`owned`) added;
/// `writes` (its `write`, when given) is exactly the set it has write grants
/// on, each one a device it sees. What is not given is kept as `stored`.
pub(crate) fn account_links(
    stored: &Links,
    owned: &BTreeSet<i64>,
    listed: Option<&[i64]>,
    writes: Option<&[i64]>,
    at: &str,
) -> StoreResult<Links> {
    let visible: BTreeSet<i64> = match listed {
        Some(list) => list.iter().chain(owned).copied().collect(),
        None => stored.keys().copied().collect(),
    };
    if let Some(j) = writes.and_then(|w| w.iter().position(|pk| !visible.contains(pk))) {
        return Err(invalid(format!("{at}.write[{j}]"), "the account cannot see this device"));
    }
    Ok(visible
        .into_iter()
        .map(|pk| {
            let can_write = match writes {
                Some(w) => w.contains(&pk),
                None => stored.get(&pk).copied().unwrap_or(false),
            };
            (pk, can_write)
        })
        .collect())
}

/// The readings of a stored hour that fall in `range` cut out of it:
/// what remains (empty: delete the row), and the readings and values
/// removed; `None` when none of its readings is in the range.
pub(crate) fn cut_hour(
    device_pk: i64,
    chunk: i64,
    data: &[u8],
    range: sensorhub_core::time::TimeRange,
) -> StoreResult<Option<(Vec<u8>, u64, u64)>> {
    let (kept, readings, values) =
        chunk::remove_range(chunk, data, range.start, range.end).ok_or_else(|| malformed(device_pk, chunk))?;
    Ok((readings > 0).then_some((kept, readings, values)))
}

/// A stored hour of schema version 2 in the column format of version 3;
/// a row that does not decode stops the upgrade (it is never dropped).
pub(crate) fn upgrade_hour(device_pk: i64, chunk: i64, old: &[u8]) -> StoreResult<Vec<u8>> {
    let rows = crate::legacy::rows(old).ok_or_else(|| malformed(device_pk, chunk))?;
    Ok(chunk::encode(&rows))
}

/// Progress of an upgrade, logged after the first batch and then at most
/// once a second.
pub(crate) struct UpgradeLog {
    total: u64,
    done: u64,
    last: Option<std::time::Instant>,
}

impl UpgradeLog {
    /// Starts the log of an upgrade of `total` hours.
    pub(crate) fn start(total: u64) -> Self {
        if total > 0 {
            tracing::info!(hours = total, "upgrading stored readings to the column format (schema version 3)");
        }
        Self { total, done: 0, last: None }
    }

    /// Counts a committed batch of `n` hours.
    pub(crate) fn batch(&mut self, n: u64) {
        self.done += n;
        if self.last.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(1)) {
            tracing::info!(done = self.done, total = self.total, "upgraded hours");
            self.last = Some(std::time::Instant::now());
        }
    }

    /// Logs the end of the upgrade.
    pub(crate) fn finish(&self) {
        if self.total > 0 {
            tracing::info!(hours = self.done, "upgrade of stored readings finished");
        }
    }
}

/// Hours dropped or trimmed per transaction by retention, so that other
/// writers get their turn.
pub(crate) const RETENTION_BATCH: usize = 256;

/// A device's number with its own and its owner's stored retention.
pub(crate) type RetentionSettings = (i64, Option<i64>, Option<i64>);

/// The first second device readings are kept from, given the device's and
/// its owner's stored settings and the server's default; `None` keeps all.
pub(crate) fn retention_cutoff(
    device: Option<i64>,
    owner: Option<i64>,
    default: sensorhub_core::retention::Retention,
    now: i64,
) -> Option<i64> {
    use sensorhub_core::retention::Retention;
    Retention::effective(Retention::from_column(device), Retention::from_column(owner), default)
        .map(|keep| now.saturating_sub(keep))
}

/// What retention does to stored hours of a device before second `cutoff`:
/// an hour entirely before it is dropped; the hour it falls in is trimmed.
pub(crate) struct Expiry {
    pub report: crate::RetentionReport,
}

impl Expiry {
    pub(crate) fn new() -> Self {
        Self { report: crate::RetentionReport::default() }
    }

    /// The last hour dropped whole, and the hour to trim.
    pub(crate) fn hours(cutoff: i64) -> (i64, i64) {
        (chunk_of(cutoff) - 1, chunk_of(cutoff))
    }

    /// Counts an hour dropped whole.
    pub(crate) fn dropped(&mut self, device_pk: i64, chunk: i64, data: &[u8]) -> StoreResult<()> {
        self.report.readings += chunk::reading_count(data).ok_or_else(|| malformed(device_pk, chunk))?;
        self.report.bytes += data.len() as u64;
        self.report.hours_dropped += 1;
        Ok(())
    }

    /// Trims the hour `cutoff` falls in: what remains of it (empty: delete
    /// the row), or `None` when nothing in it is expired.
    pub(crate) fn trim(&mut self, device_pk: i64, data: &[u8], cutoff: i64) -> StoreResult<Option<Vec<u8>>> {
        let chunk = chunk_of(cutoff);
        if cutoff == chunk * CHUNK_SECONDS {
            return Ok(None);
        }
        let range = sensorhub_core::time::TimeRange { start: chunk * CHUNK_SECONDS, end: cutoff - 1 };
        let Some((kept, readings, _)) = cut_hour(device_pk, chunk, data, range)? else { return Ok(None) };
        self.report.readings += readings;
        self.report.bytes += (data.len() - kept.len().min(data.len())) as u64;
        self.report.hours_trimmed += 1;
        Ok(Some(kept))
    }
}

/// The hour rows that may hold readings of `range`, from first to last.
pub(crate) fn chunks_of(range: sensorhub_core::time::TimeRange) -> (i64, i64) {
    (chunk_of(range.start), chunk_of(range.end))
}

/// The device numbers of a key's device list (in list order, resolved), checked
/// against the devices its account may see.
pub(crate) fn key_scope(listed: &[i64], visible: &BTreeSet<i64>, at: &str) -> StoreResult<BTreeSet<i64>> {
    if let Some(j) = listed.iter().position(|pk| !visible.contains(pk)) {
        return Err(invalid(format!("{at}.devices[{j}]"), "the account cannot see this device"));
    }
    Ok(listed.iter().copied().collect())
}

/// The scope a provisioning item asks of an API key.
pub(crate) enum ScopeRequest {
    /// Not given: a stored key keeps its scope; a new key sees all.
    Keep,
    /// Every device of the account.
    All,
    /// Only these devices.
    Only(BTreeSet<i64>),
}

impl ScopeRequest {
    /// The key's device list after the write (`None`: all of the account's).
    pub(crate) fn resolve(self, stored: Option<&StoredKey>) -> Option<BTreeSet<i64>> {
        match self {
            ScopeRequest::Keep => stored.filter(|k| k.scoped).map(|k| k.devices.clone()),
            ScopeRequest::All => None,
            ScopeRequest::Only(set) => Some(set),
        }
    }
}

/// A key row (API or webhook) as the write path needs it.
pub(crate) struct StoredKey {
    pub id: i64,
    pub account_id: i64,
    pub scoped: bool,
    pub revoked: bool,
    /// A scoped API key's devices (empty otherwise).
    pub devices: BTreeSet<i64>,
}

/// What to write for a key.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum KeyWrite {
    Insert { revoked: bool },
    Update { id: i64, revoked: bool },
    Unchanged,
}

/// Decides a key's write: `scope` is the device list of a scoped API key
/// (`None` for unscoped and webhook keys), `revoked` the wanted state if given.
pub(crate) fn key_write(
    account_id: i64,
    stored: Option<StoredKey>,
    scope: Option<&BTreeSet<i64>>,
    revoked: Option<bool>,
    what: &str,
    at: &str,
) -> StoreResult<KeyWrite> {
    match stored {
        Some(k) if k.account_id != account_id => {
            Err(invalid(at, format!("this {what} already belongs to another account")))
        }
        Some(k) => {
            let revoked = revoked.unwrap_or(k.revoked);
            let same_scope = k.scoped == scope.is_some() && scope.is_none_or(|s| *s == k.devices);
            if same_scope && revoked == k.revoked {
                Ok(KeyWrite::Unchanged)
            } else {
                Ok(KeyWrite::Update { id: k.id, revoked })
            }
        }
        None => Ok(KeyWrite::Insert { revoked: revoked.unwrap_or(false) }),
    }
}

/// A device's sensors placed by idx, from (idx, sensor) rows in idx order:
/// a missing idx (a row removed by hand) holds an empty sensor, so that
/// every sensor keeps its idx and stored values stay with their sensor.
pub(crate) fn sensors_by_idx(rows: impl IntoIterator<Item = (i64, SensorMeta)>) -> Vec<SensorMeta> {
    let mut out: Vec<SensorMeta> = Vec::new();
    for (idx, s) in rows {
        let idx = usize::try_from(idx).unwrap_or(0);
        out.resize_with(idx, || SensorMeta {
            sensor_id: String::new(),
            name: String::new(),
            kind: String::new(),
            unit: String::new(),
        });
        out.push(s);
    }
    out
}

/// A device as the reading writer needs it: its number and sensors by id.
pub(crate) struct DeviceSensors {
    pub pk: i64,
    sensors: FastMap<String, (u8, String)>,
    /// The enabled subscriptions that cover the device, when the write
    /// delivers (looked up once per device and transaction).
    pub subscriptions: Vec<String>,
}

impl DeviceSensors {
    /// Device `pk` with its sensors by idx.
    pub(crate) fn new(pk: i64, sensors: Vec<SensorMeta>) -> Self {
        let sensors = sensors
            .into_iter()
            .enumerate()
            .filter(|(_, s)| !s.sensor_id.is_empty())
            .map(|(idx, s)| (s.sensor_id, (idx as u8, s.unit)))
            .collect();
        Self { pk, sensors, subscriptions: Vec::new() }
    }

    /// The unit of sensor `sensor_id`.
    pub(crate) fn unit(&self, sensor_id: &str) -> Option<&str> {
        self.sensors.get(sensor_id).map(|(_, unit)| unit.as_str())
    }

    /// The reading's values as (sensor idx, value), or the first unknown
    /// sensor or mismatched unit.
    pub(crate) fn values(&self, r: &ReadingInput) -> StoreResult<Vec<(u8, f64)>> {
        let mut pairs = Vec::with_capacity(r.values.len());
        for (i, v) in r.values.iter().enumerate() {
            let at = || r.origin.value_at(i);
            let (idx, unit) = self.sensors.get(&v.sensor_id).ok_or_else(|| {
                invalid(at(), format!("unknown sensor {:?} for device {:?}", v.sensor_id, r.device_id))
            })?;
            if let Some(given) = v.unit.as_deref().filter(|u| u != unit) {
                return Err(invalid(at(), format!("unit {given:?} does not match the sensor's unit {unit:?}")));
            }
            pairs.push((*idx, v.value));
        }
        Ok(pairs)
    }
}

/// The message for a reading of an unknown device.
pub(crate) fn unknown_device(r: &ReadingInput) -> StoreError {
    invalid(r.origin.device_at(), format!("unknown device {:?}", r.device_id))
}

/// Hours gathered at most before they are written out.
const MAX_PENDING_HOURS: usize = 4096;

/// One hour of one device, encoded as a stored row.
pub(crate) struct HourRow {
    pub device_pk: i64,
    pub chunk: i64,
    pub data: Vec<u8>,
}

/// One hour's readings being gathered: (sensor idx, value) pairs by second offset.
type HourReadings = BTreeMap<u16, Vec<(u8, f64)>>;

/// Readings gathered by (device, hour), so that an hour's row is read,
/// merged and written once however the input interleaves devices.
#[derive(Default)]
pub(crate) struct Hours {
    pending: FastMap<(i64, i64), HourReadings>,
}

impl Hours {
    /// Whether adding a reading of device `pk` at `ts` needs a flush first.
    pub(crate) fn is_full_for(&self, pk: i64, ts: i64) -> bool {
        self.pending.len() >= MAX_PENDING_HOURS && !self.pending.contains_key(&(pk, chunk_of(ts)))
    }

    /// Adds a reading's values; a later value for the same second and sensor wins.
    pub(crate) fn add(&mut self, pk: i64, ts: i64, pairs: Vec<(u8, f64)>) {
        let chunk = chunk_of(ts);
        let offset = (ts - chunk * CHUNK_SECONDS) as u16;
        self.pending.entry((pk, chunk)).or_default().entry(offset).or_default().extend(pairs);
    }

    /// Whether nothing is gathered.
    pub(crate) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// The gathered hours, encoded, ordered by device and hour; empties the set.
    pub(crate) fn take(&mut self) -> Vec<HourRow> {
        let mut rows: Vec<HourRow> = self
            .pending
            .drain()
            .map(|((device_pk, chunk), readings)| {
                let readings: Vec<chunk::Row> = readings
                    .into_iter()
                    .map(|(offset, mut pairs)| {
                        chunk::normalize(&mut pairs);
                        (offset, pairs)
                    })
                    .collect();
                HourRow { device_pk, chunk, data: chunk::encode(&readings) }
            })
            .collect();
        rows.sort_unstable_by_key(|r| (r.device_pk, r.chunk));
        rows
    }
}

/// Merges a new hour into the stored one: the row to write and how many
/// readings it changes, or `None` when nothing would change.
pub(crate) fn merge_hour(row: HourRow, old: Option<&[u8]>) -> StoreResult<Option<(HourRow, u64)>> {
    let bad = || malformed(row.device_pk, row.chunk);
    let (merged, changed) = match old {
        Some(old) => chunk::merge(old, &row.data).ok_or_else(bad)?,
        None => {
            let changed = chunk::reading_count(&row.data).ok_or_else(bad)?;
            (row.data, changed)
        }
    };
    Ok((changed > 0).then_some((HourRow { data: merged, ..row }, changed)))
}

#[cfg(test)]
mod tests {
    use super::*;

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
