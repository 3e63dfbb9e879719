//! Writes of the SQLite backend: provisioning, imports and admin changes.
//! Every entry point runs in one `IMMEDIATE` transaction: all or nothing.

use super::tx::{SqliteTx, begin, ready};
use crate::hooks::{Outbox, ProvisionedHooks};
use crate::write::readings::{self};
use crate::write::{provision, remove};
use crate::{ApplyReport, DeleteReport, ImportReport, ReadingSource, StoreResult};
use rusqlite::Connection;
use sensorhub_core::model::ReadingInput;
use sensorhub_core::provision::Provision;
use sensorhub_core::time::TimeRange;

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

pub(super) fn grant_write_to_viewers(c: &mut Connection) -> StoreResult<u64> {
    let tx = begin(c)?;
    let n = tx.execute(
        "UPDATE account_devices SET can_write = 1 WHERE can_write = 0
         AND NOT EXISTS (SELECT 1 FROM devices d WHERE d.id = device_pk AND d.owner_id = account_id)",
        [],
    )?;
    tx.commit()?;
    Ok(n as u64)
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
