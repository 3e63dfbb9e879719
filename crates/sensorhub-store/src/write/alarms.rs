//! Alarms moved and recorded inside the transaction that moved them, once
//! for every backend: a device's rules and states are loaded once per
//! transaction ([`AlarmCache::load`]), each stored reading (or the
//! silence timer, or an acknowledgement) moves them ([`DeviceAlarms`]),
//! and at the end the
//! states that must be written ([`super::checkpoint`]), the transitions
//! and their outbox rows are written together ([`write_all`]). A reading
//! and the transitions it causes are committed, or lost, together: never
//! one without the other.

use super::alarm_cache::{AlarmCache, Marks};
use super::checkpoint::{self, Rules};
use super::device_alarms::{DeviceAlarms, Moved};
use super::tx::Tx;
use crate::alarm::{AlarmEvent, SilenceDue};
use crate::decide::outbox::OutboxRow;
use crate::sql::Sql;
use crate::sql::alarms::{self, DeviceStates, NewEvent};
use crate::{StoreError, StoreResult};
use sensorhub_core::alarm::{AlarmRule, AlarmState, RuleKind, Transition, TransitionKind};
use std::sync::Arc;

/// Records `moved`'s transitions (at `now`) with an outbox row for each
/// subscription to alarms that covers the device (asked only when there
/// may be one, `subscribed`); returns them.
pub(crate) async fn record(tx: &impl Tx, moved: Moved, now: i64, subscribed: bool) -> StoreResult<Vec<AlarmEvent>> {
    let Moved { pk, device_id, rules, transitions, after } = moved;
    if transitions.is_empty() {
        return Ok(Vec::new());
    }
    let subscriptions = if subscribed { alarms::subscriptions_of(tx, pk).await? } else { Vec::new() };
    let mut events = Vec::with_capacity(transitions.len());
    let mut outbox = Vec::new();
    for (i, t) in &transitions {
        let rule = &rules[*i];
        let level = t.level.and_then(|l| rule.level_name(l));
        let new = NewEvent {
            device_pk: pk,
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
            device_pk: pk,
            device_id: device_id.clone(),
            rule: rule.name.clone(),
            transition: t.kind,
            level: level.map(str::to_owned),
            value: t.value,
            timestamp: t.timestamp,
            at: now,
            after: after.clone(),
            queued: subscriptions.len(),
        };
        // Built only when some subscription takes it.
        let body: Arc<str> =
            if subscriptions.is_empty() { "".into() } else { super::alarm_envelope::envelope(&event).into() };
        for sub in &subscriptions {
            let message_id = Some(super::alarm_envelope::message_id(sub, id));
            let (subscription_id, body) = (sub.as_str().into(), body.clone());
            outbox.push(OutboxRow { subscription_id, device_pk: pk, message_id, body });
        }
        events.push(event);
    }
    tx.insert_outbox(&outbox).await?;
    Ok(events)
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
    let stamp = if moved { Some(alarms::stamp_state_write(tx).await?) } else { None };
    let mut transitions = Vec::new();
    for d in &mut devices {
        if written.binary_search(&d.pk()).is_ok() {
            d.progress.written();
        }
        transitions.extend(d.take_moved());
    }
    cache.keep(marks, stamp, devices);
    let mut events = Vec::new();
    if transitions.is_empty() {
        return Ok(events);
    }
    let subscribed = alarms::any_alarm_subscriptions(tx).await?;
    for moved in transitions {
        events.extend(record(tx, moved, now, subscribed).await?);
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
    let (mut devices, marks) = cache.load(tx, &[(pk, device_id)]).await?;
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
    let (mut devices, marks) = cache.load(tx, &ids).await?;
    let mut next = Vec::new();
    for alarms in &mut devices {
        let Some((_, rules)) = by_device.get(&alarms.pk()) else { continue };
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
    let ended = Moved { pk, device_id: device_id.to_owned(), rules: ended_rules.into(), transitions, after: None };
    // The states of the rules kept, exact as of every stored reading (the
    // readings before the rules were set are history to them); those of
    // rules removed or changed are forgotten.
    let through = progress.seen.max(alarms::newest_second(tx, pk).await?);
    let states = kept.iter().map(|(name, state)| (name.as_str(), state)).collect();
    alarms::put_states(tx, &[DeviceStates { pk, states, through, active_kept: false }]).await?;
    alarms::stamp_state_write(tx).await?;
    alarms::set_rules(tx, pk, new).await?;
    Ok(Some(record(tx, ended, now, true).await?))
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
    alarms::stamp_state_write(tx).await.map(|_| ())
}
