//! Retention on SQLite: each device's hours before its cutoff are dropped
//! (and the hour the cutoff falls in trimmed), a batch per transaction so
//! that writers and readers are never held up for long; the pages freed
//! are returned to the disk when the file has incremental auto-vacuum (new
//! files do) and reused by later writes otherwise.

use super::write::begin;
use super::{HOUR_BIAS, hour_key};
use crate::StoreResult;
use crate::decide::{Expiry, RETENTION_BATCH, RetentionSettings};
use rusqlite::{Connection, OptionalExtension, params};

/// Every device with its own and its owner's retention columns.
pub(super) fn settings(c: &mut Connection) -> StoreResult<Vec<RetentionSettings>> {
    let mut stmt = c.prepare_cached(
        "SELECT d.id, d.retention_seconds, a.retention_seconds FROM devices d LEFT JOIN accounts a ON a.id = d.owner_id",
    )?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?.collect::<Result<_, _>>()?;
    Ok(rows)
}

/// One transaction of the expiry of device `pk` before second `cutoff`:
/// what it removed, and whether the device is done.
pub(super) fn expire_batch(c: &mut Connection, pk: i64, cutoff: i64) -> StoreResult<(crate::RetentionReport, bool)> {
    let tx = begin(c)?;
    let mut expiry = Expiry::new();
    let (last_whole, boundary) = Expiry::hours(cutoff);
    let rows: Vec<(i64, Vec<u8>)> = tx
        .prepare_cached("SELECT key, data FROM hours WHERE key BETWEEN ?1 AND ?2 ORDER BY key LIMIT ?3")?
        .query_map(params![hour_key(pk, -HOUR_BIAS), hour_key(pk, last_whole), RETENTION_BATCH as i64], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?
        .collect::<Result<_, _>>()?;
    let done = rows.len() < RETENTION_BATCH;
    {
        let mut delete = tx.prepare_cached("DELETE FROM hours WHERE key = ?1")?;
        for (key, data) in &rows {
            expiry.dropped(pk, super::key_chunk(*key), data)?;
            delete.execute([key])?;
        }
    }
    // Sensors whose newest reading is past retention have no reading left
    // once this pass is through.
    super::latest::expire(&tx, pk, cutoff)?;
    if done {
        let key = hour_key(pk, boundary);
        let data: Option<Vec<u8>> =
            tx.query_row("SELECT data FROM hours WHERE key = ?1", [key], |r| r.get(0)).optional()?;
        if let Some(kept) = data.map(|d| expiry.trim(pk, &d, cutoff)).transpose()?.flatten() {
            if kept.is_empty() {
                tx.execute("DELETE FROM hours WHERE key = ?1", [key])?;
            } else {
                tx.execute("UPDATE hours SET data = ?2 WHERE key = ?1", params![key, kept])?;
            }
        }
    }
    tx.commit()?;
    Ok((expiry.report, done))
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
