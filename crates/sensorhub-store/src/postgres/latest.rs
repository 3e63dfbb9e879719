//! The `latest` index on PostgreSQL, read by the `latest` endpoint: the
//! newest value of each sensor of each device (schema version 5), kept by
//! every write of readings in its own transaction ([`crate::write`]), with
//! the statement that writes it.

use super::ahead::Params;
use crate::decide::latest::LatestRow;
use crate::decide::latest::entry;
use crate::decide::sensors_by_idx;
use crate::sql::access::SCOPE_FILTER;
use crate::{DeviceHandle, LatestValue, Scope, StoreResult};
use deadpool_postgres::GenericClient;
use sensorhub_core::model::SensorMeta;

/// `latest`'s upsert: the entries' devices, sensors, seconds and values
/// as arrays ($1-$4), the second they were stored at ($5).
macro_rules! upsert_latest {
    () => {
        "INSERT INTO latest (device_pk, idx, second, value, stored_at)
        SELECT d, i, s, v, $5::bigint FROM unnest($1::bigint[], $2::smallint[], $3::bigint[], $4::bigint[]) AS u(d, i, s, v)
        ON CONFLICT (device_pk, idx) DO UPDATE
        SET second = excluded.second, value = excluded.value, stored_at = excluded.stored_at
        WHERE excluded.second >= latest.second"
    };
}
pub(super) const UPSERT: &str = upsert_latest!();

/// One outbox log row ([`super::outbox_log`]'s `INSERT`, its parameters
/// `$6` to `$14`) and [`UPSERT`] in one statement: a group of live
/// readings so sends one statement fewer, and each costs both ends a flush
/// and a wake-up on the group's serial path.
pub(super) const WITH_LOG: &str = concat!(
    "WITH log AS (INSERT INTO outbox_log (created_at, devices, counts, subs, n, cum, seed, ids, bodies)
        VALUES ($6, $7, $8, $9, $10, $11, $12, $13, $14)) ",
    upsert_latest!()
);

/// The parameters of [`UPSERT`].
pub(super) fn params(rows: &[LatestRow], stored_at: i64) -> Params {
    let devices: Vec<i64> = rows.iter().map(|r| r.device_pk).collect();
    let idx: Vec<i16> = rows.iter().map(|r| r.idx).collect();
    let seconds: Vec<i64> = rows.iter().map(|r| r.second).collect();
    let values: Vec<i64> = rows.iter().map(|r| r.value).collect();
    vec![Box::new(devices), Box::new(idx), Box::new(seconds), Box::new(values), Box::new(stored_at)]
}

/// A sensor from columns `from..from + 4` (id, name, type, unit).
pub(super) fn sensor(r: &tokio_postgres::Row, from: usize) -> SensorMeta {
    SensorMeta { sensor_id: r.get(from), name: r.get(from + 1), kind: r.get(from + 2), unit: r.get(from + 3) }
}

/// The device `device_id` visible in `scope` with its entries, by idx, in
/// one query.
pub(super) async fn read(
    c: &impl GenericClient,
    scope: Scope,
    device_id: &str,
) -> StoreResult<Option<(DeviceHandle, Vec<LatestValue>)>> {
    let (account, key) = scope.params();
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
