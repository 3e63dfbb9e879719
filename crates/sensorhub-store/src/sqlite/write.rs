//! Writes of the SQLite backend: provisioning, imports and admin changes.
//! Every entry point runs in one `IMMEDIATE` transaction: all or nothing.

use super::SqliteStore;
use super::tx::{SqliteTx, begin, ready};
use super::tx::{in_tx, on};
use crate::delivery::{Outbox, ProvisionedHooks};
use crate::sql::access;
use crate::write::readings::{self};
use crate::write::{provision, remove};
use crate::{ApplyReport, DeleteReport, ImportReport, ReadingSource, StoreResult};
use async_trait::async_trait;
use rusqlite::Connection;
use sensorhub_core::model::ReadingInput;
use sensorhub_core::provision::Provision;
use sensorhub_core::time::TimeRange;

use crate::{AccountSummary, ApiKeySummary, IMPORT_COMMIT_EVERY, PartialImport, RetentionReport};

use sensorhub_core::retention::Retention;

pub(super) fn apply(
    c: &mut Connection,
    doc: Provision,
    readings: Vec<ReadingInput>,
    hooks: Option<ProvisionedHooks>,
) -> StoreResult<ApplyReport> {
    let tx = begin(c)?;
    let report = ready(provision::apply(&SqliteTx(&tx), doc, readings, hooks))?;
    tx.commit()?;
    Ok(report)
}

/// Stores readings from `source` in one transaction ([`crate::write::readings::import`]).
pub(super) fn import(
    c: &mut Connection,
    source: ReadingSource,
    limit: Option<std::time::Duration>,
    outbox: Outbox,
) -> StoreResult<(ImportReport, Option<ReadingSource>)> {
    let tx = begin(c)?;
    let out = ready(readings::import(&SqliteTx(&tx), source, limit, outbox))?;
    tx.commit()?;
    Ok(out)
}

/// Stores single readings in one transaction, each with its own outcome
/// ([`crate::write::readings::ingest_group`]). An error of the transaction
/// itself (busy, disk full) is everyone's: nothing is written then.
pub(super) fn ingest_group(c: &mut Connection, group: &[ReadingInput]) -> StoreResult<Vec<StoreResult<()>>> {
    let tx = begin(c)?;
    let outcomes = ready(readings::ingest_group(&SqliteTx(&tx), group))?;
    tx.commit()?;
    Ok(outcomes)
}

pub(super) fn revoke_api_key(c: &mut Connection, id_or_prefix: &str) -> StoreResult<String> {
    let tx = begin(c)?;
    let prefix = ready(provision::revoke_api_key(&SqliteTx(&tx), id_or_prefix))?;
    tx.commit()?;
    Ok(prefix)
}

pub(super) fn delete_readings(c: &mut Connection, device_id: &str, range: TimeRange) -> StoreResult<DeleteReport> {
    let tx = begin(c)?;
    let report = ready(remove::delete_readings(&SqliteTx(&tx), device_id, range))?;
    tx.commit()?;
    Ok(report)
}

/// One transaction of [`crate::Store::add_hour_summaries`] ([`remove::add_hour_summaries`]).
pub(super) fn add_hour_summaries(
    c: &mut Connection,
    after: Option<(i64, i64)>,
    batch: usize,
) -> StoreResult<(Option<(i64, i64)>, u64)> {
    let tx = begin(c)?;
    let out = ready(remove::add_hour_summaries(&SqliteTx(&tx), after, batch))?;
    tx.commit()?;
    Ok(out)
}

#[async_trait]
impl crate::store::ReadingWrites for SqliteStore {
    fn observe(&self, observer: std::sync::Arc<dyn crate::observe::AfterCommit>) {
        self.observers.add(observer);
    }

    fn ingest_waiting(&self) -> usize {
        self.ingest_waiting.load(std::sync::atomic::Ordering::Relaxed)
    }

    async fn ingest(&self, reading: ReadingInput) -> StoreResult<()> {
        let _waiting = super::Waiting::enter(&self.ingest_waiting);
        self.observers.one(reading, |reading| self.group.write(reading)).await
    }

    async fn import(&self, source: ReadingSource, outbox: Outbox) -> StoreResult<ImportReport> {
        let _waiting = super::Waiting::enter(&self.ingest_waiting);
        let import = |source| async move { Ok(self.writes.run(move |c| import(c, source, None, outbox)).await?.0) };
        self.observers.import(source, import).await
    }

    async fn import_batched(&self, source: ReadingSource, outbox: Outbox) -> Result<ImportReport, PartialImport> {
        let _waiting = super::Waiting::enter(&self.ingest_waiting);
        let steps = |source| {
            crate::import_in_steps(source, |source| {
                self.writes.run(move |c| import(c, source, Some(IMPORT_COMMIT_EVERY), outbox))
            })
        };
        self.observers.import_batched(source, steps).await
    }

    async fn delete_readings(&self, device_id: &str, range: TimeRange) -> StoreResult<DeleteReport> {
        let id = device_id.to_owned();
        self.writes.run(move |c| delete_readings(c, &id, range)).await
    }

    async fn expire_readings(&self, default: Retention, now: i64) -> StoreResult<RetentionReport> {
        let settings = self.reads.run(super::retention::settings).await?;
        let mut total = crate::expire_in_steps(settings, default, now, |pk, cutoff| {
            self.writes.run(move |c| super::retention::expire_batch(c, pk, cutoff))
        })
        .await?;
        if !total.is_empty() {
            total.returned = self.writes.run(super::retention::return_free_pages).await?;
        }
        Ok(total)
    }

    async fn add_hour_summaries(&self, batch: usize) -> StoreResult<u64> {
        let (mut after, mut total) = (None, 0);
        loop {
            let (next, rewritten) = self.writes.run(move |c| add_hour_summaries(c, after, batch)).await?;
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
impl crate::store::Provisioning for SqliteStore {
    async fn apply_with_hooks(
        &self,
        doc: Provision,
        readings: Vec<ReadingInput>,
        hooks: Option<crate::delivery::ProvisionedHooks>,
    ) -> StoreResult<ApplyReport> {
        let apply = |readings| self.writes.run(move |c| apply(c, doc, readings, hooks));
        self.observers.all(readings, apply).await
    }

    async fn is_empty(&self) -> StoreResult<bool> {
        self.reads.run(|c| on(c, async |c| access::is_empty(c).await)).await
    }

    async fn accounts(&self) -> StoreResult<Vec<AccountSummary>> {
        self.reads.run(|c| on(c, async |c| access::accounts(c).await)).await
    }

    async fn api_keys(&self) -> StoreResult<Vec<ApiKeySummary>> {
        self.reads.run(|c| on(c, async |c| access::api_keys(c).await)).await
    }

    async fn revoke_api_key(&self, id_or_prefix: &str) -> StoreResult<String> {
        let id = id_or_prefix.to_owned();
        self.writes.run(move |c| revoke_api_key(c, &id)).await
    }

    async fn grant_write_to_viewers(&self) -> StoreResult<u64> {
        self.writes.run(|c| in_tx(c, async |tx| access::grant_write_to_viewers(tx).await)).await
    }
}
