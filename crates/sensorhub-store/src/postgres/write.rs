//! Writes of the PostgreSQL backend: provisioning, imports and admin
//! changes, each in one transaction. Writers take one advisory lock for the
//! transaction, so that writes from several processes are serialised as on
//! SQLite and two `apply` runs cannot both create the same device. Hours of
//! readings go in with `COPY … FROM STDIN (FORMAT binary)` into a staging
//! table, then one `INSERT … ON CONFLICT` moves them into place.

use super::read::device_sensors;
use super::tx::PgTx;
use crate::decide::subscriptions::provisioned_of;
use crate::decide::{
    self, AccountWrite, Change, KeyWrite, Links, ScopeRequest, SensorWrite, StoredAccount, StoredKey, invalid, now,
};
use crate::hooks::{Outbox, ProvisionedHooks};
use crate::write::readings::{self, ReadingWriter};
use crate::write::remove;
use crate::{ApplyReport, DeleteReport, ImportReport, ReadingSource, StoreError, StoreResult};
use deadpool_postgres::{Client, GenericClient, Transaction};
use sensorhub_core::model::{DeviceSpec, ReadingInput};
use sensorhub_core::provision::{AccountSpec, KeyDevices, Provision};
use sensorhub_core::retention::Retention;
use sensorhub_core::secret::{key_digest, key_prefix};
use sensorhub_core::time::TimeRange;
use std::collections::BTreeSet;

/// The advisory lock every writing transaction holds ("writes").
const WRITE_LOCK: i64 = 0x7772_6974_6573;

/// Begins a writing transaction: waits at most the session's
/// `lock_timeout` (5 s, [`super::SESSION_OPTIONS`]) for the write lock,
/// then fails with [`StoreError::Busy`].
pub(super) async fn begin(c: &mut Client) -> StoreResult<Transaction<'_>> {
    let tx = c.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&WRITE_LOCK]).await?;
    Ok(tx)
}

/// Begins a bulk writing transaction (import, copy, delete): as [`begin`],
/// without the statement time limit that guards requests.
pub(super) async fn begin_bulk(c: &mut Client) -> StoreResult<Transaction<'_>> {
    let tx = begin(c).await?;
    tx.batch_execute("SET LOCAL statement_timeout = 0").await?;
    Ok(tx)
}

pub(super) async fn apply(
    c: &mut Client,
    mut doc: Provision,
    readings: Vec<ReadingInput>,
    hooks: Option<ProvisionedHooks>,
) -> StoreResult<ApplyReport> {
    let tx = begin_bulk(c).await?;
    let mut report = ApplyReport::default();
    let mut devices = Vec::with_capacity(doc.devices.len());
    for (i, d) in doc.devices.iter().enumerate() {
        devices.push(upsert_device(&tx, d, &format!("devices[{i}]")).await?);
    }
    for (i, a) in std::mem::take(&mut doc.accounts).into_iter().enumerate() {
        let at = format!("accounts[{i}]");
        let subs = provisioned_of(hooks.as_ref(), &a, &at)?;
        let (account_id, visible) = apply_account(&tx, a, &at, &mut report).await?;
        for (p, sealer) in subs {
            report.subscriptions.count(super::hooks::provision(&tx, account_id, &visible, p, sealer).await?);
        }
    }
    // Owners last: they may be accounts the document has just created.
    for ((i, d), change) in doc.devices.iter().enumerate().zip(&mut devices) {
        if let Some(owner) = &d.owner
            && set_owner(&tx, &d.device_id, owner, &format!("devices[{i}].owner")).await?
        {
            change.touch();
        }
        report.devices.count(*change);
    }
    let pg = PgTx::new(&tx);
    let mut writer = ReadingWriter::new(Outbox::Skip);
    for r in &readings {
        writer.write(&pg, r).await?;
    }
    report.readings.updated += writer.finish(&pg).await?;
    tx.commit().await?;
    Ok(report)
}

/// Creates or updates a device and its listed sensors.
async fn upsert_device(tx: &Transaction<'_>, d: &DeviceSpec, at: &str) -> StoreResult<Change> {
    let existing = tx
        .query_opt(
            "SELECT id, name, type, lat, long, interval_seconds FROM devices WHERE device_id = $1",
            &[&d.device_id],
        )
        .await?;
    let (pk, mut change) = match existing {
        None => {
            let row = tx
                .query_one(
                    "INSERT INTO devices (device_id, name, type, lat, long, interval_seconds)
                     VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
                    &[&d.device_id, &d.name, &d.kind, &d.lat, &d.long, &d.interval_seconds],
                )
                .await?;
            (row.get::<_, i64>(0), Change::Created)
        }
        Some(r) => {
            let pk: i64 = r.get(0);
            let stored: (String, String, f64, f64, i64) = (r.get(1), r.get(2), r.get(3), r.get(4), r.get(5));
            if stored == (d.name.clone(), d.kind.clone(), d.lat, d.long, d.interval_seconds) {
                (pk, Change::Unchanged)
            } else {
                tx.execute(
                    "UPDATE devices SET name = $2, type = $3, lat = $4, long = $5, interval_seconds = $6 WHERE id = $1",
                    &[&pk, &d.name, &d.kind, &d.lat, &d.long, &d.interval_seconds],
                )
                .await?;
                (pk, Change::Updated)
            }
        }
    };
    if let Some(r) = d.retention
        && set_retention(tx, "devices", pk, r).await?
    {
        change.touch();
    }
    let current = device_sensors(tx, pk).await?;
    for write in decide::sensor_writes(&current, &d.sensors, at)? {
        let (sql, idx, s) = match write {
            SensorWrite::Update { idx, sensor } => (
                "UPDATE sensors SET sensor_id = $3, name = $4, type = $5, unit = $6 WHERE device_pk = $1 AND idx = $2",
                idx,
                sensor,
            ),
            SensorWrite::Insert { idx, sensor } => (
                "INSERT INTO sensors (device_pk, idx, sensor_id, name, type, unit) VALUES ($1, $2, $3, $4, $5, $6)",
                idx,
                sensor,
            ),
        };
        tx.execute(sql, &[&pk, &(idx as i16), &s.sensor_id, &s.name, &s.kind, &s.unit]).await?;
        change.touch();
    }
    Ok(change)
}

/// Sets the retention of row `id` of `table` (accounts or devices);
/// whether it changed.
async fn set_retention(tx: &Transaction<'_>, table: &str, id: i64, r: Retention) -> StoreResult<bool> {
    let sql =
        format!("UPDATE {table} SET retention_seconds = $2 WHERE id = $1 AND retention_seconds IS DISTINCT FROM $2");
    Ok(tx.execute(&sql, &[&id, &r.to_column()]).await? > 0)
}

async fn device_pk(tx: &Transaction<'_>, device_id: &str) -> StoreResult<Option<i64>> {
    let stmt = tx.prepare_cached("SELECT id FROM devices WHERE device_id = $1").await?;
    Ok(tx.query_opt(&stmt, &[&device_id]).await?.map(|r| r.get(0)))
}

/// Resolves a list of device ids to their numbers, in order, naming the first unknown one.
pub(super) async fn device_pks(tx: &Transaction<'_>, ids: &[String], at: &str) -> StoreResult<Vec<i64>> {
    let mut out = Vec::with_capacity(ids.len());
    for (j, id) in ids.iter().enumerate() {
        let pk = device_pk(tx, id).await?;
        out.push(pk.ok_or_else(|| invalid(format!("{at}[{j}]"), format!("unknown device {id:?}")))?);
    }
    Ok(out)
}

/// Makes account `owner` the owner of `device_id`, which it then sees;
/// returns whether anything changed.
async fn set_owner(tx: &Transaction<'_>, device_id: &str, owner: &str, at: &str) -> StoreResult<bool> {
    let account: i64 = tx
        .query_opt("SELECT id FROM accounts WHERE username = $1", &[&owner])
        .await?
        .map(|r| r.get(0))
        .ok_or_else(|| invalid(at, format!("unknown account {owner:?}")))?;
    let changed = tx
        .execute(
            "UPDATE devices SET owner_id = $2 WHERE device_id = $1 AND owner_id IS DISTINCT FROM $2",
            &[&device_id, &account],
        )
        .await?
        > 0;
    let linked = tx
        .execute(
            "INSERT INTO account_devices (account_id, device_pk) SELECT $1, id FROM devices WHERE device_id = $2
             ON CONFLICT DO NOTHING",
            &[&account, &device_id],
        )
        .await?
        > 0;
    Ok(changed || linked)
}

/// The devices an account sees, with its write grants.
async fn links_of(tx: &Transaction<'_>, account_id: i64) -> StoreResult<Links> {
    let rows =
        tx.query("SELECT device_pk, can_write FROM account_devices WHERE account_id = $1", &[&account_id]).await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Replaces an account's device links with `links`.
async fn set_links_of(tx: &Transaction<'_>, account_id: i64, links: &Links) -> StoreResult<()> {
    tx.execute("DELETE FROM account_devices WHERE account_id = $1", &[&account_id]).await?;
    let (pks, writes): (Vec<i64>, Vec<bool>) = links.iter().map(|(pk, w)| (*pk, *w)).unzip();
    tx.execute(
        "INSERT INTO account_devices (account_id, device_pk, can_write)
         SELECT $1, * FROM unnest($2::bigint[], $3::boolean[])",
        &[&account_id, &pks, &writes],
    )
    .await?;
    Ok(())
}

async fn pk_set(tx: &Transaction<'_>, sql: &str, id: i64) -> StoreResult<BTreeSet<i64>> {
    Ok(tx.query(sql, &[&id]).await?.iter().map(|r| r.get(0)).collect())
}

/// Replaces the rows of a link table for `owner` with `pks`.
async fn set_links(
    tx: &Transaction<'_>,
    table: &str,
    owner_col: &str,
    owner: i64,
    pks: &BTreeSet<i64>,
) -> StoreResult<()> {
    tx.execute(&format!("DELETE FROM {table} WHERE {owner_col} = $1"), &[&owner]).await?;
    let pks: Vec<i64> = pks.iter().copied().collect();
    tx.execute(
        &format!("INSERT INTO {table} ({owner_col}, device_pk) SELECT $1, unnest($2::bigint[])"),
        &[&owner, &pks],
    )
    .await?;
    Ok(())
}

/// Makes account item `a` true; returns the account's number and the devices it sees.
async fn apply_account(
    tx: &Transaction<'_>,
    a: AccountSpec,
    at: &str,
    report: &mut ApplyReport,
) -> StoreResult<(i64, BTreeSet<i64>)> {
    let stored = tx
        .query_opt("SELECT id, password_hash, disabled FROM accounts WHERE username = $1", &[&a.username])
        .await?
        .map(|r| StoredAccount { id: r.get(0), password_hash: r.get(1), disabled: r.get(2) });
    let (account_id, mut change) = match decide::account_write(&a, stored, at)? {
        AccountWrite::Insert { password_hash, disabled } => {
            let row = tx
                .query_one(
                    "INSERT INTO accounts (username, password_hash, disabled, created_at) VALUES ($1, $2, $3, $4)
                     RETURNING id",
                    &[&a.username, &password_hash, &disabled, &now()],
                )
                .await?;
            (row.get::<_, i64>(0), Change::Created)
        }
        AccountWrite::Update { id, password_hash, disabled } => {
            tx.execute(
                "UPDATE accounts SET password_hash = coalesce($2, password_hash), disabled = coalesce($3, disabled)
                 WHERE id = $1",
                &[&id, &password_hash, &disabled],
            )
            .await?;
            (id, Change::Updated)
        }
        AccountWrite::Unchanged { id } => (id, Change::Unchanged),
    };
    if let Some(r) = a.retention
        && set_retention(tx, "accounts", account_id, r).await?
    {
        change.touch();
    }
    let stored = links_of(tx, account_id).await?;
    let owned = pk_set(tx, "SELECT id FROM devices WHERE owner_id = $1", account_id).await?;
    let listed = match &a.devices {
        Some(list) => Some(device_pks(tx, list, &format!("{at}.devices")).await?),
        None => None,
    };
    let writes = match &a.write {
        Some(list) => Some(device_pks(tx, list, &format!("{at}.write")).await?),
        None => None,
    };
    let links = decide::account_links(&stored, &owned, listed.as_deref(), writes.as_deref(), at)?;
    if links != stored {
        set_links_of(tx, account_id, &links).await?;
        change.touch();
    }
    let visible: BTreeSet<i64> = links.into_keys().collect();
    report.accounts.count(change);
    for (k, key) in a.api_keys.iter().enumerate() {
        let kat = format!("{at}.api_keys[{k}]");
        let scope = match &key.devices {
            Some(KeyDevices::Only(list)) => ScopeRequest::Only(decide::key_scope(
                &device_pks(tx, list, &format!("{kat}.devices")).await?,
                &visible,
                &kat,
            )?),
            Some(KeyDevices::All) => ScopeRequest::All,
            None => ScopeRequest::Keep,
        };
        report.api_keys.count(upsert_api_key(tx, account_id, &key.id, scope, key.revoked, &kat).await?);
    }
    for (k, key) in a.webhook_keys.iter().enumerate() {
        let kat = format!("{at}.webhook_keys[{k}]");
        report.webhook_keys.count(upsert_webhook_key(tx, account_id, &key.key, key.revoked, &kat).await?);
    }
    Ok((account_id, visible))
}

async fn upsert_api_key(
    tx: &Transaction<'_>,
    account_id: i64,
    id: &str,
    scope: ScopeRequest,
    revoked: Option<bool>,
    at: &str,
) -> StoreResult<Change> {
    let digest = key_digest(id);
    let row =
        tx.query_opt("SELECT id, account_id, scoped, revoked FROM api_keys WHERE digest = $1", &[&&digest[..]]).await?;
    let stored = match row {
        Some(r) => {
            let key_id: i64 = r.get(0);
            let devices = pk_set(tx, "SELECT device_pk FROM api_key_devices WHERE key_id = $1", key_id).await?;
            Some(StoredKey { id: key_id, account_id: r.get(1), scoped: r.get(2), revoked: r.get(3), devices })
        }
        None => None,
    };
    let scope = scope.resolve(stored.as_ref());
    let empty = BTreeSet::new();
    let links = scope.as_ref().unwrap_or(&empty);
    match decide::key_write(account_id, stored, scope.as_ref(), revoked, "API key id", at)? {
        KeyWrite::Unchanged => Ok(Change::Unchanged),
        KeyWrite::Update { id: key_id, revoked } => {
            tx.execute(
                "UPDATE api_keys SET scoped = $2, revoked = $3 WHERE id = $1",
                &[&key_id, &scope.is_some(), &revoked],
            )
            .await?;
            set_links(tx, "api_key_devices", "key_id", key_id, links).await?;
            Ok(Change::Updated)
        }
        KeyWrite::Insert { revoked } => {
            let row = tx
                .query_one(
                    "INSERT INTO api_keys (digest, prefix, account_id, scoped, revoked, created_at)
                     VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
                    &[&&digest[..], &key_prefix(id), &account_id, &scope.is_some(), &revoked, &now()],
                )
                .await?;
            set_links(tx, "api_key_devices", "key_id", row.get(0), links).await?;
            Ok(Change::Created)
        }
    }
}

async fn upsert_webhook_key(
    tx: &Transaction<'_>,
    account_id: i64,
    key: &str,
    revoked: Option<bool>,
    at: &str,
) -> StoreResult<Change> {
    let digest = key_digest(key);
    let stored = tx
        .query_opt("SELECT id, account_id, revoked FROM webhook_keys WHERE digest = $1", &[&&digest[..]])
        .await?
        .map(|r| StoredKey {
            id: r.get(0),
            account_id: r.get(1),
            scoped: false,
            revoked: r.get(2),
            devices: BTreeSet::new(),
        });
    match decide::key_write(account_id, stored, None, revoked, "webhook key", at)? {
        KeyWrite::Unchanged => Ok(Change::Unchanged),
        KeyWrite::Update { id, revoked } => {
            tx.execute("UPDATE webhook_keys SET revoked = $2 WHERE id = $1", &[&id, &revoked]).await?;
            Ok(Change::Updated)
        }
        KeyWrite::Insert { revoked } => {
            tx.execute(
                "INSERT INTO webhook_keys (digest, prefix, account_id, revoked, created_at) VALUES ($1, $2, $3, $4, $5)",
                &[&&digest[..], &key_prefix(key), &account_id, &revoked, &now()],
            )
            .await?;
            Ok(Change::Created)
        }
    }
}

/// Stores readings from `source` in one transaction ([`crate::write::readings::import`]).
pub(super) async fn import(
    c: &mut Client,
    source: ReadingSource,
    limit: Option<std::time::Duration>,
    outbox: Outbox,
) -> StoreResult<(ImportReport, Option<ReadingSource>)> {
    let tx = begin_bulk(c).await?;
    let out = readings::import(&PgTx::new(&tx), source, limit, outbox).await?;
    tx.commit().await?;
    Ok(out)
}

/// Stores single readings in one transaction, each with its own outcome
/// ([`crate::write::readings::ingest_group`]). An error of the transaction
/// itself (a lock wait past its limit, a lost connection) is everyone's:
/// nothing is written then.
pub(super) async fn ingest_group(c: &mut Client, group: &[ReadingInput]) -> StoreResult<Vec<StoreResult<()>>> {
    let tx = begin(c).await?;
    let outcomes = readings::ingest_group(&PgTx::new(&tx), group).await?;
    tx.commit().await?;
    Ok(outcomes)
}

pub(super) async fn revoke_api_key(c: &mut Client, id_or_prefix: &str) -> StoreResult<String> {
    let tx = begin(c).await?;
    let digest = key_digest(id_or_prefix);
    let mut found = tx.query("SELECT id, prefix FROM api_keys WHERE digest = $1", &[&&digest[..]]).await?;
    if found.is_empty() && !id_or_prefix.is_empty() {
        found = tx.query("SELECT id, prefix FROM api_keys WHERE prefix = $1 AND NOT revoked", &[&id_or_prefix]).await?;
    }
    let (id, prefix): (i64, String) = match found.as_slice() {
        [one] => (one.get(0), one.get(1)),
        [] => return Err(StoreError::NotFound(format!("no API key matches {:?}", key_prefix(id_or_prefix)))),
        _ => {
            return Err(StoreError::Conflict(format!(
                "several keys start with {id_or_prefix:?}: give the whole key id"
            )));
        }
    };
    tx.execute("UPDATE api_keys SET revoked = true WHERE id = $1", &[&id]).await?;
    tx.commit().await?;
    Ok(prefix)
}

pub(super) async fn grant_write_to_viewers(c: &mut Client) -> StoreResult<u64> {
    let tx = begin(c).await?;
    let n = tx
        .execute(
            "UPDATE account_devices x SET can_write = true WHERE NOT x.can_write
             AND NOT EXISTS (SELECT 1 FROM devices d WHERE d.id = x.device_pk AND d.owner_id = x.account_id)",
            &[],
        )
        .await?;
    tx.commit().await?;
    Ok(n)
}

pub(super) async fn delete_readings(c: &mut Client, device_id: &str, range: TimeRange) -> StoreResult<DeleteReport> {
    let tx = begin_bulk(c).await?;
    let report = remove::delete_readings(&PgTx::new(&tx), device_id, range).await?;
    tx.commit().await?;
    Ok(report)
}

/// One transaction of [`crate::Store::add_hour_summaries`] ([`remove::add_hour_summaries`]),
/// under the write lock: a concurrent write to the same hour must not be lost.
pub(super) async fn add_hour_summaries(
    c: &mut Client,
    after: Option<(i64, i64)>,
    batch: usize,
) -> StoreResult<(Option<(i64, i64)>, u64)> {
    let tx = begin_bulk(c).await?;
    let out = remove::add_hour_summaries(&PgTx::new(&tx), after, batch).await?;
    tx.commit().await?;
    Ok(out)
}
