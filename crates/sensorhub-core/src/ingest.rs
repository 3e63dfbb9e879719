//! The rules a received reading meets before it is stored, written once
//! for every way readings come in (the webhook, MQTT, line protocol): each
//! refusal is a [`Problem`], a [`Reason`] and a message naming the field.
//! Ingest refuses a reading on its first problem ([`reading`]); the
//! webhook's simulate mode reports every problem as a warning
//! ([`survey`]); MQTT counts refusals by [`Reason::metric_label`].

use crate::model::{Origin, ReadingInput, SensorMeta, ValueInput};
use crate::time::{check_not_future, check_reading_time};
use jiff::{SignedDuration, Timestamp};

/// Why a reading was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The reading holds no values.
    NoValues,
    /// Its timestamp is outside the stored range (1970 to 9999).
    BadTime,
    /// Its timestamp is further ahead of the server's clock than allowed.
    InFuture,
    /// A sensor is given twice.
    RepeatedSensor,
    /// A sensor is not registered for the device.
    UnknownSensor,
    /// A value is not a finite number.
    NotANumber,
    /// The device is not one the sender may write (or see).
    UnknownDevice,
}

impl Reason {
    /// A stable code for the reason (`in_future`).
    pub fn code(self) -> &'static str {
        match self {
            Reason::NoValues => "no_values",
            Reason::BadTime => "bad_time",
            Reason::InFuture => "in_future",
            Reason::RepeatedSensor => "repeated_sensor",
            Reason::UnknownSensor => "unknown_sensor",
            Reason::NotANumber => "not_a_number",
            Reason::UnknownDevice => "unknown_device",
        }
    }

    /// The `reason` label of `sensorhub_mqtt_rejected_total`: `bad_time`,
    /// `bad_reading`, `unknown_sensor` or `unknown_device` (coarser than
    /// [`Reason::code`], and kept as operators' dashboards know it).
    pub fn metric_label(self) -> &'static str {
        match self {
            Reason::BadTime | Reason::InFuture => "bad_time",
            Reason::NoValues | Reason::RepeatedSensor | Reason::NotANumber => "bad_reading",
            Reason::UnknownSensor => "unknown_sensor",
            Reason::UnknownDevice => "unknown_device",
        }
    }
}

/// One thing wrong with a received reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Why.
    pub reason: Reason,
    /// What is wrong, naming the field (`data.sensors[1].value must be a
    /// number, not a string`).
    pub message: String,
}

impl Problem {
    /// A problem of `reason` described by `message`.
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        Self { reason, message: message.into() }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// A value as received, before it is known to be a number.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Given {
    /// A finite number.
    Number(f64),
    /// Something else, by its kind for messages (`a string`).
    Other(&'static str),
}

/// A sensor's value as received, with where it was (for messages).
#[derive(Debug, Clone, PartialEq)]
pub struct ValueAt {
    /// Where the value is (`data.sensors[0].value`).
    pub at: String,
    /// The sensor id given.
    pub sensor_id: String,
    /// The value given.
    pub value: Given,
}

/// The server's side of the rules: its clock and how far ahead of it a
/// reading may be.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// The server's time.
    pub now: Timestamp,
    /// How far ahead of `now` a reading's time may be.
    pub max_future_skew: SignedDuration,
}

/// One reading of `device_id` at `timestamp` from received values (the
/// device's sensors are `sensors`): all of them or, on the first empty
/// list, time out of bounds, repeated sensor, unknown sensor or
/// non-number, that problem.
pub fn reading(
    device_id: &str,
    timestamp: Timestamp,
    received: Vec<ValueAt>,
    sensors: &[SensorMeta],
    rules: Rules,
    origin: String,
) -> Result<ReadingInput, Problem> {
    if received.is_empty() {
        return Err(Problem::new(Reason::NoValues, "data holds no values"));
    }
    check_reading_time(timestamp).map_err(|e| Problem::new(Reason::BadTime, e.to_string()))?;
    check_not_future(timestamp, rules.now, rules.max_future_skew)
        .map_err(|e| Problem::new(Reason::InFuture, e.to_string()))?;
    let mut values: Vec<ValueInput> = Vec::with_capacity(received.len());
    for ValueAt { at, sensor_id: id, value } in received {
        if values.iter().any(|v| *v.sensor_id == *id) {
            return Err(Problem::new(Reason::RepeatedSensor, format!("{at}: sensor {id:?} is given more than once")));
        }
        if !sensors.iter().any(|s| s.sensor_id == id) {
            return Err(unknown_sensor(&at, &id));
        }
        let value = match value {
            Given::Number(v) if v.is_finite() => v,
            Given::Number(_) => return Err(Problem::new(Reason::NotANumber, format!("{at} must be a finite number"))),
            Given::Other(kind) => {
                return Err(Problem::new(Reason::NotANumber, format!("{at} must be a number, not {kind}")));
            }
        };
        values.push(ValueInput { sensor_id: id.into(), value, unit: None });
    }
    Ok(ReadingInput {
        device_id: device_id.to_owned(),
        // Readings are kept to the second: a fraction is dropped (the
        // second it falls in, before 1970 too, which the check refuses).
        timestamp: timestamp.as_second() - i64::from(timestamp.subsec_nanosecond() < 0),
        values,
        origin: Origin::Item(origin),
    })
}

/// Every problem [`reading`] would stop at, phrased as warnings (simulate
/// mode): a time out of bounds, each repeated sensor, no values, a device
/// the sender does not see (`sensors` is `None`) or each unregistered
/// sensor, each non-number, a time too far ahead; in that order.
pub fn survey(
    device_id: &str,
    timestamp: Timestamp,
    values: &[ValueAt],
    sensors: Option<&[SensorMeta]>,
    rules: Rules,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    if let Err(e) = check_reading_time(timestamp) {
        problems.push(Problem::new(Reason::BadTime, format!("{e}: ingest mode would refuse it")));
    }
    let mut seen = std::collections::HashSet::new();
    for ValueAt { at, sensor_id: id, .. } in values {
        if !seen.insert(id.as_str()) {
            problems.push(Problem::new(Reason::RepeatedSensor, format!("{at}: sensor {id:?} is given more than once")));
        }
    }
    if values.is_empty() {
        problems.push(Problem::new(Reason::NoValues, "data holds no values"));
    }
    match sensors {
        None => problems.push(Problem::new(
            Reason::UnknownDevice,
            format!("device {device_id:?} is not one of this account's devices"),
        )),
        Some(sensors) => problems.extend(
            values
                .iter()
                .filter(|v| !sensors.iter().any(|s| s.sensor_id == v.sensor_id))
                .map(|v| unknown_sensor(&v.at, &v.sensor_id)),
        ),
    }
    for ValueAt { at, value, .. } in values {
        match value {
            Given::Number(v) if v.is_finite() => {}
            Given::Number(_) => problems.push(Problem::new(Reason::NotANumber, format!("{at} is not a finite number"))),
            Given::Other(kind) => {
                problems.push(Problem::new(Reason::NotANumber, format!("{at} is {kind}, not a number")))
            }
        }
    }
    if let Err(e) = check_not_future(timestamp, rules.now, rules.max_future_skew) {
        problems.push(Problem::new(Reason::InFuture, format!("{e}: ingest mode would refuse it")));
    }
    problems
}

fn unknown_sensor(at: &str, id: &str) -> Problem {
    Problem::new(Reason::UnknownSensor, format!("{at}: sensor {id:?} is not registered for this device"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sensors() -> Vec<SensorMeta> {
        ["wl", "batt"]
            .map(|id| SensorMeta { sensor_id: id.into(), name: id.into(), kind: "X".into(), unit: "cm".into() })
            .to_vec()
    }

    fn rules() -> Rules {
        Rules {
            now: Timestamp::from_second(1_777_939_200).expect("now"),
            max_future_skew: SignedDuration::from_secs(600),
        }
    }

    fn at(i: usize, id: &str, value: Given) -> ValueAt {
        ValueAt { at: format!("v[{i}]"), sensor_id: id.into(), value }
    }

    fn refusal(ts: i64, values: Vec<ValueAt>) -> Option<Reason> {
        let ts = Timestamp::from_second(ts).expect("ts");
        reading("D", ts, values, &sensors(), rules(), "test".into()).err().map(|p| p.reason)
    }

    #[test]
    fn each_rule_has_its_reason() {
        let now = 1_777_939_200;
        assert_eq!(refusal(now, vec![at(0, "wl", Given::Number(1.5))]), None);
        assert_eq!(refusal(now, vec![]), Some(Reason::NoValues));
        assert_eq!(refusal(-10, vec![at(0, "wl", Given::Number(1.0))]), Some(Reason::BadTime));
        // Half a second before 1970 is before 1970, not second 0.
        let wl = || vec![at(0, "wl", Given::Number(1.0))];
        let half =
            |nanos: i32| reading("D", Timestamp::new(0, nanos).expect("ts"), wl(), &sensors(), rules(), "t".into());
        assert_eq!(half(-500_000_000).err().map(|p| p.reason), Some(Reason::BadTime));
        assert_eq!(half(500_000_000).map(|r| r.timestamp).ok(), Some(0), "a fraction after is dropped");
        assert_eq!(refusal(now + 601, vec![at(0, "wl", Given::Number(1.0))]), Some(Reason::InFuture));
        let twice = vec![at(0, "wl", Given::Number(1.0)), at(1, "wl", Given::Number(2.0))];
        assert_eq!(refusal(now, twice), Some(Reason::RepeatedSensor));
        assert_eq!(refusal(now, vec![at(0, "nope", Given::Number(1.0))]), Some(Reason::UnknownSensor));
        assert_eq!(refusal(now, vec![at(0, "wl", Given::Other("a string"))]), Some(Reason::NotANumber));
        assert_eq!(refusal(now, vec![at(0, "wl", Given::Number(f64::NAN))]), Some(Reason::NotANumber));
        assert_eq!(Reason::InFuture.metric_label(), "bad_time");
        assert_eq!(Reason::NotANumber.metric_label(), "bad_reading");
    }

    #[test]
    fn the_message_names_the_field() {
        let ts = Timestamp::from_second(1_777_939_200).expect("ts");
        let err = reading("D", ts, vec![at(3, "wl", Given::Other("a string"))], &sensors(), rules(), "t".into());
        assert_eq!(err.err().map(|p| p.message), Some("v[3] must be a number, not a string".into()));
    }

    #[test]
    fn a_survey_reports_every_problem_in_order() {
        let ts = Timestamp::from_second(1_777_939_200 + 3_600).expect("ts");
        let values =
            vec![at(0, "wl", Given::Other("null")), at(1, "x", Given::Number(1.0)), at(2, "wl", Given::Number(2.0))];
        let found = survey("D", ts, &values, Some(&sensors()), rules());
        let reasons: Vec<Reason> = found.iter().map(|p| p.reason).collect();
        assert_eq!(reasons, [Reason::RepeatedSensor, Reason::UnknownSensor, Reason::NotANumber, Reason::InFuture]);
        assert_eq!(found[2].message, "v[0] is null, not a number");
        assert!(found[3].message.ends_with(": ingest mode would refuse it"), "{}", found[3]);
        let unseen = survey("D", ts, &values[..1], None, rules());
        assert_eq!(unseen[0].message, "device \"D\" is not one of this account's devices");
    }
}
