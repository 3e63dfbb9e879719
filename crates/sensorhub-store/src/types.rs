//! Plain data passed across the `Store` trait.

use crate::StoredValue;
use sensorhub_core::model::SensorMeta;

/// Which devices a caller may see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every device (admin commands).
    All,
    /// An account's devices, narrowed to a scoped API key's list when `key` is set.
    Account {
        /// The account.
        account_id: i64,
        /// A scoped API key whose device list narrows the account's.
        key: Option<i64>,
    },
}

impl Scope {
    /// The scope as its two query parameters, and as a map key: the
    /// account (none for all devices) and the scoped key, if any.
    pub(crate) fn params(self) -> (Option<i64>, Option<i64>) {
        match self {
            Scope::All => (None, None),
            Scope::Account { account_id, key } => (Some(account_id), key),
        }
    }
}

/// What HTTP Basic needs to check a login.
#[derive(Debug, Clone)]
pub struct AccountAuth {
    /// Account number.
    pub account_id: i64,
    /// Argon2id PHC string.
    pub password_hash: String,
    /// A disabled account gets 403 even with the right password.
    pub disabled: bool,
}

/// What a public request needs to know about its API key.
#[derive(Debug, Clone, Copy)]
pub struct ApiKeyAuth {
    /// Key number.
    pub key_id: i64,
    /// Owning account.
    pub account_id: i64,
    /// Whether the key sees only its own device list.
    pub scoped: bool,
    /// A revoked key gets 403.
    pub revoked: bool,
    /// A key of a disabled account gets 403.
    pub account_disabled: bool,
    /// The access generation read in the same statement: the answer holds
    /// for as long as the generation has not moved.
    pub access: i64,
}

/// What [`Reads::window_hours`](crate::Reads::window_hours) found, and the
/// access generation it was found at.
#[derive(Debug)]
pub struct HoursHead {
    /// The access generation, read in the statement that decides the
    /// device's visibility or before it: a caller's access kept at this
    /// generation held when the device was looked up.
    pub access: i64,
    /// The device with its first stored hours; `None` if it is not visible.
    pub found: Option<(std::sync::Arc<DeviceHandle>, Vec<StoredHour>)>,
}

impl ApiKeyAuth {
    /// The devices this key may see.
    pub fn scope(&self) -> Scope {
        Scope::Account { account_id: self.account_id, key: self.scoped.then_some(self.key_id) }
    }
}

/// A device found for reading: its number and its sensors by idx.
#[derive(Debug, Clone)]
pub struct DeviceHandle {
    /// Device number.
    pub pk: i64,
    /// Sensors; `sensors[i]` is the sensor with idx `i`.
    pub sensors: Vec<SensorMeta>,
}

/// A batch of readings in columns: reading `i` is at `timestamps[i]` and holds the sensors in bit
/// set `masks[i]`, whose values are the next `masks[i].count_ones()` entries of `values`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReadingBatch {
    /// Seconds since the epoch, ascending.
    pub timestamps: Vec<i64>,
    /// Sensor idx bit sets.
    pub masks: Vec<u64>,
    /// Values, in reading order then idx order.
    pub values: Vec<StoredValue>,
}

impl ReadingBatch {
    /// Number of readings.
    pub fn len(&self) -> usize {
        self.timestamps.len()
    }

    /// Whether the batch holds no reading.
    pub fn is_empty(&self) -> bool {
        self.timestamps.is_empty()
    }
}

/// A sensor's newest reading, as `latest` answers it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatestValue {
    /// The sensor's idx within its device ([`DeviceHandle::sensors`]).
    pub idx: usize,
    /// Seconds since the epoch of the sensor's newest reading.
    pub timestamp: i64,
    /// Its value, bit for bit as stored.
    pub value: StoredValue,
}

/// What `apply` changed, per kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyReport {
    /// Accounts created / updated.
    pub accounts: Changes,
    /// Devices (and sensors) created / updated.
    pub devices: Changes,
    /// API keys created / updated.
    pub api_keys: Changes,
    /// Webhook keys created / updated.
    pub webhook_keys: Changes,
    /// Outgoing webhook subscriptions created / updated.
    pub subscriptions: Changes,
    /// Readings created or changed; readings equal to what was stored are not counted.
    pub readings: Changes,
    /// Devices whose alarm rules were set anew.
    pub alarm_rules: Changes,
}

impl ApplyReport {
    /// Whether nothing changed.
    pub fn is_noop(&self) -> bool {
        *self == Self::default()
    }
}

/// Counts of created and updated items.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Changes {
    /// Newly created.
    pub created: u64,
    /// Existing and changed.
    pub updated: u64,
}

/// What `import` stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Readings (device and second) read from the input.
    pub readings: u64,
    /// Values read from the input.
    pub values: u64,
}

impl std::ops::AddAssign for ImportReport {
    fn add_assign(&mut self, other: Self) {
        self.readings += other.readings;
        self.values += other.values;
    }
}

/// An account as the admin commands list it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountSummary {
    /// Login name.
    pub username: String,
    /// Whether it is disabled.
    pub disabled: bool,
    /// Devices it may see.
    pub devices: Vec<String>,
    /// Of those, the devices it may write (it owns them or has a write grant).
    pub writes: Vec<String>,
}

/// An API key as the admin commands list it: never the whole id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeySummary {
    /// First characters of the id.
    pub prefix: String,
    /// Owning account.
    pub username: String,
    /// Device list of a scoped key; `None` for all of the account's devices.
    pub devices: Option<Vec<String>>,
    /// Whether it is revoked.
    pub revoked: bool,
}

/// What the webhook needs to know about an `X-API-KEY`.
#[derive(Debug, Clone, Copy)]
pub struct WebhookKeyAuth {
    /// Key number.
    pub key_id: i64,
    /// Owning account.
    pub account_id: i64,
    /// The stored digest, for a constant-time comparison.
    pub digest: [u8; 32],
    /// A revoked key is refused.
    pub revoked: bool,
    /// A key of a disabled account is refused.
    pub account_disabled: bool,
    /// The generations read with the key, in the same statement: what
    /// [`crate::Access::writable_device`] checks a kept answer against.
    pub generations: Generations,
}

/// The access and device generations read together (one statement): an answer about a device and
/// who may write it read at the same pair is still true (triggers move one on any change). Both only grow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Generations {
    /// `access_generation`: accounts, keys, grants, owners.
    pub access: i64,
    /// `device_generation`: devices and their sensors.
    pub devices: i64,
}

impl Generations {
    /// Whether `self` was read no earlier than `other`.
    pub fn at_or_after(self, other: Generations) -> bool {
        self.access >= other.access && self.devices >= other.devices
    }
}

/// The state of a backend's connection pool, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStatus {
    /// Connections the pool may open.
    pub max: usize,
    /// Connections in use now.
    pub in_use: usize,
    /// Open connections waiting for work.
    pub idle: usize,
}

/// A whole installation but its readings, as rows keyed by natural ids (username, device id, key
/// digest), not a backend's numbers: what `sensorhub copy` moves and checks, sorted by natural key.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Installation {
    /// Accounts.
    pub accounts: Vec<AccountRow>,
    /// Devices.
    pub devices: Vec<DeviceRow>,
    /// Sensors, by device id and idx.
    pub sensors: Vec<SensorRow>,
    /// Which accounts see (and may write) which devices.
    pub account_devices: Vec<AccountDeviceRow>,
    /// API keys.
    pub api_keys: Vec<KeyRow>,
    /// (API key digest, device id) pairs.
    pub api_key_devices: Vec<(Vec<u8>, String)>,
    /// Webhook keys (`scoped` is always false).
    pub webhook_keys: Vec<KeyRow>,
}

/// An account row, with its password hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountRow {
    /// Login name.
    pub username: String,
    /// Argon2id PHC string.
    pub password_hash: String,
    /// Disabled.
    pub disabled: bool,
    /// Seconds since the epoch.
    pub created_at: i64,
    /// Its own retention in seconds, if set (`account retention`).
    pub retention_seconds: Option<i64>,
}

/// A device row.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceRow {
    /// Device id.
    pub device_id: String,
    /// Name.
    pub name: String,
    /// Type (AWLR, AWS).
    pub kind: String,
    /// Latitude.
    pub lat: f64,
    /// Longitude.
    pub long: f64,
    /// Reporting interval.
    pub interval_seconds: i64,
    /// The owning account's username (it may write the device's readings).
    pub owner: Option<String>,
    /// Its own retention in seconds, if set (`device retention`).
    pub retention_seconds: Option<i64>,
}

/// An account's link to a device it sees, for `copy`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct AccountDeviceRow {
    /// The account's username.
    pub username: String,
    /// The device id.
    pub device_id: String,
    /// Whether the account may write the device's readings (a write grant).
    pub can_write: bool,
}

/// What `readings delete` removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeleteReport {
    /// Readings (device and second) removed.
    pub readings: u64,
    /// Values removed.
    pub values: u64,
    /// Stored hours touched (removed whole or trimmed).
    pub hours: u64,
}

/// What one pass of sensorhub's own vacuum did (PostgreSQL, autovacuum off).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VacuumPass {
    /// The tables it vacuumed and analyzed.
    pub vacuumed: Vec<Vacuumed>,
    /// Tables due that its role may not vacuum (another role owns them):
    /// PostgreSQL would only warn and skip them, so they are left alone
    /// and named here for the operator.
    pub not_permitted: Vec<String>,
    /// Tables due that another session held (another instance's vacuum):
    /// left for the next pass.
    pub busy: Vec<String>,
}

/// A table sensorhub vacuumed itself (PostgreSQL with autovacuum off).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vacuumed {
    /// The table's name.
    pub table: String,
    /// Its dead rows when it was found due (by the statistics, which lag).
    pub dead_rows: u64,
}

/// What one pass of retention removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// Devices with readings past their retention.
    pub devices: u64,
    /// Stored hours dropped whole.
    pub hours_dropped: u64,
    /// Stored hours trimmed (the hour the cutoff falls in).
    pub hours_trimmed: u64,
    /// Readings (device and second) removed.
    pub readings: u64,
    /// Stored bytes removed (the hours' encoded size; the database's own
    /// overhead comes on top).
    pub bytes: u64,
    /// Bytes the database file shrank by (SQLite files with incremental
    /// auto-vacuum; elsewhere the freed space is reused by later writes).
    pub returned: u64,
}

impl RetentionReport {
    /// Adds another report's counts.
    pub fn add(&mut self, other: &RetentionReport) {
        self.devices += other.devices;
        self.hours_dropped += other.hours_dropped;
        self.hours_trimmed += other.hours_trimmed;
        self.readings += other.readings;
        self.bytes += other.bytes;
        self.returned += other.returned;
    }

    /// Whether nothing was removed.
    pub fn is_empty(&self) -> bool {
        self.hours_dropped + self.hours_trimmed == 0
    }
}

/// A sensor row: stored readings refer to it by `idx`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SensorRow {
    /// Its device.
    pub device_id: String,
    /// Its number within the device.
    pub idx: i64,
    /// Its metadata.
    pub sensor: SensorMeta,
}

/// An API or webhook key row: a digest, never the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRow {
    /// SHA-256 of the key.
    pub digest: Vec<u8>,
    /// Shown prefix.
    pub prefix: String,
    /// Owning account.
    pub username: String,
    /// Sees only its device list.
    pub scoped: bool,
    /// Revoked.
    pub revoked: bool,
    /// Seconds since the epoch.
    pub created_at: i64,
}

/// One stored hour of a device's readings, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredHour {
    /// Hour number (second / 3600).
    pub chunk: i64,
    /// The packed readings.
    pub data: Vec<u8>,
}

impl StoredHour {
    /// The hour number holding second `ts`.
    pub fn of(ts: i64) -> i64 {
        crate::chunk::chunk_of(ts)
    }

    /// The first and the last second the hour covers.
    pub fn span(&self) -> (i64, i64) {
        let first = self.chunk.saturating_mul(crate::chunk::CHUNK_SECONDS);
        (first, first.saturating_add(crate::chunk::CHUNK_SECONDS - 1))
    }

    /// Its readings within `from..=end`, as a window read decodes them; an
    /// error naming device `device_pk` and the hour if it does not decode.
    pub fn readings(&self, device_pk: i64, from: i64, end: i64) -> crate::StoreResult<ReadingBatch> {
        let mut batch = ReadingBatch::default();
        crate::chunk::decode_into(self.chunk, &self.data, from, end, &mut batch, usize::MAX)
            .ok_or_else(|| crate::decide::malformed(device_pk, self.chunk))?;
        Ok(batch)
    }
}

#[cfg(test)]
mod tests {
    fn as_serde(v: f64) -> String {
        serde_json::to_string(&v).expect("finite")
    }

    /// `v` stored and read back as the store does, then written.
    fn as_ours(v: f64) -> String {
        let mut packed = Vec::new();
        crate::codec::encode_column(&[v], &mut packed);
        let mut values = Vec::new();
        crate::codec::decode_column(&mut crate::codec::Reader::new(&packed), 1, &mut values).expect("decodes");
        let mut out = Vec::new();
        values[0].write_json(&mut out);
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn numbers_are_written_as_serde_writes_them() {
        for v in [
            0.0,
            -0.0,
            92.5,
            -78.0,
            120.4,
            0.05,
            -0.07,
            12.34,
            1e-7,
            0.1 + 0.2,
            1e15,
            9.99e14,
            123456789.12,
            1e300,
            12.347,
            0.00001,
            0.000012,
            0.000001,
            -0.0000123,
            1.000001,
            0.123456789012,
        ] {
            assert_eq!(as_ours(v), as_serde(v), "{v}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_number_is_written_as_serde_writes_it(
            v in proptest::num::f64::NORMAL | proptest::num::f64::ZERO | proptest::num::f64::SUBNORMAL,
            d in -10_000_000_000i64..10_000_000_000,
            k in 0u32..13,
        ) {
            let decimal = d as f64 / 10f64.powi(k as i32);
            proptest::prop_assert_eq!(as_ours(v), as_serde(v));
            proptest::prop_assert_eq!(as_ours(decimal), as_serde(decimal));
        }
    }
}
