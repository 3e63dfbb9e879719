//! What a station publishes on `{prefix}/{device_id}/readings`: one reading
//! `{"timestamp": "…", "sensors": [{"id", "value"}, …]}` or a JSON array of
//! them, checked with the webhook ingest's rules and field-level messages.

use crate::ingest::envelope::{given, kind};
use sensorhub_core::ingest::{self, Problem, Reason, Rules, ValueAt};
use sensorhub_core::model::{ReadingInput, SensorMeta};
use serde_json::Value;

impl From<Problem> for Rejection {
    fn from(p: Problem) -> Self {
        Self { reason: p.reason.metric_label(), detail: p.message }
    }
}

/// The rejection of a message whose topic names no device it may write.
pub fn unknown_device(detail: String) -> Rejection {
    Rejection::from(Problem::new(Reason::UnknownDevice, detail))
}

/// Why a message was refused: the metric's `reason` label and the detail
/// the HTTP API would give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// `bad_json`, `bad_time`, `bad_reading`, `unknown_device`, `unknown_sensor`.
    pub reason: &'static str,
    /// What is wrong, naming the field.
    pub detail: String,
}

impl Rejection {
    fn new(reason: &'static str, detail: impl Into<String>) -> Self {
        Self { reason, detail: detail.into() }
    }
}

/// The readings of a message's `payload` for device `device_id` (whose
/// sensors are `sensors`): all of them, or the first rejection.
pub fn readings(
    device_id: &str,
    sensors: &[SensorMeta],
    payload: &[u8],
    now: jiff::Timestamp,
    max_future_skew: jiff::SignedDuration,
) -> Result<Vec<ReadingInput>, Rejection> {
    let value: Value = serde_json::from_slice(payload)
        .map_err(|e| Rejection::new("bad_json", format!("the payload is not JSON: {e}")))?;
    let items: Vec<(String, Value)> = match value {
        Value::Array(items) if items.is_empty() => {
            return Err(Rejection::new("bad_reading", "the array holds no reading"));
        }
        Value::Array(items) => items.into_iter().enumerate().map(|(i, v)| (format!("[{i}]"), v)).collect(),
        one @ Value::Object(_) => vec![(String::new(), one)],
        other => {
            return Err(Rejection::new(
                "bad_reading",
                format!("the payload must be a reading object or an array of them, not {}", kind(&other)),
            ));
        }
    };
    items.into_iter().map(|(at, item)| reading(device_id, sensors, &at, item, now, max_future_skew)).collect()
}

fn reading(
    device_id: &str,
    sensors: &[SensorMeta],
    at: &str,
    item: Value,
    now: jiff::Timestamp,
    max_future_skew: jiff::SignedDuration,
) -> Result<ReadingInput, Rejection> {
    let field = |name: &str| if at.is_empty() { name.to_owned() } else { format!("{at}.{name}") };
    let Value::Object(mut obj) = item else {
        return Err(Rejection::new("bad_reading", format!("{at} must be a reading object")));
    };
    let timestamp = match obj.remove("timestamp") {
        Some(Value::String(s)) => s,
        Some(other) => {
            return Err(Rejection::new(
                "bad_time",
                format!("{} must be a string, not {}", field("timestamp"), kind(&other)),
            ));
        }
        None => return Err(Rejection::new("bad_time", format!("{} is missing", field("timestamp")))),
    };
    let timestamp = sensorhub_core::time::parse_rfc3339("timestamp", &timestamp)
        .map_err(|e| Rejection::new("bad_time", format!("{}: {e}", field("timestamp"))))?;
    let list = match obj.remove("sensors") {
        Some(Value::Array(list)) => list,
        Some(other) => {
            return Err(Rejection::new(
                "bad_reading",
                format!("{} must be an array, not {}", field("sensors"), kind(&other)),
            ));
        }
        None => return Err(Rejection::new("bad_reading", format!("{} is missing", field("sensors")))),
    };
    let mut values = Vec::with_capacity(list.len());
    for (i, entry) in list.into_iter().enumerate() {
        let here = field(&format!("sensors[{i}]"));
        let Value::Object(mut entry) = entry else {
            return Err(Rejection::new("bad_reading", format!("{here} must be an object with id and value")));
        };
        let Some(Value::String(id)) = entry.remove("id") else {
            return Err(Rejection::new("bad_reading", format!("{here}.id must be a string")));
        };
        let value = entry.remove("value").unwrap_or(Value::Null);
        values.push(ValueAt { at: format!("{here}.value"), sensor_id: id, value: given(&value) });
    }
    if values.is_empty() {
        return Err(Rejection::new("bad_reading", format!("{} is empty", field("sensors"))));
    }
    let origin = if at.is_empty() { "mqtt".to_owned() } else { format!("mqtt{at}") };
    let rules = Rules { now, max_future_skew };
    ingest::reading(device_id, timestamp, values, sensors, rules, origin).map_err(|p| {
        // The time's refusals name the timestamp, not which reading of an array.
        let timed = matches!(p.reason, ingest::Reason::BadTime | ingest::Reason::InFuture);
        let mut rejection = Rejection::from(p);
        if timed && !at.is_empty() {
            rejection.detail = format!("{at}.{}", rejection.detail);
        }
        rejection
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sensors() -> Vec<SensorMeta> {
        ["AWLR1-wl", "AWLR1-batt"]
            .map(|id| SensorMeta { sensor_id: id.into(), name: id.into(), kind: "X".into(), unit: "cm".into() })
            .to_vec()
    }

    fn read(payload: &str) -> Result<Vec<ReadingInput>, Rejection> {
        let now = "2026-05-05T01:00:00Z".parse().unwrap_or_else(|e| panic!("{e}"));
        readings("AWLR-001", &sensors(), payload.as_bytes(), now, jiff::SignedDuration::from_secs(600))
    }

    #[test]
    fn one_reading_or_an_array() {
        let one = read(r#"{"timestamp":"2026-05-05T07:00:00+07:00","sensors":[{"id":"AWLR1-wl","value":120.4}]}"#);
        let one = one.unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!((one.len(), one[0].timestamp, one[0].values[0].value), (1, 1_777_939_200, 120.4));
        let two = read(
            r#"[{"timestamp":"2026-05-05T00:00:00Z","sensors":[{"id":"AWLR1-wl","value":1}]},
                {"timestamp":"2026-05-05T00:01:00Z","sensors":[{"id":"AWLR1-batt","value":2.5}]}]"#,
        );
        assert_eq!(two.map(|r| r.len()), Ok(2));
    }

    #[test]
    fn rejections_name_the_field_and_the_reason() {
        let cases = [
            ("{", "bad_json", "the payload is not JSON"),
            ("[]", "bad_reading", "the array holds no reading"),
            ("7", "bad_reading", "not a number"),
            (r#"{"sensors":[]}"#, "bad_time", "timestamp is missing"),
            (
                r#"{"timestamp":"yesterday","sensors":[]}"#,
                "bad_time",
                "timestamp: timestamp \"yesterday\" is not a date-time",
            ),
            (
                r#"{"timestamp":"2026-05-05T00:00:00Z","sensors":[{"id":"X-1","value":1}]}"#,
                "unknown_sensor",
                "sensors[0].value: sensor \"X-1\" is not registered",
            ),
            (
                r#"{"timestamp":"2026-05-05T00:00:00Z","sensors":[{"id":"AWLR1-wl","value":"1"}]}"#,
                "bad_reading",
                "sensors[0].value must be a number, not a string",
            ),
            (
                r#"[{"timestamp":"2026-05-05T00:00:00Z","sensors":[{"id":"AWLR1-wl","value":1}]},{"timestamp":"2026-05-06T00:00:00Z","sensors":[{"id":"AWLR1-wl","value":1}]}]"#,
                "bad_time",
                "[1].timestamp 2026-05-06T00:00:00Z is",
            ),
            (r#"{"timestamp":"2026-05-05T00:00:00Z","sensors":[]}"#, "bad_reading", "sensors is empty"),
            (r#"[{"timestamp":"2026-05-05T00:00:00Z","sensors":[]}]"#, "bad_reading", "[0].sensors is empty"),
        ];
        for (payload, reason, detail) in cases {
            let e = read(payload).expect_err(payload);
            assert_eq!(e.reason, reason, "{payload}: {}", e.detail);
            assert!(e.detail.contains(detail), "{payload}: {}", e.detail);
        }
    }

    proptest::proptest! {
        #[test]
        fn fuzz_payloads_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            let _ = readings("D", &sensors(), &bytes, jiff::Timestamp::UNIX_EPOCH, jiff::SignedDuration::ZERO);
        }
    }
}
