//! The types that describe answers in the OpenAPI document: readings are
//! streamed by a custom encoder and errors rendered by [`super::error`], so
//! their schemas are declared here. Handlers name these in their
//! annotations; nothing here depends on a handler.

use super::received::Received;
use sensorhub_core::model::Device;
use serde::Serialize;
use utoipa::ToSchema;

/// A measured value (spec 2.4).
#[derive(Serialize, ToSchema)]
pub struct SensorValue {
    /// Sensor identifier.
    id: String,
    /// The value.
    value: f64,
    /// Unit; `.` for a dimensionless value.
    unit: String,
}

/// The values measured at one instant (spec 2.3).
#[derive(Serialize, ToSchema)]
pub struct Reading {
    /// RFC 3339, in the requested offset (`Z` for 0).
    #[schema(format = DateTime, example = "2026-05-05T07:00:00+07:00")]
    timestamp: String,
    /// Values measured at that instant, in sensor order.
    sensors: Vec<SensorValue>,
}

/// A sensor's newest reading, with its own time.
#[derive(Serialize, ToSchema)]
pub struct LatestValue {
    /// Sensor identifier.
    id: String,
    /// The value.
    value: f64,
    /// Unit; `.` for a dimensionless value.
    unit: String,
    /// RFC 3339 time of this sensor's newest reading, in the requested zone (`Z` for 0).
    #[schema(format = DateTime, example = "2026-05-05T07:00:00+07:00")]
    timestamp: String,
}

/// `{"message": "Success", "data": [LatestValue]}`: one element per sensor
/// that has ever reported, in sensor order; empty for a device without readings.
#[derive(Serialize, ToSchema)]
pub struct LatestList {
    #[schema(example = "Success")]
    message: String,
    data: Vec<LatestValue>,
}

/// `{"message": "Success", "data": [Device]}`
#[derive(Serialize, ToSchema)]
pub struct DeviceList {
    #[schema(example = "Success")]
    message: String,
    data: Vec<Device>,
}

/// `{"message": "Success", "data": [Reading]}`, ascending by time.
#[derive(Serialize, ToSchema)]
pub struct ReadingList {
    #[schema(example = "Success")]
    message: String,
    data: Vec<Reading>,
}

/// `{"message": "Success", "data": [Received]}`, newest first.
#[derive(Serialize, ToSchema)]
pub struct ReceivedList {
    #[schema(example = "Success")]
    message: String,
    data: Vec<Received>,
}

/// An error of the read endpoints: the spec's exact text and `data: null`.
#[derive(Serialize, ToSchema)]
pub struct ErrorBody {
    /// `Bad Request`, `Unauthorized`, `Forbidden`, `Device not found`,
    /// `Method Not Allowed`, `To Many Request` (sic), `Not Found`.
    #[schema(example = "Device not found")]
    message: String,
    /// Always null.
    #[schema(value_type = Option<Object>)]
    data: Option<()>,
    /// What is wrong (400 only).
    detail: Option<String>,
}

/// The webhook envelope (spec 2.6).
#[derive(Serialize, ToSchema)]
pub struct WebhookEnvelope {
    /// Event kind, e.g. `sensor-data`: not empty, nor only spaces.
    #[schema(min_length = 1, pattern = "\\S", example = "sensor-data")]
    event: String,
    /// Device identifier: not empty, nor only spaces.
    #[schema(min_length = 1, pattern = "\\S", example = "AWLR-001")]
    device_id: String,
    /// RFC 3339 date-time with `Z` or an offset.
    #[schema(format = DateTime, example = "2026-05-05T07:00:00+07:00")]
    timestamp: String,
    /// A flat set of named values, or `{"sensors": [{"id", "value"}]}`.
    #[schema(value_type = Object)]
    data: serde_json::Value,
    /// Free-form.
    #[schema(value_type = Option<Object>)]
    metadata: Option<serde_json::Value>,
}
