//! The upgrade of schema version 2's readings ([`crate::write::upgrade`],
//! written once) on SQLite: each batch in an `IMMEDIATE` transaction of
//! the writer, so that another process opening the same file waits.

use super::tx::in_tx;
use crate::StoreResult;
use crate::decide::UpgradeLog;
use crate::write::upgrade::{move_batch, remaining};
use rusqlite::Connection;

/// Moves every hour of `readings` to `hours`, `batch` hours per transaction.
pub(super) fn run(c: &mut Connection, batch: usize) -> StoreResult<()> {
    let Some(total) = in_tx(c, async |tx| remaining(tx).await)? else { return Ok(()) };
    let mut log = UpgradeLog::start(total);
    while let Some(moved) = in_tx(c, async |tx| move_batch(tx, batch).await)? {
        log.batch(moved);
    }
    log.finish();
    Ok(())
}
