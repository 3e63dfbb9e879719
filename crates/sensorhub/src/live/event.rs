//! What the live hub carries to a device's streams: stored readings and
//! alarm transitions, each with its event id once published.

use serde::{Deserialize, Serialize};

/// One stored reading as the hub carries it: the device, the second, and
/// the values written, by sensor id, as given to the store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveReading {
    /// Device identifier.
    #[serde(rename = "d")]
    pub device_id: String,
    /// Second since the epoch.
    #[serde(rename = "t")]
    pub timestamp: i64,
    /// `(sensor id, value)` pairs.
    #[serde(rename = "v")]
    pub values: Vec<(String, f64)>,
}

impl LiveReading {
    /// The reading `input` stores.
    pub fn of(input: &sensorhub_core::model::ReadingInput) -> Self {
        Self {
            device_id: input.device_id.clone(),
            timestamp: input.timestamp,
            values: input.values.iter().map(|v| (v.sensor_id.to_string(), v.value)).collect(),
        }
    }
}

/// An alarm transition as the hub carries it (`event: alarm` on a stream).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveAlarm {
    /// Device identifier.
    #[serde(rename = "d")]
    pub device_id: String,
    /// The rule's name.
    pub rule: String,
    /// `raised`, `level_changed`, `acknowledged` or `cleared`.
    pub transition: String,
    /// The level after it.
    pub level: Option<String>,
    /// The value that caused it.
    pub value: Option<f64>,
    /// The second of the reading that caused it.
    #[serde(rename = "t")]
    pub timestamp: Option<i64>,
    /// When it was recorded (seconds).
    pub at: i64,
}

impl LiveAlarm {
    /// The transition `event` records.
    pub fn of(event: &sensorhub_store::alarm::AlarmEvent) -> Self {
        Self {
            device_id: event.device_id.clone(),
            rule: event.rule.clone(),
            transition: event.transition.as_str().to_owned(),
            level: event.level.clone(),
            value: event.value,
            timestamp: event.timestamp,
            at: event.at,
        }
    }
}

/// What the hub carries to a device's streams: a stored reading, or an
/// alarm transition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Live {
    /// A stored reading.
    Reading(LiveReading),
    /// An alarm transition.
    Alarm(LiveAlarm),
}

impl Live {
    /// The device it concerns.
    pub fn device_id(&self) -> &str {
        match self {
            Live::Reading(r) => &r.device_id,
            Live::Alarm(a) => &a.device_id,
        }
    }

    /// The reading, if it is one.
    pub fn reading(&self) -> Option<&LiveReading> {
        match self {
            Live::Reading(r) => Some(r),
            Live::Alarm(_) => None,
        }
    }
}
