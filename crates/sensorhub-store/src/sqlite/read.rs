//! Read queries of the SQLite backend.

use super::SqliteStore;
use super::pool::Pool;
use super::tx::on;
use super::{hour_key, key_chunk};
use crate::chunk::{self, chunk_of};
use crate::sql::access::{self, SCOPE_FILTER};
use crate::sql::sqlite_placeholders;
use crate::{
    AccountAuth, ApiKeyAuth, DeviceHandle, Generations, HoursHead, ReadingBatch, ReadingStream, Scope, StoreResult,
    StoredHour, WebhookKeyAuth,
};
use crate::{LatestValue, Window};
use async_trait::async_trait;
use rusqlite::{Connection, params};
use sensorhub_core::model::{Device, SensorMeta};
use sensorhub_core::secret::KeyDigest;
use sensorhub_core::time::TimeRange;
use std::collections::HashMap;
use std::sync::Arc;

pub(super) fn list_devices(c: &Connection, scope: Scope) -> StoreResult<Vec<Device>> {
    let (account, key) = scope.params();
    let mut sensors: HashMap<i64, Vec<SensorMeta>> = HashMap::new();
    let mut stmt = c.prepare_cached(&sqlite_placeholders(&format!(
        "SELECT s.device_pk, s.sensor_id, s.name, s.type, s.unit FROM sensors s JOIN devices d ON d.id = s.device_pk
         WHERE {SCOPE_FILTER} ORDER BY s.device_pk, s.idx"
    )))?;
    let mut rows = stmt.query(params![account, key])?;
    while let Some(r) = rows.next()? {
        sensors.entry(r.get(0)?).or_default().push(SensorMeta {
            sensor_id: r.get(1)?,
            name: r.get(2)?,
            kind: r.get(3)?,
            unit: r.get(4)?,
        });
    }
    let mut stmt = c.prepare_cached(&sqlite_placeholders(&format!(
        "SELECT d.id, d.device_id, d.name, d.type, d.lat, d.long, d.interval_seconds,
                (SELECT sh_last_second(h.key, h.data) FROM hours h
                 WHERE h.key BETWEEN d.id << 32 AND (d.id << 32) + 4294967295 ORDER BY h.key DESC LIMIT 1)
         FROM devices d WHERE {SCOPE_FILTER} ORDER BY d.device_id"
    )))?;
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
    let Some(device) = on(c, async |c| access::find_device(c, scope, device_id).await)? else { return Ok(None) };
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

/// The access and device generations, as [`crate::access_cache`] tags answers.
fn generations(c: &Connection) -> StoreResult<Generations> {
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| format!("SELECT {}", access::GENERATIONS));
    let mut stmt = c.prepare_cached(&SQL)?;
    Ok(stmt.query_row([], |r| Ok(Generations { access: r.get(0)?, devices: r.get(1)? }))?)
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

#[async_trait]
impl crate::store::Access for SqliteStore {
    async fn account_auth(&self, username: &str) -> StoreResult<Option<AccountAuth>> {
        let username = username.to_owned();
        self.reads.run_short(move |c| on(c, async |c| access::account_auth(c, &username).await)).await
    }

    async fn api_key_auth(&self, digest: &KeyDigest) -> StoreResult<Option<ApiKeyAuth>> {
        let digest = *digest;
        self.reads.run_short(move |c| on(c, async |c| access::api_key_auth(c, &digest).await)).await
    }

    async fn webhook_key_auth(&self, digest: &KeyDigest) -> StoreResult<Option<WebhookKeyAuth>> {
        let digest = *digest;
        self.reads.run_short(move |c| on(c, async |c| access::webhook_key_auth(c, &digest).await)).await
    }

    async fn access_generation(&self) -> StoreResult<i64> {
        self.reads.run_short(|c| on(c, async |c| access::access_generation(c).await)).await
    }

    async fn generations(&self) -> StoreResult<Generations> {
        self.reads.run_short(|c| on(c, async |c| access::current_generations(c).await)).await
    }

    async fn may_write(&self, account_id: i64, device_pk: i64) -> StoreResult<bool> {
        self.reads.run_short(move |c| on(c, async |c| access::may_write(c, account_id, device_pk).await)).await
    }

    async fn writable_device(
        &self,
        account_id: i64,
        device_id: &str,
        seen: Option<Generations>,
    ) -> StoreResult<Option<(Arc<DeviceHandle>, bool)>> {
        let id = device_id.to_owned();
        let read = self.reads.run_short(move |c| on(c, async |c| access::writable_device(c, account_id, &id).await));
        self.write_targets.through(account_id, device_id, seen, read).await
    }
}

#[async_trait]
impl crate::store::Reads for SqliteStore {
    async fn list_devices(&self, scope: Scope) -> StoreResult<Vec<Device>> {
        self.reads.run_short(move |c| list_devices(c, scope)).await
    }

    async fn find_device(&self, scope: Scope, device_id: &str) -> StoreResult<Option<DeviceHandle>> {
        let device_id = device_id.to_owned();
        self.reads.run_short(move |c| on(c, async |c| access::find_device(c, scope, &device_id).await)).await
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

    async fn window_hours(
        &self,
        scope: Scope,
        device_id: &str,
        from: i64,
        to: i64,
        limit: usize,
    ) -> StoreResult<HoursHead> {
        let (id, visible) = (device_id.to_owned(), self.visible.clone());
        self.reads
            .run_short(move |c| {
                // One snapshot: the generations tag the device found in it.
                let read_at = generations(c)?;
                let access = read_at.access;
                let device = match visible.at(read_at, scope, &id) {
                    Some(device) => device,
                    None => {
                        let found = on(c, async |c| access::find_device(c, scope, &id).await)?;
                        let Some(device) = found.map(Arc::new) else { return Ok(HoursHead { access, found: None }) };
                        visible.keep(read_at, scope, &id, &device);
                        device
                    }
                };
                let hours = read_hours(c, device.pk, from, to, limit)?;
                Ok(HoursHead { access, found: Some((device, hours)) })
            })
            .await
    }
}
