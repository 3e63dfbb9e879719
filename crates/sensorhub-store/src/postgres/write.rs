//! Writes of the PostgreSQL backend: provisioning, imports and admin
//! changes, each in one transaction. Writers take one advisory lock for the
//! transaction, so that writes from several processes are serialised as on
//! SQLite and two `apply` runs cannot both create the same device. Hours of
//! readings go in with `COPY … FROM STDIN (FORMAT binary)` into a staging
//! table, then one `INSERT … ON CONFLICT` moves them into place.

use super::PgStore;
use super::tx::{On, PgTx};
use crate::delivery::{Outbox, ProvisionedHooks};
use crate::sql::access;
use crate::write::readings::{self};
use crate::write::{provision, remove};
use crate::{ApplyReport, DeleteReport, ImportReport, ReadingSource, StoreResult};
use async_trait::async_trait;
use deadpool_postgres::{Client, GenericClient, Transaction};
use sensorhub_core::model::ReadingInput;
use sensorhub_core::provision::Provision;
use sensorhub_core::time::TimeRange;

use crate::{AccountSummary, ApiKeySummary, IMPORT_COMMIT_EVERY, PartialImport, RetentionReport};

use sensorhub_core::retention::Retention;

/// The advisory lock every writing transaction holds ("writes").
const WRITE_LOCK: i64 = 0x7772_6974_6573;

/// Begins a writing transaction: waits at most the session's
/// `lock_timeout` (5 s, [`super::SESSION_OPTIONS`]) for the write lock,
/// then fails with [`StoreError::Busy`].
pub(super) async fn begin(c: &mut Client) -> StoreResult<Transaction<'_>> {
    let tx = c.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&WRITE_LOCK]).await?;
    Ok(tx)
}

impl PgStore {
    /// Runs `step` (written once, [`crate::sql`]) in a writing transaction
    /// (this process's writer place and the write lock held), and commits
    /// it when the step succeeds.
    pub(super) async fn in_tx<R>(&self, step: impl AsyncFnOnce(&PgTx<'_>) -> StoreResult<R>) -> StoreResult<R> {
        let _writer = self.writer().await?;
        let mut client = self.pool.get().await?;
        let tx = begin(&mut client).await?;
        let result = step(&PgTx::new(&tx)).await?;
        tx.commit().await?;
        Ok(result)
    }

    /// Runs `step` (written once, [`crate::sql`]) on a pooled connection, outside a transaction (reads).
    pub(super) async fn on<R>(&self, step: impl AsyncFnOnce(&On<'_, Client>) -> StoreResult<R>) -> StoreResult<R> {
        let client = self.pool.get().await?;
        step(&On(&client)).await
    }
}

/// Begins a bulk writing transaction (import, copy, delete): as [`begin`],
/// without the statement time limit that guards requests.
pub(super) async fn begin_bulk(c: &mut Client) -> StoreResult<Transaction<'_>> {
    let tx = begin(c).await?;
    tx.batch_execute("SET LOCAL statement_timeout = 0").await?;
    Ok(tx)
}

pub(super) async fn apply(
    c: &mut Client,
    doc: Provision,
    readings: Vec<ReadingInput>,
    hooks: Option<ProvisionedHooks>,
) -> StoreResult<ApplyReport> {
    let tx = begin_bulk(c).await?;
    let report = provision::apply(&PgTx::new(&tx), doc, readings, hooks).await?;
    tx.commit().await?;
    Ok(report)
}

/// Stores readings from `source` in one transaction ([`crate::write::readings::import`]).
pub(super) async fn import(
    c: &mut Client,
    source: ReadingSource,
    limit: Option<std::time::Duration>,
    outbox: Outbox,
) -> StoreResult<(ImportReport, Option<ReadingSource>)> {
    let tx = begin_bulk(c).await?;
    let out = readings::import(&PgTx::new(&tx), source, limit, outbox).await?;
    tx.commit().await?;
    Ok(out)
}

/// Stores single readings in one transaction, each with its own outcome
/// ([`crate::write::readings::ingest_group`]). An error of the transaction
/// itself (a lock wait past its limit, a lost connection) is everyone's:
/// nothing is written then.
pub(super) async fn ingest_group(c: &mut Client, group: &[ReadingInput]) -> StoreResult<Vec<StoreResult<()>>> {
    let tx = begin(c).await?;
    let outcomes = readings::ingest_group(&PgTx::new(&tx), group).await?;
    tx.commit().await?;
    Ok(outcomes)
}

pub(super) async fn revoke_api_key(c: &mut Client, id_or_prefix: &str) -> StoreResult<String> {
    let tx = begin(c).await?;
    let prefix = provision::revoke_api_key(&PgTx::new(&tx), id_or_prefix).await?;
    tx.commit().await?;
    Ok(prefix)
}

pub(super) async fn delete_readings(c: &mut Client, device_id: &str, range: TimeRange) -> StoreResult<DeleteReport> {
    let tx = begin_bulk(c).await?;
    let report = remove::delete_readings(&PgTx::new(&tx), device_id, range).await?;
    tx.commit().await?;
    Ok(report)
}

/// One transaction of [`crate::Store::add_hour_summaries`] ([`remove::add_hour_summaries`]),
/// under the write lock: a concurrent write to the same hour must not be lost.
pub(super) async fn add_hour_summaries(
    c: &mut Client,
    after: Option<(i64, i64)>,
    batch: usize,
) -> StoreResult<(Option<(i64, i64)>, u64)> {
    let tx = begin_bulk(c).await?;
    let out = remove::add_hour_summaries(&PgTx::new(&tx), after, batch).await?;
    tx.commit().await?;
    Ok(out)
}

#[async_trait]
impl crate::store::ReadingWrites for PgStore {
    fn observe(&self, observer: std::sync::Arc<dyn crate::observe::AfterCommit>) {
        self.observers.add(observer);
    }

    async fn ingest(&self, reading: ReadingInput) -> StoreResult<()> {
        self.observers.one(reading, |reading| self.group.write(reading)).await
    }

    async fn import(&self, source: ReadingSource, outbox: Outbox) -> StoreResult<ImportReport> {
        let import = |source| async move {
            let _writer = self.writer().await?;
            Ok(import(&mut self.pool.get().await?, source, None, outbox).await?.0)
        };
        self.observers.import(source, import).await
    }

    async fn import_batched(&self, source: ReadingSource, outbox: Outbox) -> Result<ImportReport, PartialImport> {
        let steps = |source| {
            crate::import_in_steps(source, |source| async move {
                let _writer = self.writer().await?;
                import(&mut self.pool.get().await?, source, Some(IMPORT_COMMIT_EVERY), outbox).await
            })
        };
        self.observers.import_batched(source, steps).await
    }

    async fn delete_readings(&self, device_id: &str, range: TimeRange) -> StoreResult<DeleteReport> {
        let _writer = self.writer().await?;
        delete_readings(&mut self.pool.get().await?, device_id, range).await
    }

    async fn expire_readings(&self, default: Retention, now: i64) -> StoreResult<RetentionReport> {
        let settings = super::retention::settings(&self.pool.get().await?).await?;
        crate::expire_in_steps(settings, default, now, |pk, cutoff| async move {
            let _writer = self.writer().await?;
            super::retention::expire_batch(&mut self.pool.get().await?, pk, cutoff).await
        })
        .await
    }

    async fn add_hour_summaries(&self, batch: usize) -> StoreResult<u64> {
        let (mut after, mut total) = (None, 0);
        loop {
            let (next, rewritten) = {
                let _writer = self.writer().await?;
                add_hour_summaries(&mut self.pool.get().await?, after, batch).await?
            };
            total += rewritten;
            match next {
                Some(hour) => after = Some(hour),
                None => return Ok(total),
            }
            tokio::time::sleep(crate::IMPORT_PAUSE).await;
        }
    }
}

#[async_trait]
impl crate::store::Provisioning for PgStore {
    async fn apply_with_hooks(
        &self,
        doc: Provision,
        readings: Vec<ReadingInput>,
        hooks: Option<crate::delivery::ProvisionedHooks>,
    ) -> StoreResult<ApplyReport> {
        let apply = |readings| async move {
            let _writer = self.writer().await?;
            apply(&mut self.pool.get().await?, doc, readings, hooks).await
        };
        self.observers.all(readings, apply).await
    }

    async fn is_empty(&self) -> StoreResult<bool> {
        self.on(async |c| access::is_empty(c).await).await
    }

    async fn accounts(&self) -> StoreResult<Vec<AccountSummary>> {
        self.on(async |c| access::accounts(c).await).await
    }

    async fn api_keys(&self) -> StoreResult<Vec<ApiKeySummary>> {
        self.on(async |c| access::api_keys(c).await).await
    }

    async fn revoke_api_key(&self, id_or_prefix: &str) -> StoreResult<String> {
        let _writer = self.writer().await?;
        revoke_api_key(&mut self.pool.get().await?, id_or_prefix).await
    }

    async fn grant_write_to_viewers(&self) -> StoreResult<u64> {
        self.in_tx(async |tx| access::grant_write_to_viewers(tx).await).await
    }
}
