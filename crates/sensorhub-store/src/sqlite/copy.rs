//! Whole-installation export and restore of the SQLite backend, for
//! `sensorhub copy`: rows by natural key, ids renumbered on the way in.

use super::SqliteStore;
use super::tx::begin;
use super::tx::{SqliteTx, ready};
use super::{hour_key, key_chunk};
use crate::{AccountDeviceRow, AccountRow, DeviceRow, Installation, KeyRow, SensorRow, StoreResult, StoredHour};
use async_trait::async_trait;
use rusqlite::{Connection, params};
use sensorhub_core::model::SensorMeta;

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

pub(super) fn restore(c: &mut Connection, rows: Installation) -> StoreResult<()> {
    let tx = begin(c)?;
    ready(crate::write::copy::restore(&SqliteTx(&tx), rows))?;
    tx.commit()?;
    Ok(())
}

pub(super) fn restore_hours(c: &mut Connection, device_id: &str, hours: Vec<StoredHour>) -> StoreResult<()> {
    let tx = begin(c)?;
    ready(crate::write::copy::restore_hours(&SqliteTx(&tx), device_id, hours))?;
    tx.commit()?;
    Ok(())
}

#[async_trait]
impl crate::store::Copying for SqliteStore {
    async fn export(&self) -> StoreResult<Installation> {
        self.reads.run(export).await
    }

    async fn export_hour_count(&self) -> StoreResult<u64> {
        self.reads.run(export_hour_count).await
    }

    async fn export_hours(&self, device_id: &str, after: Option<i64>, limit: usize) -> StoreResult<Vec<StoredHour>> {
        let id = device_id.to_owned();
        self.reads.run(move |c| export_hours(c, &id, after, limit)).await
    }

    async fn restore(&self, rows: Installation) -> StoreResult<()> {
        self.writes.run(move |c| restore(c, rows)).await
    }

    async fn restore_hours(&self, device_id: &str, hours: Vec<StoredHour>) -> StoreResult<()> {
        let id = device_id.to_owned();
        self.writes.run(move |c| restore_hours(c, &id, hours)).await
    }
}
