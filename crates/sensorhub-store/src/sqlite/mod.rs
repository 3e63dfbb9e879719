//! The SQLite backend: one file, WAL mode, migrations from
//! `migrations/sqlite/` applied on open.

mod copy;
mod hooks;
mod latest;
mod outbox;
mod pool;
mod provision;
mod read;
mod retention;
mod tx;
mod upgrade;
mod write;

use crate::hooks::{ClaimRequest, Claimed, DeliveryRecord, Finished, Outbox, Replay};
use crate::{
    AccountAuth, AccountSummary, ApiKeyAuth, ApiKeySummary, ApplyReport, DeleteReport, DeviceHandle,
    IMPORT_COMMIT_EVERY, ImportReport, Installation, LatestValue, PartialImport, PoolStatus, ReadingSource,
    ReadingStream, RetentionReport, Scope, Store, StoreError, StoreResult, StoredHour, WebhookKeyAuth, Window,
    fact_key,
};
use async_trait::async_trait;
use pool::{Pool, Role};
use sensorhub_core::model::{Device, ReadingInput};
use sensorhub_core::provision::Provision;
use sensorhub_core::retention::Retention;
use sensorhub_core::secret::KeyDigest;
use sensorhub_core::time::TimeRange;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Migrations in order; `PRAGMA user_version` records how many ran.
const MIGRATIONS: &[&str] = &[
    include_str!("../../migrations/sqlite/0001_init.sql"),
    include_str!("../../migrations/sqlite/0002_write_grants.sql"),
    include_str!("../../migrations/sqlite/0003_column_hours.sql"),
    include_str!("../../migrations/sqlite/0004_retention.sql"),
    include_str!("../../migrations/sqlite/0005_latest.sql"),
    include_str!("../../migrations/sqlite/0006_subscriptions.sql"),
    include_str!("../../migrations/sqlite/0007_subscription_names.sql"),
    include_str!("../../migrations/sqlite/0008_access.sql"),
];

/// Offset added to an hour number in a key, so that every hour since
/// jiff's earliest timestamp is a non-negative 32-bit number.
pub(super) const HOUR_BIAS: i64 = 1 << 31;

/// The key (rowid) of device `pk`'s hour `chunk` in `hours`: a device's
/// hours are one range of keys, in time order. An hour beyond the keys
/// (only a range bound can be) is taken as the nearest one that fits.
pub(super) fn hour_key(pk: i64, chunk: i64) -> i64 {
    (pk << 32) | (chunk.clamp(-HOUR_BIAS, HOUR_BIAS - 1) + HOUR_BIAS)
}

/// [`hour_key`] for a write: refuses a device number or hour that would
/// not fit (no device table reaches 2^31 rows; no timestamp is that far).
pub(super) fn checked_hour_key(pk: i64, chunk: i64) -> StoreResult<i64> {
    if (0..HOUR_BIAS).contains(&pk) && (-HOUR_BIAS..HOUR_BIAS).contains(&chunk) {
        Ok(hour_key(pk, chunk))
    } else {
        Err(StoreError::Backend(format!("device #{pk}, hour {chunk}: outside the keys of the hours table").into()))
    }
}

/// The hour number of a key of `hours`.
pub(super) fn key_chunk(key: i64) -> i64 {
    (key & 0xffff_ffff) - HOUR_BIAS
}

/// Read connections kept open at most: readers run side by side in WAL
/// mode, and each query is short (a batch), so a few per core keep the
/// cores busy.
const READ_POOL_SIZE: usize = 4;

/// How an acknowledged write reaches the disk: SQLite's `synchronous`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous = FULL`: every commit is on disk before it is
    /// acknowledged; it survives power loss and an OS crash.
    #[default]
    Full,
    /// `synchronous = NORMAL` (WAL): commits survive a crash of the process
    /// but the last ones may roll back on power loss or an OS crash.
    Normal,
}

impl Durability {
    fn pragma(self) -> &'static str {
        match self {
            Durability::Full => "FULL",
            Durability::Normal => "NORMAL",
        }
    }
}

/// A SQLite database file.
pub struct SqliteStore {
    /// Connections for reads: never wait on writers.
    reads: Pool,
    /// The one connection for writes, which wait their turn a bounded time.
    writes: Pool,
    /// A connection of its own for readiness checks, so that `/readyz`
    /// answers while every read and write connection is busy.
    ping: Mutex<Option<rusqlite::Connection>>,
    /// Single readings, committed in groups.
    group: crate::group::GroupCommit,
    /// Writes of readings under way (see [`Store::ingest_waiting`]).
    ingest_waiting: AtomicUsize,
    /// Told of committed readings.
    observers: crate::observe::Observers,
    path: std::path::PathBuf,
}

impl SqliteStore {
    /// Opens (creating and migrating when needed) the database at `path`.
    pub async fn open(path: &str, durability: Durability) -> StoreResult<Self> {
        Self::open_with(path, durability, crate::OpenOptions::default()).await
    }

    /// [`SqliteStore::open`] with options; readings stored by an older
    /// schema are upgraded before it returns.
    pub async fn open_with(path: &str, durability: Durability, options: crate::OpenOptions) -> StoreResult<Self> {
        let path = Path::new(path);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
            return Err(StoreError::NotFound(format!(
                "the directory {} of the database does not exist",
                dir.display()
            )));
        }
        let sync = durability.pragma();
        let writes = Pool::new(path, 1, Role::Write, sync);
        writes.run(migrate).await?;
        writes.run(move |c| upgrade::run(c, options.upgrade_batch_hours)).await?;
        let reads = Pool::new(path, READ_POOL_SIZE, Role::Read, sync);
        let group_writes = writes.clone();
        let group = crate::group::GroupCommit::start(move |readings| {
            let writes = group_writes.clone();
            async move { writes.run(move |c| write::ingest_group(c, &readings)).await }
        });
        Ok(Self {
            reads,
            writes,
            ping: Mutex::new(None),
            group,
            ingest_waiting: AtomicUsize::new(0),
            observers: crate::observe::Observers::default(),
            path: path.to_owned(),
        })
    }

    /// Checks that the file answers a read, on the readiness connection.
    fn ping_now(&self) -> StoreResult<()> {
        let mut slot = self.ping.lock().map_err(|_| StoreError::Backend("readiness lock poisoned".into()))?;
        if slot.is_none() {
            *slot = Some(pool::open_connection(&self.path, Role::Read, Durability::Full.pragma())?);
        }
        let conn = slot.as_mut().ok_or_else(|| StoreError::Backend("no readiness connection".into()))?;
        // Reads the schema: touches the file, never waits on writers (WAL).
        let result = conn.query_row("SELECT count(*) FROM sqlite_schema", [], |_| Ok(()));
        if result.is_err() {
            *slot = None;
        }
        Ok(result?)
    }
}

/// Counts one write of readings in [`SqliteStore::ingest_waiting`] from
/// its call until it returns (or its future is dropped).
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn enter(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Applies the migrations the database has not seen yet, in one
/// `IMMEDIATE` transaction that also reads the version, so that several
/// processes opening a new file at once migrate it exactly once.
fn migrate(conn: &mut rusqlite::Connection) -> StoreResult<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    tx::ready(crate::write::migrate::migrate(&tx::SqliteTx(&tx), MIGRATIONS))?;
    tx.commit()?;
    Ok(())
}

#[async_trait]
impl Store for SqliteStore {
    async fn ping(&self) -> StoreResult<()> {
        self.ping_now()
    }

    async fn access_generation(&self) -> StoreResult<i64> {
        self.reads.run_short(read::access_generation).await
    }

    async fn installation_id(&self) -> StoreResult<String> {
        self.reads.run_short(read::installation_id).await
    }

    async fn installation_fact(&self, key: &str) -> StoreResult<Option<String>> {
        let key = key.to_owned();
        self.reads.run_short(move |c| read::installation_fact(c, &key)).await
    }

    async fn record_installation_fact(&self, key: &str, value: &str) -> StoreResult<()> {
        let (key, value) = (fact_key(key)?, value.to_owned());
        self.writes
            .run(move |c| {
                c.execute(
                    "INSERT INTO installation (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = ?2",
                    [&key, &value],
                )?;
                Ok(())
            })
            .await
    }

    async fn account_auth(&self, username: &str) -> StoreResult<Option<AccountAuth>> {
        let username = username.to_owned();
        self.reads.run_short(move |c| read::account_auth(c, &username)).await
    }

    async fn api_key_auth(&self, digest: &KeyDigest) -> StoreResult<Option<ApiKeyAuth>> {
        let digest = *digest;
        self.reads.run_short(move |c| read::api_key_auth(c, &digest)).await
    }

    async fn webhook_key_auth(&self, digest: &KeyDigest) -> StoreResult<Option<WebhookKeyAuth>> {
        let digest = *digest;
        self.reads.run_short(move |c| read::webhook_key_auth(c, &digest)).await
    }

    fn pool_status(&self) -> PoolStatus {
        let (r, w) = (self.reads.status(), self.writes.status());
        PoolStatus { max: r.max + w.max, in_use: r.in_use + w.in_use, idle: r.idle + w.idle }
    }

    fn ingest_waiting(&self) -> usize {
        self.ingest_waiting.load(Ordering::Relaxed)
    }

    fn observe(&self, observer: std::sync::Arc<dyn crate::observe::AfterCommit>) {
        self.observers.add(observer);
    }

    async fn list_devices(&self, scope: Scope) -> StoreResult<Vec<Device>> {
        self.reads.run_short(move |c| read::list_devices(c, scope)).await
    }

    async fn find_device(&self, scope: Scope, device_id: &str) -> StoreResult<Option<DeviceHandle>> {
        let device_id = device_id.to_owned();
        self.reads.run_short(move |c| read::find_device(c, scope, &device_id)).await
    }

    async fn may_write(&self, account_id: i64, device_pk: i64) -> StoreResult<bool> {
        self.reads.run_short(move |c| read::may_write(c, account_id, device_pk)).await
    }

    async fn grant_write_to_viewers(&self) -> StoreResult<u64> {
        self.writes.run(write::grant_write_to_viewers).await
    }

    async fn delete_readings(&self, device_id: &str, range: TimeRange) -> StoreResult<DeleteReport> {
        let id = device_id.to_owned();
        self.writes.run(move |c| write::delete_readings(c, &id, range)).await
    }

    async fn expire_readings(&self, default: Retention, now: i64) -> StoreResult<RetentionReport> {
        let settings = self.reads.run(retention::settings).await?;
        let mut total = crate::expire_in_steps(settings, default, now, |pk, cutoff| {
            self.writes.run(move |c| retention::expire_batch(c, pk, cutoff))
        })
        .await?;
        if !total.is_empty() {
            total.returned = self.writes.run(retention::return_free_pages).await?;
        }
        Ok(total)
    }

    async fn read_hours(&self, device_pk: i64, from: i64, to: i64, limit: usize) -> StoreResult<Vec<StoredHour>> {
        self.reads.run_short(move |c| read::read_hours(c, device_pk, from, to, limit)).await
    }

    async fn latest(&self, scope: Scope, device_id: &str) -> StoreResult<Option<(DeviceHandle, Vec<LatestValue>)>> {
        let device_id = device_id.to_owned();
        self.reads.run_short(move |c| latest::read(c, scope, &device_id)).await
    }

    async fn add_hour_summaries(&self, batch: usize) -> StoreResult<u64> {
        let (mut after, mut total) = (None, 0);
        loop {
            let (next, rewritten) = self.writes.run(move |c| write::add_hour_summaries(c, after, batch)).await?;
            total += rewritten;
            match next {
                Some(hour) => after = Some(hour),
                None => return Ok(total),
            }
            tokio::time::sleep(crate::IMPORT_PAUSE).await;
        }
    }

    fn read_readings(&self, device: &DeviceHandle, range: TimeRange) -> ReadingStream {
        read::stream_from(self.reads.clone(), device.pk, Some(range.start), range.end)
    }

    async fn read_window(&self, scope: Scope, device_id: &str, range: TimeRange) -> StoreResult<Option<Window>> {
        let id = device_id.to_owned();
        let Some((device, first)) = self.reads.run_short(move |c| read::window_head(c, scope, &id, range)).await?
        else {
            return Ok(None);
        };
        let (reads, pk) = (self.reads.clone(), device.pk);
        Ok(Some(Window::after_first(device, first, range.end, |next| read::stream_from(reads, pk, next, range.end))))
    }

    async fn apply_with_hooks(
        &self,
        doc: Provision,
        readings: Vec<ReadingInput>,
        hooks: Option<crate::hooks::ProvisionedHooks>,
    ) -> StoreResult<ApplyReport> {
        let apply = |readings| self.writes.run(move |c| write::apply(c, doc, readings, hooks));
        self.observers.all(readings, apply).await
    }

    async fn import(&self, source: ReadingSource, outbox: Outbox) -> StoreResult<ImportReport> {
        let _waiting = Waiting::enter(&self.ingest_waiting);
        let import =
            |source| async move { Ok(self.writes.run(move |c| write::import(c, source, None, outbox)).await?.0) };
        self.observers.import(source, import).await
    }

    async fn ingest(&self, reading: ReadingInput) -> StoreResult<()> {
        let _waiting = Waiting::enter(&self.ingest_waiting);
        self.observers.one(reading, |reading| self.group.write(reading)).await
    }

    async fn import_batched(&self, source: ReadingSource, outbox: Outbox) -> Result<ImportReport, PartialImport> {
        let _waiting = Waiting::enter(&self.ingest_waiting);
        let steps = |source| {
            crate::import_in_steps(source, |source| {
                self.writes.run(move |c| write::import(c, source, Some(IMPORT_COMMIT_EVERY), outbox))
            })
        };
        self.observers.import_batched(source, steps).await
    }

    async fn is_empty(&self) -> StoreResult<bool> {
        self.reads.run(read::is_empty).await
    }

    async fn accounts(&self) -> StoreResult<Vec<AccountSummary>> {
        self.reads.run(read::accounts).await
    }

    async fn api_keys(&self) -> StoreResult<Vec<ApiKeySummary>> {
        self.reads.run(read::api_keys).await
    }

    async fn revoke_api_key(&self, id_or_prefix: &str) -> StoreResult<String> {
        let id = id_or_prefix.to_owned();
        self.writes.run(move |c| write::revoke_api_key(c, &id)).await
    }

    async fn export(&self) -> StoreResult<Installation> {
        self.reads.run(copy::export).await
    }

    async fn export_hour_count(&self) -> StoreResult<u64> {
        self.reads.run(copy::export_hour_count).await
    }

    async fn export_hours(&self, device_id: &str, after: Option<i64>, limit: usize) -> StoreResult<Vec<StoredHour>> {
        let id = device_id.to_owned();
        self.reads.run(move |c| copy::export_hours(c, &id, after, limit)).await
    }

    async fn restore(&self, rows: Installation) -> StoreResult<()> {
        self.writes.run(move |c| copy::restore(c, rows)).await
    }

    async fn restore_hours(&self, device_id: &str, hours: Vec<StoredHour>) -> StoreResult<()> {
        let id = device_id.to_owned();
        self.writes.run(move |c| copy::restore_hours(c, &id, hours)).await
    }

    async fn add_subscription(&self, sub: crate::hooks::NewSubscription) -> StoreResult<()> {
        self.writes.run(move |c| hooks::add(c, sub)).await
    }

    async fn subscriptions(&self) -> StoreResult<Vec<crate::hooks::Subscription>> {
        self.reads.run(hooks::list).await
    }

    async fn remove_subscription(&self, id: &str) -> StoreResult<()> {
        let id = id.to_owned();
        self.writes.run(move |c| hooks::remove(c, &id)).await
    }

    async fn replace_subscription_secret(&self, id: &str, sealed_secret: Vec<u8>) -> StoreResult<()> {
        let id = id.to_owned();
        self.writes.run(move |c| hooks::set_secret(c, &id, &sealed_secret)).await
    }

    async fn set_subscription_enabled(&self, id: &str, enabled: bool) -> StoreResult<()> {
        let id = id.to_owned();
        self.writes.run(move |c| hooks::set_enabled(c, &id, enabled)).await
    }

    async fn claim_deliveries(&self, now: i64, lease: i64, req: &ClaimRequest) -> StoreResult<Claimed> {
        let req = req.clone();
        self.writes.run(move |c| outbox::claim(c, now, lease, &req)).await
    }

    async fn finish_deliveries(&self, now: i64, done: Vec<Finished>) -> StoreResult<()> {
        self.writes.run(move |c| outbox::finish(c, now, &done)).await
    }

    async fn deliveries(&self, id: &str, failed_only: bool) -> StoreResult<Vec<DeliveryRecord>> {
        let id = id.to_owned();
        self.reads.run(move |c| outbox::list(c, &id, failed_only)).await
    }

    async fn replay_deliveries(&self, id: &str, which: Replay, now: i64) -> StoreResult<u64> {
        let id = id.to_owned();
        self.writes.run(move |c| outbox::replay(c, &id, which, now)).await
    }

    async fn outbox_backlog(&self) -> StoreResult<u64> {
        self.reads.run(outbox::backlog).await
    }

    async fn prune_failed_deliveries(&self, before: i64) -> StoreResult<u64> {
        self.writes.run(move |c| outbox::prune_failed(c, before)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn opening_creates_and_migrates_and_refuses_a_newer_schema() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("m.db");
        let path = path.to_str().expect("utf-8");
        let store = SqliteStore::open(path, Durability::Full).await.expect("create");
        assert!(store.is_empty().await.expect("empty"));
        drop(store);
        SqliteStore::open(path, Durability::Full).await.expect("reopen is a no-op");
        let conn = rusqlite::Connection::open(path).expect("open");
        let auto_vacuum: i64 = conn.query_row("PRAGMA auto_vacuum", [], |r| r.get(0)).expect("pragma");
        assert_eq!(auto_vacuum, 2, "a new file returns freed pages on incremental_vacuum");
        conn.pragma_update(None, "user_version", 99i64).expect("bump");
        drop(conn);
        let err = SqliteStore::open(path, Durability::Full).await.err().expect("refused");
        assert!(err.to_string().contains("newer than this sensorhub knows"), "{err}");
        let missing = dir.path().join("no/such/dir/x.db");
        assert!(SqliteStore::open(missing.to_str().expect("utf-8"), Durability::Full).await.is_err());
    }

    #[tokio::test]
    async fn commits_are_durable_unless_the_url_says_otherwise() {
        let dir = tempfile::tempdir().expect("dir");
        let synchronous = |store: &SqliteStore| {
            let (reads, writes) = (store.reads.clone(), store.writes.clone());
            async move {
                let get = |c: &mut rusqlite::Connection| Ok(c.query_row("PRAGMA synchronous", [], |r| r.get(0))?);
                (reads.run(get).await.expect("read"), writes.run(get).await.expect("write"))
            }
        };
        let path = dir.path().join("d.db");
        let full = SqliteStore::open(path.to_str().expect("utf-8"), Durability::Full).await.expect("open");
        assert_eq!(synchronous(&full).await, (2i64, 2i64), "FULL on every connection");
        let normal = SqliteStore::open(dir.path().join("n.db").to_str().expect("utf-8"), Durability::Normal).await;
        assert_eq!(synchronous(&normal.expect("open")).await, (1, 1), "NORMAL when asked");
    }

    #[tokio::test]
    async fn a_version_1_database_upgrades_without_write_grants_unless_asked() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("v1.db");
        let conn = rusqlite::Connection::open(&path).expect("open");
        conn.execute_batch(MIGRATIONS[0]).expect("version 1");
        conn.execute_batch(
            "PRAGMA user_version = 1;
             INSERT INTO accounts (id, username, password_hash, created_at) VALUES (1, 'a', 'x', 0);
             INSERT INTO devices (id, device_id, name, type, lat, long, interval_seconds) VALUES (7, 'D', 'n', 'T', 0, 0, 60);
             INSERT INTO account_devices (account_id, device_pk) VALUES (1, 7);",
        )
        .expect("rows");
        drop(conn);
        let store = SqliteStore::open(path.to_str().expect("utf-8"), Durability::Full).await.expect("upgrade");
        assert!(store.find_device(Scope::Account { account_id: 1, key: None }, "D").await.expect("f").is_some());
        assert!(!store.may_write(1, 7).await.expect("may"), "seeing is not writing after the upgrade");
        assert_eq!(store.grant_write_to_viewers().await.expect("grant"), 1);
        assert!(store.may_write(1, 7).await.expect("may"), "the operator kept the old behaviour");
    }
}
