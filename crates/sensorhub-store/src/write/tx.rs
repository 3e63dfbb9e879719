//! The transaction seam: the primitive operations one write transaction is
//! made of, which each backend answers with its own SQL
//! (`sqlite/tx.rs`, `postgres/tx.rs`). Every write step is written once
//! against it ([`super`]); the decisions those steps take are in
//! [`crate::decide`].
//!
//! Methods take `&self` so that a backend may send several at once (on
//! PostgreSQL, the index and outbox rows go out beside the hours in one
//! round trip). On SQLite each future is ready when first polled: the steps
//! run on the writer's thread and never wait.

use crate::decide::HourRow;
use crate::decide::latest::LatestRow;
use crate::decide::outbox::OutboxRow;
use crate::{ReadingSource, StoreResult};
use sensorhub_core::model::{ReadingInput, SensorMeta};
use sensorhub_core::provision::InputError;

/// The lowest hour number a range of hours may start from.
pub(crate) const FIRST_HOUR: i64 = -(1 << 31);
/// The highest hour number a range of hours may end at.
pub(crate) const LAST_HOUR: i64 = (1 << 31) - 1;

/// Items taken from an import's source at a time.
pub(crate) type Slice = Vec<Result<ReadingInput, InputError>>;

/// One write transaction's primitive operations.
pub(crate) trait Tx {
    /// The number of device `device_id`.
    async fn device_pk(&self, device_id: &str) -> StoreResult<Option<i64>>;

    /// Device `pk`'s sensors, by idx.
    async fn device_sensors(&self, pk: i64) -> StoreResult<Vec<SensorMeta>>;

    /// The enabled subscriptions to sensor data whose account may still
    /// see device `pk` (and that list it, when they list devices).
    async fn subscriptions_of(&self, pk: i64) -> StoreResult<Vec<String>>;

    /// The stored rows of these (device, hour) pairs; missing ones are left out.
    async fn hours(&self, keys: &[(i64, i64)]) -> StoreResult<Vec<HourRow>>;

    /// Up to `limit` stored hours of device `pk` from hour `first` to
    /// `last` (inclusive), oldest first, or newest first with `newest_first`.
    async fn hours_between(
        &self,
        pk: i64,
        first: i64,
        last: i64,
        limit: usize,
        newest_first: bool,
    ) -> StoreResult<Vec<HourRow>>;

    /// Up to `limit` stored hours of every device after (device, hour)
    /// `after` (from the first with `None`), in (device, hour) order.
    async fn hours_after(&self, after: Option<(i64, i64)>, limit: usize) -> StoreResult<Vec<HourRow>>;

    /// Writes whole hour rows, replacing the stored ones.
    async fn put_hours(&self, rows: &[HourRow]) -> StoreResult<()>;

    /// Removes device `pk`'s stored hours `chunks`.
    async fn remove_hours(&self, pk: i64, chunks: &[i64]) -> StoreResult<()>;

    /// Stores entries of the `latest` index: each replaces the stored one
    /// unless that one is newer.
    async fn upsert_latest(&self, rows: &[LatestRow]) -> StoreResult<()>;

    /// The sensors (a bit set of idx) of device `pk` whose `latest` entry
    /// was taken at a second within `start..=end`.
    async fn latest_within(&self, pk: i64, start: i64, end: i64) -> StoreResult<u64>;

    /// Removes device `pk`'s `latest` entries of the sensors in bit set `mask`.
    async fn remove_latest(&self, pk: i64, mask: u64) -> StoreResult<()>;

    /// Removes device `pk`'s `latest` entries older than second `cutoff`.
    async fn expire_latest(&self, pk: i64, cutoff: i64) -> StoreResult<()>;

    /// Every device with sensors, and its sensors as a bit set of idx.
    async fn sensor_masks(&self) -> StoreResult<Vec<(i64, u64)>>;

    /// Writes the deliveries a transaction's readings owe.
    async fn insert_outbox(&self, rows: &[OutboxRow]) -> StoreResult<()>;

    /// The next `n` items of an import's `source`, and the source. A
    /// source may block (it reads a file): where blocking a thread matters,
    /// the backend reads it where that is allowed.
    async fn take(&self, source: ReadingSource, n: usize) -> StoreResult<(ReadingSource, Slice)>;
}
