//! Alarms as the store keeps them: a device's rule with its state
//! ([`Alarm`]), each recorded transition ([`AlarmEvent`]), and when a
//! silence rule would next raise ([`SilenceDue`]). The rules and their
//! evaluation are `sensorhub_core::alarm`'s; the store writes the
//! transitions of each reading in the reading's own transaction.

use sensorhub_core::alarm::{AlarmRule, AlarmState, RuleKind, TransitionKind};

/// A rule of a device, with its state.
#[derive(Debug, Clone, PartialEq)]
pub struct Alarm {
    /// The device's id.
    pub device_id: String,
    /// The rule.
    pub rule: AlarmRule,
    /// Its state on this device.
    pub state: AlarmState,
}

impl Alarm {
    /// The name of the episode's level (level rules, while active).
    pub fn level_name(&self) -> Option<&str> {
        episode_level(&self.rule, &self.state)
    }

    /// How severe an active alarm is, for ordering: its level's place in
    /// its bands (the highest first), levelled rules before the others.
    fn severity(&self) -> (usize, usize) {
        match (&self.rule.kind, self.state.level) {
            (RuleKind::Level(rule), Some(level)) => (1, (level + 1) * 1000 / rule.levels.len().max(1)),
            _ => (0, 0),
        }
    }
}

/// Orders active alarms most severe first: the deepest into its bands,
/// then the longest raised, then by device and rule.
pub fn most_severe_first(alarms: &mut [Alarm]) {
    alarms.sort_by(|a, b| {
        b.severity()
            .cmp(&a.severity())
            .then(a.state.raised_at.cmp(&b.state.raised_at))
            .then_with(|| a.device_id.cmp(&b.device_id))
            .then_with(|| a.rule.name.cmp(&b.rule.name))
    });
}

/// One transition, as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct AlarmEvent {
    /// Its number: increasing in the order transitions were recorded.
    pub id: i64,
    /// The device's number.
    pub device_pk: i64,
    /// The device's id.
    pub device_id: String,
    /// The rule's name.
    pub rule: String,
    /// What happened.
    pub transition: TransitionKind,
    /// The level after it (level rules; `None` once cleared).
    pub level: Option<String>,
    /// The value that caused it, if one did.
    pub value: Option<f64>,
    /// The second of the reading that caused it, or the last one seen.
    pub timestamp: Option<i64>,
    /// When it was recorded, by the server's clock (seconds).
    pub at: i64,
    /// The device's alarms after the transaction that
    /// recorded it, when this process recorded it from readings, the clock
    /// or an acknowledgement; `None` when read back from the store (or
    /// recorded by a change of rules). What is pushed with a transition
    /// comes from it, without a read.
    pub after: Option<std::sync::Arc<AlarmsAfter>>,
    /// How many outgoing deliveries of it (one a subscription to alarms
    /// that covers the device) the transaction that recorded it queued in
    /// the outbox; 0 when read back from the store.
    pub queued: usize,
}

/// The name of the level of `rule`'s episode in `state` (level rules, while active).
pub fn episode_level<'a>(rule: &'a AlarmRule, state: &AlarmState) -> Option<&'a str> {
    state.level.filter(|_| state.active).and_then(|l| rule.level_name(l))
}

/// A device's alarms as a transaction left them: its rules and their
/// states ([`AlarmState::shown`]), in rule order.
#[derive(Debug, Clone, PartialEq)]
pub struct AlarmsAfter {
    /// The device's rules (the writer's own, shared).
    pub rules: std::sync::Arc<[AlarmRule]>,
    /// Each rule's state, without its memo.
    pub states: Vec<AlarmState>,
}

impl AlarmEvent {
    /// The outgoing webhook's event name (`alarm.raised`, …).
    pub fn event_name(&self) -> String {
        format!("alarm.{}", self.transition.as_str())
    }
}

/// When a device's silence rule would next raise, by the server's clock.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SilenceDue {
    /// When (seconds); [`SilenceDue::ACTIVE`] while the rule's alarm is
    /// active (it is due again once data clears it).
    pub at: i64,
    /// The device's number.
    pub device_pk: i64,
    /// The device's id.
    pub device_id: String,
    /// The rule's name.
    pub rule: String,
}

impl SilenceDue {
    /// The due time of a rule whose alarm is active: never, until cleared.
    pub const ACTIVE: i64 = i64::MAX;
}

#[cfg(test)]
mod tests {
    use super::{Alarm, most_severe_first};
    use sensorhub_core::alarm::{AlarmState, RuleSpec};

    fn alarm(device: &str, spec: &str, level: Option<usize>, raised_at: i64) -> Alarm {
        let spec: RuleSpec = serde_json::from_str(spec).expect("a spec");
        let state = AlarmState { active: true, level, raised_at: Some(raised_at), ..AlarmState::default() };
        Alarm { device_id: device.into(), rule: spec.check("rule").expect("a rule"), state }
    }

    #[test]
    fn the_deepest_into_its_bands_comes_first_then_the_longest_raised() {
        let four = r#"{"name": "siaga", "sensor": "wl", "levels": [{"name": "4", "at": 60}, {"name": "3", "at": 90}, {"name": "2", "at": 160}, {"name": "1", "at": 210}]}"#;
        let two = r#"{"name": "battery", "sensor": "b", "direction": "below", "levels": [{"name": "low", "at": 20}, {"name": "empty", "at": 5}]}"#;
        let silent = r#"{"name": "silent", "no_data_for": "30m"}"#;
        let mut alarms = vec![
            alarm("S1", silent, None, 10),
            alarm("S2", four, Some(1), 50),
            alarm("S3", two, Some(1), 90),
            alarm("S4", four, Some(3), 70),
            alarm("S5", four, Some(1), 20),
            alarm("S6", two, Some(0), 5),
        ];
        most_severe_first(&mut alarms);
        let order: Vec<&str> = alarms.iter().map(|a| a.device_id.as_str()).collect();
        // Siaga 1 (4 of 4) and "empty" (2 of 2) are as deep as bands go, the earlier raised
        // first; then "low" (1 of 2) and Siaga 3 (2 of 4), halfway, the earliest raised
        // first; a rule without levels last.
        assert_eq!(order, ["S4", "S3", "S6", "S5", "S2", "S1"]);
    }
}

/// One change to a device's alarm rules, made inside the write
/// transaction (so that two made at once both hold): `alarm add`,
/// `alarm remove`.
#[derive(Debug, Clone)]
pub enum RuleEdit {
    /// Adds the rule, or replaces the device's rule of its name.
    Put(AlarmRule),
    /// Removes the rule of this name.
    Remove(String),
}

/// What a [`RuleEdit`] came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleEdited {
    /// A rule of a new name.
    Added,
    /// The rule of its name, changed.
    Replaced,
    /// The rule of its name was this one already.
    Unchanged,
    /// Removed.
    Removed,
    /// The device has no rule of that name.
    NoSuchRule,
}
