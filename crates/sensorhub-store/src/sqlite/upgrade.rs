//! The upgrade of readings stored by schema version 2 (the `readings`
//! table, in the format of `legacy.rs`) to `hours` in the column format: a
//! batch of hours per transaction, each moved (converted, inserted, deleted
//! from the old table) atomically, so that a kill at any moment loses
//! nothing and the next open carries on where it stopped. The old table is
//! dropped in the transaction that finds it empty.

use super::checked_hour_key;
use super::tx::begin;
use crate::StoreResult;
use crate::decide::latest::Newest;
use crate::decide::{UpgradeLog, upgrade_hour};
use rusqlite::{Connection, params};

fn old_table_exists(c: &Connection) -> rusqlite::Result<bool> {
    c.query_row("SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'readings')", [], |r| {
        r.get(0)
    })
}

/// Moves every hour of `readings` to `hours`, `batch` hours per transaction.
pub(super) fn run(c: &mut Connection, batch: usize) -> StoreResult<()> {
    if !old_table_exists(c)? {
        return Ok(());
    }
    // Counted in a transaction that checks the table again: another
    // process opening the same new file may have finished (and dropped the
    // table) since the look above.
    let total: i64 = {
        let tx = begin(c)?;
        if !old_table_exists(&tx)? {
            return Ok(());
        }
        let total = tx.query_row("SELECT count(*) FROM readings", [], |r| r.get(0))?;
        tx.commit()?;
        total
    };
    let mut log = UpgradeLog::start(u64::try_from(total).unwrap_or(0));
    loop {
        let tx = begin(c)?;
        // Another process may have finished the upgrade meanwhile.
        if !old_table_exists(&tx)? {
            return Ok(());
        }
        let rows: Vec<(i64, i64, Vec<u8>)> = tx
            .prepare_cached("SELECT device_pk, chunk, data FROM readings ORDER BY device_pk, chunk LIMIT ?1")?
            .query_map([batch.max(1) as i64], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<Result<_, _>>()?;
        if rows.is_empty() {
            tx.execute_batch("DROP TABLE readings")?;
            tx.commit()?;
            log.finish();
            return Ok(());
        }
        // Upgraded hours are readings written: the `latest` index learns them.
        let mut newest = Newest::default();
        {
            let mut insert = tx.prepare_cached("INSERT INTO hours (key, data) VALUES (?1, ?2)")?;
            let mut delete = tx.prepare_cached("DELETE FROM readings WHERE device_pk = ?1 AND chunk = ?2")?;
            for (pk, chunk, old) in &rows {
                let data = upgrade_hour(*pk, *chunk, old)?;
                if !data.is_empty() {
                    insert.execute(params![checked_hour_key(*pk, *chunk)?, data])?;
                    newest.add_hour(*pk, *chunk, &data)?;
                }
                delete.execute(params![pk, chunk])?;
            }
        }
        super::tx::ready(crate::write::tx::Tx::upsert_latest(&super::tx::SqliteTx(&tx), &newest.take()))?;
        tx.commit()?;
        log.batch(rows.len() as u64);
    }
}
