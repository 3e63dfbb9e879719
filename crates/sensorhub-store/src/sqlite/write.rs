//! Writes of the SQLite backend: provisioning, imports and admin changes.
//! Every entry point runs in one `IMMEDIATE` transaction: all or nothing.

use super::read::device_sensors;
use super::tx::{SqliteTx, ready};
use crate::decide::subscriptions::provisioned_of;
use crate::decide::{
    self, AccountWrite, Change, KeyWrite, Links, ScopeRequest, SensorWrite, StoredAccount, StoredKey, invalid, now,
};
use crate::hooks::{Outbox, ProvisionedHooks};
use crate::write::readings::{self, ReadingWriter};
use crate::write::remove;
use crate::{ApplyReport, DeleteReport, ImportReport, ReadingSource, StoreError, StoreResult};
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use sensorhub_core::model::{DeviceSpec, ReadingInput};
use sensorhub_core::provision::{AccountSpec, KeyDevices, Provision};
use sensorhub_core::retention::Retention;
use sensorhub_core::secret::{key_digest, key_prefix};
use sensorhub_core::time::TimeRange;
use std::collections::BTreeSet;

pub(super) fn begin(c: &mut Connection) -> StoreResult<Transaction<'_>> {
    Ok(c.transaction_with_behavior(TransactionBehavior::Immediate)?)
}

pub(super) fn apply(
    c: &mut Connection,
    mut doc: Provision,
    readings: Vec<ReadingInput>,
    hooks: Option<ProvisionedHooks>,
) -> StoreResult<ApplyReport> {
    let tx = begin(c)?;
    let mut report = ApplyReport::default();
    let mut devices = Vec::with_capacity(doc.devices.len());
    for (i, d) in doc.devices.iter().enumerate() {
        devices.push(upsert_device(&tx, d, &format!("devices[{i}]"))?);
    }
    for (i, a) in std::mem::take(&mut doc.accounts).into_iter().enumerate() {
        let at = format!("accounts[{i}]");
        let subs = provisioned_of(hooks.as_ref(), &a, &at)?;
        let (account_id, visible) = apply_account(&tx, a, &at, &mut report)?;
        for (p, sealer) in subs {
            report.subscriptions.count(super::hooks::provision(&tx, account_id, &visible, p, sealer)?);
        }
    }
    // Owners last: they may be accounts the document has just created.
    for ((i, d), change) in doc.devices.iter().enumerate().zip(&mut devices) {
        if let Some(owner) = &d.owner
            && set_owner(&tx, &d.device_id, owner, &format!("devices[{i}].owner"))?
        {
            change.touch();
        }
        report.devices.count(*change);
    }
    let sql = SqliteTx(&tx);
    let mut writer = ReadingWriter::new(Outbox::Skip);
    for r in &readings {
        ready(writer.write(&sql, r))?;
    }
    report.readings.updated += ready(writer.finish(&sql))?;
    tx.commit()?;
    Ok(report)
}

/// Creates or updates a device and its listed sensors.
fn upsert_device(tx: &Transaction<'_>, d: &DeviceSpec, at: &str) -> StoreResult<Change> {
    let existing = tx
        .query_row(
            "SELECT id, name, type, lat, long, interval_seconds FROM devices WHERE device_id = ?1",
            [&d.device_id],
            |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, f64>(3)?,
                    r.get::<_, f64>(4)?,
                    r.get::<_, i64>(5)?,
                ))
            },
        )
        .optional()?;
    let (pk, mut change) = match existing {
        None => {
            tx.execute(
                "INSERT INTO devices (device_id, name, type, lat, long, interval_seconds) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![d.device_id, d.name, d.kind, d.lat, d.long, d.interval_seconds],
            )?;
            (tx.last_insert_rowid(), Change::Created)
        }
        Some((pk, name, kind, lat, long, interval)) => {
            if (name, kind, lat, long, interval) == (d.name.clone(), d.kind.clone(), d.lat, d.long, d.interval_seconds)
            {
                (pk, Change::Unchanged)
            } else {
                tx.execute(
                    "UPDATE devices SET name = ?2, type = ?3, lat = ?4, long = ?5, interval_seconds = ?6 WHERE id = ?1",
                    params![pk, d.name, d.kind, d.lat, d.long, d.interval_seconds],
                )?;
                (pk, Change::Updated)
            }
        }
    };
    if let Some(r) = d.retention
        && set_retention(tx, "devices", pk, r)?
    {
        change.touch();
    }
    let current = device_sensors(tx, pk)?;
    for write in decide::sensor_writes(&current, &d.sensors, at)? {
        let (sql, idx, sensor) = match write {
            SensorWrite::Update { idx, sensor } => {
                ("UPDATE sensors SET name = ?4, type = ?5, unit = ?6 WHERE device_pk = ?1 AND idx = ?2", idx, sensor)
            }
            SensorWrite::Insert { idx, sensor } => (
                "INSERT INTO sensors (device_pk, idx, sensor_id, name, type, unit) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                idx,
                sensor,
            ),
        };
        tx.execute(sql, params![pk, idx as i64, sensor.sensor_id, sensor.name, sensor.kind, sensor.unit])?;
        change.touch();
    }
    Ok(change)
}

/// Sets the retention of row `id` of `table` (accounts or devices);
/// whether it changed.
fn set_retention(tx: &Transaction<'_>, table: &str, id: i64, r: Retention) -> StoreResult<bool> {
    let sql = format!("UPDATE {table} SET retention_seconds = ?2 WHERE id = ?1 AND retention_seconds IS NOT ?2");
    Ok(tx.prepare_cached(&sql)?.execute(params![id, r.to_column()])? > 0)
}

fn device_pk(tx: &Transaction<'_>, device_id: &str) -> StoreResult<Option<i64>> {
    let mut stmt = tx.prepare_cached("SELECT id FROM devices WHERE device_id = ?1")?;
    Ok(stmt.query_row([device_id], |r| r.get(0)).optional()?)
}

/// Resolves a list of device ids to their numbers, in order, naming the first unknown one.
pub(super) fn device_pks(tx: &Transaction<'_>, ids: &[String], at: &str) -> StoreResult<Vec<i64>> {
    let mut out = Vec::with_capacity(ids.len());
    for (j, id) in ids.iter().enumerate() {
        out.push(device_pk(tx, id)?.ok_or_else(|| invalid(format!("{at}[{j}]"), format!("unknown device {id:?}")))?);
    }
    Ok(out)
}

/// Makes account `owner` the owner of `device_id`, which it then sees;
/// returns whether anything changed.
fn set_owner(tx: &Transaction<'_>, device_id: &str, owner: &str, at: &str) -> StoreResult<bool> {
    let account: i64 = tx
        .query_row("SELECT id FROM accounts WHERE username = ?1", [owner], |r| r.get(0))
        .optional()?
        .ok_or_else(|| invalid(at, format!("unknown account {owner:?}")))?;
    let changed = tx.execute(
        "UPDATE devices SET owner_id = ?2 WHERE device_id = ?1 AND owner_id IS NOT ?2",
        params![device_id, account],
    )? > 0;
    let linked = tx.execute(
        "INSERT INTO account_devices (account_id, device_pk) SELECT ?1, id FROM devices WHERE device_id = ?2
         ON CONFLICT DO NOTHING",
        params![account, device_id],
    )? > 0;
    Ok(changed || linked)
}

/// The devices an account sees, with its write grants.
fn links_of(tx: &Transaction<'_>, account_id: i64) -> StoreResult<Links> {
    let mut stmt = tx.prepare_cached("SELECT device_pk, can_write FROM account_devices WHERE account_id = ?1")?;
    let links = stmt.query_map([account_id], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?;
    Ok(links)
}

/// Replaces an account's device links with `links`.
fn set_links_of(tx: &Transaction<'_>, account_id: i64, links: &Links) -> StoreResult<()> {
    tx.execute("DELETE FROM account_devices WHERE account_id = ?1", [account_id])?;
    let mut stmt =
        tx.prepare_cached("INSERT INTO account_devices (account_id, device_pk, can_write) VALUES (?1, ?2, ?3)")?;
    for (pk, can_write) in links {
        stmt.execute(params![account_id, pk, can_write])?;
    }
    Ok(())
}

fn pk_set(tx: &Transaction<'_>, sql: &str, id: i64) -> StoreResult<BTreeSet<i64>> {
    let mut stmt = tx.prepare_cached(sql)?;
    let set = stmt.query_map([id], |r| r.get(0))?.collect::<Result<_, _>>()?;
    Ok(set)
}

/// Replaces the rows of a link table for `owner` with `pks`.
fn set_links(tx: &Transaction<'_>, table: &str, owner_col: &str, owner: i64, pks: &BTreeSet<i64>) -> StoreResult<()> {
    tx.execute(&format!("DELETE FROM {table} WHERE {owner_col} = ?1"), [owner])?;
    let mut stmt = tx.prepare_cached(&format!("INSERT INTO {table} ({owner_col}, device_pk) VALUES (?1, ?2)"))?;
    for pk in pks {
        stmt.execute([owner, *pk])?;
    }
    Ok(())
}

/// Makes account item `a` true; returns the account's number and the devices it sees.
fn apply_account(
    tx: &Transaction<'_>,
    a: AccountSpec,
    at: &str,
    report: &mut ApplyReport,
) -> StoreResult<(i64, BTreeSet<i64>)> {
    let stored = tx
        .query_row("SELECT id, password_hash, disabled FROM accounts WHERE username = ?1", [&a.username], |r| {
            Ok(StoredAccount { id: r.get(0)?, password_hash: r.get(1)?, disabled: r.get(2)? })
        })
        .optional()?;
    let (account_id, mut change) = match decide::account_write(&a, stored, at)? {
        AccountWrite::Insert { password_hash, disabled } => {
            tx.execute(
                "INSERT INTO accounts (username, password_hash, disabled, created_at) VALUES (?1, ?2, ?3, ?4)",
                params![a.username, password_hash, disabled, now()],
            )?;
            (tx.last_insert_rowid(), Change::Created)
        }
        AccountWrite::Update { id, password_hash, disabled } => {
            tx.execute(
                "UPDATE accounts SET password_hash = coalesce(?2, password_hash), disabled = coalesce(?3, disabled) WHERE id = ?1",
                params![id, password_hash, disabled],
            )?;
            (id, Change::Updated)
        }
        AccountWrite::Unchanged { id } => (id, Change::Unchanged),
    };
    if let Some(r) = a.retention
        && set_retention(tx, "accounts", account_id, r)?
    {
        change.touch();
    }
    let stored = links_of(tx, account_id)?;
    let owned = pk_set(tx, "SELECT id FROM devices WHERE owner_id = ?1", account_id)?;
    let listed = a.devices.as_ref().map(|l| device_pks(tx, l, &format!("{at}.devices"))).transpose()?;
    let writes = a.write.as_ref().map(|l| device_pks(tx, l, &format!("{at}.write"))).transpose()?;
    let links = decide::account_links(&stored, &owned, listed.as_deref(), writes.as_deref(), at)?;
    if links != stored {
        set_links_of(tx, account_id, &links)?;
        change.touch();
    }
    let visible: BTreeSet<i64> = links.into_keys().collect();
    report.accounts.count(change);
    for (k, key) in a.api_keys.iter().enumerate() {
        let kat = format!("{at}.api_keys[{k}]");
        let scope = match &key.devices {
            Some(KeyDevices::Only(list)) => ScopeRequest::Only(decide::key_scope(
                &device_pks(tx, list, &format!("{kat}.devices"))?,
                &visible,
                &kat,
            )?),
            Some(KeyDevices::All) => ScopeRequest::All,
            None => ScopeRequest::Keep,
        };
        report.api_keys.count(upsert_api_key(tx, account_id, &key.id, scope, key.revoked, &kat)?);
    }
    for (k, key) in a.webhook_keys.iter().enumerate() {
        let kat = format!("{at}.webhook_keys[{k}]");
        report.webhook_keys.count(upsert_webhook_key(tx, account_id, &key.key, key.revoked, &kat)?);
    }
    Ok((account_id, visible))
}

fn upsert_api_key(
    tx: &Transaction<'_>,
    account_id: i64,
    id: &str,
    scope: ScopeRequest,
    revoked: Option<bool>,
    at: &str,
) -> StoreResult<Change> {
    let digest = key_digest(id);
    let stored = tx
        .query_row("SELECT id, account_id, scoped, revoked FROM api_keys WHERE digest = ?1", [&digest[..]], |r| {
            Ok(StoredKey {
                id: r.get(0)?,
                account_id: r.get(1)?,
                scoped: r.get(2)?,
                revoked: r.get(3)?,
                devices: BTreeSet::new(),
            })
        })
        .optional()?;
    let stored = match stored {
        Some(k) => Some(StoredKey {
            devices: pk_set(tx, "SELECT device_pk FROM api_key_devices WHERE key_id = ?1", k.id)?,
            ..k
        }),
        None => None,
    };
    let scope = scope.resolve(stored.as_ref());
    let empty = BTreeSet::new();
    let links = scope.as_ref().unwrap_or(&empty);
    match decide::key_write(account_id, stored, scope.as_ref(), revoked, "API key id", at)? {
        KeyWrite::Unchanged => Ok(Change::Unchanged),
        KeyWrite::Update { id: key_id, revoked } => {
            tx.execute(
                "UPDATE api_keys SET scoped = ?2, revoked = ?3 WHERE id = ?1",
                params![key_id, scope.is_some(), revoked],
            )?;
            set_links(tx, "api_key_devices", "key_id", key_id, links)?;
            Ok(Change::Updated)
        }
        KeyWrite::Insert { revoked } => {
            tx.execute(
                "INSERT INTO api_keys (digest, prefix, account_id, scoped, revoked, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![&digest[..], key_prefix(id), account_id, scope.is_some(), revoked, now()],
            )?;
            set_links(tx, "api_key_devices", "key_id", tx.last_insert_rowid(), links)?;
            Ok(Change::Created)
        }
    }
}

fn upsert_webhook_key(
    tx: &Transaction<'_>,
    account_id: i64,
    key: &str,
    revoked: Option<bool>,
    at: &str,
) -> StoreResult<Change> {
    let digest = key_digest(key);
    let stored = tx
        .query_row("SELECT id, account_id, revoked FROM webhook_keys WHERE digest = ?1", [&digest[..]], |r| {
            Ok(StoredKey {
                id: r.get(0)?,
                account_id: r.get(1)?,
                scoped: false,
                revoked: r.get(2)?,
                devices: BTreeSet::new(),
            })
        })
        .optional()?;
    match decide::key_write(account_id, stored, None, revoked, "webhook key", at)? {
        KeyWrite::Unchanged => Ok(Change::Unchanged),
        KeyWrite::Update { id, revoked } => {
            tx.execute("UPDATE webhook_keys SET revoked = ?2 WHERE id = ?1", params![id, revoked])?;
            Ok(Change::Updated)
        }
        KeyWrite::Insert { revoked } => {
            tx.execute(
                "INSERT INTO webhook_keys (digest, prefix, account_id, revoked, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![&digest[..], key_prefix(key), account_id, revoked, now()],
            )?;
            Ok(Change::Created)
        }
    }
}

/// Stores readings from `source` in one transaction ([`crate::write::readings::import`]).
pub(super) fn import(
    c: &mut Connection,
    source: ReadingSource,
    limit: Option<std::time::Duration>,
    outbox: Outbox,
) -> StoreResult<(ImportReport, Option<ReadingSource>)> {
    let tx = begin(c)?;
    let out = ready(readings::import(&SqliteTx(&tx), source, limit, outbox))?;
    tx.commit()?;
    Ok(out)
}

/// Stores single readings in one transaction, each with its own outcome
/// ([`crate::write::readings::ingest_group`]). An error of the transaction
/// itself (busy, disk full) is everyone's: nothing is written then.
pub(super) fn ingest_group(c: &mut Connection, group: &[ReadingInput]) -> StoreResult<Vec<StoreResult<()>>> {
    let tx = begin(c)?;
    let outcomes = ready(readings::ingest_group(&SqliteTx(&tx), group))?;
    tx.commit()?;
    Ok(outcomes)
}

pub(super) fn revoke_api_key(c: &mut Connection, id_or_prefix: &str) -> StoreResult<String> {
    let tx = begin(c)?;
    let digest = key_digest(id_or_prefix);
    let mut found: Vec<(i64, String)> = {
        let mut stmt = tx.prepare("SELECT id, prefix FROM api_keys WHERE digest = ?1")?;
        stmt.query_map([&digest[..]], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?
    };
    if found.is_empty() && !id_or_prefix.is_empty() {
        let mut stmt = tx.prepare("SELECT id, prefix FROM api_keys WHERE prefix = ?1 AND revoked = 0")?;
        found = stmt.query_map([id_or_prefix], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?;
    }
    let (id, prefix) = match found.as_slice() {
        [one] => one.clone(),
        [] => return Err(StoreError::NotFound(format!("no API key matches {:?}", key_prefix(id_or_prefix)))),
        _ => {
            return Err(StoreError::Conflict(format!(
                "several keys start with {id_or_prefix:?}: give the whole key id"
            )));
        }
    };
    tx.execute("UPDATE api_keys SET revoked = 1 WHERE id = ?1", [id])?;
    tx.commit()?;
    Ok(prefix)
}

pub(super) fn grant_write_to_viewers(c: &mut Connection) -> StoreResult<u64> {
    let tx = begin(c)?;
    let n = tx.execute(
        "UPDATE account_devices SET can_write = 1 WHERE can_write = 0
         AND NOT EXISTS (SELECT 1 FROM devices d WHERE d.id = device_pk AND d.owner_id = account_id)",
        [],
    )?;
    tx.commit()?;
    Ok(n as u64)
}

pub(super) fn delete_readings(c: &mut Connection, device_id: &str, range: TimeRange) -> StoreResult<DeleteReport> {
    let tx = begin(c)?;
    let report = ready(remove::delete_readings(&SqliteTx(&tx), device_id, range))?;
    tx.commit()?;
    Ok(report)
}

/// One transaction of [`crate::Store::add_hour_summaries`] ([`remove::add_hour_summaries`]).
pub(super) fn add_hour_summaries(
    c: &mut Connection,
    after: Option<(i64, i64)>,
    batch: usize,
) -> StoreResult<(Option<(i64, i64)>, u64)> {
    let tx = begin(c)?;
    let out = ready(remove::add_hour_summaries(&SqliteTx(&tx), after, batch))?;
    tx.commit()?;
    Ok(out)
}
