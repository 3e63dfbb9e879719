//! Whole-installation export and restore of the SQLite backend, for
//! `sensorhub copy`: rows by natural key, ids renumbered on the way in.

use super::write::begin;
use super::{hour_key, key_chunk};
use crate::{
    AccountDeviceRow, AccountRow, DeviceRow, Installation, KeyRow, SensorRow, StoreError, StoreResult, StoredHour,
};
use rusqlite::{Connection, OptionalExtension, Transaction, params};
use sensorhub_core::model::SensorMeta;
use std::collections::HashMap;

fn rows<T>(c: &Connection, sql: &str, f: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>) -> StoreResult<Vec<T>> {
    let mut stmt = c.prepare(sql)?;
    let out = stmt.query_map([], f)?.collect::<Result<_, _>>()?;
    Ok(out)
}

fn key_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<KeyRow> {
    Ok(KeyRow {
        digest: r.get(0)?,
        prefix: r.get(1)?,
        username: r.get(2)?,
        scoped: r.get(3)?,
        revoked: r.get(4)?,
        created_at: r.get(5)?,
    })
}

pub(super) fn export(c: &mut Connection) -> StoreResult<Installation> {
    let tx = c.transaction()?;
    let out = Installation {
        accounts: rows(
            &tx,
            "SELECT username, password_hash, disabled, created_at FROM accounts ORDER BY username",
            |r| {
                Ok(AccountRow {
                    username: r.get(0)?,
                    password_hash: r.get(1)?,
                    disabled: r.get(2)?,
                    created_at: r.get(3)?,
                })
            },
        )?,
        devices: rows(
            &tx,
            "SELECT d.device_id, d.name, d.type, d.lat, d.long, d.interval_seconds, a.username FROM devices d
             LEFT JOIN accounts a ON a.id = d.owner_id ORDER BY d.device_id",
            |r| {
                Ok(DeviceRow {
                    device_id: r.get(0)?,
                    name: r.get(1)?,
                    kind: r.get(2)?,
                    lat: r.get(3)?,
                    long: r.get(4)?,
                    interval_seconds: r.get(5)?,
                    owner: r.get(6)?,
                })
            },
        )?,
        sensors: rows(
            &tx,
            "SELECT d.device_id, s.idx, s.sensor_id, s.name, s.type, s.unit FROM sensors s
             JOIN devices d ON d.id = s.device_pk ORDER BY d.device_id, s.idx",
            |r| {
                Ok(SensorRow {
                    device_id: r.get(0)?,
                    idx: r.get(1)?,
                    sensor: SensorMeta { sensor_id: r.get(2)?, name: r.get(3)?, kind: r.get(4)?, unit: r.get(5)? },
                })
            },
        )?,
        account_devices: rows(
            &tx,
            "SELECT a.username, d.device_id, x.can_write FROM account_devices x JOIN accounts a ON a.id = x.account_id
             JOIN devices d ON d.id = x.device_pk ORDER BY a.username, d.device_id",
            |r| Ok(AccountDeviceRow { username: r.get(0)?, device_id: r.get(1)?, can_write: r.get(2)? }),
        )?,
        api_keys: rows(
            &tx,
            "SELECT k.digest, k.prefix, a.username, k.scoped, k.revoked, k.created_at FROM api_keys k
             JOIN accounts a ON a.id = k.account_id ORDER BY k.digest",
            key_row,
        )?,
        api_key_devices: rows(
            &tx,
            "SELECT k.digest, d.device_id FROM api_key_devices x JOIN api_keys k ON k.id = x.key_id
             JOIN devices d ON d.id = x.device_pk ORDER BY k.digest, d.device_id",
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?,
        webhook_keys: rows(
            &tx,
            "SELECT k.digest, k.prefix, a.username, 0, k.revoked, k.created_at FROM webhook_keys k
             JOIN accounts a ON a.id = k.account_id ORDER BY k.digest",
            key_row,
        )?,
    };
    Ok(out)
}

pub(super) fn export_hour_count(c: &mut Connection) -> StoreResult<u64> {
    let n: i64 = c.query_row("SELECT count(*) FROM hours", [], |r| r.get(0))?;
    Ok(u64::try_from(n).unwrap_or(0))
}

pub(super) fn export_hours(
    c: &mut Connection,
    device_id: &str,
    after: Option<i64>,
    limit: usize,
) -> StoreResult<Vec<StoredHour>> {
    let mut stmt = c.prepare_cached(
        "SELECT h.key, h.data FROM devices d JOIN hours h
           ON h.key BETWEEN (d.id << 32) + ?2 AND (d.id << 32) + 4294967295
         WHERE d.device_id = ?1 ORDER BY h.key LIMIT ?3",
    )?;
    // Hours after `after`: key offsets above its own.
    let from = after.map_or(0, |c| hour_key(0, c) + 1);
    let out = stmt
        .query_map(params![device_id, from, limit as i64], |r| {
            Ok(StoredHour { chunk: key_chunk(r.get(0)?), data: r.get(1)? })
        })?
        .collect::<Result<_, _>>()?;
    Ok(out)
}

/// Refuses when `sql` (with `?1`) finds `value`.
fn refuse_existing(tx: &Transaction<'_>, sql: &str, value: &dyn rusqlite::ToSql, what: String) -> StoreResult<()> {
    if tx.query_row(sql, [value], |_| Ok(())).optional()?.is_some() {
        return Err(StoreError::Conflict(format!("{what} already exists in the target")));
    }
    Ok(())
}

pub(super) fn restore(c: &mut Connection, rows: Installation) -> StoreResult<()> {
    let tx = begin(c)?;
    let mut accounts = HashMap::new();
    for a in &rows.accounts {
        refuse_existing(
            &tx,
            "SELECT 1 FROM accounts WHERE username = ?1",
            &a.username,
            format!("account {:?}", a.username),
        )?;
        tx.execute(
            "INSERT INTO accounts (username, password_hash, disabled, created_at) VALUES (?1, ?2, ?3, ?4)",
            params![a.username, a.password_hash, a.disabled, a.created_at],
        )?;
        accounts.insert(a.username.as_str(), tx.last_insert_rowid());
    }
    let missing = |what: &str, id: &str| {
        StoreError::Invalid(sensorhub_core::provision::InputError::new(
            "copy",
            format!("{what} {id:?} is not in the copy"),
        ))
    };
    let account = |name: &str| accounts.get(name).copied().ok_or_else(|| missing("account", name));
    let mut devices = HashMap::new();
    for d in &rows.devices {
        refuse_existing(
            &tx,
            "SELECT 1 FROM devices WHERE device_id = ?1",
            &d.device_id,
            format!("device {:?}", d.device_id),
        )?;
        let owner = d.owner.as_deref().map(&account).transpose()?;
        tx.execute(
            "INSERT INTO devices (device_id, name, type, lat, long, interval_seconds, owner_id)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![d.device_id, d.name, d.kind, d.lat, d.long, d.interval_seconds, owner],
        )?;
        devices.insert(d.device_id.as_str(), tx.last_insert_rowid());
    }
    let device = |id: &str| devices.get(id).copied().ok_or_else(|| missing("device", id));
    for s in &rows.sensors {
        tx.execute(
            "INSERT INTO sensors (device_pk, idx, sensor_id, name, type, unit) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![device(&s.device_id)?, s.idx, s.sensor.sensor_id, s.sensor.name, s.sensor.kind, s.sensor.unit],
        )?;
    }
    for link in &rows.account_devices {
        tx.execute(
            "INSERT INTO account_devices (account_id, device_pk, can_write) VALUES (?1, ?2, ?3)",
            params![account(&link.username)?, device(&link.device_id)?, link.can_write],
        )?;
    }
    let mut keys = HashMap::new();
    for k in &rows.api_keys {
        refuse_existing(&tx, "SELECT 1 FROM api_keys WHERE digest = ?1", &k.digest, format!("API key {}…", k.prefix))?;
        tx.execute(
            "INSERT INTO api_keys (digest, prefix, account_id, scoped, revoked, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![k.digest, k.prefix, account(&k.username)?, k.scoped, k.revoked, k.created_at],
        )?;
        keys.insert(k.digest.as_slice(), tx.last_insert_rowid());
    }
    for (digest, dev) in &rows.api_key_devices {
        let key = keys.get(digest.as_slice()).copied().ok_or_else(|| missing("API key", "?"))?;
        tx.execute("INSERT INTO api_key_devices (key_id, device_pk) VALUES (?1, ?2)", params![key, device(dev)?])?;
    }
    for k in &rows.webhook_keys {
        refuse_existing(
            &tx,
            "SELECT 1 FROM webhook_keys WHERE digest = ?1",
            &k.digest,
            format!("webhook key {}…", k.prefix),
        )?;
        tx.execute(
            "INSERT INTO webhook_keys (digest, prefix, account_id, revoked, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![k.digest, k.prefix, account(&k.username)?, k.revoked, k.created_at],
        )?;
    }
    tx.commit()?;
    Ok(())
}

pub(super) fn restore_hours(c: &mut Connection, device_id: &str, hours: Vec<StoredHour>) -> StoreResult<()> {
    let tx = begin(c)?;
    let pk: i64 = tx
        .query_row("SELECT id FROM devices WHERE device_id = ?1", [device_id], |r| r.get(0))
        .optional()?
        .ok_or_else(|| StoreError::NotFound(format!("device {device_id:?} is not in the target")))?;
    let mut newest = crate::decide::latest::Newest::default();
    {
        let mut insert = tx.prepare_cached("INSERT INTO hours (key, data) VALUES (?1, ?2)")?;
        for h in &hours {
            insert.execute(params![super::checked_hour_key(pk, h.chunk)?, h.data])?;
            newest.add_hour(pk, h.chunk, &h.data)?;
        }
    }
    super::tx::ready(crate::write::tx::Tx::upsert_latest(&super::tx::SqliteTx(&tx), &newest.take()))?;
    tx.commit()?;
    Ok(())
}
