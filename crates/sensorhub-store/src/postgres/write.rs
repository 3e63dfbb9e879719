//! Writes of the PostgreSQL backend: provisioning, imports and admin
//! changes, each in one transaction. Writers take one advisory lock for the
//! transaction, so that writes from several processes are serialised as on
//! SQLite and two `apply` runs cannot both create the same device. Hours of
//! readings go in with `COPY … FROM STDIN (FORMAT binary)` into a staging
//! table, then one `INSERT … ON CONFLICT` moves them into place; fewer than
//! 64 go in one `INSERT` of arrays ([`super::tx`]).

use super::PgStore;
use super::ahead::{Ahead, SendAhead};
use super::on::On;
use super::outbox_log::{KnownTail, Tail};
use super::tx::PgTx;
use crate::alarm::AlarmEvent;
use crate::delivery::Outbox;
use crate::sql::{access, retention};
use crate::write::readings::{self};
use crate::write::{provision, remove};
use crate::{ApplyReport, DeleteReport, ImportReport, ReadingSource, StoreError, StoreResult};
use async_trait::async_trait;
use deadpool_postgres::{Client, GenericClient, Transaction};
use sensorhub_core::model::ReadingInput;
use sensorhub_core::provision::Provision;
use sensorhub_core::time::TimeRange;

use crate::{AccountSummary, ApiKeySummary, IMPORT_COMMIT_EVERY, PartialImport, RetentionReport};

use sensorhub_core::retention::Retention;

/// The advisory lock every writing transaction holds ("writes").
const WRITE_LOCK: i64 = 0x7772_6974_6573;

/// The statement that takes it, and then reads the last value of the
/// outbox log's id sequence (NULL before the first row): whether the log
/// still ends where this process left it ([`KnownTail`]). The subquery
/// is not pulled up (`OFFSET 0`): the lock is granted before the read.
const LOCK: &str = "SELECT pg_sequence_last_value('outbox_log_id_seq'::regclass)
    FROM (SELECT pg_advisory_xact_lock($1) OFFSET 0) granted";

/// Writing transactions read what was committed before each statement,
/// whatever the database's or role's default: the statements after the
/// lock see every change committed before it was granted (a key revoked
/// while a group waited for the lock refuses its kept readings).
const READ_COMMITTED: tokio_postgres::IsolationLevel = tokio_postgres::IsolationLevel::ReadCommitted;

/// Begins a writing transaction: waits at most the session's
/// `lock_timeout` (5 s, [`super::SESSION_OPTIONS`]) for the write lock,
/// then fails with [`StoreError::Busy`]. Returns the transaction and
/// where the outbox log ends, if `known` still holds.
pub(super) async fn begin<'c>(c: &'c mut Client, known: &KnownTail) -> StoreResult<(Transaction<'c>, Option<Tail>)> {
    let tx = c.build_transaction().isolation_level(READ_COMMITTED).start().await?;
    let lock = tx.prepare_cached(LOCK).await?;
    let seq = tx.query_one(&lock, &[&WRITE_LOCK]).await?.try_get(0)?;
    Ok((tx, known.at(seq)))
}

impl PgStore {
    /// Runs `step` (written once, [`crate::sql`]) in a writing transaction
    /// (this process's writer place and the write lock held), and commits
    /// it when the step succeeds.
    pub(super) async fn in_tx<R>(&self, step: impl AsyncFnOnce(&PgTx<'_>) -> StoreResult<R>) -> StoreResult<R> {
        self.transaction(false, step).await
    }

    /// [`PgStore::in_tx`] for bulk work (import, copy, delete, rewrites):
    /// without the statement time limit that guards requests.
    pub(super) async fn in_bulk_tx<R>(&self, step: impl AsyncFnOnce(&PgTx<'_>) -> StoreResult<R>) -> StoreResult<R> {
        self.transaction(true, step).await
    }

    async fn transaction<R>(&self, bulk: bool, step: impl AsyncFnOnce(&PgTx<'_>) -> StoreResult<R>) -> StoreResult<R> {
        let _writer = self.writer().await?;
        let mut client = self.pool.get().await?;
        let (tx, tail) = begin(&mut client, &self.tail).await?;
        if bulk {
            tx.batch_execute("SET LOCAL statement_timeout = 0").await?;
        }
        let pg = PgTx::new(&tx, tail);
        let result = step(&pg).await?;
        let tail = pg.tail();
        drop(pg);
        tx.commit().await?;
        self.tail.committed(tail);
        Ok(result)
    }

    /// Runs `step` (written once, [`crate::sql`]) on a pooled connection, outside a transaction (reads).
    pub(super) async fn on<R>(&self, step: impl AsyncFnOnce(&On<'_, Client>) -> StoreResult<R>) -> StoreResult<R> {
        let client = self.pool.get().await?;
        step(&On(&client)).await
    }
}

/// Stores single readings in one transaction, each with its own outcome
/// ([`crate::write::readings::ingest_group`]). An error of the transaction
/// itself (a lock wait past its limit, a lost connection) is everyone's:
/// nothing is written then.
///
/// Two round trips: `BEGIN` and the write lock go out with the step's
/// first reads (the devices' generation, their subscriptions, and the
/// hours of the devices kept, read ahead) as soon as the group's first
/// readings are there, while the group fills; and the writes of the
/// hours, `latest` and the outbox with the `COMMIT` ([`super::ahead`]).
/// Readings of devices or hours the first reads did not cover cost a
/// round trip between. The server runs them in that
/// order, and a failure in any fails the ones after it. `BEGIN` itself
/// fails only with the connection: every group ends its transaction (a
/// `COMMIT`, or a `ROLLBACK`) or the connection is closed, so the next
/// begins on an idle one.
pub(super) async fn ingest_group(
    c: Client,
    group: &mut crate::group::Gather<'_>,
    kept: &crate::write::Kept,
    known: &KnownTail,
) -> StoreResult<(Vec<StoreResult<()>>, Vec<AlarmEvent>)> {
    let lock = c.prepare_cached(LOCK).await?;
    let ahead = Ahead::new(&c);
    let tx = PgTx::sending_ahead(&c, &ahead);
    let begun = c.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED");
    let locked = async {
        let seq = c.query_one(&lock, &[&WRITE_LOCK]).await?.try_get(0)?;
        // Answered before the reads sent after it: known before the log
        // rows are made (if not, they look the tail up).
        tx.begun(known.at(seq));
        Ok::<_, tokio_postgres::Error>(())
    };
    let begin = futures_util::future::join(begun, locked);
    // `join` polls `begin` first: its statements are sent first.
    let first = group.first();
    let written = readings::ingest_group(&tx, first, group.rest(), kept);
    let ((begun, locked), written) = futures_util::future::join(begin, written).await;
    let mut errors: Vec<StoreError> = [begun.err(), locked.err()].into_iter().flatten().map(StoreError::from).collect();
    match written {
        Ok(written) if errors.is_empty() => {
            let (settled, committed) = futures_util::future::join(ahead.settle(), c.batch_execute("COMMIT")).await;
            // After a failed write the `COMMIT` rolled back.
            errors.extend(settled.err().into_iter().chain(committed.err().map(|e| e.into())));
            match super::ahead::reported(errors) {
                None => {
                    known.committed(tx.tail());
                    Ok(written)
                }
                Some(e) => Err(e),
            }
        }
        written => {
            errors.extend(ahead.settle().await.err().into_iter().chain(written.err()));
            let rolled_back = c.batch_execute("ROLLBACK").await.is_ok();
            drop(ahead);
            if !rolled_back {
                // Closed rather than pooled in a transaction.
                drop(deadpool_postgres::Object::take(c));
            }
            Err(super::ahead::reported(errors)
                .unwrap_or_else(|| StoreError::Backend("the group was not written".into())))
        }
    }
}

#[async_trait]
impl crate::store::ReadingWrites for PgStore {
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
        let _waiting = self.ingest_waiting.enter();
        self.observers.one(reading, |reading| self.group.write(reading, None)).await
    }

    async fn ingest_at(&self, reading: ReadingInput, at: crate::Generations) -> StoreResult<()> {
        let _waiting = self.ingest_waiting.enter();
        self.observers.one(reading, |reading| self.group.write(reading, Some(at))).await
    }

    async fn import(&self, source: ReadingSource, outbox: Outbox) -> StoreResult<ImportReport> {
        let _waiting = self.ingest_waiting.enter();
        let import = |source| async move {
            let (report, _, events) =
                self.in_bulk_tx(async |tx| readings::import(tx, source, None, outbox, &self.kept).await).await?;
            Ok(self.observers.after((report, events)).await)
        };
        self.observers.import(source, import).await
    }

    async fn import_batched(&self, source: ReadingSource, outbox: Outbox) -> Result<ImportReport, PartialImport> {
        let _waiting = self.ingest_waiting.enter();
        let steps = |source| {
            crate::import_in_steps(source, |source| async move {
                let limit = Some(IMPORT_COMMIT_EVERY);
                let (report, rest, events) =
                    self.in_bulk_tx(async |tx| readings::import(tx, source, limit, outbox, &self.kept).await).await?;
                Ok(self.observers.after(((report, rest), events)).await)
            })
        };
        self.observers.import_batched(source, steps).await
    }

    async fn delete_readings(&self, device_id: &str, range: TimeRange) -> StoreResult<DeleteReport> {
        self.in_bulk_tx(async |tx| remove::delete_readings(tx, device_id, range).await).await
    }

    async fn expire_readings(&self, default: Retention, now: i64) -> StoreResult<RetentionReport> {
        let settings = self.on(async |c| retention::settings(c).await).await?;
        // A batch per transaction; with several instances each may run a
        // pass: a row deleted by one is simply not found by the other.
        crate::expire_in_steps(settings, default, now, |pk, cutoff| {
            self.in_tx(async move |tx| remove::expire_batch(tx, pk, cutoff).await)
        })
        .await
    }

    async fn add_hour_summaries(&self, batch: usize) -> StoreResult<u64> {
        let (mut after, mut total) = (None, 0);
        loop {
            // Under the write lock: a concurrent write to the same hour must not be lost.
            let (next, rewritten) =
                self.in_bulk_tx(async |tx| remove::add_hour_summaries(tx, after, batch).await).await?;
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
            let applied = self.in_bulk_tx(async |tx| provision::apply(tx, doc, readings, hooks).await).await?;
            Ok(self.observers.after(applied).await)
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
        self.in_tx(async |tx| provision::revoke_api_key(tx, id_or_prefix).await).await
    }

    async fn grant_write_to_viewers(&self) -> StoreResult<u64> {
        self.in_tx(async |tx| access::grant_write_to_viewers(tx).await).await
    }
}
