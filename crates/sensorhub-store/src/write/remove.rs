//! Removing and rewriting stored hours, once for every backend: a range of
//! a device's readings (`readings delete`), what is past its retention
//! (one batch of a device per transaction), the hours stored before
//! summaries existed (`migrate --summaries`), and the `latest` entries
//! these touch, recomputed from what is left.

use super::tx::{FIRST_HOUR, LAST_HOUR, Tx};
use crate::decide::latest::{SEARCH_BATCH, Search};
use crate::decide::{self, Expiry, HourRow, RETENTION_BATCH};
use crate::{DeleteReport, RetentionReport, StoreError, StoreResult};
use sensorhub_core::time::TimeRange;

/// Hours read at a time while deleting, so that a long range is never held in memory whole.
const DELETE_BATCH: usize = 512;

/// Removes device `device_id`'s readings within `range` (inclusive).
pub(crate) async fn delete_readings(tx: &impl Tx, device_id: &str, range: TimeRange) -> StoreResult<DeleteReport> {
    let pk = tx.device_pk(device_id).await?.ok_or_else(|| StoreError::NotFound(format!("no device {device_id:?}")))?;
    super::alarms::checkpoint_before_removal(tx, pk).await?;
    let (mut next, last) = decide::chunks_of(range);
    let mut report = DeleteReport::default();
    // The sensors whose newest reading goes: their entries are recomputed.
    let stale = tx.latest_within(pk, range.start, range.end).await?;
    loop {
        let rows = tx.hours_between(pk, next, last, DELETE_BATCH, false).await?;
        let Some(end) = rows.last().map(|r| r.chunk) else { break };
        let (mut gone, mut trimmed) = (Vec::new(), Vec::new());
        for row in rows {
            let Some((kept, readings, values)) = decide::cut_hour(pk, row.chunk, &row.data, range)? else { continue };
            if kept.is_empty() {
                gone.push(row.chunk);
            } else {
                trimmed.push(HourRow { data: kept, ..row });
            }
            report.readings += readings;
            report.values += values;
            report.hours += 1;
        }
        futures_util::future::try_join(tx.remove_hours(pk, &gone), tx.put_hours(&trimmed)).await?;
        next = end + 1;
    }
    // Their readings after the range are none (each was the newest).
    recompute_latest(tx, pk, stale, last).await?;
    Ok(report)
}

/// One transaction of the expiry of device `pk` before second `cutoff`:
/// what it removed, and whether the device is done.
pub(crate) async fn expire_batch(tx: &impl Tx, pk: i64, cutoff: i64) -> StoreResult<(RetentionReport, bool)> {
    let mut expiry = Expiry::new();
    let (last_whole, boundary) = Expiry::hours(cutoff);
    let rows = tx.hours_between(pk, FIRST_HOUR, last_whole, RETENTION_BATCH, false).await?;
    if !rows.is_empty() {
        super::alarms::checkpoint_before_removal(tx, pk).await?;
    }
    let done = rows.len() < RETENTION_BATCH;
    let mut gone = Vec::with_capacity(rows.len());
    for row in &rows {
        expiry.dropped(pk, row.chunk, &row.data)?;
        gone.push(row.chunk);
    }
    tx.remove_hours(pk, &gone).await?;
    // Sensors whose newest reading is past retention have no reading left
    // once this pass is through.
    tx.expire_latest(pk, cutoff).await?;
    if done && let Some(row) = tx.hours(&[(pk, boundary)]).await?.pop() {
        match expiry.trim(pk, &row.data, cutoff)? {
            Some(kept) if kept.is_empty() => tx.remove_hours(pk, &[boundary]).await?,
            Some(kept) => tx.put_hours(&[HourRow { data: kept, ..row }]).await?,
            None => {}
        }
    }
    Ok((expiry.report, done))
}

/// One transaction of `migrate --summaries`: up to `batch` hours after
/// `after` rewritten with summaries. Returns the last hour read (`None` at
/// the end) and how many were rewritten; the readings are unchanged.
pub(crate) async fn add_hour_summaries(
    tx: &impl Tx,
    after: Option<(i64, i64)>,
    batch: usize,
) -> StoreResult<(Option<(i64, i64)>, u64)> {
    let rows = tx.hours_after(after, batch.max(1)).await?;
    let next = (rows.len() >= batch.max(1)).then(|| rows.last().map(|r| (r.device_pk, r.chunk))).flatten();
    let mut rewritten = Vec::new();
    for row in rows {
        let bad = || decide::malformed(row.device_pk, row.chunk);
        if let Some(data) = crate::chunk::with_summaries(&row.data).ok_or_else(bad)? {
            rewritten.push(HourRow { data, ..row });
        }
    }
    tx.put_hours(&rewritten).await?;
    Ok((next, rewritten.len() as u64))
}

/// Recomputes the `latest` entries of device `pk`'s sensors in bit set
/// `wanted` from its stored hours, walking back from hour `from` (the
/// newest that may hold them) until each is found or the hours run out (a
/// sensor without readings then has no entry).
pub(crate) async fn recompute_latest(tx: &impl Tx, pk: i64, wanted: u64, from: i64) -> StoreResult<()> {
    if wanted == 0 {
        return Ok(());
    }
    let mut search = Search::new(pk, wanted);
    let mut newest = from;
    while !search.is_done() {
        let rows = tx.hours_between(pk, FIRST_HOUR, newest, SEARCH_BATCH, true).await?;
        for row in &rows {
            search.hour(row.chunk, &row.data)?;
            if search.is_done() {
                break;
            }
        }
        match rows.last() {
            Some(row) if rows.len() == SEARCH_BATCH => newest = row.chunk - 1,
            _ => break,
        }
    }
    tx.remove_latest(pk, wanted).await?;
    tx.upsert_latest(&search.found(), 0).await
}

/// Fills the `latest` index from the stored hours of every device (the
/// migration that made it).
pub(crate) async fn fill_latest(tx: &impl Tx) -> StoreResult<()> {
    for (pk, sensors) in tx.sensor_masks().await? {
        recompute_latest(tx, pk, sensors, LAST_HOUR).await?;
    }
    Ok(())
}
