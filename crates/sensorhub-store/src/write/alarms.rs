//! Alarms moved and recorded inside the transaction that moved them, once
//! for every backend: a device's rules and states are loaded once per
//! transaction ([`DeviceAlarms::load`]), each stored reading (or the
//! silence timer, or an acknowledgement) moves them, and at the end the
//! changed states, the transitions and their outbox rows are written
//! together ([`DeviceAlarms::write`]). A reading and the transitions it
//! causes are committed, or lost, together: never one without the other.

use super::alarm_cache::{AlarmCache, Marks, Rules, in_rule_order};
use super::tx::Tx;
use crate::Scope;
use crate::alarm::{Alarm, AlarmEvent, SilenceDue};
use crate::decide::outbox::OutboxRow;
use crate::sql::Sql;
use crate::sql::alarms::{self, DeviceStates, NewEvent, StoredStates};
use crate::{StoreError, StoreResult};
use sensorhub_core::alarm::{AlarmRule, AlarmState, NotActive, RuleKind, Transition, TransitionKind};
use sensorhub_core::time::format_rfc3339;
use std::fmt::Write as _;

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
    /// Which states differ from what is stored.
    changed: Vec<bool>,
    /// The transitions of this transaction, by rule (index into `rules`).
    transitions: Vec<(usize, Transition)>,
}

impl DeviceAlarms {
    /// Device `pk`'s `rules` with their `stored` states (a rule without one starts at rest).
    fn new(pk: i64, device_id: &str, rules: Rules, stored: StoredStates) -> Self {
        let states = in_rule_order(&rules, stored);
        Self::with_states(pk, device_id, rules, states)
    }

    /// Device `pk`'s `rules` with their `states`, in rule order.
    fn with_states(pk: i64, device_id: &str, rules: Rules, states: Vec<AlarmState>) -> Self {
        let changed = vec![false; rules.len()];
        Self { pk, device_id: device_id.to_owned(), rules, states, changed, transitions: Vec::new() }
    }

    /// Device `pk`'s rules with their states; `None` when it has no rule.
    pub(crate) async fn load(tx: &impl Sql, pk: i64, device_id: &str) -> StoreResult<Option<Self>> {
        let rules = alarms::rules_only_of_many(tx, &[pk]).await?.remove(&pk).unwrap_or_default();
        if rules.is_empty() {
            return Ok(None);
        }
        let stored = alarms::states_of_many(tx, &[pk]).await?.remove(&pk).unwrap_or_default();
        Ok(Some(Self::new(pk, device_id, rules.into(), stored)))
    }

    /// The device's key.
    pub(crate) fn pk(&self) -> i64 {
        self.pk
    }

    /// The rules with their states of those of `devices` (pk, id) that
    /// have rules, from `cache` and a few queries for the rest; with the
    /// marks [`write_all`] hands back to the cache.
    pub(crate) async fn load_many(
        tx: &impl Sql,
        cache: &AlarmCache,
        devices: &[(i64, &str)],
    ) -> StoreResult<(Vec<Self>, Marks)> {
        let pks: Vec<i64> = devices.iter().map(|(pk, _)| *pk).collect();
        let (mut loaded, marks) = cache.load(tx, &pks).await?;
        let devices = devices
            .iter()
            .filter_map(|(pk, id)| {
                let (rules, states) = loaded.remove(pk)?;
                Some(Self::with_states(*pk, id, rules, states))
            })
            .collect();
        Ok((devices, marks))
    }

    /// Moves every rule by a reading at `timestamp` whose value of a
    /// sensor is `value_of(sensor_id)`, stored at `now` (server seconds).
    /// A backfill (a reading more than [`BACKFILL`] older than `now`)
    /// moves no level or rate rule; for a silence rule it is data all the
    /// same.
    pub(crate) fn on_reading(&mut self, timestamp: i64, value_of: impl Fn(&str) -> Option<f64>, now: i64) {
        let backfill = timestamp < now.saturating_sub(BACKFILL);
        for (i, (rule, state)) in self.rules.iter().zip(&mut self.states).enumerate() {
            if backfill && !matches!(rule.kind, RuleKind::Silence(_)) {
                continue;
            }
            let value = rule.sensor().and_then(&value_of);
            self.changed[i] |= rule.hears(value.is_some());
            if let Some(t) = rule.on_reading(state, timestamp, value, now) {
                self.transitions.push((i, t));
            }
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

    /// Writes the changed states, records the transitions (at `now`) with
    /// an outbox row for each subscription to alarms that covers the
    /// device, and returns the transitions recorded.
    pub(crate) async fn write(self, tx: &impl Tx, now: i64) -> StoreResult<Vec<AlarmEvent>> {
        alarms::put_states(tx, &self.changed_states().into_iter().collect::<Vec<_>>()).await?;
        self.record(tx, now).await
    }

    /// Every rule's state of the device, when one differs from what is
    /// stored (the device's states are one row).
    fn changed_states(&self) -> Option<DeviceStates<'_>> {
        self.changed.iter().any(|c| *c).then(|| DeviceStates {
            pk: self.pk,
            states: self.rules.iter().zip(&self.states).map(|(rule, state)| (rule.name.as_str(), state)).collect(),
            active_kept: !self
                .transitions
                .iter()
                .any(|(_, t)| matches!(t.kind, TransitionKind::Raised | TransitionKind::Cleared)),
        })
    }

    /// Records the transitions (at `now`) with an outbox row for each
    /// subscription to alarms that covers the device; returns them.
    async fn record(self, tx: &impl Tx, now: i64) -> StoreResult<Vec<AlarmEvent>> {
        if self.transitions.is_empty() {
            return Ok(Vec::new());
        }
        let subscriptions = alarms::subscriptions_of(tx, self.pk).await?;
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
            let body = envelope(&event);
            for sub in &subscriptions {
                let message_id = message_id(sub, id);
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

/// [`DeviceAlarms::write`] for many devices loaded from `cache` at
/// `marks`: every changed state in a few statements, the states kept in
/// the cache, then each device's transitions.
pub(crate) async fn write_all(
    tx: &impl Tx,
    mut devices: Vec<DeviceAlarms>,
    now: i64,
    cache: &AlarmCache,
    marks: Marks,
) -> StoreResult<Vec<AlarmEvent>> {
    let states: Vec<_> = devices.iter().filter_map(DeviceAlarms::changed_states).collect();
    let wrote = !states.is_empty();
    alarms::put_states(tx, &states).await?;
    drop(states);
    cache.keep(marks, wrote, devices.iter_mut().map(|d| (d.pk, std::mem::take(&mut d.states))));
    let mut events = Vec::new();
    for device in devices {
        events.extend(device.record(tx, now).await?);
    }
    Ok(events)
}

/// The alarms of device `device_id` visible in `scope`, in rule order;
/// `None` when the device is not visible.
pub(crate) async fn alarms_of(c: &impl Sql, scope: Scope, device_id: &str) -> StoreResult<Option<Vec<Alarm>>> {
    let Some(device) = crate::sql::access::find_device(c, scope, device_id).await? else { return Ok(None) };
    let rules = alarms::rules_of(c, device.pk).await?;
    let device_id = device_id.to_owned();
    Ok(Some(rules.into_iter().map(|(rule, state)| Alarm { device_id: device_id.clone(), rule, state }).collect()))
}

/// The active alarms of every device visible in `scope`, highest level first.
pub(crate) async fn active(c: &impl Sql, scope: Scope) -> StoreResult<Vec<Alarm>> {
    let mut active = alarms::active(c, scope).await?;
    crate::alarm::most_severe_first(&mut active);
    Ok(active)
}

/// The transitions of device `device_id` (visible in `scope`) recorded
/// (by the server's clock, `at`) in `range`, oldest first; `None` when the device is not visible.
pub(crate) async fn events_of(
    c: &impl Sql,
    scope: Scope,
    device_id: &str,
    range: sensorhub_core::time::TimeRange,
) -> StoreResult<Option<Vec<AlarmEvent>>> {
    let Some(device) = crate::sql::access::find_device(c, scope, device_id).await? else { return Ok(None) };
    Ok(Some(alarms::events(c, device.pk, device_id, range.start, range.end).await?))
}

/// Acknowledges the active episode of rule `rule` of device `device_id`
/// at `now`: the acknowledgement, and whether it was recorded now (false:
/// the episode was acknowledged already, and that earlier one is
/// returned, so that an acknowledgement sent twice is recorded once).
pub(crate) async fn acknowledge(
    tx: &impl Tx,
    device_id: &str,
    rule: &str,
    now: i64,
) -> StoreResult<(AlarmEvent, bool)> {
    let pk = tx.device_pk(device_id).await?.ok_or_else(|| StoreError::NotFound(format!("no device {device_id:?}")))?;
    let mut alarms = DeviceAlarms::load(tx, pk, device_id)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("device {device_id:?} has no alarm rule {rule:?}")))?;
    if let Some(at) = alarms.acknowledge(rule, now)? {
        let recorded = alarms::events(tx, pk, device_id, at, at).await?;
        let earlier =
            recorded.into_iter().rev().find(|e| e.rule == rule && e.transition == TransitionKind::Acknowledged);
        return earlier.map(|e| (e, false)).ok_or_else(|| {
            StoreError::Backend(format!("alarm {rule:?} of {device_id:?} acknowledged at {at} with no event").into())
        });
    }
    let recorded = alarms.write(tx, now).await?;
    let event =
        recorded.into_iter().next().ok_or_else(|| StoreError::Backend("an acknowledgement recorded nothing".into()))?;
    Ok((event, true))
}

/// When every silence rule would next raise, counted from `started`
/// ([`SilenceDue::ACTIVE`] for those raised).
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

/// Looks at the clock (`now`) for the silence rules `due`: those silent
/// for their time (from the later of their last data and `started`) are
/// raised. Returns the transitions recorded and when each rule looked at
/// would next raise.
pub(crate) async fn check_silence(
    tx: &impl Tx,
    due: &[SilenceDue],
    now: i64,
    started: i64,
) -> StoreResult<(Vec<AlarmEvent>, Vec<SilenceDue>)> {
    let mut by_device: std::collections::BTreeMap<(i64, &str), Vec<String>> = std::collections::BTreeMap::new();
    for d in due {
        by_device.entry((d.device_pk, d.device_id.as_str())).or_default().push(d.rule.clone());
    }
    let (mut events, mut next) = (Vec::new(), Vec::new());
    for ((pk, device_id), rules) in by_device {
        let Some(mut alarms) = DeviceAlarms::load(tx, pk, device_id).await? else { continue };
        alarms.on_clock(now, started, Some(&rules));
        next.extend(alarms.silence_due(started).filter(|d| rules.contains(&d.rule)));
        events.extend(alarms.write(tx, now).await?);
    }
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
    let stored = alarms::rules_of(tx, pk).await?;
    if stored.len() == new.len() && stored.iter().zip(new).all(|((rule, _), new)| rule == new) {
        return Ok(None);
    }
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
    let mut ended = DeviceAlarms::new(pk, device_id, ended_rules.into(), StoredStates::default());
    ended.transitions = transitions;
    // The states of the rules kept; those of rules removed or changed are forgotten.
    let states = kept.iter().map(|(name, state)| (name.as_str(), state)).collect();
    alarms::put_states(tx, &[DeviceStates { pk, states, active_kept: false }]).await?;
    alarms::set_rules(tx, pk, new).await?;
    Ok(Some(ended.write(tx, now).await?))
}

/// The id of the delivery of transition `event_id` to subscription
/// `subscription`: the same for every attempt, so that a receiver can
/// de-duplicate, and telling nothing of other subscriptions.
fn message_id(subscription: &str, event_id: i64) -> String {
    let digest =
        sensorhub_core::secret::digest_parts(&[b"sensorhub alarm", subscription.as_bytes(), &event_id.to_le_bytes()]);
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("msg_alarm_{hex}")
}

/// The body delivered for `event`: the shape of the sensor-data envelope
/// (`event`, `device_id`, `timestamp`, `data`), the transition in `data`.
pub(crate) fn envelope(event: &AlarmEvent) -> String {
    let at = format_rfc3339(event.at, jiff::tz::Offset::UTC);
    let ts = event.timestamp.map(|t| format_rfc3339(t, jiff::tz::Offset::UTC));
    let mut out = String::with_capacity(256);
    let _ = write!(
        out,
        r#"{{"event":{},"device_id":{},"timestamp":{},"data":{}}}"#,
        json(&event.event_name()),
        json(&event.device_id),
        json(ts.as_deref().unwrap_or(&at)),
        event_json(event, ts.as_deref(), &at),
    );
    out
}

/// The transition as a JSON object (times as given).
fn event_json(event: &AlarmEvent, timestamp: Option<&str>, at: &str) -> String {
    let value = event.value.and_then(|v| serde_json::to_string(&v).ok()).unwrap_or_else(|| "null".into());
    format!(
        r#"{{"device_id":{},"rule":{},"transition":"{}","level":{},"value":{value},"timestamp":{},"at":{}}}"#,
        json(&event.device_id),
        json(&event.rule),
        event.transition.as_str(),
        event.level.as_deref().map_or_else(|| "null".into(), json),
        timestamp.map_or_else(|| "null".into(), json),
        json(at),
    )
}

/// `s` as a JSON string.
fn json(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}
