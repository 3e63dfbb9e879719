//! An alarm's state per rule and device, and the transitions between its
//! states: `raised` (an episode opens), `level_changed` (up or down within
//! the episode), `acknowledged` and `cleared` (the episode ends; a new
//! crossing after it opens a new episode).

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// What moved an alarm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransitionKind {
    Raised,
    LevelChanged,
    Acknowledged,
    Cleared,
}

impl TransitionKind {
    /// The name in events and webhooks (`raised`, `level_changed`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            TransitionKind::Raised => "raised",
            TransitionKind::LevelChanged => "level_changed",
            TransitionKind::Acknowledged => "acknowledged",
            TransitionKind::Cleared => "cleared",
        }
    }

    /// The name read back.
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Raised, Self::LevelChanged, Self::Acknowledged, Self::Cleared].into_iter().find(|k| k.as_str() == text)
    }
}

/// One transition, as a rule's evaluation produces it (the store adds when
/// it was recorded).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Transition {
    pub kind: TransitionKind,
    /// The level after the transition (level rules; `None` once cleared).
    pub level: Option<usize>,
    /// The value that caused it (`None` for silence and acknowledgements without one).
    pub value: Option<f64>,
    /// The second of the reading that caused it, or the last one seen.
    pub timestamp: Option<i64>,
}

/// What an evaluation remembers between readings, by kind of rule.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Memo {
    #[default]
    None,
    /// Per level, the second since when the value has reached it without a
    /// break (`None`: it does not reach it now).
    Level { since: Vec<Option<i64>> },
    /// The readings of the window that may still be its minimum: seconds
    /// (rounded up to the rule's step) and values, values increasing (a
    /// sliding-window minimum).
    Rate { window: VecDeque<(i64, f64)> },
    /// When data was last stored, by the server's clock.
    Silence { last_data_at: Option<i64> },
}

/// An alarm's state: one per rule and device. Stored as JSON (every rule's
/// state of a device in one row, rewritten by each reading that moves it),
/// its fields as named here; those at rest (false, null, no memo) are left
/// out, which keeps the row small.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AlarmState {
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub active: bool,
    /// The episode's level (level rules), least severe 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<usize>,
    /// When the episode opened: the raising reading's second (silence: when
    /// the silence began).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raised_at: Option<i64>,
    /// Since when the episode is at its level.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level_since: Option<i64>,
    /// When the episode was acknowledged (a rise to a higher level asks again).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acknowledged_at: Option<i64>,
    /// The last value evaluated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// The second of the newest reading evaluated: an older one changes nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<i64>,
    #[serde(skip_serializing_if = "Memo::is_none")]
    pub memo: Memo,
}

impl Memo {
    fn is_none(&self) -> bool {
        matches!(self, Memo::None)
    }
}

/// Acknowledging an alarm that is not active.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the alarm is not active")]
pub struct NotActive;

impl AlarmState {
    /// This state as it is shown: without its memo (what only the
    /// evaluation of later readings needs), so copying it allocates nothing.
    pub fn shown(&self) -> AlarmState {
        AlarmState { memo: Memo::None, ..*self }
    }

    /// Acknowledges the active episode at `now`; `None` when it is
    /// acknowledged already (at its level): nothing moves, so that an
    /// acknowledgement sent twice is recorded once.
    pub fn acknowledge(&mut self, now: i64) -> Result<Option<Transition>, NotActive> {
        if !self.active {
            return Err(NotActive);
        }
        if self.acknowledged_at.is_some() {
            return Ok(None);
        }
        self.acknowledged_at = Some(now);
        Ok(Some(Transition {
            kind: TransitionKind::Acknowledged,
            level: self.level,
            value: self.value,
            timestamp: self.timestamp,
        }))
    }

    /// A silence rule's state when the rule is set at server second `now`:
    /// at rest, its silence counted from then.
    pub fn listening_since(now: i64) -> Self {
        Self { memo: Memo::Silence { last_data_at: Some(now) }, ..Self::default() }
    }

    /// Moves to `level` (`None`: ok) at second `at`; the transition, if it is one.
    pub(crate) fn move_to(&mut self, level: Option<usize>, active: bool, at: i64) -> Option<Transition> {
        let kind = match (self.active, active) {
            (false, true) => TransitionKind::Raised,
            (true, false) => TransitionKind::Cleared,
            (true, true) if self.level != level => TransitionKind::LevelChanged,
            _ => return None,
        };
        match kind {
            TransitionKind::Raised => {
                self.raised_at = Some(at);
                self.acknowledged_at = None;
            }
            TransitionKind::Cleared => {
                self.raised_at = None;
                self.acknowledged_at = None;
            }
            _ if level > self.level => self.acknowledged_at = None,
            _ => {}
        }
        self.active = active;
        self.level = level;
        self.level_since = active.then_some(at);
        Some(Transition { kind, level, value: self.value, timestamp: self.timestamp })
    }
}
