//! Writes of the SQLite backend: the write steps written once
//! ([`crate::write`], [`crate::sql`]), each in one `IMMEDIATE` transaction
//! on the writer's connection: all or nothing.

use super::SqliteStore;
use super::tx::{in_tx, on};
use crate::delivery::Outbox;
use crate::sql::{access, retention};
use crate::write::readings::{self};
use crate::write::{provision, remove};
use crate::{ApplyReport, DeleteReport, ImportReport, ReadingSource, StoreResult};
use async_trait::async_trait;
use sensorhub_core::model::ReadingInput;
use sensorhub_core::provision::Provision;
use sensorhub_core::time::TimeRange;

use crate::{AccountSummary, ApiKeySummary, IMPORT_COMMIT_EVERY, PartialImport, RetentionReport};

use sensorhub_core::retention::Retention;

impl SqliteStore {
    /// One reading, in the next group, counted as waiting for the writer
    /// meanwhile ([`crate::store::ReadingWrites::ingest_waiting`]).
    async fn single(&self, reading: ReadingInput, at: Option<crate::Generations>) -> StoreResult<()> {
        let _waiting = self.ingest_waiting.enter();
        self.observers.one(reading, |reading| self.group.write(reading, at)).await
    }
}

#[async_trait]
impl crate::store::ReadingWrites for SqliteStore {
    fn observe(&self, observer: std::sync::Arc<dyn crate::observe::AfterCommit>) {
        self.observers.add(observer);
    }

    fn ingest_waiting(&self) -> usize {
        self.ingest_waiting.now()
    }

    fn ingest_quiet(&self) -> std::time::Duration {
        self.ingest_waiting.quiet()
    }

    async fn ingest(&self, reading: ReadingInput) -> StoreResult<()> {
        self.single(reading, None).await
    }

    async fn ingest_at(&self, reading: ReadingInput, at: crate::Generations) -> StoreResult<()> {
        self.single(reading, Some(at)).await
    }

    async fn import(&self, source: ReadingSource, outbox: Outbox) -> StoreResult<ImportReport> {
        let _waiting = self.ingest_waiting.enter();
        let import = |source| async move {
            let kept = self.kept.clone();
            let (report, _, events) = self
                .writes
                .run(move |c| in_tx(c, async |tx| readings::import(tx, source, None, outbox, &kept).await))
                .await?;
            Ok(self.observers.after((report, events)).await)
        };
        self.observers.import(source, import).await
    }

    async fn import_batched(&self, source: ReadingSource, outbox: Outbox) -> Result<ImportReport, PartialImport> {
        let _waiting = self.ingest_waiting.enter();
        let steps = |source| {
            crate::import_in_steps(source, |source| async move {
                let (limit, kept) = (Some(IMPORT_COMMIT_EVERY), self.kept.clone());
                let (report, rest, events) = self
                    .writes
                    .run(move |c| in_tx(c, async |tx| readings::import(tx, source, limit, outbox, &kept).await))
                    .await?;
                Ok(self.observers.after(((report, rest), events)).await)
            })
        };
        self.observers.import_batched(source, steps).await
    }

    async fn delete_readings(&self, device_id: &str, range: TimeRange) -> StoreResult<DeleteReport> {
        let id = device_id.to_owned();
        self.writes.run(move |c| in_tx(c, async |tx| remove::delete_readings(tx, &id, range).await)).await
    }

    async fn expire_readings(&self, default: Retention, now: i64) -> StoreResult<RetentionReport> {
        let settings = self.reads.run(|c| on(c, async |c| retention::settings(c).await)).await?;
        // A batch per transaction, so that writers and readers are never held up for long.
        let mut total = crate::expire_in_steps(settings, default, now, |pk, cutoff| {
            self.writes.run(move |c| in_tx(c, async |tx| remove::expire_batch(tx, pk, cutoff).await))
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
            let step = move |c: &mut _| in_tx(c, async |tx| remove::add_hour_summaries(tx, after, batch).await);
            let (next, rewritten) = self.writes.run(step).await?;
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
        let apply = |readings| async move {
            let applied =
                self.writes.run(move |c| in_tx(c, async |tx| provision::apply(tx, doc, readings, hooks).await)).await?;
            Ok(self.observers.after(applied).await)
        };
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
        self.writes.run(move |c| in_tx(c, async |tx| provision::revoke_api_key(tx, &id).await)).await
    }

    async fn grant_write_to_viewers(&self) -> StoreResult<u64> {
        self.writes.run(|c| in_tx(c, async |tx| access::grant_write_to_viewers(tx).await)).await
    }
}
