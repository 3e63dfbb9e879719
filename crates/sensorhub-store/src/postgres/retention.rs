//! Retention on PostgreSQL: each device's hours before its cutoff are
//! dropped (and the hour the cutoff falls in trimmed), a batch per
//! transaction under the writers' limit; autovacuum makes the freed space
//! reusable. With several instances each may run a pass: a row deleted by
//! one is simply not found by the other.

use super::write::begin;
use crate::StoreResult;
use crate::decide::RetentionSettings;
use deadpool_postgres::Client;

/// Every device with its own and its owner's retention columns.
pub(super) async fn settings(c: &Client) -> StoreResult<Vec<RetentionSettings>> {
    let rows = c
        .query(
            "SELECT d.id, d.retention_seconds, a.retention_seconds FROM devices d LEFT JOIN accounts a ON a.id = d.owner_id",
            &[],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect())
}

/// One transaction of the expiry of device `pk` before second `cutoff`
/// ([`crate::write::remove::expire_batch`]).
pub(super) async fn expire_batch(c: &mut Client, pk: i64, cutoff: i64) -> StoreResult<(crate::RetentionReport, bool)> {
    let tx = begin(c).await?;
    let out = crate::write::remove::expire_batch(&super::tx::PgTx::new(&tx), pk, cutoff).await?;
    tx.commit().await?;
    Ok(out)
}
