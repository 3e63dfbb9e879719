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
use crate::{ReadingSource, StoreError, StoreResult};
use sensorhub_core::model::{ReadingInput, SensorMeta};
use sensorhub_core::provision::InputError;
use std::collections::BTreeSet;
use std::task::Poll;

/// The lowest hour number a range of hours may start from.
pub(crate) const FIRST_HOUR: i64 = -(1 << 31);
/// The highest hour number a range of hours may end at.
pub(crate) const LAST_HOUR: i64 = (1 << 31) - 1;

/// Items taken from an import's source at a time.
pub(crate) type Slice = Vec<Result<ReadingInput, InputError>>;

/// Runs two steps of one transaction together, as its statements must
/// run: each is begun in turn (on PostgreSQL their statements then share
/// round trips), but once one has failed a step not yet begun is never
/// begun. On SQLite each step runs to its end when first polled, and an
/// error that made SQLite roll the transaction back (a full disk, an I/O
/// error) leaves the connection outside any transaction: a later step
/// would commit its rows on their own. Of the errors, the one reported is
/// their [`StoreError::cause`].
pub(crate) async fn together(
    a: impl Future<Output = StoreResult<()>>,
    b: impl Future<Output = StoreResult<()>>,
) -> StoreResult<()> {
    let (mut a, mut b) = (std::pin::pin!(a), std::pin::pin!(b));
    // Per step: not begun (None), running (Some(false)) or done (Some(true)).
    let mut steps = [None::<bool>; 2];
    let mut errors = Vec::new();
    std::future::poll_fn(|cx| {
        let mut running = false;
        for (i, step) in steps.iter_mut().enumerate() {
            match step {
                Some(true) => continue,
                None if !errors.is_empty() => {
                    *step = Some(true);
                    continue;
                }
                _ => {}
            }
            let polled = match i {
                0 => a.as_mut().poll(cx),
                _ => b.as_mut().poll(cx),
            };
            *step = Some(polled.is_ready());
            match polled {
                Poll::Ready(Err(e)) => errors.push(e),
                Poll::Ready(Ok(())) => {}
                Poll::Pending => running = true,
            }
        }
        if running { Poll::Pending } else { Poll::Ready(()) }
    })
    .await;
    let mut errors = errors.into_iter();
    match errors.next() {
        Some(first) => Err(StoreError::cause(first, errors)),
        None => Ok(()),
    }
}

/// One subscription a device's readings owe: its id, and on PostgreSQL
/// the number its outbox log rows name it by (0 on SQLite).
pub(crate) type Owed = (std::sync::Arc<str>, i32);

/// One write transaction's primitive operations.
pub(crate) trait Tx: crate::sql::DeviceHours {
    /// The number of device `device_id`.
    async fn device_pk(&self, device_id: &str) -> StoreResult<Option<i64>>;

    /// Device `pk`'s sensors, by idx.
    async fn device_sensors(&self, pk: i64) -> StoreResult<Vec<SensorMeta>>;

    /// For each of devices `pks`, in the same order: the enabled
    /// subscriptions to sensor data whose account may still see it (and
    /// that list it, when they list devices), in id order.
    async fn subscriptions_of(&self, pks: &[i64]) -> StoreResult<Vec<Vec<Owed>>>;

    /// Tells the transaction of subscriptions kept from an earlier one,
    /// which its outbox rows may name (PostgreSQL's log names them by number).
    fn knows(&self, _owed: &[Owed]) {}

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

    /// [`Tx::put_hours`] for live writes, whose hours are likely written
    /// again soon with a few readings more: a backend may store them so
    /// that the next such write costs less (SQLite reserves room at a
    /// row's end, `sqlite/tx.rs`).
    async fn put_open_hours(&self, rows: &[HourRow]) -> StoreResult<()> {
        self.put_hours(rows).await
    }

    /// Removes device `pk`'s stored hours `chunks`.
    async fn remove_hours(&self, pk: i64, chunks: &[i64]) -> StoreResult<()>;

    /// Stores entries of the `latest` index, written at server second
    /// `stored_at` (0: not known): each replaces the stored one unless
    /// that one is newer.
    async fn upsert_latest(&self, rows: &[LatestRow], stored_at: i64) -> StoreResult<()>;

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

    /// [`Tx::upsert_latest`] then [`Tx::insert_outbox`], for the same
    /// readings: a backend may write both with one statement (PostgreSQL,
    /// where each statement of a group's costs both ends a flush and a
    /// wake-up on its serial path).
    async fn upsert_latest_and_outbox(
        &self,
        latest: &[LatestRow],
        stored_at: i64,
        outbox: &[OutboxRow],
    ) -> StoreResult<()> {
        self.upsert_latest(latest, stored_at).await?;
        self.insert_outbox(outbox).await
    }

    /// The next `n` items of an import's `source`, and the source. A
    /// source may block (it reads a file): where blocking a thread matters,
    /// the backend reads it where that is allowed.
    async fn take(&self, source: ReadingSource, n: usize) -> StoreResult<(ReadingSource, Slice)>;
}

/// A device row as provisioning compares it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DeviceFields {
    pub name: String,
    pub kind: String,
    pub lat: f64,
    pub long: f64,
    pub interval_seconds: i64,
}

/// The rows a retention setting lives on.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RetentionOf {
    Account(i64),
    Device(i64),
}

/// Which key table a key lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyKind {
    /// `api_keys` (public reads), which may be scoped to devices.
    Api,
    /// `webhook_keys` (the webhook receiver).
    Webhook,
}

/// A new key row.
pub(crate) struct NewKey<'a> {
    pub kind: KeyKind,
    pub digest: &'a [u8],
    pub prefix: &'a str,
    pub account_id: i64,
    pub scoped: bool,
    pub revoked: bool,
    /// Seconds since the epoch.
    pub created_at: i64,
}

/// The primitive operations of provisioning (`apply`, the admin commands).
pub(crate) trait ProvisionTx: Tx {
    /// Device `device_id`'s number and row.
    async fn device_row(&self, device_id: &str) -> StoreResult<Option<(i64, DeviceFields)>>;

    /// Adds a device; its number.
    async fn insert_device(&self, device_id: &str, row: &DeviceFields) -> StoreResult<i64>;

    /// Replaces device `pk`'s row.
    async fn update_device(&self, pk: i64, row: &DeviceFields) -> StoreResult<()>;

    /// Writes sensor `sensor` at `idx` of device `pk`, adding it when `new`.
    async fn put_sensor(&self, pk: i64, idx: usize, sensor: &SensorMeta, new: bool) -> StoreResult<()>;

    /// Sets a retention column (`None` clears it); whether it changed.
    async fn set_retention(&self, of: RetentionOf, seconds: Option<i64>) -> StoreResult<bool>;

    /// Account `username`'s number, password hash and disabled flag.
    async fn account_row(&self, username: &str) -> StoreResult<Option<crate::decide::StoredAccount>>;

    /// Adds an account created at `created_at` (seconds); its number.
    async fn insert_account(
        &self,
        username: &str,
        password_hash: &str,
        disabled: bool,
        created_at: i64,
    ) -> StoreResult<i64>;

    /// Changes what is given of account `id`.
    async fn update_account(&self, id: i64, password_hash: Option<&str>, disabled: Option<bool>) -> StoreResult<()>;

    /// The devices account `id` sees, with its write grants.
    async fn links_of(&self, id: i64) -> StoreResult<crate::decide::Links>;

    /// Replaces account `id`'s device links.
    async fn set_links_of(&self, id: i64, links: &crate::decide::Links) -> StoreResult<()>;

    /// The devices account `id` owns.
    async fn owned_by(&self, id: i64) -> StoreResult<BTreeSet<i64>>;

    /// Makes account `account` the owner of device `device_id`, which it
    /// then sees; whether anything changed.
    async fn set_owner(&self, device_id: &str, account: i64) -> StoreResult<bool>;

    /// The key of `kind` with `digest` (an API key with its device list).
    async fn key_row(&self, kind: KeyKind, digest: &[u8]) -> StoreResult<Option<crate::decide::StoredKey>>;

    /// Adds a key; its number.
    async fn insert_key(&self, key: NewKey<'_>) -> StoreResult<i64>;

    /// Changes key `id` of `kind`: whether it is scoped (API keys; `None`
    /// leaves it) and revoked.
    async fn update_key(&self, kind: KeyKind, id: i64, scoped: Option<bool>, revoked: bool) -> StoreResult<()>;

    /// Replaces API key `id`'s device list.
    async fn set_key_devices(&self, id: i64, devices: &BTreeSet<i64>) -> StoreResult<()>;

    /// The API keys whose digest is `digest`, else the unrevoked ones shown
    /// with `prefix`: (number, prefix).
    async fn api_keys_matching(&self, digest: &[u8], prefix: &str) -> StoreResult<Vec<(i64, String)>>;
}

/// The primitive operations of provisioning webhook subscriptions.
pub(crate) trait SubscriptionTx: ProvisionTx {
    /// Account `account`'s subscription named `name`, with its device list.
    async fn subscription_row(
        &self,
        account: i64,
        name: &str,
    ) -> StoreResult<Option<crate::decide::subscriptions::SubscriptionRow>>;

    /// Writes subscription `row` of account `account` under `name` (an
    /// update keeps its name and creation time) and its device list.
    async fn put_subscription(
        &self,
        account: i64,
        name: &str,
        row: &crate::decide::subscriptions::SubscriptionRow,
    ) -> StoreResult<()>;
}

#[cfg(test)]
mod tests {
    use super::together;
    use crate::StoreError::{Backend, Busy};
    use std::cell::Cell;

    #[tokio::test]
    async fn after_a_failed_step_no_other_begins() {
        let began = [Cell::new(false), Cell::new(false)];
        let step = |i: usize, fails: bool| {
            let began = &began[i];
            async move {
                began.set(true);
                if fails { Err(Backend("disk full".into())) } else { Ok(()) }
            }
        };
        let got = together(step(0, true), step(1, false)).await;
        assert_eq!(got.map_err(|e| e.to_string()), Err("database error: disk full".into()));
        assert_eq!(began.each_ref().map(Cell::get), [true, false], "as SQLite runs them");
        let began_all = together(step(0, false), step(1, false)).await;
        assert!(began_all.is_ok());
        assert_eq!(began.each_ref().map(Cell::get), [true, true]);
    }

    #[tokio::test]
    async fn steps_begun_together_report_the_timeout_not_its_echo() {
        // As on PostgreSQL: both are sent, then answered.
        let answered = |e: Option<crate::StoreError>| async move {
            tokio::task::yield_now().await;
            e.map_or(Ok(()), Err)
        };
        let echo = || Some(Backend("current transaction is aborted".into()));
        let got = together(answered(echo()), answered(Some(Busy("lock timeout".into())))).await;
        assert_eq!(got.map_err(|e| e.to_string()), Err("database busy: lock timeout".into()));
        let got = together(answered(Some(Busy("lock timeout".into()))), answered(echo())).await;
        assert_eq!(got.map_err(|e| e.to_string()), Err("database busy: lock timeout".into()));
        assert!(together(answered(None), answered(None)).await.is_ok());
    }
}
