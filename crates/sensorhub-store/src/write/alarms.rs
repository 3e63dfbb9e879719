//! Alarms moved and recorded inside the transaction that moved them, once
//! for every backend: a device's rules and states are loaded once per
//! transaction ([`DeviceAlarms::load_many`]), each stored reading (or the
//! silence timer, or an acknowledgement) moves them, and at the end the
//! states that must be written ([`super::checkpoint`]), the transitions
//! and their outbox rows are written together ([`write_all`]). A reading
//! and the transitions it causes are committed, or lost, together: never
//! one without the other.

use super::alarm_cache::{AlarmCache, Marks};
use super::checkpoint::{self, Progress, Rules};
use super::tx::Tx;
use crate::alarm::{AlarmEvent, SilenceDue};
use crate::decide::outbox::OutboxRow;
use crate::sql::alarms::{self, DeviceStates, NewEvent};
use crate::sql::{DeviceHours, Sql};
use crate::{StoreError, StoreResult};
use sensorhub_core::alarm::{AlarmRule, AlarmState, NotActive, RuleKind, Transition, TransitionKind};

/// How much older than the server's clock a reading may be and still move
/// a level or rate rule: an hour. Older readings are history (an import,
/// a logger's backlog after a long outage): stored, never raised.
pub const BACKFILL: i64 = 3600;

/// A device's alarm rules and their states within one transaction.
pub(crate) struct DeviceAlarms {
    pk: i64,
    device_id: String,
    rules: Rules,
    /// Each rule's state (by index into `rules`).
    states: Vec<AlarmState>,
    /// Which states this transaction moved.
    changed: Vec<bool>,
    /// Each rule's sensor's idx (`None`: the device, or a sensor it does
    /// not have), looked up at the first reading.
    sensors: Option<Vec<Option<u8>>>,
    /// Where the states stand against the stored row.
    progress: Progress,
    /// Whether a reading came late or as a backfill, so that the row must
    /// be written (a replay in time order would not give these states).
    must_write: bool,
    /// The transitions of this transaction, by rule (index into `rules`).
    transitions: Vec<(usize, Transition)>,
}

impl DeviceAlarms {
    /// Device `pk`'s `rules` with their `states` (in rule order) and progress.
    fn with_states(pk: i64, device_id: &str, rules: Rules, states: Vec<AlarmState>, progress: Progress) -> Self {
        let changed = vec![false; rules.len()];
        Self {
            pk,
            device_id: device_id.to_owned(),
            rules,
            states,
            changed,
            sensors: None,
            progress,
            must_write: false,
            transitions: Vec::new(),
        }
    }

    /// The rules with their states of those of `devices` (pk, id) that
    /// have rules, from `cache` and a few queries for the rest; with the
    /// marks [`write_all`] hands back to the cache.
    pub(crate) async fn load_many(
        tx: &impl DeviceHours,
        cache: &AlarmCache,
        devices: &[(i64, &str)],
    ) -> StoreResult<(Vec<Self>, Marks)> {
        let pks: Vec<i64> = devices.iter().map(|(pk, _)| *pk).collect();
        let (mut loaded, marks) = cache.load(tx, &pks).await?;
        let devices = devices
            .iter()
            .filter_map(|(pk, id)| {
                let (rules, states, progress) = loaded.remove(pk)?;
                Some(Self::with_states(*pk, id, rules, states, progress))
            })
            .collect();
        Ok((devices, marks))
    }

    /// The device's key.
    pub(crate) fn pk(&self) -> i64 {
        self.pk
    }

    /// Moves every rule by a reading at `timestamp` whose (sensor idx,
    /// value) pairs are `pairs`, stored at `now` (server seconds); a
    /// sensor's idx is `idx_of(sensor_id)`. A backfill (a reading more
    /// than [`BACKFILL`] older than `now`) moves no level or rate rule;
    /// for a silence rule it is data all the same.
    pub(crate) fn on_reading(
        &mut self,
        timestamp: i64,
        pairs: &[(u8, f64)],
        idx_of: impl Fn(&str) -> Option<u8>,
        now: i64,
    ) {
        let backfill = timestamp < now.saturating_sub(BACKFILL);
        let in_order = self.progress.saw(timestamp);
        let sensors =
            self.sensors.get_or_insert_with(|| self.rules.iter().map(|r| r.sensor().and_then(&idx_of)).collect());
        let mut heard = false;
        for (i, ((rule, state), idx)) in self.rules.iter().zip(&mut self.states).zip(sensors.iter()).enumerate() {
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
        self.rules.iter().zip(&self.states).filter_map(move |(rule, state)| {
            let at = rule.due_at(state, started)?;
            Some(SilenceDue { at, device_pk: self.pk, device_id: self.device_id.clone(), rule: rule.name.clone() })
        })
    }

    /// Whether this transaction moved any state.
    fn moved(&self) -> bool {
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
    fn checkpoint(&self) -> Option<DeviceStates<'_>> {
        let active_moved =
            self.transitions.iter().any(|(_, t)| matches!(t.kind, TransitionKind::Raised | TransitionKind::Cleared));
        let not_replayed = self.transitions.iter().any(|(i, t)| {
            t.kind == TransitionKind::Acknowledged || matches!(self.rules[*i].kind, RuleKind::Silence(_))
        });
        let due = self.must_write || active_moved || not_replayed || self.progress.due();
        (self.moved() && due).then(|| DeviceStates {
            pk: self.pk,
            states: self.rules.iter().zip(&self.states).map(|(rule, state)| (rule.name.as_str(), state)).collect(),
            through: self.progress.seen,
            active_kept: !active_moved,
        })
    }

    /// Records the transitions (at `now`) with an outbox row for each
    /// subscription to alarms that covers the device (asked only when
    /// there may be one, `subscribed`); returns them.
    async fn record(self, tx: &impl Tx, now: i64, subscribed: bool) -> StoreResult<Vec<AlarmEvent>> {
        if self.transitions.is_empty() {
            return Ok(Vec::new());
        }
        let subscriptions = if subscribed { alarms::subscriptions_of(tx, self.pk).await? } else { Vec::new() };
        let mut events = Vec::with_capacity(self.transitions.len());
        let mut outbox = Vec::new();
        for (i, t) in &self.transitions {
            let rule = &self.rules[*i];
            let level = t.level.and_then(|l| rule.level_name(l));
            let new = NewEvent {
                device_pk: self.pk,
                rule: &rule.name,
                transition: t.kind,
                level,
                value: t.value,
                timestamp: t.timestamp,
                at: now,
            };
            let id = alarms::insert_event(tx, &new).await?;
            let event = AlarmEvent {
                id,
                device_pk: self.pk,
                device_id: self.device_id.clone(),
                rule: rule.name.clone(),
                transition: t.kind,
                level: level.map(str::to_owned),
                value: t.value,
                timestamp: t.timestamp,
                at: now,
            };
            let body = super::alarm_envelope::envelope(&event);
            for sub in &subscriptions {
                let message_id = super::alarm_envelope::message_id(sub, id);
                outbox.push(OutboxRow {
                    subscription_id: sub.clone(),
                    device_pk: self.pk,
                    message_id,
                    body: body.clone(),
                });
            }
            events.push(event);
        }
        tx.insert_outbox(&outbox).await?;
        Ok(events)
    }
}

/// Writes what devices loaded from `cache` at `marks` must write: the
/// rows due ([`DeviceAlarms::checkpoint`]) in a few statements, one count
/// of a write when any state moved, the states kept in the cache, then
/// each device's transitions (recorded at `now`).
pub(crate) async fn write_all(
    tx: &impl Tx,
    mut devices: Vec<DeviceAlarms>,
    now: i64,
    cache: &AlarmCache,
    marks: Marks,
) -> StoreResult<Vec<AlarmEvent>> {
    let moved = devices.iter().any(DeviceAlarms::moved);
    let rows: Vec<_> = devices.iter().filter_map(DeviceAlarms::checkpoint).collect();
    let mut written: Vec<i64> = rows.iter().map(|d| d.pk).collect();
    written.sort_unstable();
    alarms::put_states(tx, &rows).await?;
    drop(rows);
    if moved {
        alarms::count_state_write(tx).await?;
    }
    for d in &mut devices {
        if written.binary_search(&d.pk).is_ok() {
            d.progress.written();
        }
    }
    cache.keep(marks, moved, devices.iter_mut().map(|d| (d.pk, (std::mem::take(&mut d.states), d.progress))));
    let mut events = Vec::new();
    let mut subscribed = None;
    for device in devices.into_iter().filter(|d| !d.transitions.is_empty()) {
        if subscribed.is_none() {
            subscribed = Some(alarms::any_alarm_subscriptions(tx).await?);
        }
        events.extend(device.record(tx, now, subscribed == Some(true)).await?);
    }
    Ok(events)
}

/// Acknowledges the active episode of rule `rule` of device `device_id`
/// at `now` (its states from `cache`): the acknowledgement, and whether
/// it was recorded now (false: the episode was acknowledged already, and
/// that earlier one is returned, so that an acknowledgement sent twice is
/// recorded once).
pub(crate) async fn acknowledge(
    tx: &impl Tx,
    cache: &AlarmCache,
    device_id: &str,
    rule: &str,
    now: i64,
) -> StoreResult<(AlarmEvent, bool)> {
    let pk = tx.device_pk(device_id).await?.ok_or_else(|| StoreError::NotFound(format!("no device {device_id:?}")))?;
    let (mut devices, marks) = DeviceAlarms::load_many(tx, cache, &[(pk, device_id)]).await?;
    let no_rule = || StoreError::NotFound(format!("device {device_id:?} has no alarm rule {rule:?}"));
    let alarms = devices.first_mut().ok_or_else(no_rule)?;
    let earlier = alarms.acknowledge(rule, now);
    let recorded = write_all(tx, devices, now, cache, marks).await?;
    if let Some(at) = earlier? {
        let recorded = alarms::events(tx, pk, device_id, at, at).await?;
        let earlier =
            recorded.into_iter().rev().find(|e| e.rule == rule && e.transition == TransitionKind::Acknowledged);
        return earlier.map(|e| (e, false)).ok_or_else(|| {
            StoreError::Backend(format!("alarm {rule:?} of {device_id:?} acknowledged at {at} with no event").into())
        });
    }
    let event =
        recorded.into_iter().next().ok_or_else(|| StoreError::Backend("an acknowledgement recorded nothing".into()))?;
    Ok((event, true))
}

/// When every silence rule would next raise, counted from `started`
/// ([`SilenceDue::ACTIVE`] for those raised). A state read here may be
/// behind its last data ([`checkpoint`]): it says when to look, and the
/// look ([`check_silence`]) loads the last data.
pub(crate) async fn silence_due(c: &impl Sql, started: i64) -> StoreResult<Vec<SilenceDue>> {
    let rules = alarms::silence_rules(c).await?;
    Ok(rules
        .into_iter()
        .map(|(device_pk, device_id, rule, state)| SilenceDue {
            at: rule.due_at(&state, started).unwrap_or(SilenceDue::ACTIVE),
            device_pk,
            device_id,
            rule: rule.name,
        })
        .collect())
}

/// Looks at the clock (`now`) for the silence rules `due` (their states
/// from `cache`): those silent for their time (from the later of their
/// last data and `started`) are raised. Returns the transitions recorded
/// and when each rule looked at would next raise.
pub(crate) async fn check_silence(
    tx: &impl Tx,
    cache: &AlarmCache,
    due: &[SilenceDue],
    now: i64,
    started: i64,
) -> StoreResult<(Vec<AlarmEvent>, Vec<SilenceDue>)> {
    let mut by_device: std::collections::BTreeMap<i64, (&str, Vec<String>)> = std::collections::BTreeMap::new();
    for d in due {
        by_device.entry(d.device_pk).or_insert_with(|| (&d.device_id, Vec::new())).1.push(d.rule.clone());
    }
    let ids: Vec<(i64, &str)> = by_device.iter().map(|(pk, (id, _))| (*pk, *id)).collect();
    let (mut devices, marks) = DeviceAlarms::load_many(tx, cache, &ids).await?;
    let mut next = Vec::new();
    for alarms in &mut devices {
        let Some((_, rules)) = by_device.get(&alarms.pk) else { continue };
        alarms.on_clock(now, started, Some(rules));
        next.extend(alarms.silence_due(started).filter(|d| rules.contains(&d.rule)));
    }
    let events = write_all(tx, devices, now, cache, marks).await?;
    Ok((events, next))
}

/// Makes `new` device `pk`'s rules. A rule removed or changed ends its
/// episode: its state is forgotten, and an active one is `cleared`. `None`
/// when the rules were `new` already (nothing is written).
pub(crate) async fn replace_rules(
    tx: &impl Tx,
    pk: i64,
    device_id: &str,
    new: &[AlarmRule],
    now: i64,
) -> StoreResult<Option<Vec<AlarmEvent>>> {
    let rules: Rules = alarms::rules_only_of_many(tx, &[pk]).await?.remove(&pk).unwrap_or_default().into();
    if rules.len() == new.len() && rules.iter().zip(new).all(|(rule, new)| rule == new) {
        return Ok(None);
    }
    let (_, states, progress) = checkpoint::load(tx, vec![(pk, rules.clone())]).await?.remove(&pk).unwrap_or_default();
    let stored: Vec<(AlarmRule, AlarmState)> = rules.iter().cloned().zip(states).collect();
    let (mut ended_rules, mut transitions, mut kept) = (Vec::new(), Vec::new(), Vec::new());
    for (rule, state) in &stored {
        if new.contains(rule) {
            kept.push((rule.name.clone(), state.clone()));
        }
    }
    // A silence rule added (or changed) counts its silence from now, not
    // from this server's start: setting it never raises at once.
    for rule in new {
        if matches!(rule.kind, RuleKind::Silence(_)) && !kept.iter().any(|(name, _)| *name == rule.name) {
            kept.push((rule.name.clone(), AlarmState::listening_since(now)));
        }
    }
    for (rule, state) in stored {
        if new.contains(&rule) {
            continue;
        }
        if state.active {
            let t = Transition {
                kind: TransitionKind::Cleared,
                level: None,
                value: state.value,
                timestamp: state.timestamp,
            };
            transitions.push((ended_rules.len(), t));
            ended_rules.push(rule);
        }
    }
    let mut ended = DeviceAlarms::with_states(pk, device_id, ended_rules.into(), Vec::new(), Progress::default());
    ended.transitions = transitions;
    // The states of the rules kept, exact as of every stored reading (the
    // readings before the rules were set are history to them); those of
    // rules removed or changed are forgotten.
    let through = progress.seen.max(alarms::newest_second(tx, pk).await?);
    let states = kept.iter().map(|(name, state)| (name.as_str(), state)).collect();
    alarms::put_states(tx, &[DeviceStates { pk, states, through, active_kept: false }]).await?;
    alarms::count_state_write(tx).await?;
    alarms::set_rules(tx, pk, new).await?;
    Ok(Some(ended.record(tx, now, true).await?))
}

/// Writes device `pk`'s states as they are, when readings stored after
/// its row would be replayed into it: before readings it was evaluated
/// with are removed (a delete, retention), so that a later load gives
/// the states they left.
pub(crate) async fn checkpoint_before_removal(tx: &impl Tx, pk: i64) -> StoreResult<()> {
    let rules: Rules = alarms::rules_only_of_many(tx, &[pk]).await?.remove(&pk).unwrap_or_default().into();
    if rules.is_empty() {
        return Ok(());
    }
    let Some((rules, states, progress)) = checkpoint::load(tx, vec![(pk, rules)]).await?.remove(&pk) else {
        return Ok(());
    };
    if progress.seen == progress.through {
        return Ok(());
    }
    let states = rules.iter().zip(&states).map(|(rule, state)| (rule.name.as_str(), state)).collect();
    alarms::put_states(tx, &[DeviceStates { pk, states, through: progress.seen, active_kept: true }]).await?;
    alarms::count_state_write(tx).await
}
