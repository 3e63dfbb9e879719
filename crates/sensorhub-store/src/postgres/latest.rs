//! The `latest` index on PostgreSQL: the newest value of each sensor of
//! each device (schema version 5), kept by every write of readings in its
//! own transaction and read by the `latest` endpoint. The decisions are in
//! [`crate::decide::latest`].

use super::read::{SCOPE_FILTER, scope_params, sensor};
use crate::decide::latest::{LatestRow, SEARCH_BATCH, Search, entry, idx_of, mask_of};
use crate::decide::sensors_by_idx;
use crate::{DeviceHandle, LatestValue, Scope, StoreResult};
use deadpool_postgres::{GenericClient, Transaction};

/// Stores a transaction's newest values, in one statement (prepared once
/// per connection): each replaces its entry unless the entry is newer.
pub(super) async fn upsert(tx: &Transaction<'_>, rows: &[LatestRow]) -> StoreResult<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let devices: Vec<i64> = rows.iter().map(|r| r.device_pk).collect();
    let idx: Vec<i16> = rows.iter().map(|r| r.idx).collect();
    let seconds: Vec<i64> = rows.iter().map(|r| r.second).collect();
    let values: Vec<i64> = rows.iter().map(|r| r.value).collect();
    let stmt = tx
        .prepare_cached(
            "INSERT INTO latest (device_pk, idx, second, value)
             SELECT * FROM unnest($1::bigint[], $2::smallint[], $3::bigint[], $4::bigint[])
             ON CONFLICT (device_pk, idx) DO UPDATE SET second = excluded.second, value = excluded.value
             WHERE excluded.second >= latest.second",
        )
        .await?;
    tx.execute(&stmt, &[&devices, &idx, &seconds, &values]).await?;
    Ok(())
}

/// Recomputes the entries of device `pk`'s sensors in bit set `wanted`
/// from its stored hours, walking back from hour `from` (the newest that
/// may hold them) until each is found or the hours run out (a sensor
/// without readings then has no entry).
pub(super) async fn recompute(tx: &Transaction<'_>, pk: i64, wanted: u64, from: i64) -> StoreResult<()> {
    if wanted == 0 {
        return Ok(());
    }
    let mut search = Search::new(pk, wanted);
    let mut newest = from;
    while !search.is_done() {
        let rows = tx
            .query(
                "SELECT chunk, data FROM hours WHERE device_pk = $1 AND chunk <= $2 ORDER BY chunk DESC LIMIT $3",
                &[&pk, &newest, &SEARCH_BATCH],
            )
            .await?;
        for r in &rows {
            search.hour(r.get(0), r.get(1))?;
            if search.is_done() {
                break;
            }
        }
        match rows.last() {
            Some(r) if rows.len() as i64 == SEARCH_BATCH => newest = r.get::<_, i64>(0) - 1,
            _ => break,
        }
    }
    tx.execute("DELETE FROM latest WHERE device_pk = $1 AND idx = ANY($2)", &[&pk, &idx_of(wanted)]).await?;
    upsert(tx, &search.found()).await
}

/// The sensors of device `pk` whose entries were taken at a second within
/// `start..=end` (readings about to be removed).
pub(super) async fn within(tx: &Transaction<'_>, pk: i64, start: i64, end: i64) -> StoreResult<u64> {
    let rows = tx
        .query("SELECT idx FROM latest WHERE device_pk = $1 AND second BETWEEN $2 AND $3", &[&pk, &start, &end])
        .await?;
    Ok(mask_of(rows.iter().map(|r| i64::from(r.get::<_, i16>(0)))))
}

/// Removes the entries of device `pk` older than `cutoff`: retention
/// removes every reading before it, so such a sensor has none left.
pub(super) async fn expire(tx: &Transaction<'_>, pk: i64, cutoff: i64) -> StoreResult<()> {
    tx.execute("DELETE FROM latest WHERE device_pk = $1 AND second < $2", &[&pk, &cutoff]).await?;
    Ok(())
}

/// Fills the index from the stored hours of every device (the migration
/// to schema version 5).
pub(super) async fn fill(tx: &Transaction<'_>) -> StoreResult<()> {
    let rows = tx.query("SELECT device_pk, bit_or(1::bigint << idx) FROM sensors GROUP BY device_pk", &[]).await?;
    for r in &rows {
        recompute(tx, r.get(0), r.get::<_, i64>(1) as u64, i64::MAX).await?;
    }
    Ok(())
}

/// The device `device_id` visible in `scope` with its entries, by idx, in
/// one query.
pub(super) async fn read(
    c: &impl GenericClient,
    scope: Scope,
    device_id: &str,
) -> StoreResult<Option<(DeviceHandle, Vec<LatestValue>)>> {
    let (account, key) = scope_params(scope);
    let stmt = c
        .prepare_cached(&format!(
            "WITH d AS (SELECT d.id FROM devices d WHERE d.device_id = $3 AND {SCOPE_FILTER})
             SELECT d.id, s.idx, s.sensor_id, s.name, s.type, s.unit, NULL::bigint AS second, NULL::bigint AS value
             FROM d LEFT JOIN sensors s ON s.device_pk = d.id
             UNION ALL
             SELECT d.id, l.idx, NULL, NULL, NULL, NULL, l.second, l.value FROM d JOIN latest l ON l.device_pk = d.id"
        ))
        .await?;
    let rows = c.query(&stmt, &[&account, &key, &device_id]).await?;
    let Some(first) = rows.first() else { return Ok(None) };
    let pk: i64 = first.get(0);
    let (mut sensors, mut values) = (Vec::new(), Vec::new());
    for r in &rows {
        match (r.get::<_, Option<i16>>(1), r.get::<_, Option<i64>>(6)) {
            (Some(idx), Some(second)) => values.push(entry(i64::from(idx), second, r.get(7))),
            (Some(idx), None) => sensors.push((i64::from(idx), sensor(r, 2))),
            (None, _) => {} // a device without sensors
        }
    }
    sensors.sort_unstable_by_key(|(idx, _)| *idx);
    values.sort_unstable_by_key(|v| v.idx);
    Ok(Some((DeviceHandle { pk, sensors: sensors_by_idx(sensors) }, values)))
}
