//! The sensor-data webhook's envelope (spec 2.6) as JSON: checked field by
//! field, each error naming the field, into a device id, a time and the
//! values it carries (a flat object of named values or a `sensors` list).
//! MQTT messages carry the same `data` and share `given` and `kind`.

use sensorhub_core::ingest::{Given, ValueAt};
use sensorhub_core::time::parse_rfc3339;
use serde_json::{Map, Value};

/// A checked envelope.
pub(crate) struct Envelope {
    pub device_id: String,
    pub timestamp: jiff::Timestamp,
    /// The values, each with its field path for messages.
    pub values: Vec<ValueAt>,
    /// What was accepted but is worth saying (unknown fields, a fraction of a second).
    pub warnings: Vec<String>,
}

/// `v` as a received value: a number, or its JSON type.
pub(crate) fn given(v: &Value) -> Given {
    v.as_f64().map_or(Given::Other(kind(v)), Given::Number)
}

/// The JSON type of `v`, for messages (`a string`).
pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn required_string(obj: &Map<String, Value>, field: &str) -> Result<String, String> {
    match obj.get(field) {
        None => Err(format!("{field} is required")),
        Some(Value::String(s)) if s.trim().is_empty() => Err(format!("{field} must not be empty")),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(format!("{field} must be a string, not {}", kind(other))),
    }
}

/// Checks the envelope of spec 2.6; the error names the field.
pub(crate) fn parse_envelope(body: &[u8]) -> Result<Envelope, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err("the body is empty: send the envelope as a JSON object".into());
    }
    let raw: Value = serde_json::from_slice(body).map_err(|e| format!("the body is not valid JSON: {e}"))?;
    let Value::Object(obj) = &raw else {
        return Err(format!("the body must be a JSON object, not {}", kind(&raw)));
    };
    required_string(obj, "event")?;
    let device_id = required_string(obj, "device_id")?;
    let ts_text = required_string(obj, "timestamp")?;
    let timestamp = parse_rfc3339("timestamp", &ts_text).map_err(|_| {
        format!("timestamp must be an RFC 3339 date-time like 2026-05-05T07:00:00+07:00, not {ts_text:?}")
    })?;
    let data = match obj.get("data") {
        None => return Err("data is required".into()),
        Some(Value::Object(d)) => d,
        Some(other) => return Err(format!("data must be a JSON object, not {}", kind(other))),
    };
    match obj.get("metadata") {
        None | Some(Value::Null | Value::Object(_)) => {}
        Some(other) => return Err(format!("metadata must be a JSON object, not {}", kind(other))),
    }
    let mut values = Vec::new();
    match data.get("sensors") {
        Some(Value::Array(_)) if data.len() > 1 => {
            return Err("data must hold either a sensors list or named values, not both".into());
        }
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                let at = format!("data.sensors[{i}]");
                let Value::Object(item) = item else {
                    return Err(format!("{at} must be an object with id and value, not {}", kind(item)));
                };
                let id = required_string(item, "id").map_err(|e| format!("{at}.{e}"))?;
                let value = item.get("value").ok_or(format!("{at}.value is required"))?;
                values.push(ValueAt { at: format!("{at}.value"), sensor_id: id, value: given(value) });
            }
        }
        Some(other) if data.len() == 1 => {
            return Err(format!("data.sensors must be an array of {{id, value}}, not {}", kind(other)));
        }
        // Each member as written: a name given twice is two values (which
        // ingest refuses, and simulate warns of), not the last one alone.
        _ => match flat_members(body) {
            Some(members) => values.extend(members.into_iter().map(|(k, v)| ValueAt {
                at: format!("data.{k}"),
                value: given(&v),
                sensor_id: k,
            })),
            None => values.extend(data.iter().map(|(k, v)| ValueAt {
                at: format!("data.{k}"),
                sensor_id: k.clone(),
                value: given(v),
            })),
        },
    }
    let known = ["event", "device_id", "timestamp", "data", "metadata"];
    let mut warnings: Vec<String> = obj
        .keys()
        .filter(|k| !known.contains(&k.as_str()))
        .map(|k| format!("unknown field {k:?} is ignored"))
        .collect();
    if timestamp.subsec_nanosecond() != 0 {
        warnings
            .push("timestamp has a fraction of a second: readings are stored to the second, so it is dropped".into());
    }
    Ok(Envelope { device_id, timestamp, values, warnings })
}

/// The body's `data` object's members in the order written, a name given
/// twice kept twice (`Value` keeps the last); `None` if the body does not
/// read so (a `data` given twice at the top: `Value`'s reading stands).
fn flat_members(body: &[u8]) -> Option<Vec<(String, Value)>> {
    #[derive(serde::Deserialize)]
    struct Body<'a> {
        #[serde(borrow)]
        data: &'a serde_json::value::RawValue,
    }
    struct Members(Vec<(String, Value)>);
    impl<'de> serde::Deserialize<'de> for Members {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Visit;
            impl<'de> serde::de::Visitor<'de> for Visit {
                type Value = Members;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("an object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                    let mut out = Vec::new();
                    while let Some(member) = map.next_entry::<String, Value>()? {
                        out.push(member);
                    }
                    Ok(Members(out))
                }
            }
            d.deserialize_map(Visit)
        }
    }
    let body: Body<'_> = serde_json::from_slice(body).ok()?;
    serde_json::from_str::<Members>(body.data.get()).ok().map(|m| m.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| serde_json::json!(f)),
            any::<i64>().prop_map(|i| serde_json::json!(i)),
            "[ -~]{0,24}".prop_map(Value::String),
            prop_oneof![Just("2026-05-05T07:00:00+07:00"), Just("0000-01-01T00:00:00Z"), Just("9999-12-31T23:59:59Z")]
                .prop_map(|s| Value::String(s.into())),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map(
                    prop_oneof![
                        Just("event".to_owned()),
                        Just("device_id".to_owned()),
                        Just("timestamp".to_owned()),
                        Just("data".to_owned()),
                        Just("sensors".to_owned()),
                        Just("id".to_owned()),
                        Just("value".to_owned()),
                        "[a-z]{1,6}"
                    ],
                    inner,
                    0..6
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// Any bytes: an envelope or a detail, never a panic.
        #[test]
        fn fuzz_envelope_bytes_never_panic(body in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            if let Err(detail) = parse_envelope(&body) { proptest::prop_assert!(!detail.is_empty()); }
        }

        /// Any JSON shaped like an envelope: accepted, or refused with a detail.
        #[test]
        fn fuzz_envelope_json_never_panics(v in json_value()) {
            let body = serde_json::to_vec(&v).unwrap_or_default();
            if let Err(detail) = parse_envelope(&body) { proptest::prop_assert!(!detail.is_empty()); }
        }
    }

    fn detail(body: &str) -> String {
        parse_envelope(body.as_bytes()).err().unwrap_or_default()
    }

    #[test]
    fn both_data_shapes_are_read() {
        let e = parse_envelope(
            br#"{"event":"sensor-data","device_id":"D","timestamp":"2026-05-05T07:00:00+07:00","data":{"a":1,"b":2.5}}"#,
        )
        .expect("valid");
        assert_eq!(e.values.len(), 2);
        let e = parse_envelope(
            br#"{"event":"x","device_id":"D","timestamp":"2026-05-05T00:00:00Z","data":{"sensors":[{"id":"a","value":1}]},"metadata":{"fw":"1.2"}}"#,
        )
        .expect("valid");
        assert_eq!(e.values[0].at, "data.sensors[0].value");
        assert_eq!(e.values[0].sensor_id, "a");
        // A name given twice is two values, in the order written.
        let e = parse_envelope(
            br#"{"event":"x","device_id":"D","timestamp":"2026-05-05T00:00:00Z","data":{"wl":1,"b":3,"wl":2}}"#,
        )
        .expect("valid");
        let got: Vec<_> = e.values.iter().map(|v| (v.sensor_id.as_str(), v.at.as_str())).collect();
        assert_eq!(got, [("wl", "data.wl"), ("b", "data.b"), ("wl", "data.wl")]);
    }

    #[test]
    fn errors_name_the_field() {
        let ok = r#""event":"x","device_id":"D","timestamp":"2026-05-05T00:00:00Z""#;
        assert!(detail("").contains("empty"));
        assert!(detail("{").contains("not valid JSON"));
        assert!(detail("[]").contains("not an array"));
        assert!(
            detail(r#"{"device_id":"D","timestamp":"2026-05-05T00:00:00Z","data":{}}"#).contains("event is required")
        );
        assert!(
            detail(r#"{"event":5,"device_id":"D","timestamp":"2026-05-05T00:00:00Z","data":{}}"#)
                .contains("event must be a string")
        );
        assert!(
            detail(r#"{"event":"x","device_id":"","timestamp":"2026-05-05T00:00:00Z","data":{}}"#)
                .contains("device_id must not be empty")
        );
        assert!(
            detail(r#"{"event":"x","device_id":"D","timestamp":"yesterday","data":{}}"#)
                .contains("timestamp must be an RFC 3339")
        );
        assert!(detail(&format!("{{{ok}}}")).contains("data is required"));
        assert!(detail(&format!("{{{ok},\"data\":[1]}}")).contains("data must be a JSON object, not an array"));
        assert!(detail(&format!("{{{ok},\"data\":{{}},\"metadata\":3}}")).contains("metadata must be a JSON object"));
        assert!(
            detail(&format!("{{{ok},\"data\":{{\"sensors\":[{{\"value\":1}}]}}}}"))
                .contains("data.sensors[0].id is required")
        );
        assert!(detail(&format!("{{{ok},\"data\":{{\"sensors\":5}}}}")).contains("data.sensors must be an array"));
        assert!(detail(&format!("{{{ok},\"data\":{{\"sensors\":[],\"x\":1}}}}")).contains("not both"));
    }
}
