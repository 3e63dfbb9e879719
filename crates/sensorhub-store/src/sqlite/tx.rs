//! The transaction seam on SQLite ([`crate::write::tx::Tx`]): each
//! primitive operation as a prepared statement on the writer's connection,
//! inside its `IMMEDIATE` transaction. The futures are ready when first
//! polled, so a step runs to its end on the writer's thread ([`ready`]).

use super::{checked_hour_key, hour_key, key_chunk};
use crate::decide::HourRow;
use crate::decide::latest::{LatestRow, idx_of, mask_of};
use crate::decide::outbox::OutboxRow;
use crate::delivery::SENSOR_DATA;
use crate::sql::{Param, Row, Sql, Value, sqlite_placeholders};
use crate::write::tx::{Owed, Slice, Tx};
use crate::{ReadingSource, StoreError, StoreResult};
use futures_util::FutureExt;
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use sensorhub_core::model::SensorMeta;
use std::future::Future;

/// An hour row's stored bytes that fit in one page with the row's key
/// (4,096-byte pages; SQLite keeps at most 4,061 bytes of a row in its
/// leaf): a row beyond them goes on overflow pages.
const IN_ONE_PAGE: usize = 4_000;
/// The room an open hour's row is given at a time, bytes: its row keeps
/// its size while the hour grows by up to this much.
const PAD_STEP: usize = 2_048;

/// The zero bytes to store after an hour's `len` stored bytes (`None`:
/// none, and the column NULL): an open hour that no longer fits in a page
/// gets enough to round its row up to the next [`PAD_STEP`], so that while
/// it fills SQLite overwrites the row in place and writes only the pages
/// that changed (a row that grows is written whole, to new overflow pages:
/// 13 pages a commit for a 22 KB hour against 2,
/// `bench/blob_update_sql.py`). Other hours are stored as they are.
fn pad_for(open: bool, len: usize) -> Option<i64> {
    (open && len > IN_ONE_PAGE).then(|| (PAD_STEP - len % PAD_STEP) as i64)
}

/// Writes hours, with room at their end when they are `open` (written by
/// live data) and no longer fit in a page ([`pad_for`]), and takes the
/// room from the device's hour before each one given some: that one is
/// done with (a clock that lags gives it room again for as long as it
/// writes there). Other writes (an import of history, a removal, a copy)
/// store an hour's bytes alone.
pub(super) fn put_hours(c: &Connection, rows: &[HourRow], open: bool) -> StoreResult<()> {
    let mut stmt = c.prepare_cached(
        "INSERT INTO hours (key, data, pad) VALUES (?1, ?2, CASE WHEN ?3 IS NOT NULL THEN zeroblob(?3) END)
         ON CONFLICT (key) DO UPDATE SET data = excluded.data, pad = excluded.pad",
    )?;
    for row in rows {
        let key = checked_hour_key(row.device_pk, row.chunk)?;
        let pad = pad_for(open, row.data.len());
        stmt.execute(params![key, row.data, pad])?;
        if pad.is_some() {
            let before = hour_key(row.device_pk, row.chunk - 1);
            c.prepare_cached("UPDATE hours SET pad = NULL WHERE key = ?1 AND pad IS NOT NULL")?.execute([before])?;
        }
    }
    Ok(())
}

/// A step's future run to its end here; SQLite's never wait.
pub(super) fn ready<T>(step: impl Future<Output = StoreResult<T>>) -> StoreResult<T> {
    step.now_or_never().unwrap_or_else(|| Err(StoreError::Backend("a SQLite write step waited".into())))
}

/// A connection: the writer's inside a transaction, or a reader's.
pub(super) struct SqliteTx<'c>(pub &'c Connection);

fn rows(c: &Connection, sql: &str, p: impl rusqlite::Params) -> StoreResult<Vec<HourRow>> {
    let mut stmt = c.prepare_cached(sql)?;
    let rows = stmt.query_map(p, |r| {
        let key: i64 = r.get(0)?;
        Ok(HourRow { device_pk: key >> 32, chunk: key_chunk(key), data: r.get(1)? })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

impl Tx for SqliteTx<'_> {
    async fn device_pk(&self, device_id: &str) -> StoreResult<Option<i64>> {
        let mut stmt = self.0.prepare_cached("SELECT id FROM devices WHERE device_id = ?1")?;
        Ok(stmt.query_row([device_id], |r| r.get(0)).optional()?)
    }

    async fn device_sensors(&self, pk: i64) -> StoreResult<Vec<SensorMeta>> {
        crate::sql::access::device_sensors(self, pk).await
    }

    async fn subscriptions_of(&self, pks: &[i64]) -> StoreResult<Vec<Vec<Owed>>> {
        pks.iter().map(|&pk| subscriptions_of(self.0, pk)).collect()
    }

    async fn hours(&self, keys: &[(i64, i64)]) -> StoreResult<Vec<HourRow>> {
        let mut stmt = self.0.prepare_cached("SELECT data FROM hours WHERE key = ?1")?;
        let mut out = Vec::with_capacity(keys.len());
        for &(device_pk, chunk) in keys {
            let found: Option<Vec<u8>> =
                stmt.query_row([checked_hour_key(device_pk, chunk)?], |r| r.get(0)).optional()?;
            out.extend(found.map(|data| HourRow { device_pk, chunk, data }));
        }
        Ok(out)
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
            "SELECT key, data FROM hours WHERE key BETWEEN ?1 AND ?2 ORDER BY key DESC LIMIT ?3"
        } else {
            "SELECT key, data FROM hours WHERE key BETWEEN ?1 AND ?2 ORDER BY key LIMIT ?3"
        };
        rows(self.0, sql, params![hour_key(pk, first), hour_key(pk, last), limit as i64])
    }

    async fn hours_after(&self, after: Option<(i64, i64)>, limit: usize) -> StoreResult<Vec<HourRow>> {
        let after = after.map_or(i64::MIN, |(pk, chunk)| hour_key(pk, chunk));
        rows(self.0, "SELECT key, data FROM hours WHERE key > ?1 ORDER BY key LIMIT ?2", params![after, limit as i64])
    }

    async fn put_hours(&self, rows: &[HourRow]) -> StoreResult<()> {
        put_hours(self.0, rows, false)
    }

    async fn put_open_hours(&self, rows: &[HourRow]) -> StoreResult<()> {
        put_hours(self.0, rows, true)
    }

    async fn remove_hours(&self, pk: i64, chunks: &[i64]) -> StoreResult<()> {
        let mut stmt = self.0.prepare_cached("DELETE FROM hours WHERE key = ?1")?;
        for &chunk in chunks {
            stmt.execute([hour_key(pk, chunk)])?;
        }
        Ok(())
    }

    async fn upsert_latest(&self, rows: &[LatestRow], stored_at: i64) -> StoreResult<()> {
        let mut stmt = self.0.prepare_cached(
            "INSERT INTO latest (device_pk, idx, second, value, stored_at) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (device_pk, idx) DO UPDATE
             SET second = excluded.second, value = excluded.value, stored_at = excluded.stored_at
             WHERE excluded.second >= latest.second",
        )?;
        for r in rows {
            stmt.execute(params![r.device_pk, r.idx, r.second, r.value, stored_at])?;
        }
        Ok(())
    }

    async fn latest_within(&self, pk: i64, start: i64, end: i64) -> StoreResult<u64> {
        let mut stmt =
            self.0.prepare_cached("SELECT idx FROM latest WHERE device_pk = ?1 AND second BETWEEN ?2 AND ?3")?;
        let idx = stmt.query_map(params![pk, start, end], |r| r.get(0))?.collect::<Result<Vec<i64>, _>>()?;
        Ok(mask_of(idx))
    }

    async fn remove_latest(&self, pk: i64, mask: u64) -> StoreResult<()> {
        let mut stmt = self.0.prepare_cached("DELETE FROM latest WHERE device_pk = ?1 AND idx = ?2")?;
        for idx in idx_of(mask) {
            stmt.execute(params![pk, idx])?;
        }
        Ok(())
    }

    async fn expire_latest(&self, pk: i64, cutoff: i64) -> StoreResult<()> {
        self.0
            .prepare_cached("DELETE FROM latest WHERE device_pk = ?1 AND second < ?2")?
            .execute(params![pk, cutoff])?;
        Ok(())
    }

    async fn sensor_masks(&self) -> StoreResult<Vec<(i64, u64)>> {
        let mut stmt = self.0.prepare("SELECT device_pk, idx FROM sensors ORDER BY device_pk")?;
        let sensors = stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))?;
        let mut devices: Vec<(i64, u64)> = Vec::new();
        for sensor in sensors {
            let (pk, idx) = sensor?;
            match devices.last_mut() {
                Some((last, mask)) if *last == pk => *mask |= mask_of([idx]),
                _ => devices.push((pk, mask_of([idx]))),
            }
        }
        Ok(devices)
    }

    async fn insert_outbox(&self, rows: &[OutboxRow]) -> StoreResult<()> {
        super::outbox_log::write(self.0, rows)
    }

    async fn take(&self, mut source: ReadingSource, n: usize) -> StoreResult<(ReadingSource, Slice)> {
        // The writer's thread may block: read the source right here.
        let items = source.by_ref().take(n).collect();
        Ok((source, items))
    }
}

impl crate::write::migrate::MigrationTx for SqliteTx<'_> {
    async fn schema_version(&self) -> StoreResult<usize> {
        Ok(usize::try_from(self.0.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0))?).unwrap_or(0))
    }

    async fn run_migration(&self, sql: &str) -> StoreResult<()> {
        Ok(self.0.execute_batch(sql)?)
    }

    async fn set_schema_version(&self, version: usize) -> StoreResult<()> {
        Ok(self.0.pragma_update(None, "user_version", version as i64)?)
    }

    async fn has_old_readings(&self) -> StoreResult<bool> {
        let sql = "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'readings')";
        Ok(self.0.query_row(sql, [], |r| r.get(0))?)
    }
}

impl rusqlite::ToSql for Param<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        use rusqlite::types::Value as V;
        let null = || ToSqlOutput::Owned(V::Null);
        Ok(match *self {
            Param::Int(v) => v.map_or_else(null, ToSqlOutput::from),
            Param::Int4(v) => v.map_or_else(null, ToSqlOutput::from),
            Param::Int2(v) => v.map_or_else(null, ToSqlOutput::from),
            Param::Real(v) => v.map_or_else(null, ToSqlOutput::from),
            Param::Bool(v) => v.map_or_else(null, ToSqlOutput::from),
            Param::Text(v) => v.map_or_else(null, ToSqlOutput::from),
            Param::Bytes(v) => v.map_or_else(null, ToSqlOutput::from),
        })
    }
}

/// A column as [`Row`]s hold it.
fn value(v: ValueRef<'_>) -> StoreResult<Value> {
    Ok(match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(n) => Value::Int(n),
        ValueRef::Real(x) => Value::Real(x),
        ValueRef::Text(t) => Value::Text(std::str::from_utf8(t).map_err(|e| StoreError::Backend(e.into()))?.to_owned()),
        ValueRef::Blob(b) => Value::Bytes(b.to_vec()),
    })
}

impl Sql for SqliteTx<'_> {
    async fn query(&self, sql: &str, params: &[Param<'_>]) -> StoreResult<Vec<Row>> {
        let mut stmt = self.0.prepare_cached(&sqlite_placeholders(sql))?;
        let n = stmt.column_count();
        let mut rows = stmt.query(rusqlite::params_from_iter(params))?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            out.push(Row((0..n).map(|i| value(r.get_ref(i)?)).collect::<StoreResult<_>>()?));
        }
        Ok(out)
    }

    async fn execute(&self, sql: &str, params: &[Param<'_>]) -> StoreResult<u64> {
        let mut stmt = self.0.prepare_cached(&sqlite_placeholders(sql))?;
        Ok(stmt.execute(rusqlite::params_from_iter(params))? as u64)
    }
}

impl crate::sql::DeviceHours for SqliteTx<'_> {
    async fn hours_from(&self, pk: i64, first: i64) -> StoreResult<Vec<HourRow>> {
        let sql = "SELECT key, data FROM hours WHERE key BETWEEN ?1 AND ?2 ORDER BY key";
        rows(self.0, sql, params![hour_key(pk, first), hour_key(pk, crate::write::tx::LAST_HOUR)])
    }
}

/// Runs `step` (written once, [`crate::sql`]) in an `IMMEDIATE`
/// transaction on `c`, and commits it when the step succeeds.
pub(super) fn in_tx<R>(c: &mut Connection, step: impl AsyncFnOnce(&SqliteTx<'_>) -> StoreResult<R>) -> StoreResult<R> {
    let tx = begin(c)?;
    let result = ready(step(&SqliteTx(&tx)))?;
    tx.commit()?;
    Ok(result)
}

/// Runs `step` (written once, [`crate::sql`]) on `c`, outside a transaction (reads).
pub(super) fn on<R>(c: &Connection, step: impl AsyncFnOnce(&SqliteTx<'_>) -> StoreResult<R>) -> StoreResult<R> {
    ready(step(&SqliteTx(c)))
}

/// An `IMMEDIATE` transaction: every write of this backend starts here.
pub(super) fn begin(c: &mut Connection) -> StoreResult<Transaction<'_>> {
    Ok(c.transaction_with_behavior(TransactionBehavior::Immediate)?)
}

/// The enabled subscriptions to sensor data of enabled accounts that
/// cover device `pk`, which their account sees: all of its devices, or a
/// list naming it.
fn subscriptions_of(tx: &Connection, pk: i64) -> StoreResult<Vec<Owed>> {
    let mut stmt = tx.prepare_cached(
        "SELECT s.id FROM subscriptions s JOIN accounts a ON a.id = s.account_id
         WHERE s.enabled = 1 AND a.disabled = 0 AND instr(',' || s.events || ',', ',' || ?2 || ',') > 0
           AND EXISTS (SELECT 1 FROM account_devices x WHERE x.account_id = s.account_id AND x.device_pk = ?1)
           AND (s.all_devices = 1
                OR EXISTS (SELECT 1 FROM subscription_devices sd WHERE sd.subscription_id = s.id AND sd.device_pk = ?1))
         ORDER BY s.id",
    )?;
    // SQLite's log names subscriptions by id: no number.
    let ids = stmt
        .query_map(params![pk, SENSOR_DATA], |r| Ok((r.get::<_, String>(0)?.into(), 0)))?
        .collect::<Result<_, _>>()?;
    Ok(ids)
}
