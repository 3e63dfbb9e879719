//! The JSON of what the MQTT alarm publisher sends: a device's alarms and
//! a transition, written straight from the rules and states with each
//! object's keys sorted, the very bytes that going through
//! `serde_json::Value` gives (and gave, when that was how they were made:
//! the tests below hold the two together). Without the detour a reading's
//! transition no longer builds, sorts and frees a tree of maps per
//! publication, which was a tenth of a ruled MQTT server's CPU.

use crate::alarm_view::Clock;
use sensorhub_core::alarm::{AlarmRule, AlarmState, Direction, RuleKind, rule::format_duration};
use sensorhub_store::alarm::{AlarmEvent, episode_level};
use serde::Serialize;

/// A rule with its state, its fields in the order of their names.
#[derive(Serialize)]
struct Alarm<'a> {
    acknowledged_at: Option<String>,
    device_id: &'a str,
    kind: &'static str,
    level: Option<&'a str>,
    level_since: Option<String>,
    raised_at: Option<String>,
    rule: &'a str,
    spec: Spec<'a>,
    state: &'static str,
    timestamp: Option<String>,
    value: Option<f64>,
}

/// A rule as written (`AlarmRule::spec`), its fields in the order of their names.
#[derive(Serialize, Default)]
struct Spec<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    deadband: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    direction: Option<Direction>,
    #[serde(rename = "for", skip_serializing_if = "Option::is_none")]
    hold: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    levels: Option<Vec<Level<'a>>>,
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    no_data_for: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rise: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sensor: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    within: Option<String>,
}

/// One band of a level rule, its fields in the order of their names.
#[derive(Serialize)]
struct Level<'a> {
    at: f64,
    name: &'a str,
}

/// A transition, its fields in the order of their names.
#[derive(Serialize)]
struct Event<'a> {
    at: String,
    device_id: &'a str,
    level: Option<&'a str>,
    rule: &'a str,
    timestamp: Option<String>,
    transition: &'static str,
    value: Option<f64>,
}

fn spec(rule: &AlarmRule) -> Spec<'_> {
    let name = rule.name.as_str();
    match &rule.kind {
        RuleKind::Level(r) => Spec {
            deadband: Some(r.deadband),
            direction: Some(r.direction),
            hold: Some(format_duration(r.hold_seconds)),
            levels: Some(r.levels.iter().map(|l| Level { at: l.at, name: &l.name }).collect()),
            name,
            sensor: Some(&r.sensor),
            ..Spec::default()
        },
        RuleKind::Rate(r) => Spec {
            name,
            rise: Some(r.rise),
            sensor: Some(&r.sensor),
            within: Some(format_duration(r.within_seconds)),
            ..Spec::default()
        },
        RuleKind::Silence(r) => Spec {
            name,
            no_data_for: Some(format_duration(r.no_data_for_seconds)),
            sensor: r.sensor.as_deref(),
            ..Spec::default()
        },
    }
}

/// The alarms of a device as published: its rules with their states,
/// built once for both what is sent and what a resync compares.
pub(super) struct Alarms<'r>(Vec<Alarm<'r>>);

impl<'r> Alarms<'r> {
    /// Rules of device `device_id` with their states.
    pub(super) fn of<'a: 'r>(
        clock: &mut Clock,
        device_id: &'r str,
        rules: impl IntoIterator<Item = (&'a AlarmRule, &'a AlarmState)>,
    ) -> Self {
        Alarms(
            rules
                .into_iter()
                .map(|(rule, s)| Alarm {
                    acknowledged_at: clock.maybe(s.acknowledged_at.filter(|_| s.active)),
                    device_id,
                    kind: rule.kind.name(),
                    level: episode_level(rule, s),
                    level_since: clock.maybe(s.level_since.filter(|_| s.active)),
                    raised_at: clock.maybe(s.raised_at.filter(|_| s.active)),
                    rule: &rule.name,
                    spec: spec(rule),
                    state: if s.active { "active" } else { "ok" },
                    timestamp: clock.maybe(s.timestamp),
                    value: s.value,
                })
                .collect(),
        )
    }

    /// The list as published (`None` when it cannot be written; finite
    /// values always can).
    pub(super) fn json(&self) -> Option<String> {
        serde_json::to_string(&self.0).ok()
    }

    /// A digest of what the list says of the episodes: the rules, and
    /// each one's state, level and times, but not the last value heard
    /// and its time, which move with every reading. Two lists with the
    /// same digest tell a subscriber the same alarms.
    pub(super) fn episodes(&mut self) -> u64 {
        let heard: Vec<_> = self.0.iter_mut().map(|a| (a.value.take(), a.timestamp.take())).collect();
        let text = serde_json::to_vec(&self.0).unwrap_or_default();
        for (alarm, (value, timestamp)) in self.0.iter_mut().zip(heard) {
            (alarm.value, alarm.timestamp) = (value, timestamp);
        }
        let mut hasher = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(&text, &mut hasher);
        std::hash::Hasher::finish(&hasher)
    }
}

/// Transition `e` as published.
pub(super) fn event(clock: &mut Clock, e: &AlarmEvent) -> String {
    let event = Event {
        at: clock.at(e.at),
        device_id: &e.device_id,
        level: e.level.as_deref(),
        rule: &e.rule,
        timestamp: clock.maybe(e.timestamp),
        transition: e.transition.as_str(),
        value: e.value,
    };
    serde_json::to_string(&event).unwrap_or_else(|_| "null".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sensorhub_core::alarm::{RuleSpec, TransitionKind};
    use sensorhub_core::time::Zone;

    fn utc() -> Clock {
        Clock::new(Zone::Fixed(jiff::tz::Offset::UTC))
    }

    fn rule(json: &str) -> AlarmRule {
        let spec: RuleSpec = serde_json::from_str(json).expect("a rule spec");
        spec.check("rule").expect("a valid rule")
    }

    fn rules() -> Vec<AlarmRule> {
        vec![
            rule(
                r#"{"name": "siaga", "sensor": "AWLR1-wl", "direction": "above", "levels": [{"name": "Siaga 4", "at": 60},
                {"name": "Siaga 3", "at": 90.5}, {"name": "Siaga \"2\"", "at": 160}], "deadband": 5, "for": "90s"}"#,
            ),
            rule(
                r#"{"name": "tank", "sensor": "T-1", "direction": "below", "levels": [{"name": "low", "at": -0.25}]}"#,
            ),
            rule(r#"{"name": "rising", "sensor": "AWLR1-wl", "rise": 20, "within": "30m"}"#),
            rule(r#"{"name": "silent", "no_data_for": "1h"}"#),
            rule(r#"{"name": "quiet-sensor", "sensor": "AWLR1-wl", "no_data_for": "2d"}"#),
        ]
    }

    fn states() -> Vec<AlarmState> {
        let active = AlarmState {
            active: true,
            level: Some(1),
            raised_at: Some(1_700_000_000),
            level_since: Some(1_700_000_060),
            acknowledged_at: Some(1_700_000_100),
            value: Some(93.125),
            timestamp: Some(1_700_000_120),
            ..AlarmState::default()
        };
        let cleared = AlarmState { active: false, value: Some(1e-7), timestamp: Some(0), ..active.clone() };
        vec![active.clone(), cleared, AlarmState::default(), active, AlarmState { level: None, ..states_one() }]
    }

    fn states_one() -> AlarmState {
        AlarmState { active: true, raised_at: Some(-86_400), value: Some(-12.5), ..AlarmState::default() }
    }

    #[test]
    fn the_alarms_are_the_bytes_their_views_give_through_a_json_value() {
        let (rules, states) = (rules(), states());
        for zone_rules in [&rules[..], &rules[..1], &[]] {
            let pairs: Vec<_> = zone_rules.iter().zip(&states).collect();
            let mut clock = utc();
            let views: Vec<_> = pairs.iter().map(|(r, s)| clock.rule_state("AWLR-001", r, s)).collect();
            let through_value = serde_json::to_value(views).expect("a value").to_string();
            let mut published = Alarms::of(&mut utc(), "AWLR-001", pairs);
            let episodes = published.episodes();
            assert_eq!(published.json().as_deref(), Some(through_value.as_str()), "the digest leaves the list whole");
            let mut heard: Vec<_> = zone_rules.iter().zip(&states).map(|(r, s)| (r, s.clone())).collect();
            for (_, s) in &mut heard {
                (s.value, s.timestamp) = (Some(-1.0), None);
            }
            let digest = |pairs: &[(&AlarmRule, AlarmState)]| {
                Alarms::of(&mut utc(), "AWLR-001", pairs.iter().map(|(r, s)| (*r, s))).episodes()
            };
            assert_eq!(digest(&heard), episodes, "the last value and its time are not an episode's");
            if let Some((_, first)) = heard.first_mut() {
                first.active = !first.active;
                let flipped = digest(&heard);
                assert_ne!(flipped, episodes, "a state raised or cleared is a new episode");
            }
        }
    }

    #[test]
    fn a_transition_is_the_bytes_its_view_gives_through_a_json_value() {
        for (transition, level, value, timestamp) in [
            (TransitionKind::Raised, Some("Siaga 4"), Some(61.0), Some(1_700_000_000)),
            (TransitionKind::Cleared, None, Some(-0.001), Some(1_700_000_300)),
            (TransitionKind::Acknowledged, Some("Siaga \"2\""), None, None),
        ] {
            let e = AlarmEvent {
                id: 7,
                device_pk: 1,
                device_id: "AWLR-001".into(),
                rule: "siaga".into(),
                transition,
                level: level.map(str::to_owned),
                value,
                timestamp,
                at: 1_700_000_400,
                after: None,
                queued: 0,
            };
            let through_value = serde_json::to_value(utc().event(&e)).expect("a value").to_string();
            assert_eq!(event(&mut utc(), &e), through_value);
        }
    }
}
