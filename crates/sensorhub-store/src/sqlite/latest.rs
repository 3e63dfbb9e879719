//! The `latest` index on SQLite: the newest value of each sensor of each
//! device (schema version 5), kept by every write of readings in its own
//! transaction and read by the `latest` endpoint. The decisions are in
//! [`crate::decide::latest`].

use super::read::find_device;
use super::{HOUR_BIAS, hour_key, key_chunk};
use crate::decide::latest::{LatestRow, SEARCH_BATCH, Search, entry, idx_of, mask_of};
use crate::{DeviceHandle, LatestValue, Scope, StoreResult};
use rusqlite::{Connection, params};

/// Stores a transaction's newest values: each replaces its entry unless
/// the entry is newer.
pub(super) fn upsert(c: &Connection, rows: &[LatestRow]) -> StoreResult<()> {
    let mut stmt = c.prepare_cached(
        "INSERT INTO latest (device_pk, idx, second, value) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (device_pk, idx) DO UPDATE SET second = excluded.second, value = excluded.value
         WHERE excluded.second >= latest.second",
    )?;
    for r in rows {
        stmt.execute(params![r.device_pk, r.idx, r.second, r.value])?;
    }
    Ok(())
}

/// Recomputes the entries of device `pk`'s sensors in bit set `wanted`
/// from its stored hours, walking back from hour `from` (the newest that
/// may hold them) until each is found or the hours run out (a sensor
/// without readings then has no entry).
pub(super) fn recompute(c: &Connection, pk: i64, wanted: u64, from: i64) -> StoreResult<()> {
    if wanted == 0 {
        return Ok(());
    }
    let mut search = Search::new(pk, wanted);
    let mut stmt =
        c.prepare_cached("SELECT key, data FROM hours WHERE key BETWEEN ?1 AND ?2 ORDER BY key DESC LIMIT ?3")?;
    let mut before = hour_key(pk, from);
    while !search.is_done() {
        let rows: Vec<(i64, Vec<u8>)> = stmt
            .query_map(params![hour_key(pk, -HOUR_BIAS), before, SEARCH_BATCH], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        for (key, data) in &rows {
            search.hour(key_chunk(*key), data)?;
            if search.is_done() {
                break;
            }
        }
        match rows.last() {
            Some((key, _)) if rows.len() as i64 == SEARCH_BATCH => before = key - 1,
            _ => break,
        }
    }
    let mut delete = c.prepare_cached("DELETE FROM latest WHERE device_pk = ?1 AND idx = ?2")?;
    for idx in idx_of(wanted) {
        delete.execute(params![pk, idx])?;
    }
    upsert(c, &search.found())
}

/// The sensors of device `pk` whose entries were taken at a second within
/// `start..=end` (readings about to be removed).
pub(super) fn within(c: &Connection, pk: i64, start: i64, end: i64) -> StoreResult<u64> {
    let mut stmt = c.prepare_cached("SELECT idx FROM latest WHERE device_pk = ?1 AND second BETWEEN ?2 AND ?3")?;
    let idx = stmt.query_map(params![pk, start, end], |r| r.get(0))?.collect::<Result<Vec<i64>, _>>()?;
    Ok(mask_of(idx))
}

/// Removes the entries of device `pk` older than `cutoff`: retention
/// removes every reading before it, so such a sensor has none left.
pub(super) fn expire(c: &Connection, pk: i64, cutoff: i64) -> StoreResult<()> {
    c.prepare_cached("DELETE FROM latest WHERE device_pk = ?1 AND second < ?2")?.execute(params![pk, cutoff])?;
    Ok(())
}

/// Fills the index from the stored hours of every device (the migration
/// to schema version 5).
pub(super) fn fill(c: &Connection) -> StoreResult<()> {
    let sensors: Vec<(i64, i64)> = c
        .prepare("SELECT device_pk, idx FROM sensors ORDER BY device_pk")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let mut devices: Vec<(i64, u64)> = Vec::new();
    for (pk, idx) in sensors {
        match devices.last_mut() {
            Some((last, mask)) if *last == pk => *mask |= mask_of([idx]),
            _ => devices.push((pk, mask_of([idx]))),
        }
    }
    for (pk, wanted) in devices {
        recompute(c, pk, wanted, HOUR_BIAS - 1)?;
    }
    Ok(())
}

/// The device `device_id` visible in `scope` with its entries, by idx.
pub(super) fn read(
    c: &mut Connection,
    scope: Scope,
    device_id: &str,
) -> StoreResult<Option<(DeviceHandle, Vec<LatestValue>)>> {
    let Some(device) = find_device(c, scope, device_id)? else { return Ok(None) };
    let mut stmt = c.prepare_cached("SELECT idx, second, value FROM latest WHERE device_pk = ?1 ORDER BY idx")?;
    let values =
        stmt.query_map([device.pk], |r| Ok(entry(r.get(0)?, r.get(1)?, r.get(2)?)))?.collect::<Result<_, _>>()?;
    Ok(Some((device, values)))
}
