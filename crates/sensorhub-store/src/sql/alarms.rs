//! Alarms' statements, written once for both backends: a device's rules
//! with their states (one query), states and transitions written, the
//! subscriptions that want alarm events, the rules rewritten, and the
//! reads of the API and the silence watch.

use super::access::SCOPE_FILTER;
use super::by_keys::ByKeys as ByDevices;
use super::{Param, Sql};
use crate::alarm::AlarmEvent;
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

/// A device's row of states: a checkpoint, exact as of every stored
/// reading up to second `through` (`None`: as of none); the readings
/// after it are replayed into it when it is loaded
/// ([`crate::write::checkpoint`]).
#[derive(Debug, Default)]
pub(crate) struct StoredRow {
    pub states: StoredStates,
    pub through: Option<i64>,
}

/// Whether any device has an alarm rule.
pub(crate) async fn any_rules(c: &impl Sql) -> StoreResult<bool> {
    c.query_one("SELECT EXISTS (SELECT 1 FROM alarm_rules)", &[]).await?.get(0)
}

static RULES_OF: ByDevices =
    ByDevices::new("SELECT device_pk, spec FROM alarm_rules WHERE device_pk IN (", ") ORDER BY device_pk, position");

static STATES_OF: ByDevices =
    ByDevices::new("SELECT device_pk, states, through FROM alarm_states WHERE device_pk IN (", ")");

static LATEST_OF: ByDevices = ByDevices::new(
    "SELECT l.device_pk, s.sensor_id, l.second, l.stored_at, l.idx FROM latest l
     JOIN sensors s ON s.device_pk = l.device_pk AND s.idx = l.idx
     WHERE l.device_pk IN (",
    ")",
);

static DEVICE_PKS: ByDevices = ByDevices::new("SELECT id, device_id FROM devices WHERE device_id IN (", ")");

/// The numbers of those of devices `ids` that exist (number, id), a query per 128 devices.
pub(crate) async fn device_pks(c: &impl Sql, ids: &[&str]) -> StoreResult<Vec<(i64, String)>> {
    let mut out = Vec::with_capacity(ids.len());
    DEVICE_PKS
        .each(c, ids, |row| {
            out.push((row.get(0)?, row.get(1)?));
            Ok(())
        })
        .await?;
    Ok(out)
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

/// The stored rows of states of those of devices `pks` that have one, by
/// device, a query per 128 devices.
pub(crate) async fn states_of_many(c: &impl Sql, pks: &[i64]) -> StoreResult<crate::decide::FastMap<i64, StoredRow>> {
    let mut states: crate::decide::FastMap<i64, StoredRow> = Default::default();
    STATES_OF
        .each(c, pks, |row| {
            states.insert(row.get(0)?, StoredRow { states: parse_states(row.text(1)?)?, through: row.get(2)? });
            Ok(())
        })
        .await?;
    Ok(states)
}

/// A sensor's entry of the `latest` index: its newest second, and when
/// (by the server's clock; 0: not known) it was written. Every sensor
/// with a stored reading has one.
pub(crate) struct LatestOf {
    pub sensor_id: String,
    pub idx: i64,
    pub second: i64,
    pub stored_at: i64,
}

/// The `latest` entries of devices `pks`, by device, a query per 128 devices.
pub(crate) async fn latest_of_many(
    c: &impl Sql,
    pks: &[i64],
) -> StoreResult<crate::decide::FastMap<i64, Vec<LatestOf>>> {
    let mut out: crate::decide::FastMap<i64, Vec<LatestOf>> = Default::default();
    LATEST_OF
        .each(c, pks, |row| {
            let entry =
                LatestOf { sensor_id: row.get(1)?, second: row.get(2)?, stored_at: row.get(3)?, idx: row.get(4)? };
            out.entry(row.get(0)?).or_default().push(entry);
            Ok(())
        })
        .await?;
    Ok(out)
}

/// The newest reading second stored of device `pk` (`None`: none).
pub(crate) async fn newest_second(c: &impl Sql, pk: i64) -> StoreResult<Option<i64>> {
    c.query_one("SELECT max(second) FROM latest WHERE device_pk = $1", &[pk.into()]).await?.get(0)
}

/// Devices whose states one statement writes at most.
const STATES_AT_ONCE: usize = 200;

/// The states of one device's rules to be written. Rules left out are forgotten.
pub(crate) struct DeviceStates<'a> {
    pub pk: i64,
    /// Every rule's (name, state).
    pub states: Vec<(&'a str, &'a AlarmState)>,
    /// The newest reading second the states are exact as of.
    pub through: Option<i64>,
    /// Whether as many rules are active as the stored row says (none was
    /// raised or cleared): the row's `active`, and the index of active
    /// devices over it, are then left alone.
    pub active_kept: bool,
}

/// Writes the states of `devices` (checkpoints), a few hundred devices a statement.
pub(crate) async fn put_states(c: &impl Sql, devices: &[DeviceStates<'_>]) -> StoreResult<()> {
    for chunk in devices.chunks(STATES_AT_ONCE) {
        put_state_rows(c, chunk).await?;
    }
    Ok(())
}

/// Marks a transaction that moved states, written or not ([`marks`]): a
/// store that keeps states in memory then reads them again. The mark is a
/// fresh random stamp, not a count: a transaction rolled back after its
/// store kept the stamp leaves a value no later write sets again, where a
/// count would come back to it after one other write and pass the
/// rolled-back states off as the stored ones. Returns the stamp.
pub(crate) async fn stamp_state_write(c: &impl Sql) -> StoreResult<i64> {
    let mut bytes = [0u8; 8];
    sensorhub_core::secret::fill_random(&mut bytes).map_err(|e| crate::StoreError::Backend(e.to_string().into()))?;
    let stamp = i64::from_le_bytes(bytes);
    c.execute("UPDATE alarm_generation SET state_writes = $1", &[stamp.into()]).await?;
    Ok(stamp)
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
    put_rows(c, &kept, "states = excluded.states, through = excluded.through").await?;
    put_rows(c, &moved, "active = excluded.active, states = excluded.states, through = excluded.through").await
}

/// Writes the states of `devices` in one statement, setting `set` on a row that exists.
async fn put_rows(c: &impl Sql, devices: &[&DeviceStates<'_>], set: &str) -> StoreResult<()> {
    if devices.is_empty() {
        return Ok(());
    }
    let texts: Vec<String> = devices.iter().map(|d| stored_text(&d.states)).collect::<StoreResult<_>>()?;
    let mut rows = String::with_capacity(devices.len() * 16);
    let mut params: Vec<Param<'_>> = Vec::with_capacity(devices.len() * 4);
    for (d, text) in devices.iter().zip(&texts) {
        let n = params.len();
        if n > 0 {
            rows.push_str(", ");
        }
        rows.push_str(&format!("(${}, ${}, ${}, ${})", n + 1, n + 2, n + 3, n + 4));
        let active = i32::try_from(d.states.iter().filter(|(_, s)| s.active).count()).unwrap_or(i32::MAX);
        params.extend::<[Param<'_>; 4]>([d.pk.into(), active.into(), text.as_str().into(), d.through.into()]);
    }
    let sql = format!(
        "INSERT INTO alarm_states (device_pk, active, states, through) VALUES {rows}
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

/// Whether any subscription asks for alarm events: when none does (the
/// usual case), a transaction's transitions owe no outbox rows and
/// [`subscriptions_of`] is not asked for each device.
pub(crate) async fn any_alarm_subscriptions(c: &impl Sql) -> StoreResult<bool> {
    let sql = "SELECT EXISTS (SELECT 1 FROM subscriptions WHERE (',' || events || ',') LIKE '%,alarms,%')";
    c.query_one(sql, &[]).await?.get(0)
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

/// The devices visible in `scope` with an active alarm (number, id).
pub(crate) async fn active_devices(c: &impl Sql, scope: Scope) -> StoreResult<Vec<(i64, String)>> {
    let (account, key) = scope.params();
    let sql = format!(
        "SELECT d.id, d.device_id FROM alarm_states s JOIN devices d ON d.id = s.device_pk
         WHERE s.active > 0 AND {SCOPE_FILTER} ORDER BY d.id"
    );
    let rows = c.query(&sql, &[account.into(), key.into()]).await?;
    rows.iter().map(|r| Ok((r.get(0)?, r.get(1)?))).collect()
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
                after: None,
                queued: 0,
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
