//! Retention on SQLite: each device's hours before its cutoff are dropped
//! (and the hour the cutoff falls in trimmed), a batch per transaction so
//! that writers and readers are never held up for long; the pages freed
//! are returned to the disk when the file has incremental auto-vacuum (new
//! files do) and reused by later writes otherwise.

use super::tx::begin;
use super::tx::{SqliteTx, ready};
use crate::StoreResult;
use crate::decide::RetentionSettings;
use rusqlite::Connection;

/// Every device with its own and its owner's retention columns.
pub(super) fn settings(c: &mut Connection) -> StoreResult<Vec<RetentionSettings>> {
    let mut stmt = c.prepare_cached(
        "SELECT d.id, d.retention_seconds, a.retention_seconds FROM devices d LEFT JOIN accounts a ON a.id = d.owner_id",
    )?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?.collect::<Result<_, _>>()?;
    Ok(rows)
}

/// One transaction of the expiry of device `pk` before second `cutoff`
/// ([`crate::write::remove::expire_batch`]).
pub(super) fn expire_batch(c: &mut Connection, pk: i64, cutoff: i64) -> StoreResult<(crate::RetentionReport, bool)> {
    let tx = begin(c)?;
    let out = ready(crate::write::remove::expire_batch(&SqliteTx(&tx), pk, cutoff))?;
    tx.commit()?;
    Ok(out)
}

/// Returns free pages to the disk (a no-op unless the file has incremental
/// auto-vacuum); the bytes the file shrank by.
pub(super) fn return_free_pages(c: &mut Connection) -> StoreResult<u64> {
    let size = |c: &Connection| -> rusqlite::Result<i64> {
        c.query_row("SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()", [], |r| r.get(0))
    };
    let before = size(c)?;
    c.execute_batch("PRAGMA incremental_vacuum")?;
    Ok(u64::try_from(before - size(c)?).unwrap_or(0))
}
