//! One device's alarm rules and states as the writer moves them: by each
//! reading, by the clock, by an acknowledgement. A device is kept whole
//! between transactions ([`super::alarm_cache`]), so that a transaction
//! that hears it builds nothing: its id, its rules, each rule's sensor idx
//! and its buffers are already there, and only what one transaction moved
//! ([`DeviceAlarms::reset`]) is cleared when it is kept again.

use super::checkpoint::{Progress, Rules};
use crate::StoreError;
use crate::StoreResult;
use crate::alarm::{AlarmsAfter, SilenceDue};
use crate::decide::{DeviceSensors, SensorTable};
use crate::sql::alarms::DeviceStates;
use sensorhub_core::alarm::{AlarmState, NotActive, RuleKind, Transition, TransitionKind};
use std::sync::Arc;

/// How much older than the server's clock a reading may be and still move
/// a level or rate rule: an hour. Older readings are history (an import,
/// a logger's backlog after a long outage): stored, never raised.
pub const BACKFILL: i64 = 3600;

/// A device's alarm rules and their states.
pub(crate) struct DeviceAlarms {
    pk: i64,
    device_id: String,
    rules: Rules,
    /// Each rule's state (by index into `rules`).
    states: Vec<AlarmState>,
    /// Where the states stand against the stored row.
    pub(super) progress: Progress,
    /// Each rule's sensor's idx (`None`: the device, or a sensor it does
    /// not have), with the sensor table they were looked up in: valid
    /// while the device's table is that one.
    sensors: Option<(SensorTable, Vec<Option<u8>>)>,
    /// Which states this transaction moved.
    changed: Vec<bool>,
    /// Whether a reading came late or as a backfill in this transaction,
    /// so that the row must be written (a replay in time order would not
    /// give these states).
    must_write: bool,
    /// The transitions of this transaction, by rule (index into `rules`).
    transitions: Vec<(usize, Transition)>,
}

/// The transitions one device's alarms moved through in a transaction,
/// taken out to be recorded ([`super::alarms::record`]).
pub(crate) struct Moved {
    pub pk: i64,
    pub device_id: String,
    pub rules: Rules,
    pub transitions: Vec<(usize, Transition)>,
    /// The device's alarms once they moved (`None`: not known here).
    pub after: Option<Arc<AlarmsAfter>>,
}

impl DeviceAlarms {
    /// Device `pk`'s `rules` with their `states` (in rule order) and progress.
    pub(crate) fn with_states(
        pk: i64,
        device_id: &str,
        rules: Rules,
        states: Vec<AlarmState>,
        progress: Progress,
    ) -> Self {
        let changed = vec![false; rules.len()];
        Self {
            pk,
            device_id: device_id.to_owned(),
            rules,
            states,
            progress,
            sensors: None,
            changed,
            must_write: false,
            transitions: Vec::new(),
        }
    }

    /// The device's key.
    pub(crate) fn pk(&self) -> i64 {
        self.pk
    }

    /// The rules and their states, in rule order.
    pub(crate) fn states(&self) -> impl Iterator<Item = (&sensorhub_core::alarm::AlarmRule, &AlarmState)> {
        self.rules.iter().zip(&self.states)
    }

    /// Forgets what the last transaction moved (its transitions were
    /// taken out): the device as it is kept between transactions.
    pub(crate) fn reset(&mut self) {
        self.changed.fill(false);
        self.must_write = false;
        self.transitions.clear();
    }

    /// Moves every rule by a reading of `device` at `timestamp` whose
    /// (sensor idx, value) pairs are `pairs`, stored at `now` (server
    /// seconds). A backfill (a reading more than [`BACKFILL`] older than
    /// `now`) moves no level or rate rule; for a silence rule it is data
    /// all the same.
    pub(crate) fn on_reading(&mut self, timestamp: i64, pairs: &[(u8, f64)], device: &DeviceSensors, now: i64) {
        let backfill = timestamp < now.saturating_sub(BACKFILL);
        let in_order = self.progress.saw(timestamp);
        let table = device.table();
        if !matches!(&self.sensors, Some((kept, _)) if std::sync::Arc::ptr_eq(kept, table)) {
            let idx = self.rules.iter().map(|r| r.sensor().and_then(|s| device.idx(s))).collect();
            self.sensors = Some((table.clone(), idx));
        }
        let sensors = self.sensors.as_ref().map_or(&[][..], |(_, idx)| idx.as_slice());
        let mut heard = false;
        for (i, ((rule, state), idx)) in self.rules.iter().zip(&mut self.states).zip(sensors).enumerate() {
            let value = idx.and_then(|k| pairs.iter().find(|(j, _)| *j == k)).map(|p| p.1);
            let hears = rule.hears(value.is_some());
            heard |= hears;
            if backfill && !matches!(rule.kind, RuleKind::Silence(_)) {
                continue;
            }
            self.changed[i] |= hears;
            if let Some(t) = rule.on_reading(state, timestamp, value, now) {
                self.transitions.push((i, t));
            }
        }
        if heard {
            self.progress.unwritten += 1;
            self.must_write |= backfill || !in_order;
        }
    }

    /// Looks at the clock for the silence rules named in `rules` (all when
    /// `None`): those silent for their time are raised.
    pub(crate) fn on_clock(&mut self, now: i64, started: i64, rules: Option<&[String]>) {
        for (i, (rule, state)) in self.rules.iter().zip(&mut self.states).enumerate() {
            if rules.is_some_and(|names| !names.contains(&rule.name)) {
                continue;
            }
            if let Some(t) = rule.on_clock(state, now, started) {
                self.transitions.push((i, t));
                self.changed[i] = true;
            }
        }
    }

    /// Acknowledges the active episode of rule `name` at `now`; when it
    /// is acknowledged already, nothing moves and the earlier
    /// acknowledgement's second is returned.
    pub(crate) fn acknowledge(&mut self, name: &str, now: i64) -> StoreResult<Option<i64>> {
        let i =
            self.rules.iter().position(|rule| rule.name == name).ok_or_else(|| {
                StoreError::NotFound(format!("device {:?} has no alarm rule {name:?}", self.device_id))
            })?;
        let moved = self.states[i].acknowledge(now).map_err(|NotActive| {
            StoreError::Conflict(format!("alarm {name:?} of device {:?} is not active", self.device_id))
        })?;
        let Some(t) = moved else { return Ok(self.states[i].acknowledged_at) };
        self.transitions.push((i, t));
        self.changed[i] = true;
        Ok(None)
    }

    /// When each silence rule would next raise, counted from `started`.
    pub(crate) fn silence_due(&self, started: i64) -> impl Iterator<Item = SilenceDue> + '_ {
        self.states().filter_map(move |(rule, state)| {
            let at = rule.due_at(state, started)?;
            Some(SilenceDue { at, device_pk: self.pk, device_id: self.device_id.clone(), rule: rule.name.clone() })
        })
    }

    /// Whether this transaction moved any state.
    pub(crate) fn moved(&self) -> bool {
        self.changed.iter().any(|c| *c)
    }

    /// Every rule's state of the device, when they moved and must be
    /// written now (the device's states are one row, a checkpoint): when
    /// a rule was raised or cleared (the row counts the active rules, for
    /// the list of active alarms), acknowledged or moved by the clock
    /// (neither is in the readings a load replays), after a late reading
    /// or a backfill, or when the row is due ([`Progress::due`]). A level
    /// changed by a reading needs none: a replay of the readings moves it
    /// again (recording nothing), as it was moved live.
    pub(crate) fn checkpoint(&self) -> Option<DeviceStates<'_>> {
        let active_moved =
            self.transitions.iter().any(|(_, t)| matches!(t.kind, TransitionKind::Raised | TransitionKind::Cleared));
        let not_replayed = self.transitions.iter().any(|(i, t)| {
            t.kind == TransitionKind::Acknowledged || matches!(self.rules[*i].kind, RuleKind::Silence(_))
        });
        let due = active_moved || not_replayed || self.progress.due();
        // A late reading or a backfill writes the row even when it moved
        // no state (a backfill moves no level rule): a replay in time order
        // would judge it as live.
        (self.must_write || (self.moved() && due)).then(|| DeviceStates {
            pk: self.pk,
            states: self.states().map(|(rule, state)| (rule.name.as_str(), state)).collect(),
            through: self.progress.seen,
            active_kept: !active_moved,
        })
    }

    /// This transaction's transitions, taken out to be recorded (`None`:
    /// it moved through none).
    pub(crate) fn take_moved(&mut self) -> Option<Moved> {
        if self.transitions.is_empty() {
            return None;
        }
        let after =
            AlarmsAfter { rules: self.rules.clone(), states: self.states.iter().map(AlarmState::shown).collect() };
        Some(Moved {
            pk: self.pk,
            device_id: self.device_id.clone(),
            rules: self.rules.clone(),
            transitions: std::mem::take(&mut self.transitions),
            after: Some(Arc::new(after)),
        })
    }
}
