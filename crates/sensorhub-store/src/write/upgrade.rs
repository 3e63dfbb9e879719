//! The upgrade of readings stored by schema version 2 (the `readings`
//! table, in the format of `legacy.rs`) to `hours` in the column format,
//! once for every backend: a batch of hours per transaction, each moved
//! (read, converted, written, deleted from the old table) atomically, so
//! that a kill at any moment loses nothing and the next open carries on
//! where it stopped. The old table is dropped in the transaction that
//! finds it empty. Each backend runs [`remaining`] and then [`move_batch`]
//! until it says the table is gone, each in a transaction of its own, and
//! says how it tells that the table exists
//! ([`MigrationTx::has_old_readings`]).

use super::migrate::MigrationTx;
use crate::StoreResult;
use crate::decide::latest::Newest;
use crate::decide::{HourRow, upgrade_hour};

/// How many hours the old table holds; `None` when there is none (never
/// was, or another process finished the upgrade).
pub(crate) async fn remaining(tx: &impl MigrationTx) -> StoreResult<Option<u64>> {
    if !tx.has_old_readings().await? {
        return Ok(None);
    }
    let Some(row) = tx.query_opt("SELECT count(*) FROM readings", &[]).await? else { return Ok(Some(0)) };
    Ok(Some(u64::try_from(row.get::<i64>(0)?).unwrap_or(0)))
}

/// Moves the next `batch` hours of the old table: how many, or `None`
/// when it was empty (and is dropped now) or gone.
pub(crate) async fn move_batch(tx: &impl MigrationTx, batch: usize) -> StoreResult<Option<u64>> {
    // Another process may have finished the upgrade meanwhile.
    if !tx.has_old_readings().await? {
        return Ok(None);
    }
    let limit = batch.max(1) as i64;
    let sql = "SELECT device_pk, chunk, data FROM readings ORDER BY device_pk, chunk LIMIT $1";
    let rows = tx.query(sql, &[limit.into()]).await?;
    let Some(last) = rows.last() else {
        tx.execute("DROP TABLE readings", &[]).await?;
        return Ok(None);
    };
    let (last_pk, last_chunk): (i64, i64) = (last.get(0)?, last.get(1)?);
    // Upgraded hours are readings written: the `latest` index learns them.
    let mut newest = Newest::default();
    let mut hours = Vec::with_capacity(rows.len());
    for r in &rows {
        let (pk, chunk, old): (i64, i64, Vec<u8>) = (r.get(0)?, r.get(1)?, r.get(2)?);
        let data = upgrade_hour(pk, chunk, &old)?;
        if !data.is_empty() {
            newest.add_hour(pk, chunk, &data)?;
            hours.push(HourRow { device_pk: pk, chunk, data });
        }
    }
    tx.put_hours(&hours).await?;
    tx.upsert_latest(&newest.take(), 0).await?;
    let done = "DELETE FROM readings WHERE device_pk < $1 OR (device_pk = $1 AND chunk <= $2)";
    tx.execute(done, &[last_pk.into(), last_chunk.into()]).await?;
    Ok(Some(rows.len() as u64))
}
