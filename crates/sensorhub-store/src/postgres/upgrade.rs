//! The upgrade of schema version 2's readings ([`crate::write::upgrade`],
//! written once) on PostgreSQL: it runs under the migration lock, so one
//! instance upgrades while the others wait.

use super::tx::PgTx;
use crate::StoreResult;
use crate::decide::UpgradeLog;
use crate::write::upgrade::{move_batch, remaining};
use deadpool_postgres::Client;

/// Moves every hour of `readings` to `hours`, `batch` hours per transaction.
pub(super) async fn run(client: &mut Client, batch: usize) -> StoreResult<()> {
    let tx = client.transaction().await?;
    let Some(total) = remaining(&PgTx::new(&tx, None)).await? else { return Ok(()) };
    tx.commit().await?;
    let mut log = UpgradeLog::start(total);
    loop {
        let tx = client.transaction().await?;
        let moved = move_batch(&PgTx::new(&tx, None), batch).await?;
        tx.commit().await?;
        match moved {
            Some(n) => log.batch(n),
            None => break,
        }
    }
    log.finish();
    Ok(())
}
