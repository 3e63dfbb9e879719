//! Read queries of the SQLite backend.

use super::SqliteStore;
use super::pool::Pool;
use super::{hour_key, key_chunk};
use crate::chunk::{self, chunk_of};
use crate::{
    AccountAuth, AccountSummary, ApiKeyAuth, ApiKeySummary, DeviceHandle, ReadingBatch, ReadingStream, Scope,
    StoreResult, StoredHour, WebhookKeyAuth,
};
use crate::{LatestValue, Window};
use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};
use sensorhub_core::model::{Device, SensorMeta};
use sensorhub_core::secret::KeyDigest;
use sensorhub_core::time::TimeRange;
use std::collections::HashMap;

pub(super) fn account_auth(c: &Connection, username: &str) -> StoreResult<Option<AccountAuth>> {
    let mut stmt = c.prepare_cached("SELECT id, password_hash, disabled FROM accounts WHERE username = ?1")?;
    Ok(stmt
        .query_row([username], |r| {
            Ok(AccountAuth { account_id: r.get(0)?, password_hash: r.get(1)?, disabled: r.get(2)? })
        })
        .optional()?)
}

pub(super) fn api_key_auth(c: &Connection, digest: &KeyDigest) -> StoreResult<Option<ApiKeyAuth>> {
    let mut stmt = c.prepare_cached(
        "SELECT k.id, k.account_id, k.scoped, k.revoked, a.disabled
         FROM api_keys k JOIN accounts a ON a.id = k.account_id WHERE k.digest = ?1",
    )?;
    Ok(stmt
        .query_row([&digest[..]], |r| {
            Ok(ApiKeyAuth {
                key_id: r.get(0)?,
                account_id: r.get(1)?,
                scoped: r.get(2)?,
                revoked: r.get(3)?,
                account_disabled: r.get(4)?,
            })
        })
        .optional()?)
}

pub(super) fn webhook_key_auth(c: &Connection, digest: &KeyDigest) -> StoreResult<Option<WebhookKeyAuth>> {
    let mut stmt = c.prepare_cached(
        "SELECT k.id, k.account_id, k.digest, k.revoked, a.disabled
         FROM webhook_keys k JOIN accounts a ON a.id = k.account_id WHERE k.digest = ?1",
    )?;
    Ok(stmt
        .query_row([&digest[..]], |r| {
            Ok(WebhookKeyAuth {
                key_id: r.get(0)?,
                account_id: r.get(1)?,
                digest: r.get(2)?,
                revoked: r.get(3)?,
                account_disabled: r.get(4)?,
            })
        })
        .optional()?)
}

/// The `WHERE` clause selecting the devices `d` of a scope, with
/// parameters `?1` (account, or NULL for all) and `?2` (scoped key or NULL).
const SCOPE_FILTER: &str = "(?1 IS NULL OR d.id IN (SELECT device_pk FROM account_devices WHERE account_id = ?1))
     AND (?2 IS NULL OR d.id IN (SELECT device_pk FROM api_key_devices WHERE key_id = ?2))";

fn scope_params(scope: Scope) -> (Option<i64>, Option<i64>) {
    match scope {
        Scope::All => (None, None),
        Scope::Account { account_id, key } => (Some(account_id), key),
    }
}

pub(super) fn list_devices(c: &Connection, scope: Scope) -> StoreResult<Vec<Device>> {
    let (account, key) = scope_params(scope);
    let mut sensors: HashMap<i64, Vec<SensorMeta>> = HashMap::new();
    let mut stmt = c.prepare_cached(&format!(
        "SELECT s.device_pk, s.sensor_id, s.name, s.type, s.unit FROM sensors s JOIN devices d ON d.id = s.device_pk
         WHERE {SCOPE_FILTER} ORDER BY s.device_pk, s.idx"
    ))?;
    let mut rows = stmt.query(params![account, key])?;
    while let Some(r) = rows.next()? {
        sensors.entry(r.get(0)?).or_default().push(SensorMeta {
            sensor_id: r.get(1)?,
            name: r.get(2)?,
            kind: r.get(3)?,
            unit: r.get(4)?,
        });
    }
    let mut stmt = c.prepare_cached(&format!(
        "SELECT d.id, d.device_id, d.name, d.type, d.lat, d.long, d.interval_seconds,
                (SELECT sh_last_second(h.key, h.data) FROM hours h
                 WHERE h.key BETWEEN d.id << 32 AND (d.id << 32) + 4294967295 ORDER BY h.key DESC LIMIT 1)
         FROM devices d WHERE {SCOPE_FILTER} ORDER BY d.device_id"
    ))?;
    let devices = stmt
        .query_map(params![account, key], |r| {
            let pk: i64 = r.get(0)?;
            Ok(Device {
                device_id: r.get(1)?,
                name: r.get(2)?,
                kind: r.get(3)?,
                lat: r.get(4)?,
                long: r.get(5)?,
                interval_seconds: r.get(6)?,
                last_update_at: r.get(7)?,
                sensors: sensors.remove(&pk).unwrap_or_default(),
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(devices)
}

pub(super) fn find_device(c: &Connection, scope: Scope, device_id: &str) -> StoreResult<Option<DeviceHandle>> {
    let (account, key) = scope_params(scope);
    let mut stmt =
        c.prepare_cached(&format!("SELECT d.id FROM devices d WHERE d.device_id = ?3 AND {SCOPE_FILTER}"))?;
    let Some(pk) = stmt.query_row(params![account, key, device_id], |r| r.get::<_, i64>(0)).optional()? else {
        return Ok(None);
    };
    Ok(Some(DeviceHandle { pk, sensors: device_sensors(c, pk)? }))
}

/// Whether account `account_id` owns device `pk` or sees it with a write grant.
pub(super) fn may_write(c: &Connection, account_id: i64, pk: i64) -> StoreResult<bool> {
    let mut stmt = c.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM devices WHERE id = ?2 AND owner_id = ?1)
             OR EXISTS (SELECT 1 FROM account_devices WHERE account_id = ?1 AND device_pk = ?2 AND can_write)",
    )?;
    Ok(stmt.query_row(params![account_id, pk], |r| r.get(0))?)
}

/// The sensors of device `pk`, indexed by idx (gaps filled with blanks,
/// which never occur since idx are handed out in order).
pub(super) fn device_sensors(c: &Connection, pk: i64) -> StoreResult<Vec<SensorMeta>> {
    let mut stmt =
        c.prepare_cached("SELECT idx, sensor_id, name, type, unit FROM sensors WHERE device_pk = ?1 ORDER BY idx")?;
    let rows = stmt
        .query_map([pk], |r| {
            Ok((r.get(0)?, SensorMeta { sensor_id: r.get(1)?, name: r.get(2)?, kind: r.get(3)?, unit: r.get(4)? }))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(crate::decide::sensors_by_idx(rows))
}

/// Streams readings of `device_pk` from `next` to `end` in batches ([`crate::batches`]).
pub(super) fn stream_from(pool: Pool, device_pk: i64, next: Option<i64>, end: i64) -> ReadingStream {
    crate::batches::stream_from(next, end, crate::batches::BATCH_READINGS, move |from, end, limit| {
        let pool = pool.clone();
        async move { pool.run_short(move |c| read_batch(c, device_pk, from, end, limit)).await }
    })
}

/// The device visible in `scope` and its first batch, in one round trip.
pub(super) fn window_head(
    c: &mut Connection,
    scope: Scope,
    device_id: &str,
    range: TimeRange,
) -> StoreResult<Option<(DeviceHandle, ReadingBatch)>> {
    let Some(device) = find_device(c, scope, device_id)? else { return Ok(None) };
    let first = read_batch(c, device.pk, range.start, range.end, crate::batches::FIRST_BATCH)?;
    Ok(Some((device, first)))
}

/// Up to `limit` readings of a device from `from` to `end`, inclusive.
pub(super) fn read_batch(
    c: &mut Connection,
    device_pk: i64,
    from: i64,
    end: i64,
    limit: usize,
) -> StoreResult<ReadingBatch> {
    let mut stmt = c.prepare_cached("SELECT key, data FROM hours WHERE key BETWEEN ?1 AND ?2 ORDER BY key")?;
    let mut rows = stmt.query(params![hour_key(device_pk, chunk_of(from)), hour_key(device_pk, chunk_of(end))])?;
    let mut batch = ReadingBatch::default();
    while batch.len() < limit {
        let Some(r) = rows.next()? else { break };
        let chunk = key_chunk(r.get(0)?);
        let bytes = r.get_ref(1)?.as_blob().map_err(rusqlite::Error::from)?;
        chunk::decode_into(chunk, bytes, from, end, &mut batch, limit)
            .ok_or_else(|| crate::decide::malformed(device_pk, chunk))?;
    }
    Ok(batch)
}

/// Up to `limit` stored hours of a device from hour `from` to hour `to`.
pub(super) fn read_hours(
    c: &mut Connection,
    device_pk: i64,
    from: i64,
    to: i64,
    limit: usize,
) -> StoreResult<Vec<StoredHour>> {
    let mut stmt = c.prepare_cached("SELECT key, data FROM hours WHERE key BETWEEN ?1 AND ?2 ORDER BY key LIMIT ?3")?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = stmt.query_map(params![hour_key(device_pk, from), hour_key(device_pk, to), limit], |r| {
        Ok(StoredHour { chunk: key_chunk(r.get(0)?), data: r.get(1)? })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(super) fn access_generation(c: &mut Connection) -> StoreResult<i64> {
    Ok(c.prepare_cached("SELECT generation FROM access_generation")?.query_row([], |r| r.get(0))?)
}

pub(super) fn installation_id(c: &mut Connection) -> StoreResult<String> {
    Ok(c.query_row("SELECT value FROM installation WHERE key = 'id'", [], |r| r.get(0))?)
}

pub(super) fn installation_fact(c: &mut Connection, key: &str) -> StoreResult<Option<String>> {
    Ok(c.query_row("SELECT value FROM installation WHERE key = ?1", [key], |r| r.get(0)).optional()?)
}

pub(super) fn is_empty(c: &mut Connection) -> StoreResult<bool> {
    Ok(c.query_row("SELECT NOT EXISTS (SELECT 1 FROM accounts) AND NOT EXISTS (SELECT 1 FROM devices)", [], |r| {
        r.get(0)
    })?)
}

pub(super) fn accounts(c: &mut Connection) -> StoreResult<Vec<AccountSummary>> {
    let mut stmt = c.prepare(
        "SELECT a.username, a.disabled, d.device_id, (ad.can_write OR d.owner_id IS a.id) FROM accounts a
         LEFT JOIN account_devices ad ON ad.account_id = a.id LEFT JOIN devices d ON d.id = ad.device_pk
         ORDER BY a.username, d.device_id",
    )?;
    let mut out: Vec<AccountSummary> = Vec::new();
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let username: String = r.get(0)?;
        let device: Option<String> = r.get(2)?;
        if out.last().is_none_or(|a| a.username != username) {
            out.push(AccountSummary { username, disabled: r.get(1)?, devices: Vec::new(), writes: Vec::new() });
        }
        if let (Some(d), Some(a)) = (device, out.last_mut()) {
            if r.get::<_, Option<bool>>(3)?.unwrap_or(false) {
                a.writes.push(d.clone());
            }
            a.devices.push(d);
        }
    }
    Ok(out)
}

pub(super) fn api_keys(c: &mut Connection) -> StoreResult<Vec<ApiKeySummary>> {
    let mut stmt = c.prepare(
        "SELECT k.id, k.prefix, a.username, k.scoped, k.revoked, d.device_id FROM api_keys k
         JOIN accounts a ON a.id = k.account_id
         LEFT JOIN api_key_devices kd ON kd.key_id = k.id LEFT JOIN devices d ON d.id = kd.device_pk
         ORDER BY a.username, k.id, d.device_id",
    )?;
    let mut out: Vec<(i64, ApiKeySummary)> = Vec::new();
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let id: i64 = r.get(0)?;
        let scoped: bool = r.get(3)?;
        if out.last().is_none_or(|(last, _)| *last != id) {
            out.push((
                id,
                ApiKeySummary {
                    prefix: r.get(1)?,
                    username: r.get(2)?,
                    devices: scoped.then(Vec::new),
                    revoked: r.get(4)?,
                },
            ));
        }
        let device: Option<String> = r.get(5)?;
        if let (Some(d), Some((_, k))) = (device, out.last_mut()) {
            k.devices.get_or_insert_with(Vec::new).push(d);
        }
    }
    Ok(out.into_iter().map(|(_, k)| k).collect())
}

#[async_trait]
impl crate::store::Access for SqliteStore {
    async fn account_auth(&self, username: &str) -> StoreResult<Option<AccountAuth>> {
        let username = username.to_owned();
        self.reads.run_short(move |c| account_auth(c, &username)).await
    }

    async fn api_key_auth(&self, digest: &KeyDigest) -> StoreResult<Option<ApiKeyAuth>> {
        let digest = *digest;
        self.reads.run_short(move |c| api_key_auth(c, &digest)).await
    }

    async fn webhook_key_auth(&self, digest: &KeyDigest) -> StoreResult<Option<WebhookKeyAuth>> {
        let digest = *digest;
        self.reads.run_short(move |c| webhook_key_auth(c, &digest)).await
    }

    async fn access_generation(&self) -> StoreResult<i64> {
        self.reads.run_short(access_generation).await
    }

    async fn may_write(&self, account_id: i64, device_pk: i64) -> StoreResult<bool> {
        self.reads.run_short(move |c| may_write(c, account_id, device_pk)).await
    }
}

#[async_trait]
impl crate::store::Reads for SqliteStore {
    async fn list_devices(&self, scope: Scope) -> StoreResult<Vec<Device>> {
        self.reads.run_short(move |c| list_devices(c, scope)).await
    }

    async fn find_device(&self, scope: Scope, device_id: &str) -> StoreResult<Option<DeviceHandle>> {
        let device_id = device_id.to_owned();
        self.reads.run_short(move |c| find_device(c, scope, &device_id)).await
    }

    async fn latest(&self, scope: Scope, device_id: &str) -> StoreResult<Option<(DeviceHandle, Vec<LatestValue>)>> {
        let device_id = device_id.to_owned();
        self.reads.run_short(move |c| super::latest::read(c, scope, &device_id)).await
    }

    async fn read_window(&self, scope: Scope, device_id: &str, range: TimeRange) -> StoreResult<Option<Window>> {
        let id = device_id.to_owned();
        let Some((device, first)) = self.reads.run_short(move |c| window_head(c, scope, &id, range)).await? else {
            return Ok(None);
        };
        let (reads, pk) = (self.reads.clone(), device.pk);
        Ok(Some(Window::after_first(device, first, range.end, |next| stream_from(reads, pk, next, range.end))))
    }

    fn read_readings(&self, device: &DeviceHandle, range: TimeRange) -> ReadingStream {
        stream_from(self.reads.clone(), device.pk, Some(range.start), range.end)
    }

    async fn read_hours(&self, device_pk: i64, from: i64, to: i64, limit: usize) -> StoreResult<Vec<StoredHour>> {
        self.reads.run_short(move |c| read_hours(c, device_pk, from, to, limit)).await
    }
}
