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
        self.state.level.filter(|_| self.state.active).and_then(|l| self.rule.level_name(l))
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
    /// When (seconds).
    pub at: i64,
    /// The device's number.
    pub device_pk: i64,
    /// The device's id.
    pub device_id: String,
    /// The rule's name.
    pub rule: String,
}
