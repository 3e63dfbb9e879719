//! Whole-installation export and restore of the SQLite backend, for
//! `sensorhub copy`: the rows written once ([`crate::sql::copy`]), and the
//! stored hours by key.

use super::SqliteStore;
use super::tx::{in_tx, on};
use super::{hour_key, key_chunk};
use crate::sql::copy;
use crate::write;
use crate::{Installation, StoreResult, StoredHour};
use async_trait::async_trait;
use rusqlite::{Connection, params};

pub(super) fn export_hours(
    c: &mut Connection,
    device_id: &str,
    after: Option<i64>,
    limit: usize,
) -> StoreResult<Vec<StoredHour>> {
    let mut stmt = c.prepare_cached(
        "SELECT h.key, h.data FROM devices d JOIN hours h
           ON h.key BETWEEN (d.id << 32) + ?2 AND (d.id << 32) + 4294967295
         WHERE d.device_id = ?1 ORDER BY h.key LIMIT ?3",
    )?;
    // Hours after `after`: key offsets above its own.
    let from = after.map_or(0, |c| hour_key(0, c) + 1);
    let out = stmt
        .query_map(params![device_id, from, limit as i64], |r| {
            Ok(StoredHour { chunk: key_chunk(r.get(0)?), data: r.get(1)? })
        })?
        .collect::<Result<_, _>>()?;
    Ok(out)
}

#[async_trait]
impl crate::store::Copying for SqliteStore {
    async fn export(&self) -> StoreResult<Installation> {
        // One snapshot: a read transaction.
        self.reads
            .run(|c| {
                let snapshot = c.transaction()?;
                on(&snapshot, async |c| copy::export(c).await)
            })
            .await
    }

    async fn export_hour_count(&self) -> StoreResult<u64> {
        self.reads.run(|c| on(c, async |c| copy::hour_count(c).await)).await
    }

    async fn export_hours(&self, device_id: &str, after: Option<i64>, limit: usize) -> StoreResult<Vec<StoredHour>> {
        let id = device_id.to_owned();
        self.reads.run(move |c| export_hours(c, &id, after, limit)).await
    }

    async fn restore(&self, rows: Installation) -> StoreResult<()> {
        self.writes.run(move |c| in_tx(c, async |tx| write::copy::restore(tx, rows).await)).await
    }

    async fn restore_hours(&self, device_id: &str, hours: Vec<StoredHour>) -> StoreResult<()> {
        let id = device_id.to_owned();
        self.writes.run(move |c| in_tx(c, async |tx| write::copy::restore_hours(tx, &id, hours).await)).await
    }
}
