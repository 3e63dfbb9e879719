//! Alarms' statements, written once for both backends: a device's rules
//! with their states (one query), states and transitions written, the
//! subscriptions that want alarm events, the rules rewritten, and the
//! reads of the API and the silence watch.

use super::access::{SCOPE_FILTER, scope_params};
use super::by_keys::ByKeys as ByDevices;
use super::{Param, Sql};
use crate::alarm::{Alarm, AlarmEvent};
use crate::{Scope, StoreError, StoreResult};
use sensorhub_core::alarm::{AlarmRule, AlarmState, RuleSpec, TransitionKind};

/// A stored rule spec, read back. Every transaction that writes readings
/// reads the rules of its stations, and most stations share a few specs:
/// each distinct text is parsed and checked once, then cloned (a bounded
/// map of spec texts; a text always means the same rule, so nothing in it
/// goes stale).
pub(crate) fn parse_rule(spec: &str) -> StoreResult<AlarmRule> {
    static PARSED: std::sync::LazyLock<std::sync::Mutex<crate::decide::FastMap<String, AlarmRule>>> =
        std::sync::LazyLock::new(Default::default);
    const KEPT: usize = 4096;
    if let Some(rule) = PARSED.lock().ok().and_then(|m| m.get(spec).cloned()) {
        return Ok(rule);
    }
    let parsed: RuleSpec = serde_json::from_str(spec).map_err(|e| StoreError::Backend(e.into()))?;
    let rule =
        parsed.check("rule").map_err(|e| StoreError::Backend(format!("a stored alarm rule is invalid: {e}").into()))?;
    if let Ok(mut m) = PARSED.lock() {
        if m.len() >= KEPT {
            m.clear();
        }
        m.insert(spec.to_owned(), rule.clone());
    }
    Ok(rule)
}

/// The states of one device's rules, as stored: a JSON object by rule name.
pub(crate) type StoredStates = crate::decide::FastMap<String, AlarmState>;

/// A device's stored states, read back.
fn parse_states(text: &str) -> StoreResult<StoredStates> {
    serde_json::from_str(text).map_err(|e| StoreError::Backend(format!("stored alarm states: {e}").into()))
}

/// `rules` in order, each with its state in `states` (a rule without one starts at rest).
fn with_states(rules: Vec<AlarmRule>, mut states: StoredStates) -> Vec<(AlarmRule, AlarmState)> {
    rules
        .into_iter()
        .map(|rule| {
            let state = states.remove(&rule.name).unwrap_or_default();
            (rule, state)
        })
        .collect()
}

/// Device `pk`'s rules in order, each with its state.
pub(crate) async fn rules_of(c: &impl Sql, pk: i64) -> StoreResult<Vec<(AlarmRule, AlarmState)>> {
    Ok(rules_of_many(c, &[pk]).await?.remove(&pk).unwrap_or_default())
}

/// Whether any device has an alarm rule.
pub(crate) async fn any_rules(c: &impl Sql) -> StoreResult<bool> {
    c.query_one("SELECT EXISTS (SELECT 1 FROM alarm_rules)", &[]).await?.get(0)
}

static RULES_OF: ByDevices =
    ByDevices::new("SELECT device_pk, spec FROM alarm_rules WHERE device_pk IN (", ") ORDER BY device_pk, position");

static RULES_AND_STATES_OF: ByDevices = ByDevices::new(
    "SELECT r.device_pk, r.spec, s.states FROM alarm_rules r
     LEFT JOIN alarm_states s ON s.device_pk = r.device_pk
     WHERE r.device_pk IN (",
    ") ORDER BY r.device_pk, r.position",
);

static STATES_OF: ByDevices = ByDevices::new("SELECT device_pk, states FROM alarm_states WHERE device_pk IN (", ")");

/// The rules in order, each with its state, of those of devices `pks`
/// that have rules, by device.
pub(crate) async fn rules_of_many(
    c: &impl Sql,
    pks: &[i64],
) -> StoreResult<crate::decide::FastMap<i64, Vec<(AlarmRule, AlarmState)>>> {
    let rules = rules_only_of_many(c, pks).await?;
    let with_rules: Vec<i64> = pks.iter().copied().filter(|pk| rules.contains_key(pk)).collect();
    let mut states = states_of_many(c, &with_rules).await?;
    Ok(rules
        .into_iter()
        .map(|(pk, rules)| {
            let stored = states.remove(&pk).unwrap_or_default();
            (pk, with_states(rules, stored))
        })
        .collect())
}

/// The rules in order of those of devices `pks` that have rules, by
/// device, a query per 128 devices.
pub(crate) async fn rules_only_of_many(
    c: &impl Sql,
    pks: &[i64],
) -> StoreResult<crate::decide::FastMap<i64, Vec<AlarmRule>>> {
    let mut rules: crate::decide::FastMap<i64, Vec<AlarmRule>> = Default::default();
    RULES_OF
        .each(c, pks, |row| {
            rules.entry(row.get(0)?).or_default().push(parse_rule(row.text(1)?)?);
            Ok(())
        })
        .await?;
    Ok(rules)
}

/// The rules in order and the stored states of those of devices `pks`
/// that have rules, by device, in one query per 128 devices (a device's
/// states come with each of its rules and are read once).
pub(crate) async fn rules_and_states_of_many(
    c: &impl Sql,
    pks: &[i64],
) -> StoreResult<crate::decide::FastMap<i64, (Vec<AlarmRule>, StoredStates)>> {
    let mut out: crate::decide::FastMap<i64, (Vec<AlarmRule>, StoredStates)> = Default::default();
    RULES_AND_STATES_OF
        .each(c, pks, |row| {
            let pk: i64 = row.get(0)?;
            let rule = parse_rule(row.text(1)?)?;
            match out.entry(pk) {
                std::collections::hash_map::Entry::Occupied(mut e) => e.get_mut().0.push(rule),
                std::collections::hash_map::Entry::Vacant(e) => {
                    let text: Option<String> = row.get(2)?;
                    let states = text.as_deref().map(parse_states).transpose()?.unwrap_or_default();
                    e.insert((vec![rule], states));
                }
            }
            Ok(())
        })
        .await?;
    Ok(out)
}

/// The stored states of those of devices `pks` that have some, by device,
/// a query per 128 devices.
pub(crate) async fn states_of_many(
    c: &impl Sql,
    pks: &[i64],
) -> StoreResult<crate::decide::FastMap<i64, StoredStates>> {
    let mut states: crate::decide::FastMap<i64, StoredStates> = Default::default();
    STATES_OF
        .each(c, pks, |row| {
            states.insert(row.get(0)?, parse_states(row.text(1)?)?);
            Ok(())
        })
        .await?;
    Ok(states)
}

/// Devices whose states one statement writes at most.
const STATES_AT_ONCE: usize = 200;

/// The states of one device's rules to be written. Rules left out are forgotten.
pub(crate) struct DeviceStates<'a> {
    pub pk: i64,
    /// Every rule's (name, state).
    pub states: Vec<(&'a str, &'a AlarmState)>,
    /// Whether as many rules are active as the stored row says (none was
    /// raised or cleared): the row's `active`, and the index of active
    /// devices over it, are then left alone.
    pub active_kept: bool,
}

/// Writes the states of `devices`, a few hundred devices a statement,
/// and counts the write ([`marks`]) when there was one.
pub(crate) async fn put_states(c: &impl Sql, devices: &[DeviceStates<'_>]) -> StoreResult<()> {
    if devices.is_empty() {
        return Ok(());
    }
    for chunk in devices.chunks(STATES_AT_ONCE) {
        put_state_rows(c, chunk).await?;
    }
    c.execute("UPDATE alarm_generation SET state_writes = state_writes + 1", &[]).await?;
    Ok(())
}

/// A device's states as stored: a JSON object by rule name.
fn stored_text(states: &[(&str, &AlarmState)]) -> StoreResult<String> {
    let mut out = Vec::with_capacity(64 + states.len() * 160);
    out.push(b'{');
    for (k, (name, state)) in states.iter().enumerate() {
        if k > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut out, name).map_err(|e| StoreError::Backend(e.into()))?;
        out.push(b':');
        serde_json::to_writer(&mut out, state).map_err(|e| StoreError::Backend(e.into()))?;
    }
    out.push(b'}');
    String::from_utf8(out).map_err(|e| StoreError::Backend(e.into()))
}

/// Writes the states of `devices`: those whose count of active rules
/// moved in one statement, the others in another that leaves `active`
/// (and so the partial index of active devices) untouched, which made
/// each row's write about a sixth cheaper on SQLite.
async fn put_state_rows(c: &impl Sql, devices: &[DeviceStates<'_>]) -> StoreResult<()> {
    let (kept, moved): (Vec<&DeviceStates<'_>>, Vec<&DeviceStates<'_>>) = devices.iter().partition(|d| d.active_kept);
    put_rows(c, &kept, "states = excluded.states").await?;
    put_rows(c, &moved, "active = excluded.active, states = excluded.states").await
}

/// Writes the states of `devices` in one statement, setting `set` on a row that exists.
async fn put_rows(c: &impl Sql, devices: &[&DeviceStates<'_>], set: &str) -> StoreResult<()> {
    if devices.is_empty() {
        return Ok(());
    }
    let texts: Vec<String> = devices.iter().map(|d| stored_text(&d.states)).collect::<StoreResult<_>>()?;
    let mut rows = String::with_capacity(devices.len() * 16);
    let mut params: Vec<Param<'_>> = Vec::with_capacity(devices.len() * 3);
    for (d, text) in devices.iter().zip(&texts) {
        let n = params.len();
        if n > 0 {
            rows.push_str(", ");
        }
        rows.push_str(&format!("(${}, ${}, ${})", n + 1, n + 2, n + 3));
        let active = i32::try_from(d.states.iter().filter(|(_, s)| s.active).count()).unwrap_or(i32::MAX);
        params.extend::<[Param<'_>; 3]>([d.pk.into(), active.into(), text.as_str().into()]);
    }
    let sql = format!(
        "INSERT INTO alarm_states (device_pk, active, states) VALUES {rows}
         ON CONFLICT (device_pk) DO UPDATE SET {set}"
    );
    c.execute(&sql, &params).await?;
    Ok(())
}

/// A transition about to be recorded.
pub(crate) struct NewEvent<'a> {
    pub device_pk: i64,
    pub rule: &'a str,
    pub transition: TransitionKind,
    pub level: Option<&'a str>,
    pub value: Option<f64>,
    pub timestamp: Option<i64>,
    pub at: i64,
}

/// Records a transition; its number.
pub(crate) async fn insert_event(c: &impl Sql, e: &NewEvent<'_>) -> StoreResult<i64> {
    let sql = "INSERT INTO alarm_events (device_pk, rule, transition, level, value, timestamp, at)
               VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id";
    let params = [
        e.device_pk.into(),
        e.rule.into(),
        e.transition.as_str().into(),
        e.level.into(),
        e.value.into(),
        e.timestamp.into(),
        e.at.into(),
    ];
    c.query_one(sql, &params).await?.get(0)
}

/// The enabled subscriptions to alarm events of enabled accounts that
/// cover device `pk`, which their account sees.
pub(crate) async fn subscriptions_of(c: &impl Sql, pk: i64) -> StoreResult<Vec<String>> {
    let sql = "SELECT s.id FROM subscriptions s JOIN accounts a ON a.id = s.account_id
               WHERE s.enabled AND NOT a.disabled AND (',' || s.events || ',') LIKE '%,alarms,%'
                 AND EXISTS (SELECT 1 FROM account_devices x WHERE x.account_id = s.account_id AND x.device_pk = $1)
                 AND (s.all_devices OR EXISTS (SELECT 1 FROM subscription_devices sd
                                               WHERE sd.subscription_id = s.id AND sd.device_pk = $1))
               ORDER BY s.id";
    c.query(sql, &[pk.into()]).await?.iter().map(|r| r.get(0)).collect()
}

/// Makes `rules` device `pk`'s rules, in that order.
pub(crate) async fn set_rules(c: &impl Sql, pk: i64, rules: &[AlarmRule]) -> StoreResult<()> {
    c.execute("DELETE FROM alarm_rules WHERE device_pk = $1", &[pk.into()]).await?;
    let sql = "INSERT INTO alarm_rules (device_pk, position, name, spec) VALUES ($1, $2, $3, $4)";
    for (position, rule) in rules.iter().enumerate() {
        let spec = serde_json::to_string(&rule.spec()).map_err(|e| StoreError::Backend(e.into()))?;
        let position = i32::try_from(position).unwrap_or(i32::MAX);
        c.execute(sql, &[pk.into(), position.into(), rule.name.as_str().into(), spec.as_str().into()]).await?;
    }
    Ok(())
}

/// Every device's rules (or `device_id`'s), by device and position.
pub(crate) async fn rules(c: &impl Sql, device_id: Option<&str>) -> StoreResult<Vec<(String, AlarmRule)>> {
    let sql = "SELECT d.device_id, r.spec FROM alarm_rules r JOIN devices d ON d.id = r.device_pk
               WHERE CAST($1 AS text) IS NULL OR d.device_id = $1 ORDER BY d.device_id, r.position";
    let rows = c.query(sql, &[device_id.into()]).await?;
    rows.iter().map(|r| Ok((r.get(0)?, parse_rule(r.text(1)?)?))).collect()
}

/// The active alarms of the devices visible in `scope`.
pub(crate) async fn active(c: &impl Sql, scope: Scope) -> StoreResult<Vec<Alarm>> {
    let (account, key) = scope_params(scope);
    let sql = format!(
        "SELECT d.id, d.device_id FROM alarm_states s JOIN devices d ON d.id = s.device_pk
         WHERE s.active > 0 AND {SCOPE_FILTER}"
    );
    let rows = c.query(&sql, &[account.into(), key.into()]).await?;
    let mut ids = crate::decide::FastMap::default();
    for r in &rows {
        ids.insert(r.get::<i64>(0)?, r.get::<String>(1)?);
    }
    let pks: Vec<i64> = ids.keys().copied().collect();
    let mut out = Vec::new();
    for (pk, alarms) in rules_of_many(c, &pks).await? {
        let Some(device_id) = ids.get(&pk) else { continue };
        out.extend(alarms.into_iter().filter(|(_, state)| state.active).map(|(rule, state)| Alarm {
            device_id: device_id.clone(),
            rule,
            state,
        }));
    }
    Ok(out)
}

/// Device `pk`'s transitions recorded from second `start` to `end`, oldest first.
pub(crate) async fn events(
    c: &impl Sql,
    pk: i64,
    device_id: &str,
    start: i64,
    end: i64,
) -> StoreResult<Vec<AlarmEvent>> {
    let sql = "SELECT id, rule, transition, level, value, timestamp, at FROM alarm_events
               WHERE device_pk = $1 AND at BETWEEN $2 AND $3 ORDER BY at, id";
    let rows = c.query(sql, &[pk.into(), start.into(), end.into()]).await?;
    rows.iter()
        .map(|r| {
            let transition: String = r.get(2)?;
            Ok(AlarmEvent {
                id: r.get(0)?,
                device_pk: pk,
                device_id: device_id.to_owned(),
                rule: r.get(1)?,
                transition: TransitionKind::parse(&transition)
                    .ok_or_else(|| StoreError::Backend(format!("unknown transition {transition:?}").into()))?,
                level: r.get(3)?,
                value: r.get(4)?,
                timestamp: r.get(5)?,
                at: r.get(6)?,
            })
        })
        .collect()
}

/// Where the alarms stand, in one row: the rules' generation and how
/// many transactions have written states ([`put_states`]).
pub(crate) async fn marks(c: &impl Sql) -> StoreResult<(i64, i64)> {
    let row = c.query_one("SELECT generation, state_writes FROM alarm_generation", &[]).await?;
    Ok((row.get(0)?, row.get(1)?))
}

/// The number that moves whenever an alarm rule is added, changed or removed.
pub(crate) async fn generation(c: &impl Sql) -> StoreResult<i64> {
    c.query_one("SELECT generation FROM alarm_generation", &[]).await?.get(0)
}

/// Every silence rule of every device (its number and id), with its state.
pub(crate) async fn silence_rules(c: &impl Sql) -> StoreResult<Vec<(i64, String, AlarmRule, AlarmState)>> {
    let sql = "SELECT r.device_pk, d.device_id, r.spec, s.states FROM alarm_rules r
               JOIN devices d ON d.id = r.device_pk
               LEFT JOIN alarm_states s ON s.device_pk = r.device_pk
               WHERE r.spec LIKE '%\"no_data_for\"%' ORDER BY r.device_pk, r.position";
    let mut out = Vec::new();
    // The states of the device of the row before (a device's rows are together).
    let mut states: Option<(i64, StoredStates)> = None;
    for r in c.query(sql, &[]).await? {
        let pk: i64 = r.get(0)?;
        let rule = parse_rule(r.text(2)?)?;
        if !matches!(rule.kind, sensorhub_core::alarm::RuleKind::Silence(_)) {
            continue;
        }
        if states.as_ref().is_none_or(|(at, _)| *at != pk) {
            let text: Option<String> = r.get(3)?;
            states = Some((pk, text.as_deref().map(parse_states).transpose()?.unwrap_or_default()));
        }
        let state = states.as_mut().and_then(|(_, s)| s.remove(&rule.name)).unwrap_or_default();
        out.push((pk, r.get(1)?, rule, state));
    }
    Ok(out)
}
