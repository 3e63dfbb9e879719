//! Domain types of the read API: devices, their sensors, and readings as
//! they come in from provisioning files, imports and (later) webhooks.

pub use crate::input::is_valid_identifier;
use jiff::tz::Offset;
use serde::{Deserialize, Serialize, Serializer};

/// The most sensors one device may have: a stored reading marks which
/// sensors it holds in a 64-bit set.
pub const MAX_SENSORS_PER_DEVICE: usize = 64;

/// A device (station) as listed by the API (spec 2.1).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Device {
    /// Device identifier.
    pub device_id: String,
    /// Display name.
    pub name: String,
    /// Device category, e.g. `AWLR`, `AWS`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Latitude.
    pub lat: f64,
    /// Longitude.
    pub long: f64,
    /// Reporting interval in seconds.
    pub interval_seconds: i64,
    /// Time of the latest reading, UTC with `Z`; null when it has none.
    #[serde(serialize_with = "utc_or_null")]
    #[schema(value_type = Option<String>, format = DateTime, example = "2026-05-05T00:30:00Z")]
    pub last_update_at: Option<i64>,
    /// Sensors, in the order they were declared.
    pub sensors: Vec<SensorMeta>,
}

fn utc_or_null<S: Serializer>(v: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(sec) => s.serialize_str(&crate::time::format_rfc3339(*sec, Offset::UTC)),
        None => s.serialize_none(),
    }
}

/// A sensor of a device (spec 2.2); also the provisioning form of one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SensorMeta {
    /// Sensor identifier, `<device_prefix>-<short_code>`.
    pub sensor_id: String,
    /// Display name.
    pub name: String,
    /// Sensor category, e.g. `BATTERY`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Unit; `.` for a dimensionless value.
    pub unit: String,
}

/// A device as provisioned (by `apply` or `device add`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceSpec {
    /// Device identifier.
    pub device_id: String,
    /// Display name.
    pub name: String,
    /// Device category.
    #[serde(rename = "type")]
    pub kind: String,
    /// Latitude in degrees, -90 to 90.
    pub lat: f64,
    /// Longitude in degrees, -180 to 180.
    pub long: f64,
    /// Reporting interval in seconds, at least 1.
    pub interval_seconds: i64,
    /// Sensors to create or update; sensors not listed are left alone.
    #[serde(default)]
    pub sensors: Vec<SensorMeta>,
    /// Username of the account that owns the device: it sees the device
    /// and may write its readings. Omitted leaves the owner as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// How long the device's readings are kept (`90d`, `forever`, or
    /// `inherit`: its owner's setting). Omitted leaves it as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<crate::retention::Retention>,
    /// The device's alarm rules, in order: these and no others (an empty
    /// list removes them all). Omitted leaves them as they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alarms: Option<Vec<crate::alarm::RuleSpec>>,
}

/// One reading to store: values measured by a device at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadingInput {
    /// Device identifier.
    pub device_id: String,
    /// Second since the epoch (UTC).
    pub timestamp: i64,
    /// Measured values.
    pub values: Vec<ValueInput>,
    /// Where it came from, for error messages.
    pub origin: Origin,
}

/// Where a reading came from, so that an error can point at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// An item of a document (`readings[3]`) or an NDJSON line (`line 12`).
    Item(String),
    /// CSV rows: value `i` of the reading is on line `n + i`.
    Lines(u64),
}

impl Origin {
    /// Where the device id is.
    pub fn device_at(&self) -> String {
        match self {
            Origin::Item(item) => format!("{item}.device_id"),
            Origin::Lines(n) => format!("line {n}"),
        }
    }

    /// Where value `i` is.
    pub fn value_at(&self, i: usize) -> String {
        match self {
            Origin::Item(item) => format!("{item}.sensors[{i}]"),
            Origin::Lines(n) => format!("line {}", n + i as u64),
        }
    }
}

/// One measured value of a [`ReadingInput`].
#[derive(Debug, Clone, PartialEq)]
pub struct ValueInput {
    /// Sensor identifier: shared, so that a reader of many readings (an
    /// import) hands out one allocation per sensor rather than one per
    /// value, and values freed on another thread cost no allocator lock.
    pub sensor_id: std::sync::Arc<str>,
    /// The value; always finite.
    pub value: f64,
    /// The unit as given, which must equal the sensor's; `None` means the sensor's.
    pub unit: Option<String>,
}
