//! The transaction seam on PostgreSQL ([`crate::write::tx::Tx`]): each
//! primitive operation as one statement (arrays through `unnest`, hour rows
//! through a binary `COPY`), so that a step costs few round trips, and
//! operations sent together travel in one.

use super::ahead::{Params, SendAhead};
use super::on::{On, refs, rows_of};
use super::outbox_log::Tail;
use crate::decide::FastMap;
use crate::decide::HourRow;
use crate::decide::latest::{LatestRow, idx_of, mask_of};
use crate::decide::outbox::OutboxRow;
use crate::delivery::SENSOR_DATA;
use crate::sql::{Param, Row, Sql};
use crate::write::tx::{Owed, Slice, Tx};
use crate::{ReadingSource, StoreError, StoreResult};
use deadpool_postgres::{Client, GenericClient, StatementCache, Transaction};
use sensorhub_core::model::SensorMeta;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use tokio_postgres::Statement;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::Type;

/// Hour rows written from this many on go through the binary `COPY` into a
/// staging table; fewer go in one `INSERT` of arrays.
const STAGE_FROM: usize = 64;

/// A device's hours from one on.
const HOURS_FROM: &str = "SELECT device_pk, chunk, data FROM hours WHERE device_pk = $1 AND chunk >= $2 ORDER BY chunk";

/// A writing transaction.
pub(super) struct PgTx<'a> {
    c: &'a tokio_postgres::Client,
    /// The connection's prepared statements.
    cache: &'a StatementCache,
    /// Whether this connection has the staging table of hour rows.
    staged: AtomicBool,
    /// Where the writes of hours, `latest` and the outbox go ahead, if they do.
    ahead: Option<&'a dyn SendAhead>,
    /// The numbers of the subscriptions this transaction looked up, which
    /// its outbox rows name (the write lock, held from its start, keeps
    /// them as they are until it ends).
    numbers: Mutex<FastMap<std::sync::Arc<str>, i32>>,
    /// Where the outbox log ends, once known (the write lock keeps it).
    tail: Mutex<Option<Tail>>,
}

impl<'a> PgTx<'a> {
    /// The seam over `tx`: each statement waits for its answer. `tail` is
    /// where the outbox log ends, if known.
    pub(super) fn new(tx: &'a Transaction<'a>, tail: Option<Tail>) -> Self {
        let pg = Self::on(tx.client(), &tx.statement_cache, None);
        pg.begun(tail);
        pg
    }

    /// The seam over `c`, in a transaction begun by hand, with the writes
    /// whose answers the step does not use sent through `ahead`
    /// ([`super::ahead`]): the caller settles it before it commits.
    pub(super) fn sending_ahead(c: &'a Client, ahead: &'a dyn SendAhead) -> Self {
        Self::on(c, &c.statement_cache, Some(ahead))
    }

    fn on(c: &'a tokio_postgres::Client, cache: &'a StatementCache, ahead: Option<&'a dyn SendAhead>) -> Self {
        let numbers = Mutex::new(FastMap::default());
        Self { c, cache, staged: AtomicBool::new(false), ahead, numbers, tail: Mutex::new(None) }
    }

    /// Where the outbox log ends, if known: as the transaction found it, or
    /// as its log rows left it.
    pub(super) fn tail(&self) -> Option<Tail> {
        *self.tail.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Learns where the outbox log ends (known when the write lock was
    /// granted), unless the transaction has looked it up already.
    pub(super) fn begun(&self, tail: Option<Tail>) {
        let mut known = self.tail.lock().unwrap_or_else(PoisonError::into_inner);
        if known.is_none() {
            *known = tail;
        }
    }

    /// The subscription numbers known to this transaction.
    fn numbers(&self) -> std::sync::MutexGuard<'_, FastMap<std::sync::Arc<str>, i32>> {
        self.numbers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Looks up the numbers of the subscriptions `rows` owe that were not
    /// looked up with the readings (an alarm transition's), in one round trip.
    async fn learn_numbers(&self, rows: &[OutboxRow]) -> StoreResult<()> {
        let mut unknown: Vec<&str> = {
            let numbers = self.numbers();
            rows.iter().map(|r| &*r.subscription_id).filter(|id| !numbers.contains_key(*id)).collect()
        };
        if !unknown.is_empty() {
            unknown.sort_unstable();
            unknown.dedup();
            let found = super::outbox_log::numbers(self.tx().await?, &unknown).await?;
            self.numbers().extend(found.into_iter().map(|(id, num)| (id.into(), num)));
        }
        Ok(())
    }

    /// The log rows of deliveries `rows`, their numbers learnt; the log's
    /// tail looked up first if it is not known.
    async fn log_rows(&self, rows: &[OutboxRow]) -> StoreResult<Vec<(&'static str, Params)>> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let mut tail = match self.tail() {
            Some(tail) => tail,
            None => super::outbox_log::tail(self.tx().await?).await?,
        };
        let numbers = self.numbers();
        let rows = super::outbox_log::insert(rows, |id| numbers.get(id).copied(), &mut tail)?;
        *self.tail.lock().unwrap_or_else(PoisonError::into_inner) = Some(tail);
        Ok(rows)
    }

    /// The connection for a statement that waits for its answer: once the
    /// writes sent ahead have answered (their failure is the one reported).
    async fn tx(&self) -> StoreResult<&'a tokio_postgres::Client> {
        if let Some(ahead) = self.ahead {
            ahead.settle().await?;
        }
        Ok(self.c)
    }

    /// The connection, for a step of this backend's own (its statements
    /// wait for their answers).
    pub(super) async fn settled(&self) -> StoreResult<&'a tokio_postgres::Client> {
        self.tx().await
    }

    /// `sql` prepared once per connection (a cached statement asks nothing).
    async fn prepare(&self, sql: &str) -> StoreResult<Statement> {
        Ok(self.cache.prepare(self.c, sql).await?)
    }

    /// Runs the write `sql` with owned `params`, sent ahead where so.
    async fn write(&self, sql: &str, params: Params) -> StoreResult<()> {
        let stmt = self.prepare(sql).await?;
        match self.ahead {
            Some(ahead) => ahead.send(stmt, params),
            None => {
                self.c.execute_raw(&stmt, params).await?;
                Ok(())
            }
        }
    }
}

impl Sql for PgTx<'_> {
    async fn query(&self, sql: &str, params: &[Param<'_>]) -> StoreResult<Vec<Row>> {
        let c = self.tx().await?;
        let stmt = self.prepare(sql).await?;
        rows_of(&c.query(&stmt, &refs(params)).await?)
    }

    async fn execute(&self, sql: &str, params: &[Param<'_>]) -> StoreResult<u64> {
        let c = self.tx().await?;
        let stmt = self.prepare(sql).await?;
        Ok(c.execute(&stmt, &refs(params)).await?)
    }
}

impl<C: GenericClient + Sync> crate::sql::DeviceHours for On<'_, C> {
    async fn hours_from(&self, pk: i64, first: i64) -> StoreResult<Vec<HourRow>> {
        let stmt = self.0.prepare_cached(HOURS_FROM).await?;
        Ok(hour_rows(&self.0.query(&stmt, &[&pk, &first]).await?))
    }
}

impl crate::sql::DeviceHours for PgTx<'_> {
    async fn hours_from(&self, pk: i64, first: i64) -> StoreResult<Vec<HourRow>> {
        let c = self.tx().await?;
        let stmt = self.prepare(HOURS_FROM).await?;
        Ok(hour_rows(&c.query(&stmt, &[&pk, &first]).await?))
    }
}

/// Sends hour rows through `copy` (a `COPY … FROM STDIN (FORMAT binary)`
/// of columns device_pk, chunk, data).
pub(super) async fn copy_hours(c: &tokio_postgres::Client, copy: &str, rows: &[HourRow]) -> StoreResult<u64> {
    let sink = c.copy_in(copy).await?;
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
        let c = self.tx().await?;
        let stmt = self.prepare("SELECT id FROM devices WHERE device_id = $1").await?;
        let device_id = &*super::lookup_name(device_id);
        Ok(c.query_opt(&stmt, &[&device_id]).await?.map(|r| r.get(0)))
    }

    async fn device_sensors(&self, pk: i64) -> StoreResult<Vec<SensorMeta>> {
        crate::sql::access::device_sensors(self, pk).await
    }

    async fn subscriptions_of(&self, pks: &[i64]) -> StoreResult<Vec<Vec<Owed>>> {
        let c = self.tx().await?;
        let stmt = self.prepare(super::outbox::SUBSCRIPTIONS_OF).await?;
        // One statement a device, sent together: a statement of them all
        // (`= ANY ($1)`) is planned anew at each run, for as much again.
        let stmt = &stmt;
        let asked = futures_util::future::try_join_all(
            pks.iter().map(|pk| async move { c.query(stmt, &[pk, &SENSOR_DATA]).await }),
        );
        let lists: Vec<Vec<Owed>> = asked
            .await?
            .iter()
            .map(|rows| rows.iter().map(|r| (r.get::<_, &str>(0).into(), r.get(1))).collect())
            .collect();
        self.knows(&lists.concat());
        Ok(lists)
    }

    fn knows(&self, owed: &[Owed]) {
        let mut numbers = self.numbers();
        for (id, num) in owed {
            if !numbers.contains_key(id) {
                numbers.insert(id.clone(), *num);
            }
        }
    }

    async fn hours(&self, keys: &[(i64, i64)]) -> StoreResult<Vec<HourRow>> {
        let c = self.tx().await?;
        if let [(pk, chunk)] = keys {
            // One hour (a group of a station's live readings): a plan made
            // once. With the arrays below the planner plans each bind anew
            // (the arrays' lengths change its estimate): 60 us a group.
            let sql = "SELECT device_pk, chunk, data FROM hours WHERE device_pk = $1 AND chunk = $2";
            let stmt = self.prepare(sql).await?;
            return Ok(hour_rows(&c.query(&stmt, &[pk, chunk]).await?));
        }
        let devices: Vec<i64> = keys.iter().map(|k| k.0).collect();
        let chunks: Vec<i64> = keys.iter().map(|k| k.1).collect();
        let stmt = self
            .prepare(
                "SELECT r.device_pk, r.chunk, r.data FROM hours r
                 JOIN unnest($1::bigint[], $2::bigint[]) AS k(device_pk, chunk)
                   ON r.device_pk = k.device_pk AND r.chunk = k.chunk",
            )
            .await?;
        Ok(hour_rows(&c.query(&stmt, &[&devices, &chunks]).await?))
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
        Ok(hour_rows(&self.tx().await?.query(sql, &[&pk, &first, &last, &(limit as i64)]).await?))
    }

    async fn hours_after(&self, after: Option<(i64, i64)>, limit: usize) -> StoreResult<Vec<HourRow>> {
        let (pk, chunk) = after.unwrap_or((i64::MIN, i64::MIN));
        let sql = "SELECT device_pk, chunk, data FROM hours WHERE (device_pk, chunk) > ($1, $2)
                   ORDER BY device_pk, chunk LIMIT $3";
        Ok(hour_rows(&self.tx().await?.query(sql, &[&pk, &chunk, &(limit as i64)]).await?))
    }

    async fn put_hours(&self, rows: &[HourRow]) -> StoreResult<()> {
        if rows.is_empty() {
            return Ok(());
        }
        if rows.len() < STAGE_FROM {
            // A few hours (a group of webhook or MQTT readings): one
            // statement, sent ahead where so. Staging costs a temporary
            // table's TRUNCATE, a new file each time, which was most of a
            // small group's time.
            let devices: Vec<i64> = rows.iter().map(|r| r.device_pk).collect();
            let chunks: Vec<i64> = rows.iter().map(|r| r.chunk).collect();
            let data: Vec<Vec<u8>> = rows.iter().map(|r| r.data.clone()).collect();
            let sql = "INSERT INTO hours (device_pk, chunk, data)
                       SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bytea[])
                       ON CONFLICT (device_pk, chunk) DO UPDATE SET data = excluded.data";
            return self.write(sql, vec![Box::new(devices), Box::new(chunks), Box::new(data)]).await;
        }
        let c = self.tx().await?;
        if !self.staged.swap(true, Ordering::Relaxed) {
            c.batch_execute(
                "CREATE TEMP TABLE IF NOT EXISTS readings_in (device_pk bigint, chunk bigint, data bytea)
                 ON COMMIT DELETE ROWS",
            )
            .await?;
        }
        copy_hours(c, "COPY readings_in (device_pk, chunk, data) FROM STDIN (FORMAT binary)", rows).await?;
        c.batch_execute(
            "INSERT INTO hours (device_pk, chunk, data) SELECT device_pk, chunk, data FROM readings_in
             ON CONFLICT (device_pk, chunk) DO UPDATE SET data = excluded.data;
             TRUNCATE readings_in",
        )
        .await?;
        Ok(())
    }

    async fn remove_hours(&self, pk: i64, chunks: &[i64]) -> StoreResult<()> {
        if !chunks.is_empty() {
            let sql = "DELETE FROM hours WHERE device_pk = $1 AND chunk = ANY($2)";
            self.tx().await?.execute(sql, &[&pk, &chunks]).await?;
        }
        Ok(())
    }

    async fn upsert_latest(&self, rows: &[LatestRow], stored_at: i64) -> StoreResult<()> {
        if rows.is_empty() {
            return Ok(());
        }
        self.write(super::latest::UPSERT, super::latest::params(rows, stored_at)).await
    }

    async fn latest_within(&self, pk: i64, start: i64, end: i64) -> StoreResult<u64> {
        let sql = "SELECT idx FROM latest WHERE device_pk = $1 AND second BETWEEN $2 AND $3";
        let rows = self.tx().await?.query(sql, &[&pk, &start, &end]).await?;
        Ok(mask_of(rows.iter().map(|r| i64::from(r.get::<_, i16>(0)))))
    }

    async fn remove_latest(&self, pk: i64, mask: u64) -> StoreResult<()> {
        let sql = "DELETE FROM latest WHERE device_pk = $1 AND idx = ANY($2)";
        self.tx().await?.execute(sql, &[&pk, &idx_of(mask)]).await?;
        Ok(())
    }

    async fn expire_latest(&self, pk: i64, cutoff: i64) -> StoreResult<()> {
        let sql = "DELETE FROM latest WHERE device_pk = $1 AND second < $2";
        self.tx().await?.execute(sql, &[&pk, &cutoff]).await?;
        Ok(())
    }

    async fn sensor_masks(&self) -> StoreResult<Vec<(i64, u64)>> {
        let sql = "SELECT device_pk, bit_or(1::bigint << idx) FROM sensors GROUP BY device_pk";
        let rows = self.tx().await?.query(sql, &[]).await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get::<_, i64>(1) as u64)).collect())
    }

    async fn insert_outbox(&self, rows: &[OutboxRow]) -> StoreResult<()> {
        self.learn_numbers(rows).await?;
        for (sql, params) in self.log_rows(rows).await? {
            self.write(sql, params).await?;
        }
        Ok(())
    }

    async fn upsert_latest_and_outbox(
        &self,
        latest: &[LatestRow],
        stored_at: i64,
        outbox: &[OutboxRow],
    ) -> StoreResult<()> {
        self.learn_numbers(outbox).await?;
        let mut log = self.log_rows(outbox).await?;
        match log.pop() {
            // One log row (a group of live readings): it goes in with the
            // upsert, one statement fewer for both ends to flush and wake for.
            Some((_, row)) if log.is_empty() && !latest.is_empty() => {
                let mut params = super::latest::params(latest, stored_at);
                params.extend(row);
                self.write(super::latest::WITH_LOG, params).await
            }
            last => {
                self.upsert_latest(latest, stored_at).await?;
                for (sql, params) in log.into_iter().chain(last) {
                    self.write(sql, params).await?;
                }
                Ok(())
            }
        }
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
        self.tx()
            .await?
            .batch_execute(
                "CREATE TABLE IF NOT EXISTS sensorhub_schema
                 (version integer NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
            )
            .await?;
        let row = self.tx().await?.query_one("SELECT coalesce(max(version), 0) FROM sensorhub_schema", &[]).await?;
        Ok(usize::try_from(row.get::<_, i32>(0)).unwrap_or(0))
    }

    async fn run_migration(&self, sql: &str) -> StoreResult<()> {
        Ok(self.tx().await?.batch_execute(sql).await?)
    }

    async fn set_schema_version(&self, version: usize) -> StoreResult<()> {
        let version = i32::try_from(version).unwrap_or(i32::MAX);
        self.tx().await?.execute("INSERT INTO sensorhub_schema (version) VALUES ($1)", &[&version]).await?;
        Ok(())
    }

    async fn has_old_readings(&self) -> StoreResult<bool> {
        Ok(self.tx().await?.query_one("SELECT to_regclass('readings') IS NOT NULL", &[]).await?.get(0))
    }
}
