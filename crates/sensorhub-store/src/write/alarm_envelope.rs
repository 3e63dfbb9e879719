//! The body and the id of an alarm transition's webhook delivery.

use crate::alarm::AlarmEvent;
use sensorhub_core::time::format_rfc3339;
use std::fmt::Write as _;

/// The id of the delivery of transition `event_id` to subscription
/// `subscription`: the same for every attempt, so that a receiver can
/// de-duplicate, and telling nothing of other subscriptions.
pub(crate) fn message_id(subscription: &str, event_id: i64) -> String {
    let digest =
        sensorhub_core::secret::digest_parts(&[b"sensorhub alarm", subscription.as_bytes(), &event_id.to_le_bytes()]);
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("{}{hex}", crate::delivery::ALARM_MESSAGE_PREFIX)
}

/// The body delivered for `event`: the shape of the sensor-data envelope
/// (`event`, `device_id`, `timestamp`, `data`), the transition in `data`.
pub(crate) fn envelope(event: &AlarmEvent) -> String {
    let at = format_rfc3339(event.at, jiff::tz::Offset::UTC);
    let ts = event.timestamp.map(|t| format_rfc3339(t, jiff::tz::Offset::UTC));
    let mut out = String::with_capacity(256);
    let _ = write!(
        out,
        r#"{{"event":{},"device_id":{},"timestamp":{},"data":{}}}"#,
        json(&event.event_name()),
        json(&event.device_id),
        json(ts.as_deref().unwrap_or(&at)),
        event_json(event, ts.as_deref(), &at),
    );
    out
}

/// The transition as a JSON object (times as given).
fn event_json(event: &AlarmEvent, timestamp: Option<&str>, at: &str) -> String {
    let value = event.value.and_then(|v| serde_json::to_string(&v).ok()).unwrap_or_else(|| "null".into());
    format!(
        r#"{{"device_id":{},"rule":{},"transition":"{}","level":{},"value":{value},"timestamp":{},"at":{}}}"#,
        json(&event.device_id),
        json(&event.rule),
        event.transition.as_str(),
        event.level.as_deref().map_or_else(|| "null".into(), json),
        timestamp.map_or_else(|| "null".into(), json),
        json(at),
    )
}

/// `s` as a JSON string.
fn json(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}
