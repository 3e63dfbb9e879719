//! The SQLite backend: one file, WAL mode, migrations from
//! `migrations/sqlite/` applied on open.

mod copy;
mod pool;
mod read;
mod write;

use crate::{
    AccountAuth, AccountSummary, ApiKeyAuth, ApiKeySummary, ApplyReport, DeleteReport, DeviceHandle, ImportReport,
    Installation, PoolStatus, ReadingSource, ReadingStream, Scope, Store, StoreError, StoreResult, StoredHour,
    WebhookKeyAuth, Window,
};
use async_trait::async_trait;
use pool::Pool;
use sensorhub_core::model::{Device, ReadingInput};
use sensorhub_core::provision::Provision;
use sensorhub_core::secret::KeyDigest;
use sensorhub_core::time::TimeRange;
use std::path::Path;

/// Migrations in order; `PRAGMA user_version` records how many ran.
const MIGRATIONS: &[&str] = &[
    include_str!("../../migrations/sqlite/0001_init.sql"),
    include_str!("../../migrations/sqlite/0002_write_grants.sql"),
];

/// Connections kept open at most: readers run side by side in WAL mode, and
/// each query is short (a batch), so a few per core keep the cores busy.
const POOL_SIZE: usize = 4;

/// A SQLite database file.
pub struct SqliteStore {
    pool: Pool,
}

impl SqliteStore {
    /// Opens (creating and migrating when needed) the database at `path`.
    pub async fn open(path: &str) -> StoreResult<Self> {
        let path = Path::new(path);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
            return Err(StoreError::NotFound(format!(
                "the directory {} of the database does not exist",
                dir.display()
            )));
        }
        let pool = Pool::new(path, POOL_SIZE);
        pool.run(migrate).await?;
        Ok(Self { pool })
    }
}

/// Applies the migrations the database has not seen yet, in one
/// `IMMEDIATE` transaction that also reads the version, so that several
/// processes opening a new file at once migrate it exactly once. Refuses a
/// database made by a newer sensorhub.
fn migrate(conn: &mut rusqlite::Connection) -> StoreResult<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let version = usize::try_from(tx.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0))?).unwrap_or(0);
    if version > MIGRATIONS.len() {
        return Err(StoreError::Conflict(format!(
            "the database has schema version {version}, newer than this sensorhub knows ({}); upgrade sensorhub",
            MIGRATIONS.len()
        )));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(version) {
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        tracing::info!(version = i + 1, "applied migration");
    }
    tx.commit()?;
    Ok(())
}

#[async_trait]
impl Store for SqliteStore {
    async fn ping(&self) -> StoreResult<()> {
        self.pool.run(|c| Ok(c.query_row("SELECT 1", [], |_| Ok(()))?)).await
    }

    async fn account_auth(&self, username: &str) -> StoreResult<Option<AccountAuth>> {
        let username = username.to_owned();
        self.pool.run_short(move |c| read::account_auth(c, &username)).await
    }

    async fn api_key_auth(&self, digest: &KeyDigest) -> StoreResult<Option<ApiKeyAuth>> {
        let digest = *digest;
        self.pool.run_short(move |c| read::api_key_auth(c, &digest)).await
    }

    async fn webhook_key_auth(&self, digest: &KeyDigest) -> StoreResult<Option<WebhookKeyAuth>> {
        let digest = *digest;
        self.pool.run_short(move |c| read::webhook_key_auth(c, &digest)).await
    }

    fn pool_status(&self) -> PoolStatus {
        self.pool.status()
    }

    async fn list_devices(&self, scope: Scope) -> StoreResult<Vec<Device>> {
        self.pool.run_short(move |c| read::list_devices(c, scope)).await
    }

    async fn find_device(&self, scope: Scope, device_id: &str) -> StoreResult<Option<DeviceHandle>> {
        let device_id = device_id.to_owned();
        self.pool.run_short(move |c| read::find_device(c, scope, &device_id)).await
    }

    async fn may_write(&self, account_id: i64, device_pk: i64) -> StoreResult<bool> {
        self.pool.run_short(move |c| read::may_write(c, account_id, device_pk)).await
    }

    async fn grant_write_to_viewers(&self) -> StoreResult<u64> {
        self.pool.run(write::grant_write_to_viewers).await
    }

    async fn delete_readings(&self, device_id: &str, range: TimeRange) -> StoreResult<DeleteReport> {
        let id = device_id.to_owned();
        self.pool.run(move |c| write::delete_readings(c, &id, range)).await
    }

    fn read_readings(&self, device: &DeviceHandle, range: TimeRange) -> ReadingStream {
        read::stream_from(self.pool.clone(), device.pk, Some(range.start), range.end)
    }

    async fn read_window(&self, scope: Scope, device_id: &str, range: TimeRange) -> StoreResult<Option<Window>> {
        let id = device_id.to_owned();
        let Some((device, first)) = self.pool.run_short(move |c| read::window_head(c, scope, &id, range)).await? else {
            return Ok(None);
        };
        let next = crate::batches::after(&first, range.end, crate::batches::FIRST_BATCH);
        let rest = read::stream_from(self.pool.clone(), device.pk, next, range.end);
        Ok(Some(Window { device, first, rest, complete: next.is_none() }))
    }

    async fn apply(&self, doc: Provision, readings: Vec<ReadingInput>) -> StoreResult<ApplyReport> {
        self.pool.run(move |c| write::apply(c, doc, readings)).await
    }

    async fn import(&self, source: ReadingSource) -> StoreResult<ImportReport> {
        self.pool.run(move |c| write::import(c, source)).await
    }

    async fn is_empty(&self) -> StoreResult<bool> {
        self.pool.run(read::is_empty).await
    }

    async fn accounts(&self) -> StoreResult<Vec<AccountSummary>> {
        self.pool.run(read::accounts).await
    }

    async fn api_keys(&self) -> StoreResult<Vec<ApiKeySummary>> {
        self.pool.run(read::api_keys).await
    }

    async fn revoke_api_key(&self, id_or_prefix: &str) -> StoreResult<String> {
        let id = id_or_prefix.to_owned();
        self.pool.run(move |c| write::revoke_api_key(c, &id)).await
    }

    async fn export(&self) -> StoreResult<Installation> {
        self.pool.run(copy::export).await
    }

    async fn export_hour_count(&self) -> StoreResult<u64> {
        self.pool.run(copy::export_hour_count).await
    }

    async fn export_hours(&self, device_id: &str, after: Option<i64>, limit: usize) -> StoreResult<Vec<StoredHour>> {
        let id = device_id.to_owned();
        self.pool.run(move |c| copy::export_hours(c, &id, after, limit)).await
    }

    async fn restore(&self, rows: Installation) -> StoreResult<()> {
        self.pool.run(move |c| copy::restore(c, rows)).await
    }

    async fn restore_hours(&self, device_id: &str, hours: Vec<StoredHour>) -> StoreResult<()> {
        let id = device_id.to_owned();
        self.pool.run(move |c| copy::restore_hours(c, &id, hours)).await
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
        let store = SqliteStore::open(path).await.expect("create");
        assert!(store.is_empty().await.expect("empty"));
        drop(store);
        SqliteStore::open(path).await.expect("reopen is a no-op");
        let conn = rusqlite::Connection::open(path).expect("open");
        conn.pragma_update(None, "user_version", 99i64).expect("bump");
        drop(conn);
        let err = SqliteStore::open(path).await.err().expect("refused");
        assert!(err.to_string().contains("newer than this sensorhub knows"), "{err}");
        let missing = dir.path().join("no/such/dir/x.db");
        assert!(SqliteStore::open(missing.to_str().expect("utf-8")).await.is_err());
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
        let store = SqliteStore::open(path.to_str().expect("utf-8")).await.expect("upgrade");
        assert!(store.find_device(Scope::Account { account_id: 1, key: None }, "D").await.expect("f").is_some());
        assert!(!store.may_write(1, 7).await.expect("may"), "seeing is not writing after the upgrade");
        assert_eq!(store.grant_write_to_viewers().await.expect("grant"), 1);
        assert!(store.may_write(1, 7).await.expect("may"), "the operator kept the old behaviour");
    }
}
