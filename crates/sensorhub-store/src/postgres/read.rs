//! Read queries of the PostgreSQL backend. Statements are prepared once per
//! pooled connection (`prepare_cached`).

use super::PgStore;
use super::latest::sensor;
use crate::chunk::{self, chunk_of};
use crate::decide::malformed;
use crate::sql::access::{self, GENERATIONS, SCOPE_FILTER};
use crate::{
    AccountAuth, ApiKeyAuth, DeviceHandle, Generations, HoursHead, ReadingBatch, Scope, StoreResult, WebhookKeyAuth,
};
use crate::{LatestValue, ReadingStream, Window};
use crate::{StoreError, StoredHour};
use async_trait::async_trait;
use deadpool_postgres::GenericClient;
use sensorhub_core::model::{Device, SensorMeta};
use sensorhub_core::secret::KeyDigest;
use std::collections::HashMap;
use std::sync::Arc;

use sensorhub_core::time::TimeRange;

pub(super) async fn list_devices(c: &impl GenericClient, scope: Scope) -> StoreResult<Vec<Device>> {
    let (account, key) = scope.params();
    let stmt = c
        .prepare_cached(&format!(
            "SELECT s.device_pk, s.sensor_id, s.name, s.type, s.unit FROM sensors s JOIN devices d ON d.id = s.device_pk
             WHERE {SCOPE_FILTER} ORDER BY s.device_pk, s.idx"
        ))
        .await?;
    let mut sensors: HashMap<i64, Vec<SensorMeta>> = HashMap::new();
    for r in c.query(&stmt, &[&account, &key]).await? {
        sensors.entry(r.get(0)).or_default().push(sensor(&r, 1));
    }
    // The last second is decoded here from each device's newest hour.
    let stmt = c
        .prepare_cached(&format!(
            "SELECT d.id, d.device_id, d.name, d.type, d.lat, d.long, d.interval_seconds, r.chunk, r.data
             FROM devices d LEFT JOIN LATERAL (
                 SELECT chunk, data FROM hours WHERE device_pk = d.id ORDER BY chunk DESC LIMIT 1
             ) r ON true
             WHERE {SCOPE_FILTER} ORDER BY d.device_id"
        ))
        .await?;
    let rows = c.query(&stmt, &[&account, &key]).await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let pk: i64 = r.get(0);
        let last: Option<(i64, &[u8])> = r.get::<_, Option<i64>>(7).zip(r.get::<_, Option<&[u8]>>(8));
        let last_update_at = match last {
            Some((chunk, data)) => Some(chunk::last_second(chunk, data).ok_or_else(|| malformed(pk, chunk))?),
            None => None,
        };
        out.push(Device {
            device_id: r.get(1),
            name: r.get(2),
            kind: r.get(3),
            lat: r.get(4),
            long: r.get(5),
            interval_seconds: r.get(6),
            last_update_at,
            sensors: sensors.remove(&pk).unwrap_or_default(),
        });
    }
    Ok(out)
}

/// Hour rows the window's first query asks for: a one-minute day (24 rows)
/// and a little more; a longer window reads on with [`read_into`].
const HEAD_ROWS: i64 = 48;

/// The device `device_id` visible in `scope`, its sensors, and its first
/// `limit` readings from `from` to `end`: the device and its first
/// [`HEAD_ROWS`] hour rows come in one query ([`head_hours`]); only when
/// those hold fewer than `limit` readings and there may be more does a
/// second step ([`read_into`]) read on.
pub(super) async fn window_head(
    c: &impl GenericClient,
    scope: Scope,
    device_id: &str,
    from: i64,
    end: i64,
    limit: usize,
) -> StoreResult<Option<(DeviceHandle, ReadingBatch)>> {
    let rows = HEAD_ROWS.min(limit as i64);
    let Some((device, hours)) = head_hours(c, scope, device_id, chunk_of(from), chunk_of(end), rows).await?.1 else {
        return Ok(None);
    };
    let pk = device.pk;
    let mut batch = ReadingBatch::default();
    let truncated = hours.len() as i64 == rows;
    let mut next_chunk = None;
    for hour in hours {
        if batch.len() >= limit {
            break;
        }
        chunk::decode_into(hour.chunk, &hour.data, from, end, &mut batch, limit)
            .ok_or_else(|| malformed(pk, hour.chunk))?;
        next_chunk = Some(hour.chunk + 1);
    }
    if let Some(next) = next_chunk.filter(|_| truncated && batch.len() < limit) {
        let from = from.max(next * chunk::CHUNK_SECONDS);
        read_into(c, pk, from, end, limit, &mut batch).await?;
    }
    Ok(Some((device, batch)))
}

/// The device `device_id` visible in `scope`, with its sensors, and its
/// `limit` stored hours from hour `from` to hour `to`, with the access and
/// device generations, in one query: the sensor rows, the hour rows and the
/// generations come as one result, told apart by their columns.
pub(super) async fn head_hours(
    c: &impl GenericClient,
    scope: Scope,
    device_id: &str,
    from: i64,
    to: i64,
    limit: i64,
) -> StoreResult<(Generations, Option<(DeviceHandle, Vec<StoredHour>)>)> {
    let (account, key) = scope.params();
    let stmt = c
        .prepare_cached(&format!(
            "WITH d AS (SELECT d.id FROM devices d WHERE d.device_id = $3 AND {SCOPE_FILTER})
             (SELECT d.id, s.idx, s.sensor_id, s.name, s.type, s.unit, NULL::bigint AS chunk,
                     NULL::bigint AS devices, NULL::bytea AS data
              FROM d LEFT JOIN sensors s ON s.device_pk = d.id)
             UNION ALL
             (SELECT d.id, NULL, NULL, NULL, NULL, NULL, r.chunk, NULL, r.data
              FROM d JOIN hours r ON r.device_pk = d.id
              WHERE r.chunk >= $4 AND r.chunk <= $5 ORDER BY r.chunk LIMIT $6)
             UNION ALL
             SELECT NULL, NULL, NULL, NULL, NULL, NULL, {GENERATIONS}, NULL"
        ))
        .await?;
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] = [&account, &key, &device_id, &from, &to, &limit];
    let rows = c.query(&stmt, &params).await?;
    // The generations come in the one row without a device, read in the
    // statement's snapshot.
    let (mut read_at, mut pk) = (None, None);
    let mut sensors: Vec<(i16, SensorMeta)> = Vec::new();
    let mut hours: Vec<StoredHour> = Vec::new();
    for r in &rows {
        let Some(id) = r.get::<_, Option<i64>>(0) else {
            read_at = generations_of(r, 6);
            continue;
        };
        pk = Some(id);
        match (r.get::<_, Option<i64>>(6), r.get::<_, Option<i16>>(1)) {
            (Some(chunk), _) => hours.push(StoredHour { chunk, data: r.get(8) }),
            (None, Some(idx)) => sensors.push((idx, sensor(r, 2))),
            (None, None) => {} // a device without sensors
        }
    }
    let read_at = read_at.ok_or_else(no_generations)?;
    let Some(pk) = pk else { return Ok((read_at, None)) };
    sensors.sort_unstable_by_key(|(idx, _)| *idx);
    hours.sort_unstable_by_key(|h| h.chunk);
    // By position, as SQLite's look-up and `latest` place them: a gap in
    // the positions keeps each value under its own sensor.
    let sensors = crate::decide::sensors_by_idx(sensors.into_iter().map(|(idx, s)| (i64::from(idx), s)));
    let device = DeviceHandle { pk, sensors };
    Ok((read_at, Some((device, hours))))
}

/// The generations in columns `from` and `from + 1` of `r`
/// ([`access::GENERATIONS`]), if both are there.
fn generations_of(r: &tokio_postgres::Row, from: usize) -> Option<Generations> {
    Some(Generations { access: r.get::<_, Option<i64>>(from)?, devices: r.get::<_, Option<i64>>(from + 1)? })
}

/// A window's statement that returned no row of generations.
fn no_generations() -> StoreError {
    StoreError::Backend("the window statement returned no generations".into())
}

/// The `limit` stored hours of device `pk` from hour `from` to hour `to`,
/// with the access and device generations, in one query: a kept device's
/// window, which holds if the generations are still the ones it was kept at.
async fn kept_hours(
    c: &impl GenericClient,
    pk: i64,
    from: i64,
    to: i64,
    limit: i64,
) -> StoreResult<(Generations, Vec<StoredHour>)> {
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "(SELECT chunk, NULL::bigint AS devices, data FROM hours
              WHERE device_pk = $1 AND chunk >= $2 AND chunk <= $3 ORDER BY chunk LIMIT $4)
             UNION ALL
             SELECT {GENERATIONS}, NULL"
        )
    });
    let stmt = c.prepare_cached(&SQL).await?;
    let rows = c.query(&stmt, &[&pk, &from, &to, &limit]).await?;
    let mut read_at = None;
    let mut hours = Vec::with_capacity(rows.len());
    for r in &rows {
        match r.get::<_, Option<Vec<u8>>>(2) {
            Some(data) => hours.push(StoredHour { chunk: r.get(0), data }),
            None => read_at = generations_of(r, 0),
        }
    }
    let read_at = read_at.ok_or_else(no_generations)?;
    hours.sort_unstable_by_key(|h| h.chunk);
    Ok((read_at, hours))
}

/// Hour rows asked for first when reading a batch: a one-minute station's
/// 512 readings fit in 9. Rows are asked for in growing steps, so that a
/// dense station costs one round trip of a few rows, not one of `limit`
/// rows (every hour row holds at least one reading, so `limit` rows are
/// always enough, but for dense data they are ~60 times too many).
const FIRST_ROWS: usize = 16;

/// Up to `limit` stored hours of a device from hour `from` to hour `to`.
pub(super) async fn read_hours(
    c: &impl GenericClient,
    device_pk: i64,
    from: i64,
    to: i64,
    limit: usize,
) -> StoreResult<Vec<StoredHour>> {
    let stmt = c
        .prepare_cached(
            "SELECT chunk, data FROM hours WHERE device_pk = $1 AND chunk >= $2 AND chunk <= $3
             ORDER BY chunk LIMIT $4",
        )
        .await?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = c.query(&stmt, &[&device_pk, &from, &to, &limit]).await?;
    Ok(rows.iter().map(|r| StoredHour { chunk: r.get(0), data: r.get(1) }).collect())
}

/// Appends up to `limit` readings (in all) of a device from `from` to
/// `end`, inclusive, to `batch`, from hour rows asked for in growing steps.
pub(super) async fn read_into(
    c: &impl GenericClient,
    device_pk: i64,
    from: i64,
    end: i64,
    limit: usize,
    batch: &mut ReadingBatch,
) -> StoreResult<()> {
    let stmt = c
        .prepare_cached(
            "SELECT chunk, data FROM hours WHERE device_pk = $1 AND chunk >= $2 AND chunk <= $3
             ORDER BY chunk LIMIT $4",
        )
        .await?;
    let mut first_chunk = chunk_of(from);
    let mut rows_wanted = FIRST_ROWS.min(limit);
    while batch.len() < limit && first_chunk <= chunk_of(end) {
        let rows = c.query(&stmt, &[&device_pk, &first_chunk, &chunk_of(end), &(rows_wanted as i64)]).await?;
        for r in &rows {
            if batch.len() >= limit {
                break;
            }
            let chunk: i64 = r.get(0);
            chunk::decode_into(chunk, r.get(1), from, end, batch, limit).ok_or_else(|| malformed(device_pk, chunk))?;
            first_chunk = chunk + 1;
        }
        if rows.len() < rows_wanted {
            break;
        }
        rows_wanted = (rows_wanted * 4).min(limit);
    }
    Ok(())
}

/// Up to `limit` readings of a device from `from` to `end`, inclusive.
pub(super) async fn read_batch(
    c: &impl GenericClient,
    device_pk: i64,
    from: i64,
    end: i64,
    limit: usize,
) -> StoreResult<ReadingBatch> {
    let mut batch = ReadingBatch::default();
    read_into(c, device_pk, from, end, limit, &mut batch).await?;
    Ok(batch)
}

#[async_trait]
impl crate::store::Access for PgStore {
    async fn account_auth(&self, username: &str) -> StoreResult<Option<AccountAuth>> {
        let username = &*super::lookup_name(username);
        self.on(async |c| access::account_auth(c, username).await).await
    }

    async fn api_key_auth(&self, digest: &KeyDigest) -> StoreResult<Option<ApiKeyAuth>> {
        self.on(async |c| access::api_key_auth(c, digest).await).await
    }

    async fn webhook_key_auth(&self, digest: &KeyDigest) -> StoreResult<Option<WebhookKeyAuth>> {
        self.on(async |c| access::webhook_key_auth(c, digest).await).await
    }

    async fn access_generation(&self) -> StoreResult<i64> {
        self.on(async |c| access::access_generation(c).await).await
    }

    async fn generations(&self) -> StoreResult<Generations> {
        self.on(async |c| access::current_generations(c).await).await
    }

    async fn may_write(&self, account_id: i64, device_pk: i64) -> StoreResult<bool> {
        self.on(async |c| access::may_write(c, account_id, device_pk).await).await
    }

    async fn writable_device(
        &self,
        account_id: i64,
        device_id: &str,
        seen: Option<Generations>,
    ) -> StoreResult<Option<(Arc<DeviceHandle>, bool)>> {
        let device_id = &*super::lookup_name(device_id);
        let read = self.on(async |c| access::writable_device(c, account_id, device_id).await);
        self.write_targets.through(account_id, device_id, seen, read).await
    }
}

#[async_trait]
impl crate::store::Reads for PgStore {
    async fn list_devices(&self, scope: Scope) -> StoreResult<Vec<Device>> {
        list_devices(&self.pool.get().await?, scope).await
    }

    async fn find_device(&self, scope: Scope, device_id: &str) -> StoreResult<Option<DeviceHandle>> {
        let device_id = &*super::lookup_name(device_id);
        self.on(async |c| access::find_device(c, scope, device_id).await).await
    }

    async fn latest(&self, scope: Scope, device_id: &str) -> StoreResult<Option<(DeviceHandle, Vec<LatestValue>)>> {
        let device_id = &*super::lookup_name(device_id);
        super::latest::read(&self.pool.get().await?, scope, device_id).await
    }

    async fn read_window(&self, scope: Scope, device_id: &str, range: TimeRange) -> StoreResult<Option<Window>> {
        let device_id = &*super::lookup_name(device_id);
        let client = self.pool.get().await?;
        let head = window_head(&client, scope, device_id, range.start, range.end, crate::batches::FIRST_BATCH).await?;
        let Some((device, first)) = head else { return Ok(None) };
        drop(client);
        let (pool, pk) = (self.pool.clone(), device.pk);
        Ok(Some(Window::after_first(device, first, range.end, |next| stream_from(pool, pk, next, range.end))))
    }

    fn read_readings(&self, device: &DeviceHandle, range: TimeRange) -> ReadingStream {
        stream_from(self.pool.clone(), device.pk, Some(range.start), range.end)
    }

    async fn read_hours(&self, device_pk: i64, from: i64, to: i64, limit: usize) -> StoreResult<Vec<StoredHour>> {
        read_hours(&self.pool.get().await?, device_pk, from, to, limit).await
    }

    async fn window_hours(
        &self,
        scope: Scope,
        device_id: &str,
        from: i64,
        to: i64,
        limit: usize,
    ) -> StoreResult<HoursHead> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let device_id = &*super::lookup_name(device_id);
        let c = self.pool.get().await?;
        // A device kept at the generations the hours were read at is the
        // one the full statement would find: one smaller statement.
        if let Some((kept_at, device)) = self.visible.guess(scope, device_id) {
            let (read_at, hours) = kept_hours(&c, device.pk, from, to, limit).await?;
            if read_at == kept_at {
                return Ok(HoursHead { access: read_at.access, found: Some((device, hours)) });
            }
        }
        let (read_at, found) = head_hours(&c, scope, device_id, from, to, limit).await?;
        let found = found.map(|(device, hours)| {
            let device = Arc::new(device);
            self.visible.keep(read_at, scope, device_id, &device);
            (device, hours)
        });
        Ok(HoursHead { access: read_at.access, found })
    }
}

/// Streams readings of `device_pk` from `next` to `end`, one pooled
/// connection per batch ([`crate::batches`]).
fn stream_from(pool: deadpool_postgres::Pool, device_pk: i64, next: Option<i64>, end: i64) -> ReadingStream {
    crate::batches::stream_from(next, end, crate::batches::REMOTE_BATCH_READINGS, move |from, end, limit| {
        let pool = pool.clone();
        async move { read_batch(&pool.get().await?, device_pk, from, end, limit).await }
    })
}
