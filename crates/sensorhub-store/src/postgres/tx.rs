//! The transaction seam on PostgreSQL ([`crate::write::tx::Tx`]): each
//! primitive operation as one statement (arrays through `unnest`, hour rows
//! through a binary `COPY`), so that a step costs few round trips, and
//! operations sent together travel in one.

use crate::decide::HourRow;
use crate::decide::latest::{LatestRow, idx_of, mask_of};
use crate::decide::outbox::OutboxRow;
use crate::sql::{Param, Row, Sql, Value};
use crate::write::tx::{Slice, Tx};
use crate::{ReadingSource, StoreError, StoreResult};
use bytes::BytesMut;
use deadpool_postgres::{GenericClient, Transaction};
use sensorhub_core::model::SensorMeta;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{IsNull, ToSql, Type};

/// Hour rows written from this many on go through the binary `COPY` into a
/// staging table; fewer go in one `INSERT` of arrays.
const STAGE_FROM: usize = 64;

/// A writing transaction.
pub(super) struct PgTx<'a> {
    tx: &'a Transaction<'a>,
    /// Whether this connection has the staging table of hour rows.
    staged: AtomicBool,
}

impl<'a> PgTx<'a> {
    /// The seam over `tx`.
    pub(super) fn new(tx: &'a Transaction<'a>) -> Self {
        Self { tx, staged: AtomicBool::new(false) }
    }
}

impl ToSql for Param<'_> {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Param::Int(v) => v.to_sql(ty, out),
            Param::Int4(v) => v.to_sql(ty, out),
            Param::Int2(v) => v.to_sql(ty, out),
            Param::Real(v) => v.to_sql(ty, out),
            Param::Bool(v) => v.to_sql(ty, out),
            Param::Text(v) => v.to_sql(ty, out),
            Param::Bytes(v) => v.to_sql(ty, out),
        }
    }

    /// Each variant checks its own type against the column's.
    fn accepts(_: &Type) -> bool {
        true
    }

    fn to_sql_checked(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Param::Int(v) => v.to_sql_checked(ty, out),
            Param::Int4(v) => v.to_sql_checked(ty, out),
            Param::Int2(v) => v.to_sql_checked(ty, out),
            Param::Real(v) => v.to_sql_checked(ty, out),
            Param::Bool(v) => v.to_sql_checked(ty, out),
            Param::Text(v) => v.to_sql_checked(ty, out),
            Param::Bytes(v) => v.to_sql_checked(ty, out),
        }
    }
}

/// Column `i` of `row` as [`Row`]s hold it.
fn value(row: &tokio_postgres::Row, i: usize) -> StoreResult<Value> {
    let ty = row.columns()[i].type_().clone();
    let v = match ty {
        Type::INT8 => row.try_get::<_, Option<i64>>(i)?.map(Value::Int),
        Type::INT4 => row.try_get::<_, Option<i32>>(i)?.map(|n| Value::Int(n.into())),
        Type::INT2 => row.try_get::<_, Option<i16>>(i)?.map(|n| Value::Int(n.into())),
        Type::FLOAT8 => row.try_get::<_, Option<f64>>(i)?.map(Value::Real),
        Type::BOOL => row.try_get::<_, Option<bool>>(i)?.map(Value::Bool),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => row.try_get::<_, Option<String>>(i)?.map(Value::Text),
        Type::BYTEA => row.try_get::<_, Option<Vec<u8>>>(i)?.map(Value::Bytes),
        other => {
            return Err(StoreError::Backend(format!("column {i} is of type {other}, which Row does not hold").into()));
        }
    };
    Ok(v.unwrap_or(Value::Null))
}

/// A PostgreSQL connection or transaction running statements written once ([`crate::sql`]).
pub(super) struct On<'a, C>(pub &'a C);

impl<C: GenericClient + Sync> Sql for On<'_, C> {
    async fn query(&self, sql: &str, params: &[Param<'_>]) -> StoreResult<Vec<Row>> {
        let stmt = self.0.prepare_cached(sql).await?;
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
        let rows = self.0.query(&stmt, &refs).await?;
        rows.iter().map(|r| Ok(Row((0..r.len()).map(|i| value(r, i)).collect::<StoreResult<_>>()?))).collect()
    }

    async fn execute(&self, sql: &str, params: &[Param<'_>]) -> StoreResult<u64> {
        let stmt = self.0.prepare_cached(sql).await?;
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
        Ok(self.0.execute(&stmt, &refs).await?)
    }
}

impl Sql for PgTx<'_> {
    async fn query(&self, sql: &str, params: &[Param<'_>]) -> StoreResult<Vec<Row>> {
        On(self.tx).query(sql, params).await
    }

    async fn execute(&self, sql: &str, params: &[Param<'_>]) -> StoreResult<u64> {
        On(self.tx).execute(sql, params).await
    }
}

impl<C: GenericClient + Sync> crate::sql::DeviceHours for On<'_, C> {
    async fn hours_from(&self, pk: i64, first: i64) -> StoreResult<Vec<HourRow>> {
        let sql = "SELECT device_pk, chunk, data FROM hours WHERE device_pk = $1 AND chunk >= $2 ORDER BY chunk";
        let stmt = self.0.prepare_cached(sql).await?;
        Ok(hour_rows(&self.0.query(&stmt, &[&pk, &first]).await?))
    }
}

impl crate::sql::DeviceHours for PgTx<'_> {
    async fn hours_from(&self, pk: i64, first: i64) -> StoreResult<Vec<HourRow>> {
        On(self.tx).hours_from(pk, first).await
    }
}

/// Sends hour rows through `copy` (a `COPY … FROM STDIN (FORMAT binary)`
/// of columns device_pk, chunk, data).
pub(super) async fn copy_hours(tx: &Transaction<'_>, copy: &str, rows: &[HourRow]) -> StoreResult<u64> {
    let sink = tx.copy_in(copy).await?;
    let writer = BinaryCopyInWriter::new(sink, &[Type::INT8, Type::INT8, Type::BYTEA]);
    futures_util::pin_mut!(writer);
    for r in rows {
        writer.as_mut().write(&[&r.device_pk, &r.chunk, &r.data]).await?;
    }
    Ok(writer.finish().await?)
}

fn hour_rows(rows: &[tokio_postgres::Row]) -> Vec<HourRow> {
    rows.iter().map(|r| HourRow { device_pk: r.get(0), chunk: r.get(1), data: r.get(2) }).collect()
}

impl Tx for PgTx<'_> {
    async fn device_pk(&self, device_id: &str) -> StoreResult<Option<i64>> {
        let stmt = self.tx.prepare_cached("SELECT id FROM devices WHERE device_id = $1").await?;
        Ok(self.tx.query_opt(&stmt, &[&device_id]).await?.map(|r| r.get(0)))
    }

    async fn device_sensors(&self, pk: i64) -> StoreResult<Vec<SensorMeta>> {
        crate::sql::access::device_sensors(self, pk).await
    }

    async fn subscriptions_of(&self, pk: i64) -> StoreResult<Vec<String>> {
        super::outbox::subscriptions_of(self.tx, pk).await
    }

    async fn hours(&self, keys: &[(i64, i64)]) -> StoreResult<Vec<HourRow>> {
        if let [(pk, chunk)] = keys {
            // One hour (a group of a station's live readings): a plan made
            // once. With the arrays below the planner plans each bind anew
            // (the arrays' lengths change its estimate): 60 us a group.
            let sql = "SELECT device_pk, chunk, data FROM hours WHERE device_pk = $1 AND chunk = $2";
            let stmt = self.tx.prepare_cached(sql).await?;
            return Ok(hour_rows(&self.tx.query(&stmt, &[pk, chunk]).await?));
        }
        let devices: Vec<i64> = keys.iter().map(|k| k.0).collect();
        let chunks: Vec<i64> = keys.iter().map(|k| k.1).collect();
        let stmt = self
            .tx
            .prepare_cached(
                "SELECT r.device_pk, r.chunk, r.data FROM hours r
                 JOIN unnest($1::bigint[], $2::bigint[]) AS k(device_pk, chunk)
                   ON r.device_pk = k.device_pk AND r.chunk = k.chunk",
            )
            .await?;
        Ok(hour_rows(&self.tx.query(&stmt, &[&devices, &chunks]).await?))
    }

    async fn hours_between(
        &self,
        pk: i64,
        first: i64,
        last: i64,
        limit: usize,
        newest_first: bool,
    ) -> StoreResult<Vec<HourRow>> {
        let sql = if newest_first {
            "SELECT device_pk, chunk, data FROM hours WHERE device_pk = $1 AND chunk BETWEEN $2 AND $3
             ORDER BY chunk DESC LIMIT $4"
        } else {
            "SELECT device_pk, chunk, data FROM hours WHERE device_pk = $1 AND chunk BETWEEN $2 AND $3
             ORDER BY chunk LIMIT $4"
        };
        Ok(hour_rows(&self.tx.query(sql, &[&pk, &first, &last, &(limit as i64)]).await?))
    }

    async fn hours_after(&self, after: Option<(i64, i64)>, limit: usize) -> StoreResult<Vec<HourRow>> {
        let (pk, chunk) = after.unwrap_or((i64::MIN, i64::MIN));
        let rows = self
            .tx
            .query(
                "SELECT device_pk, chunk, data FROM hours WHERE (device_pk, chunk) > ($1, $2)
                 ORDER BY device_pk, chunk LIMIT $3",
                &[&pk, &chunk, &(limit as i64)],
            )
            .await?;
        Ok(hour_rows(&rows))
    }

    async fn put_hours(&self, rows: &[HourRow]) -> StoreResult<()> {
        if rows.is_empty() {
            return Ok(());
        }
        if rows.len() < STAGE_FROM {
            // A few hours (a group of webhook or MQTT readings): one
            // statement. Staging costs a temporary table's TRUNCATE, a new
            // file each time, which was most of a small group's time.
            let devices: Vec<i64> = rows.iter().map(|r| r.device_pk).collect();
            let chunks: Vec<i64> = rows.iter().map(|r| r.chunk).collect();
            let data: Vec<&[u8]> = rows.iter().map(|r| r.data.as_slice()).collect();
            let stmt = self
                .tx
                .prepare_cached(
                    "INSERT INTO hours (device_pk, chunk, data)
                     SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bytea[])
                     ON CONFLICT (device_pk, chunk) DO UPDATE SET data = excluded.data",
                )
                .await?;
            self.tx.execute(&stmt, &[&devices, &chunks, &data]).await?;
            return Ok(());
        }
        if !self.staged.swap(true, Ordering::Relaxed) {
            self.tx
                .batch_execute(
                    "CREATE TEMP TABLE IF NOT EXISTS readings_in (device_pk bigint, chunk bigint, data bytea)
                     ON COMMIT DELETE ROWS",
                )
                .await?;
        }
        copy_hours(self.tx, "COPY readings_in (device_pk, chunk, data) FROM STDIN (FORMAT binary)", rows).await?;
        self.tx
            .batch_execute(
                "INSERT INTO hours (device_pk, chunk, data) SELECT device_pk, chunk, data FROM readings_in
                 ON CONFLICT (device_pk, chunk) DO UPDATE SET data = excluded.data;
                 TRUNCATE readings_in",
            )
            .await?;
        Ok(())
    }

    async fn remove_hours(&self, pk: i64, chunks: &[i64]) -> StoreResult<()> {
        if !chunks.is_empty() {
            self.tx.execute("DELETE FROM hours WHERE device_pk = $1 AND chunk = ANY($2)", &[&pk, &chunks]).await?;
        }
        Ok(())
    }

    async fn upsert_latest(&self, rows: &[LatestRow], stored_at: i64) -> StoreResult<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let devices: Vec<i64> = rows.iter().map(|r| r.device_pk).collect();
        let idx: Vec<i16> = rows.iter().map(|r| r.idx).collect();
        let seconds: Vec<i64> = rows.iter().map(|r| r.second).collect();
        let values: Vec<i64> = rows.iter().map(|r| r.value).collect();
        let stmt = self
            .tx
            .prepare_cached(
                "INSERT INTO latest (device_pk, idx, second, value, stored_at)
                 SELECT d, i, s, v, $5::bigint FROM unnest($1::bigint[], $2::smallint[], $3::bigint[], $4::bigint[])
                     AS u(d, i, s, v)
                 ON CONFLICT (device_pk, idx) DO UPDATE
                 SET second = excluded.second, value = excluded.value, stored_at = excluded.stored_at
                 WHERE excluded.second >= latest.second",
            )
            .await?;
        self.tx.execute(&stmt, &[&devices, &idx, &seconds, &values, &stored_at]).await?;
        Ok(())
    }

    async fn latest_within(&self, pk: i64, start: i64, end: i64) -> StoreResult<u64> {
        let rows = self
            .tx
            .query("SELECT idx FROM latest WHERE device_pk = $1 AND second BETWEEN $2 AND $3", &[&pk, &start, &end])
            .await?;
        Ok(mask_of(rows.iter().map(|r| i64::from(r.get::<_, i16>(0)))))
    }

    async fn remove_latest(&self, pk: i64, mask: u64) -> StoreResult<()> {
        self.tx.execute("DELETE FROM latest WHERE device_pk = $1 AND idx = ANY($2)", &[&pk, &idx_of(mask)]).await?;
        Ok(())
    }

    async fn expire_latest(&self, pk: i64, cutoff: i64) -> StoreResult<()> {
        self.tx.execute("DELETE FROM latest WHERE device_pk = $1 AND second < $2", &[&pk, &cutoff]).await?;
        Ok(())
    }

    async fn sensor_masks(&self) -> StoreResult<Vec<(i64, u64)>> {
        let rows =
            self.tx.query("SELECT device_pk, bit_or(1::bigint << idx) FROM sensors GROUP BY device_pk", &[]).await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get::<_, i64>(1) as u64)).collect())
    }

    async fn insert_outbox(&self, rows: &[OutboxRow]) -> StoreResult<()> {
        super::outbox::insert(self.tx, rows).await
    }

    async fn take(&self, mut source: ReadingSource, n: usize) -> StoreResult<(ReadingSource, Slice)> {
        // The source may block (it reads a file): it is drained on the
        // blocking pool, never on the async worker.
        tokio::task::spawn_blocking(move || {
            let items: Slice = source.by_ref().take(n).collect();
            (source, items)
        })
        .await
        .map_err(|e| StoreError::Backend(format!("reading the input failed: {e}").into()))
    }
}

impl crate::write::migrate::MigrationTx for PgTx<'_> {
    async fn schema_version(&self) -> StoreResult<usize> {
        self.tx
            .batch_execute(
                "CREATE TABLE IF NOT EXISTS sensorhub_schema
                 (version integer NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
            )
            .await?;
        let row = self.tx.query_one("SELECT coalesce(max(version), 0) FROM sensorhub_schema", &[]).await?;
        Ok(usize::try_from(row.get::<_, i32>(0)).unwrap_or(0))
    }

    async fn run_migration(&self, sql: &str) -> StoreResult<()> {
        Ok(self.tx.batch_execute(sql).await?)
    }

    async fn set_schema_version(&self, version: usize) -> StoreResult<()> {
        let version = i32::try_from(version).unwrap_or(i32::MAX);
        self.tx.execute("INSERT INTO sensorhub_schema (version) VALUES ($1)", &[&version]).await?;
        Ok(())
    }

    async fn has_old_readings(&self) -> StoreResult<bool> {
        Ok(self.tx.query_one("SELECT to_regclass('readings') IS NOT NULL", &[]).await?.get(0))
    }
}
