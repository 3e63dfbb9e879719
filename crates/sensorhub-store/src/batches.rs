//! How a window of readings is cut into batches, shared by the backends: a
//! large first batch (a one-minute day in one query), then small ones, each
//! a fresh range query from just after the last second sent. No connection
//! is held while the client reads: a slow client costs a little memory,
//! never a pooled connection, and the next batch is read only when the
//! previous one was taken.

use crate::{ReadingBatch, ReadingStream, StoreResult};
use futures_util::StreamExt;
use std::future::Future;
use std::sync::Arc;

/// Readings in the first batch of a window: a day at one-minute intervals
/// (1,440) comes in one query.
pub(crate) const FIRST_BATCH: usize = 2048;
/// Readings in each later batch on SQLite: small, so that memory per
/// stream stays low (a batch there is a cheap in-process read).
pub(crate) const BATCH_READINGS: usize = 512;

/// Readings in each later batch on PostgreSQL, where a batch is a round
/// trip to another process: four times SQLite's, so a year-long window
/// takes a quarter of the trips, for ~100 KB more per stream.
pub(crate) const REMOTE_BATCH_READINGS: usize = 2048;

/// Where the next batch starts, when `batch` (of at most `limit`) was full
/// and ends before `end`.
pub(crate) fn after(batch: &ReadingBatch, end: i64, limit: usize) -> Option<i64> {
    (batch.len() == limit).then(|| batch.timestamps.last().map(|t| t + 1)).flatten().filter(|t| *t <= end)
}

/// The stream of readings from `next` (when there may be more) to `end`,
/// in batches of `size`; `read(from, end, limit)` reads one batch.
pub(crate) fn stream_from<F, Fut>(next: Option<i64>, end: i64, size: usize, read: F) -> ReadingStream
where
    F: Fn(i64, i64, usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = StoreResult<ReadingBatch>> + Send + 'static,
{
    let read = Arc::new(read);
    futures_util::stream::try_unfold(next, move |next| {
        let read = Arc::clone(&read);
        async move {
            let Some(from) = next else { return Ok(None) };
            let batch = read(from, end, size).await?;
            if batch.is_empty() {
                return Ok(None);
            }
            let more = after(&batch, end, size);
            Ok(Some((batch, more)))
        }
    })
    .fuse()
    .boxed()
}
