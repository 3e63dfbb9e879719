//! Writes of the PostgreSQL backend: provisioning, imports and admin
//! changes, each in one transaction. Writers take one advisory lock for the
//! transaction, so that writes from several processes are serialised as on
//! SQLite and two `apply` runs cannot both create the same device. Hours of
//! readings go in with `COPY … FROM STDIN (FORMAT binary)` into a staging
//! table, then one `INSERT … ON CONFLICT` moves them into place.

use super::tx::PgTx;
use crate::hooks::{Outbox, ProvisionedHooks};
use crate::write::readings::{self};
use crate::write::{provision, remove};
use crate::{ApplyReport, DeleteReport, ImportReport, ReadingSource, StoreResult};
use deadpool_postgres::{Client, GenericClient, Transaction};
use sensorhub_core::model::ReadingInput;
use sensorhub_core::provision::Provision;
use sensorhub_core::time::TimeRange;

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

pub(super) async fn grant_write_to_viewers(c: &mut Client) -> StoreResult<u64> {
    let tx = begin(c).await?;
    let n = tx
        .execute(
            "UPDATE account_devices x SET can_write = true WHERE NOT x.can_write
             AND NOT EXISTS (SELECT 1 FROM devices d WHERE d.id = x.device_pk AND d.owner_id = x.account_id)",
            &[],
        )
        .await?;
    tx.commit().await?;
    Ok(n)
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
