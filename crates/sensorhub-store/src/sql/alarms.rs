//! Alarms' statements, written once for both backends: a device's rules
//! with their states (one query), states and transitions written, the
//! subscriptions that want alarm events, the rules rewritten, and the
//! reads of the API and the silence watch.

use super::access::{SCOPE_FILTER, scope_params};
use super::{Param, Row, Sql};
use crate::alarm::{Alarm, AlarmEvent};
use crate::{Scope, StoreError, StoreResult};
use sensorhub_core::alarm::{AlarmRule, AlarmState, RuleSpec, TransitionKind};

/// The columns of a rule with its state, for [`rule_with_state`].
const RULE_AND_STATE: &str = "r.name, r.spec, s.active, s.level, s.raised_at, s.level_since, s.acknowledged_at,
    s.value, s.timestamp, s.memo";

/// A stored rule spec, read back.
pub(crate) fn parse_rule(spec: &str) -> StoreResult<AlarmRule> {
    let spec: RuleSpec = serde_json::from_str(spec).map_err(|e| StoreError::Backend(e.into()))?;
    spec.check("rule").map_err(|e| StoreError::Backend(format!("a stored alarm rule is invalid: {e}").into()))
}

/// A rule and its state from columns `from..from + 10` ([`RULE_AND_STATE`]);
/// a rule without a stored state starts at rest.
fn rule_with_state(r: &Row, from: usize) -> StoreResult<(AlarmRule, AlarmState)> {
    let rule = parse_rule(&r.get::<String>(from + 1)?)?;
    let Some(active) = r.get::<Option<bool>>(from + 2)? else { return Ok((rule, AlarmState::default())) };
    let memo: String = r.get(from + 9)?;
    let state = AlarmState {
        active,
        level: r.get(from + 3)?,
        raised_at: r.get(from + 4)?,
        level_since: r.get(from + 5)?,
        acknowledged_at: r.get(from + 6)?,
        value: r.get(from + 7)?,
        timestamp: r.get(from + 8)?,
        memo: serde_json::from_str(&memo).map_err(|e| StoreError::Backend(e.into()))?,
    };
    Ok((rule, state))
}

/// Device `pk`'s rules in order, each with its state.
pub(crate) async fn rules_of(c: &impl Sql, pk: i64) -> StoreResult<Vec<(AlarmRule, AlarmState)>> {
    let sql = format!(
        "SELECT {RULE_AND_STATE} FROM alarm_rules r
         LEFT JOIN alarm_states s ON s.device_pk = r.device_pk AND s.rule = r.name
         WHERE r.device_pk = $1 ORDER BY r.position"
    );
    c.query(&sql, &[pk.into()]).await?.iter().map(|r| rule_with_state(r, 0)).collect()
}

/// Devices a query of several names at once ([`rules_of_many`]): the
/// statement is the same for every chunk (the last padded), so it is
/// prepared once.
const DEVICES_AT_ONCE: usize = 128;

/// Whether any device has an alarm rule.
pub(crate) async fn any_rules(c: &impl Sql) -> StoreResult<bool> {
    c.query_one("SELECT EXISTS (SELECT 1 FROM alarm_rules)", &[]).await?.get(0)
}

/// The rules in order, each with its state, of those of devices `pks`
/// that have rules, by device.
pub(crate) async fn rules_of_many(
    c: &impl Sql,
    pks: &[i64],
) -> StoreResult<crate::decide::FastMap<i64, Vec<(AlarmRule, AlarmState)>>> {
    let list: Vec<String> = (1..=DEVICES_AT_ONCE).map(|i| format!("${i}")).collect();
    let sql = format!(
        "SELECT r.device_pk, {RULE_AND_STATE} FROM alarm_rules r
         LEFT JOIN alarm_states s ON s.device_pk = r.device_pk AND s.rule = r.name
         WHERE r.device_pk IN ({}) ORDER BY r.device_pk, r.position",
        list.join(", ")
    );
    let mut out = crate::decide::FastMap::default();
    for chunk in pks.chunks(DEVICES_AT_ONCE) {
        let last = chunk.last().copied().unwrap_or_default();
        let params: Vec<Param<'_>> =
            chunk.iter().copied().chain(std::iter::repeat(last)).take(DEVICES_AT_ONCE).map(Param::from).collect();
        for row in c.query(&sql, &params).await? {
            let pk: i64 = row.get(0)?;
            out.entry(pk).or_insert_with(Vec::new).push(rule_with_state(&row, 1)?);
        }
    }
    Ok(out)
}

/// States written by one statement at most.
const STATES_AT_ONCE: usize = 200;

/// Writes `states` (device, rule, state), a few hundred a statement.
pub(crate) async fn put_states(c: &impl Sql, states: &[(i64, &str, &AlarmState)]) -> StoreResult<()> {
    for chunk in states.chunks(STATES_AT_ONCE) {
        put_state_rows(c, chunk).await?;
    }
    Ok(())
}

/// Writes `states` in one statement.
async fn put_state_rows(c: &impl Sql, states: &[(i64, &str, &AlarmState)]) -> StoreResult<()> {
    if states.is_empty() {
        return Ok(());
    }
    let memos: Vec<String> = states
        .iter()
        .map(|(_, _, s)| serde_json::to_string(&s.memo).map_err(|e| StoreError::Backend(e.into())))
        .collect::<StoreResult<_>>()?;
    let mut rows = Vec::with_capacity(states.len());
    let mut params: Vec<Param<'_>> = Vec::with_capacity(states.len() * 10);
    for ((pk, rule, s), memo) in states.iter().zip(&memos) {
        let n = params.len();
        rows.push(format!(
            "(${}, ${}, ${}, ${}, ${}, ${}, ${}, ${}, ${}, ${})",
            n + 1,
            n + 2,
            n + 3,
            n + 4,
            n + 5,
            n + 6,
            n + 7,
            n + 8,
            n + 9,
            n + 10
        ));
        let level = s.level.map(|l| i32::try_from(l).unwrap_or(i32::MAX));
        params.extend::<[Param<'_>; 10]>([
            (*pk).into(),
            (*rule).into(),
            s.active.into(),
            level.into(),
            s.raised_at.into(),
            s.level_since.into(),
            s.acknowledged_at.into(),
            s.value.into(),
            s.timestamp.into(),
            memo.as_str().into(),
        ]);
    }
    let sql = format!(
        "INSERT INTO alarm_states (device_pk, rule, active, level, raised_at, level_since, acknowledged_at, value,
                                   timestamp, memo)
         VALUES {}
         ON CONFLICT (device_pk, rule) DO UPDATE SET active = excluded.active, level = excluded.level,
             raised_at = excluded.raised_at, level_since = excluded.level_since,
             acknowledged_at = excluded.acknowledged_at, value = excluded.value, timestamp = excluded.timestamp,
             memo = excluded.memo",
        rows.join(", ")
    );
    c.execute(&sql, &params).await?;
    Ok(())
}

/// Forgets the state of device `pk`'s rule `rule`.
pub(crate) async fn remove_state(c: &impl Sql, pk: i64, rule: &str) -> StoreResult<()> {
    c.execute("DELETE FROM alarm_states WHERE device_pk = $1 AND rule = $2", &[pk.into(), rule.into()]).await?;
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
    rows.iter().map(|r| Ok((r.get(0)?, parse_rule(&r.get::<String>(1)?)?))).collect()
}

/// The active alarms of the devices visible in `scope`.
pub(crate) async fn active(c: &impl Sql, scope: Scope) -> StoreResult<Vec<Alarm>> {
    let (account, key) = scope_params(scope);
    let sql = format!(
        "SELECT d.device_id, {RULE_AND_STATE} FROM alarm_states s
         JOIN alarm_rules r ON r.device_pk = s.device_pk AND r.name = s.rule
         JOIN devices d ON d.id = s.device_pk
         WHERE s.active AND {SCOPE_FILTER}"
    );
    let rows = c.query(&sql, &[account.into(), key.into()]).await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        let (rule, state) = rule_with_state(r, 1)?;
        out.push(Alarm { device_id: r.get(0)?, rule, state });
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

/// The number that moves whenever an alarm rule is added, changed or removed.
pub(crate) async fn generation(c: &impl Sql) -> StoreResult<i64> {
    c.query_one("SELECT generation FROM alarm_generation", &[]).await?.get(0)
}

/// Every silence rule of every device (its number and id), with its state.
pub(crate) async fn silence_rules(c: &impl Sql) -> StoreResult<Vec<(i64, String, AlarmRule, AlarmState)>> {
    let sql = format!(
        "SELECT r.device_pk, d.device_id, {RULE_AND_STATE} FROM alarm_rules r
         JOIN devices d ON d.id = r.device_pk
         LEFT JOIN alarm_states s ON s.device_pk = r.device_pk AND s.rule = r.name
         WHERE r.spec LIKE '%\"no_data_for\"%'"
    );
    let mut out = Vec::new();
    for r in c.query(&sql, &[]).await? {
        let (rule, state) = rule_with_state(&r, 2)?;
        if matches!(rule.kind, sensorhub_core::alarm::RuleKind::Silence(_)) {
            out.push((r.get(0)?, r.get(1)?, rule, state));
        }
    }
    Ok(out)
}
