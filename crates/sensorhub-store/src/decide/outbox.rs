//! The outbox's shared decisions: which readings of a write become
//! deliveries, and the envelope each carries. A transaction that stores
//! readings gathers one row per reading and matching subscription; the
//! backend writes them in the same transaction, so a reading acknowledged
//! is a delivery owed.

use super::DeviceSensors;
use crate::delivery::Outbox;
use sensorhub_core::model::ReadingInput;
use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::Arc;

/// One delivery owed, as the transaction writes it.
pub(crate) struct OutboxRow {
    /// Shared with the transaction's list of the device's subscriptions.
    pub subscription_id: Arc<str>,
    /// The reading's device (a claim checks the account still sees it).
    pub device_pk: i64,
    /// The id every attempt of the delivery carries when it must be this
    /// one (an alarm transition's); `None` for a random one, made where the
    /// row is spread from the log ([`id_bytes`]).
    pub message_id: Option<String>,
    /// One copy for all the subscriptions a reading owes.
    pub body: Arc<str>,
}

/// The deliveries gathered by one transaction.
#[derive(Default)]
pub(crate) struct Deliveries {
    pub outbox: Outbox,
    pub rows: Vec<OutboxRow>,
}

impl Deliveries {
    /// Nothing gathered yet.
    pub(crate) fn new(outbox: Outbox) -> Self {
        Self { outbox, rows: Vec::new() }
    }

    /// Whether subscriptions need looking up for the devices written.
    pub(crate) fn wanted(&self) -> bool {
        self.outbox == Outbox::Deliver
    }

    /// Gathers reading `r` of `device` (already checked) for each
    /// subscription that covers the device.
    pub(crate) fn add(&mut self, device: &DeviceSensors, r: &ReadingInput) {
        if device.subscriptions.is_empty() {
            return;
        }
        let body: Arc<str> = envelope(device, r).into();
        for sub in &device.subscriptions {
            let (subscription_id, body) = (sub.clone(), body.clone());
            self.rows.push(OutboxRow { subscription_id, device_pk: device.pk, message_id: None, body });
        }
    }
}

/// The random bytes behind a delivery's message id.
pub(crate) const ID_BYTES: usize = 16;

/// Random bytes for `count` message ids, [`ID_BYTES`] each, in one call to
/// the generator: an id is random for each delivery, so no receiver learns
/// from its ids how many readings went to others, or that others exist.
pub(crate) fn id_bytes(count: usize) -> crate::StoreResult<Vec<u8>> {
    let mut bytes = vec![0; count * ID_BYTES];
    sensorhub_core::secret::fill_unguessable(&mut bytes)
        .map_err(|e| crate::StoreError::Backend(e.to_string().into()))?;
    Ok(bytes)
}

/// The message id of one delivery's random bytes: `msg_` and the bytes in
/// lowercase hex. PostgreSQL's log makes this text in SQL when it
/// spreads (its tests check it against this); SQLite's makes its ids here.
pub(crate) fn id_text(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(4 + 2 * bytes.len());
    out.push_str("msg_");
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// The sensor-data envelope of reading `r` of `device` (spec 2.6, the
/// webhook's own shape): the timestamp in RFC 3339 UTC, each value as the
/// data endpoint prints it (serde_json's shortest form of the double).
/// Written into one buffer: a group's writer makes one for each reading
/// it takes, on the group's serial path.
pub(crate) fn envelope(device: &DeviceSensors, r: &ReadingInput) -> String {
    let mut out = Vec::with_capacity(96 + 64 * r.values.len());
    out.extend_from_slice(br#"{"event":"sensor-data","device_id":"#);
    push_json(&mut out, &r.device_id);
    out.extend_from_slice(br#","timestamp":""#);
    // Writing into a Vec cannot fail.
    let _ = match jiff::Timestamp::from_second(r.timestamp) {
        Ok(t) => write!(out, "{t}"),
        Err(_) => write!(out, "{}", r.timestamp),
    };
    out.extend_from_slice(br#"","data":{"sensors":["#);
    for (i, v) in r.values.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(br#"{"id":"#);
        push_json(&mut out, &v.sensor_id);
        out.extend_from_slice(br#","value":"#);
        push_value(&mut out, v.value);
        out.extend_from_slice(br#","unit":"#);
        push_json(&mut out, device.unit(&v.sensor_id).unwrap_or(""));
        out.push(b'}');
    }
    out.extend_from_slice(b"]}}");
    // Made of UTF-8 strings and serde_json's output only.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Appends `s` as a JSON string, as serde_json writes it, without a
/// buffer of its own.
fn push_json(out: &mut Vec<u8>, s: &str) {
    // A string always serializes.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// Appends the finite double `v` in serde_json's shortest form.
fn push_value(out: &mut Vec<u8>, v: f64) {
    // Finite (checked on the way in), so this always serializes.
    let _ = serde_json::to_writer(&mut *out, &v);
}

#[cfg(test)]
mod tests {
    use super::*;
    use sensorhub_core::model::{Origin, SensorMeta, ValueInput};

    #[test]
    fn the_envelope_is_the_webhooks_shape_with_stored_units() {
        let sensors = ["wl", "batt"]
            .iter()
            .zip(["cm", "V"])
            .map(|(id, unit)| SensorMeta {
                sensor_id: (*id).into(),
                name: String::new(),
                kind: String::new(),
                unit: unit.into(),
            })
            .collect();
        let device = DeviceSensors::new(7, sensors);
        let value = |id: &str, value| ValueInput { sensor_id: id.into(), value, unit: None };
        let r = ReadingInput {
            device_id: "AWLR-\"1".into(),
            timestamp: 1_777_964_400,
            values: vec![value("wl", 3.0), value("batt", 12.25)],
            origin: Origin::Item("x".into()),
        };
        let body = envelope(&device, &r);
        assert_eq!(
            body,
            r#"{"event":"sensor-data","device_id":"AWLR-\"1","timestamp":"2026-05-05T07:00:00Z","data":{"sensors":[{"id":"wl","value":3.0,"unit":"cm"},{"id":"batt","value":12.25,"unit":"V"}]}}"#
        );
        assert!(serde_json::from_str::<serde_json::Value>(&body).is_ok());
    }

    #[test]
    fn awkward_ids_units_and_values_come_out_as_serde_json_writes_them() {
        let ids = ["a\"b\\c", "tab\there", "nl\n\u{1}", "ünï-😀", "</script>"];
        let sensors = ids
            .iter()
            .map(|id| SensorMeta {
                sensor_id: (*id).into(),
                name: String::new(),
                kind: String::new(),
                unit: format!("{id}°"),
            })
            .collect();
        let device = DeviceSensors::new(7, sensors);
        let values = [0.1, -0.0, 1e21, -1.5e-300, f64::MAX];
        let r = ReadingInput {
            device_id: "dev\"\u{7f}".into(),
            timestamp: -1,
            values: ids
                .iter()
                .zip(values)
                .map(|(id, value)| ValueInput { sensor_id: (*id).into(), value, unit: None })
                .collect(),
            origin: Origin::Item("x".into()),
        };
        let body = envelope(&device, &r);
        // serde_json's own text of each part, as the envelope was made before
        // it was written into one buffer.
        let json = |v: serde_json::Value| v.to_string();
        let mut want = format!(
            r#"{{"event":"sensor-data","device_id":{},"timestamp":"1969-12-31T23:59:59Z","data":{{"sensors":["#,
            json("dev\"\u{7f}".into())
        );
        for (i, (id, value)) in ids.iter().zip(values).enumerate() {
            let sep = if i > 0 { "," } else { "" };
            want += &format!(
                r#"{sep}{{"id":{},"value":{},"unit":{}}}"#,
                json((*id).into()),
                json(value.into()),
                json(format!("{id}°").into())
            );
        }
        want += "]}}";
        assert_eq!(body, want);
    }
}
