//! Retention on PostgreSQL: each device's hours before its cutoff are
//! dropped (and the hour the cutoff falls in trimmed), a batch per
//! transaction under the writers' limit; autovacuum makes the freed space
//! reusable. With several instances each may run a pass: a row deleted by
//! one is simply not found by the other.

use super::write::begin;
use crate::StoreResult;
use crate::decide::{Expiry, RETENTION_BATCH, RetentionSettings};
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

/// One transaction of the expiry of device `pk` before second `cutoff`:
/// what it removed, and whether the device is done.
pub(super) async fn expire_batch(c: &mut Client, pk: i64, cutoff: i64) -> StoreResult<(crate::RetentionReport, bool)> {
    let tx = begin(c).await?;
    let mut expiry = Expiry::new();
    let (last_whole, boundary) = Expiry::hours(cutoff);
    let rows = tx
        .query(
            "DELETE FROM hours WHERE device_pk = $1 AND chunk IN
               (SELECT chunk FROM hours WHERE device_pk = $1 AND chunk <= $2 ORDER BY chunk LIMIT $3)
             RETURNING chunk, data",
            &[&pk, &last_whole, &(RETENTION_BATCH as i64)],
        )
        .await?;
    for r in &rows {
        expiry.dropped(pk, r.get(0), r.get(1))?;
    }
    let done = rows.len() < RETENTION_BATCH;
    // Sensors whose newest reading is past retention have no reading left
    // once this pass is through.
    super::latest::expire(&tx, pk, cutoff).await?;
    if done {
        let row = tx
            .query_opt("SELECT data FROM hours WHERE device_pk = $1 AND chunk = $2 FOR UPDATE", &[&pk, &boundary])
            .await?;
        if let Some(kept) = row.map(|r| expiry.trim(pk, r.get(0), cutoff)).transpose()?.flatten() {
            if kept.is_empty() {
                tx.execute("DELETE FROM hours WHERE device_pk = $1 AND chunk = $2", &[&pk, &boundary]).await?;
            } else {
                tx.execute("UPDATE hours SET data = $3 WHERE device_pk = $1 AND chunk = $2", &[&pk, &boundary, &kept])
                    .await?;
            }
        }
    }
    tx.commit().await?;
    Ok((expiry.report, done))
}
