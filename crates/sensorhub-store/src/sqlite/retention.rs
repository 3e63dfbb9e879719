//! Retention on SQLite, beyond the expiry written once
//! ([`crate::write::remove`]): the pages freed are returned to the disk
//! when the file has incremental auto-vacuum (new files do) and reused by
//! later writes otherwise.

use crate::StoreResult;
use rusqlite::Connection;

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
