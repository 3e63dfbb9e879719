//! Alarms and their transitions as sensorhub shows them, wherever it
//! does: the API's answers (times in the caller's `tz`), a stream's
//! `event: alarm`, and the views whose bytes MQTT publishes (times in UTC;
//! written straight by `ingest::mqtt::alarm_payload`). The
//! outgoing webhook's body is the store's (`sensorhub_store::alarm`).

use sensorhub_core::alarm::{AlarmRule, AlarmState, RuleSpec};
use sensorhub_core::time::{Rfc3339Writer, Zone};
use sensorhub_store::alarm::{Alarm, AlarmEvent, episode_level};
use serde::Serialize;
use utoipa::ToSchema;

/// A rule of a device with its state.
#[derive(Serialize, ToSchema)]
pub struct AlarmView {
    /// The device.
    #[schema(example = "AWLR-001")]
    pub device_id: String,
    /// The rule's name, unique per device.
    #[schema(example = "siaga")]
    rule: String,
    /// `level`, `rate` or `silence`.
    #[schema(example = "level")]
    kind: &'static str,
    /// The rule as written (normalised): its sensor, levels, deadband, durations.
    #[schema(value_type = Object)]
    spec: RuleSpec,
    /// `ok` or `active`.
    #[schema(example = "active")]
    state: &'static str,
    /// The episode's level (level rules, while active).
    #[schema(example = "Siaga 3")]
    level: Option<String>,
    /// When the episode opened.
    #[schema(format = DateTime)]
    raised_at: Option<String>,
    /// Since when the episode is at its level.
    #[schema(format = DateTime)]
    level_since: Option<String>,
    /// When the episode was acknowledged (a rise to a higher level asks again).
    #[schema(format = DateTime)]
    acknowledged_at: Option<String>,
    /// The last value the rule evaluated.
    value: Option<f64>,
    /// The time of that value's reading.
    #[schema(format = DateTime)]
    timestamp: Option<String>,
    /// Whether the caller may acknowledge it (an account that owns the
    /// device or holds a write grant); API answers only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub may_acknowledge: Option<bool>,
}

/// One recorded transition.
#[derive(Serialize, ToSchema)]
pub struct AlarmEventView {
    /// The device.
    #[schema(example = "AWLR-001")]
    device_id: String,
    /// The rule.
    #[schema(example = "siaga")]
    rule: String,
    /// `raised`, `level_changed`, `acknowledged` or `cleared`.
    #[schema(example = "raised")]
    transition: &'static str,
    /// The level after it (level rules; null once cleared).
    #[schema(example = "Siaga 4")]
    level: Option<String>,
    /// The value that caused it.
    value: Option<f64>,
    /// The time of the reading that caused it (silence: the last one seen).
    #[schema(format = DateTime)]
    timestamp: Option<String>,
    /// When it was recorded, by the server's clock.
    #[schema(format = DateTime)]
    at: String,
}

/// `{"message": "Success", "data": [Alarm]}`
#[derive(Serialize, ToSchema)]
pub struct AlarmList {
    #[schema(example = "Success")]
    message: String,
    data: Vec<AlarmView>,
}

/// `{"message": "Success", "data": [AlarmEvent]}`, oldest first.
#[derive(Serialize, ToSchema)]
pub struct AlarmEventList {
    #[schema(example = "Success")]
    message: String,
    data: Vec<AlarmEventView>,
}

/// `{"message": "Success", "data": AlarmEvent}`: the acknowledgement recorded.
#[derive(Serialize, ToSchema)]
pub struct Acknowledged {
    #[schema(example = "Success")]
    message: String,
    data: AlarmEventView,
}

/// Renders seconds as RFC 3339 in one zone, and alarms and transitions
/// with their times so.
pub struct Clock(Rfc3339Writer);

impl Clock {
    /// Times in `zone`.
    pub fn new(zone: Zone) -> Self {
        Self(match zone {
            Zone::Fixed(offset) => Rfc3339Writer::new(offset),
            Zone::Named(tz) => Rfc3339Writer::in_zone(tz),
        })
    }

    /// `second` as RFC 3339.
    pub fn at(&mut self, second: i64) -> String {
        let mut out = Vec::with_capacity(25);
        self.0.write(&mut out, second);
        String::from_utf8(out).unwrap_or_default()
    }

    /// `second`, if any, as RFC 3339.
    pub fn maybe(&mut self, second: Option<i64>) -> Option<String> {
        second.map(|s| self.at(s))
    }

    /// Alarm `a` as the API shows it.
    pub fn alarm(&mut self, a: &Alarm) -> AlarmView {
        self.rule_state(&a.device_id, &a.rule, &a.state)
    }

    /// Rule `rule` of device `device_id` in state `s`, as the API shows it.
    pub fn rule_state(&mut self, device_id: &str, rule: &AlarmRule, s: &AlarmState) -> AlarmView {
        AlarmView {
            device_id: device_id.to_owned(),
            rule: rule.name.clone(),
            kind: rule.kind.name(),
            spec: rule.spec(),
            state: if s.active { "active" } else { "ok" },
            level: episode_level(rule, s).map(str::to_owned),
            raised_at: self.maybe(s.raised_at.filter(|_| s.active)),
            level_since: self.maybe(s.level_since.filter(|_| s.active)),
            acknowledged_at: self.maybe(s.acknowledged_at.filter(|_| s.active)),
            value: s.value,
            timestamp: self.maybe(s.timestamp),
            may_acknowledge: None,
        }
    }

    /// Transition `e` as the API shows it.
    pub fn event(&mut self, e: &AlarmEvent) -> AlarmEventView {
        AlarmEventView {
            device_id: e.device_id.clone(),
            rule: e.rule.clone(),
            transition: e.transition.as_str(),
            level: e.level.clone(),
            value: e.value,
            timestamp: self.maybe(e.timestamp),
            at: self.at(e.at),
        }
    }
}

/// A transition carried by the live hub as a stream's `event: alarm`
/// shows it: the events list's element, times in `zone`.
pub fn transition_json(alarm: &crate::live::LiveAlarm, zone: &Zone) -> String {
    let mut clock = Clock::new(zone.clone());
    let view = AlarmEventView {
        device_id: alarm.device_id.clone(),
        rule: alarm.rule.clone(),
        transition: sensorhub_core::alarm::TransitionKind::parse(&alarm.transition).map_or("", |t| t.as_str()),
        level: alarm.level.clone(),
        value: alarm.value,
        timestamp: clock.maybe(alarm.timestamp),
        at: clock.at(alarm.at),
    };
    serde_json::to_string(&view).unwrap_or_default()
}
