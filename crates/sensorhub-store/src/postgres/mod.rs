//! The PostgreSQL backend: tokio-postgres over a deadpool pool, migrations
//! from `migrations/postgres/` applied on open. It stores the same rows as
//! the SQLite backend (readings packed one row per device and hour) and
//! shares its decisions ([`crate::decide`]), so answers are the same byte for
//! byte. Several sensorhub processes may share one database.

mod copy;
mod hooks;
mod latest;
mod outbox;
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
    ReadingStream, RetentionReport, Scope, Store, StoreError, StoreResult, StoredHour, WebhookKeyAuth, Window, batches,
    fact_key,
};
use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use sensorhub_core::model::{Device, ReadingInput};
use sensorhub_core::provision::Provision;
use sensorhub_core::retention::Retention;
use sensorhub_core::secret::KeyDigest;
use sensorhub_core::time::TimeRange;
use tokio_postgres::NoTls;

/// Migrations in order; the table `sensorhub_schema` records how many ran.
const MIGRATIONS: &[&str] = &[
    include_str!("../../migrations/postgres/0001_init.sql"),
    include_str!("../../migrations/postgres/0002_write_grants.sql"),
    include_str!("../../migrations/postgres/0003_column_hours.sql"),
    include_str!("../../migrations/postgres/0004_retention.sql"),
    include_str!("../../migrations/postgres/0005_latest.sql"),
    include_str!("../../migrations/postgres/0006_subscriptions.sql"),
    include_str!("../../migrations/postgres/0007_subscription_names.sql"),
    include_str!("../../migrations/postgres/0008_access.sql"),
];

/// Connections per process unless the URL says otherwise (`pool_max_size=N`).
pub const DEFAULT_POOL_SIZE: usize = 16;

/// The advisory lock taken while migrating, so that instances starting
/// together migrate once ("sensorhub" in ASCII).
const MIGRATION_LOCK: i64 = 0x7365_6e73_6f72_6875;

/// Every session's time limits, so that nothing waits without end: a
/// statement runs at most 30 s (a request's own limit; bulk writes lift it
/// for their transaction), and a lock (the write lock above all) is waited
/// for at most 5 s. Past either, the work fails with [`StoreError::Busy`].
const SESSION_OPTIONS: &str = "-c statement_timeout=30000 -c lock_timeout=5000";

/// Writers of this process at once: one writes, one waits for the write
/// lock; the others wait here (at most [`WRITE_WAIT`]) without holding a
/// pooled connection that reads need.
const WRITERS: usize = 2;

/// How long a write waits for its turn in this process.
const WRITE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        use tokio_postgres::error::SqlState;
        match e.code() {
            Some(c) if *c == SqlState::LOCK_NOT_AVAILABLE => {
                StoreError::Busy(format!("other writes held the database's write lock too long ({e})"))
            }
            Some(c) if *c == SqlState::QUERY_CANCELED => {
                StoreError::Busy(format!("a statement ran past its time limit ({e})"))
            }
            _ => StoreError::Backend(Box::new(e)),
        }
    }
}

impl From<deadpool_postgres::PoolError> for StoreError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Timeout(_) => {
                StoreError::Busy(format!("every database connection stayed busy ({e})"))
            }
            other => StoreError::Backend(Box::new(other)),
        }
    }
}

/// A place among this process's writers, within [`WRITE_WAIT`].
async fn writer_place(writers: &tokio::sync::Semaphore) -> StoreResult<tokio::sync::SemaphorePermit<'_>> {
    match tokio::time::timeout(WRITE_WAIT, writers.acquire()).await {
        Ok(permit) => permit.map_err(|e| StoreError::Backend(Box::new(e))),
        Err(_) => Err(StoreError::Busy(format!("other writes held the database for {} s", WRITE_WAIT.as_secs()))),
    }
}

/// A PostgreSQL database.
pub struct PgStore {
    pool: Pool,
    /// One connection of its own for readiness checks, so that `/readyz`
    /// answers while the pool is busy.
    ping: Pool,
    /// Places for this process's writers ([`WRITERS`]).
    writers: std::sync::Arc<tokio::sync::Semaphore>,
    /// Single readings, committed in groups.
    group: crate::group::GroupCommit,
    /// Told of committed readings.
    observers: crate::observe::Observers,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The pool's config holds the password: show only the size.
        f.debug_struct("PgStore").field("pool_max_size", &self.pool.status().max_size).finish()
    }
}

/// Splits sensorhub's own `pool_max_size` option off a connection URL.
fn pool_option(url: &str) -> StoreResult<(String, usize)> {
    let Some((base, query)) = url.split_once('?') else { return Ok((url.to_owned(), DEFAULT_POOL_SIZE)) };
    let mut size = DEFAULT_POOL_SIZE;
    let mut rest = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("pool_max_size", n)) => {
                size = n.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                    StoreError::Unsupported(format!("pool_max_size={n:?}: expected a number of connections ≥ 1"))
                })?;
            }
            _ => rest.push(pair),
        }
    }
    let url = if rest.is_empty() { base.to_owned() } else { format!("{base}?{}", rest.join("&")) };
    Ok((url, size))
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://user:pass@host:port/db?options`)
    /// and migrates it.
    pub async fn open(url: &str) -> StoreResult<Self> {
        Self::open_with(url, crate::OpenOptions::default()).await
    }

    /// [`PgStore::open`] with options.
    pub async fn open_with(url: &str, open: crate::OpenOptions) -> StoreResult<Self> {
        let (url, size) = pool_option(url)?;
        let mut config: tokio_postgres::Config = url.parse().map_err(|e: tokio_postgres::Error| {
            StoreError::Unsupported(format!("PostgreSQL URL {}: {e}", crate::redact_url(&url)))
        })?;
        let options = format!("{} {SESSION_OPTIONS}", config.get_options().unwrap_or_default());
        config.options(options.trim());
        let build = |size: usize, wait: u64| {
            let manager =
                Manager::from_config(config.clone(), NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
            Pool::builder(manager)
                .max_size(size)
                .runtime(deadpool_postgres::Runtime::Tokio1)
                .wait_timeout(Some(std::time::Duration::from_secs(wait)))
                .create_timeout(Some(std::time::Duration::from_secs(10)))
                .build()
                .map_err(|e| StoreError::Backend(Box::new(e)))
        };
        let pool = build(size, 30)?;
        let writers = std::sync::Arc::new(tokio::sync::Semaphore::new(WRITERS));
        let (group_pool, group_writers) = (pool.clone(), writers.clone());
        let group = crate::group::GroupCommit::start(move |readings| {
            let (pool, writers) = (group_pool.clone(), group_writers.clone());
            async move {
                let _writer = writer_place(&writers).await?;
                write::ingest_group(&mut pool.get().await?, &readings).await
            }
        });
        let observers = crate::observe::Observers::default();
        let store = Self { pool, ping: build(1, 5)?, writers, group, observers };
        store.migrate(open).await?;
        Ok(store)
    }

    /// A writer's place in this process, within [`WRITE_WAIT`].
    async fn writer(&self) -> StoreResult<tokio::sync::SemaphorePermit<'_>> {
        writer_place(&self.writers).await
    }

    /// Applies the migrations the database has not seen yet, under an
    /// advisory lock, in one transaction, then finishes any upgrade of
    /// stored readings.
    async fn migrate(&self, options: crate::OpenOptions) -> StoreResult<()> {
        let mut client = self.pool.get().await?;
        // Another instance may be migrating: wait for it however long it takes.
        client.batch_execute("SET lock_timeout = 0; SET statement_timeout = 0").await?;
        client.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK]).await?;
        let result = async {
            let tx = client.transaction().await?;
            crate::write::migrate::migrate(&tx::PgTx::new(&tx), MIGRATIONS).await?;
            tx.commit().await?;
            upgrade::run(&mut client, options.upgrade_batch_hours).await
        }
        .await;
        client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK]).await?;
        client.batch_execute("RESET lock_timeout; RESET statement_timeout").await?;
        result
    }
}

#[async_trait]
impl Store for PgStore {
    async fn ping(&self) -> StoreResult<()> {
        self.ping.get().await?.query_one("SELECT 1", &[]).await?;
        Ok(())
    }

    async fn access_generation(&self) -> StoreResult<i64> {
        read::access_generation(&self.pool.get().await?).await
    }

    async fn installation_id(&self) -> StoreResult<String> {
        read::installation_id(&self.pool.get().await?).await
    }

    async fn installation_fact(&self, key: &str) -> StoreResult<Option<String>> {
        read::installation_fact(&self.pool.get().await?, key).await
    }

    async fn record_installation_fact(&self, key: &str, value: &str) -> StoreResult<()> {
        let key = fact_key(key)?;
        self.pool
            .get()
            .await?
            .execute(
                "INSERT INTO installation (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = $2",
                &[&key, &value],
            )
            .await?;
        Ok(())
    }

    async fn account_auth(&self, username: &str) -> StoreResult<Option<AccountAuth>> {
        read::account_auth(&self.pool.get().await?, username).await
    }

    async fn api_key_auth(&self, digest: &KeyDigest) -> StoreResult<Option<ApiKeyAuth>> {
        read::api_key_auth(&self.pool.get().await?, digest).await
    }

    async fn webhook_key_auth(&self, digest: &KeyDigest) -> StoreResult<Option<WebhookKeyAuth>> {
        read::webhook_key_auth(&self.pool.get().await?, digest).await
    }

    fn pool_status(&self) -> PoolStatus {
        let s = self.pool.status();
        PoolStatus { max: s.max_size, in_use: s.size.saturating_sub(s.available), idle: s.available }
    }

    fn observe(&self, observer: std::sync::Arc<dyn crate::observe::AfterCommit>) {
        self.observers.add(observer);
    }

    async fn list_devices(&self, scope: Scope) -> StoreResult<Vec<Device>> {
        read::list_devices(&self.pool.get().await?, scope).await
    }

    async fn find_device(&self, scope: Scope, device_id: &str) -> StoreResult<Option<DeviceHandle>> {
        read::find_device(&self.pool.get().await?, scope, device_id).await
    }

    async fn may_write(&self, account_id: i64, device_pk: i64) -> StoreResult<bool> {
        read::may_write(&self.pool.get().await?, account_id, device_pk).await
    }

    async fn grant_write_to_viewers(&self) -> StoreResult<u64> {
        let _writer = self.writer().await?;
        write::grant_write_to_viewers(&mut self.pool.get().await?).await
    }

    async fn delete_readings(&self, device_id: &str, range: TimeRange) -> StoreResult<DeleteReport> {
        let _writer = self.writer().await?;
        write::delete_readings(&mut self.pool.get().await?, device_id, range).await
    }

    async fn expire_readings(&self, default: Retention, now: i64) -> StoreResult<RetentionReport> {
        let settings = retention::settings(&self.pool.get().await?).await?;
        crate::expire_in_steps(settings, default, now, |pk, cutoff| async move {
            let _writer = self.writer().await?;
            retention::expire_batch(&mut self.pool.get().await?, pk, cutoff).await
        })
        .await
    }

    async fn read_hours(&self, device_pk: i64, from: i64, to: i64, limit: usize) -> StoreResult<Vec<StoredHour>> {
        read::read_hours(&self.pool.get().await?, device_pk, from, to, limit).await
    }

    async fn latest(&self, scope: Scope, device_id: &str) -> StoreResult<Option<(DeviceHandle, Vec<LatestValue>)>> {
        latest::read(&self.pool.get().await?, scope, device_id).await
    }

    async fn add_hour_summaries(&self, batch: usize) -> StoreResult<u64> {
        let (mut after, mut total) = (None, 0);
        loop {
            let (next, rewritten) = {
                let _writer = self.writer().await?;
                write::add_hour_summaries(&mut self.pool.get().await?, after, batch).await?
            };
            total += rewritten;
            match next {
                Some(hour) => after = Some(hour),
                None => return Ok(total),
            }
            tokio::time::sleep(crate::IMPORT_PAUSE).await;
        }
    }

    fn read_readings(&self, device: &DeviceHandle, range: TimeRange) -> ReadingStream {
        stream_from(self.pool.clone(), device.pk, Some(range.start), range.end)
    }

    async fn read_window(&self, scope: Scope, device_id: &str, range: TimeRange) -> StoreResult<Option<Window>> {
        let client = self.pool.get().await?;
        let head = read::window_head(&client, scope, device_id, range.start, range.end, batches::FIRST_BATCH).await?;
        let Some((device, first)) = head else { return Ok(None) };
        drop(client);
        let (pool, pk) = (self.pool.clone(), device.pk);
        Ok(Some(Window::after_first(device, first, range.end, |next| stream_from(pool, pk, next, range.end))))
    }

    async fn apply_with_hooks(
        &self,
        doc: Provision,
        readings: Vec<ReadingInput>,
        hooks: Option<crate::hooks::ProvisionedHooks>,
    ) -> StoreResult<ApplyReport> {
        let apply = |readings| async move {
            let _writer = self.writer().await?;
            write::apply(&mut self.pool.get().await?, doc, readings, hooks).await
        };
        self.observers.all(readings, apply).await
    }

    async fn import(&self, source: ReadingSource, outbox: Outbox) -> StoreResult<ImportReport> {
        let import = |source| async move {
            let _writer = self.writer().await?;
            Ok(write::import(&mut self.pool.get().await?, source, None, outbox).await?.0)
        };
        self.observers.import(source, import).await
    }

    async fn ingest(&self, reading: ReadingInput) -> StoreResult<()> {
        self.observers.one(reading, |reading| self.group.write(reading)).await
    }

    async fn import_batched(&self, source: ReadingSource, outbox: Outbox) -> Result<ImportReport, PartialImport> {
        let steps = |source| {
            crate::import_in_steps(source, |source| async move {
                let _writer = self.writer().await?;
                write::import(&mut self.pool.get().await?, source, Some(IMPORT_COMMIT_EVERY), outbox).await
            })
        };
        self.observers.import_batched(source, steps).await
    }

    async fn is_empty(&self) -> StoreResult<bool> {
        read::is_empty(&self.pool.get().await?).await
    }

    async fn accounts(&self) -> StoreResult<Vec<AccountSummary>> {
        read::accounts(&self.pool.get().await?).await
    }

    async fn api_keys(&self) -> StoreResult<Vec<ApiKeySummary>> {
        read::api_keys(&self.pool.get().await?).await
    }

    async fn revoke_api_key(&self, id_or_prefix: &str) -> StoreResult<String> {
        let _writer = self.writer().await?;
        write::revoke_api_key(&mut self.pool.get().await?, id_or_prefix).await
    }

    async fn export(&self) -> StoreResult<Installation> {
        copy::export(&mut self.pool.get().await?).await
    }

    async fn export_hour_count(&self) -> StoreResult<u64> {
        copy::export_hour_count(&self.pool.get().await?).await
    }

    async fn export_hours(&self, device_id: &str, after: Option<i64>, limit: usize) -> StoreResult<Vec<StoredHour>> {
        copy::export_hours(&self.pool.get().await?, device_id, after, limit).await
    }

    async fn restore(&self, rows: Installation) -> StoreResult<()> {
        let _writer = self.writer().await?;
        copy::restore(&mut self.pool.get().await?, rows).await
    }

    async fn restore_hours(&self, device_id: &str, hours: Vec<StoredHour>) -> StoreResult<()> {
        let _writer = self.writer().await?;
        copy::restore_hours(&mut self.pool.get().await?, device_id, hours).await
    }

    async fn add_subscription(&self, sub: crate::hooks::NewSubscription) -> StoreResult<()> {
        let _writer = self.writer().await?;
        hooks::add(&mut self.pool.get().await?, sub).await
    }

    async fn subscriptions(&self) -> StoreResult<Vec<crate::hooks::Subscription>> {
        hooks::list(&self.pool.get().await?).await
    }

    async fn remove_subscription(&self, id: &str) -> StoreResult<()> {
        let _writer = self.writer().await?;
        hooks::remove(&mut self.pool.get().await?, id).await
    }

    async fn replace_subscription_secret(&self, id: &str, sealed_secret: Vec<u8>) -> StoreResult<()> {
        let _writer = self.writer().await?;
        hooks::set_secret(&mut self.pool.get().await?, id, &sealed_secret).await
    }

    async fn set_subscription_enabled(&self, id: &str, enabled: bool) -> StoreResult<()> {
        let _writer = self.writer().await?;
        hooks::set_enabled(&mut self.pool.get().await?, id, enabled).await
    }

    async fn claim_deliveries(&self, now: i64, lease: i64, req: &ClaimRequest) -> StoreResult<Claimed> {
        outbox::claim(&mut self.pool.get().await?, now, lease, req).await
    }

    async fn finish_deliveries(&self, now: i64, done: Vec<Finished>) -> StoreResult<()> {
        outbox::finish(&mut self.pool.get().await?, now, &done).await
    }

    async fn deliveries(&self, id: &str, failed_only: bool) -> StoreResult<Vec<DeliveryRecord>> {
        outbox::list(&self.pool.get().await?, id, failed_only).await
    }

    async fn replay_deliveries(&self, id: &str, which: Replay, now: i64) -> StoreResult<u64> {
        outbox::replay(&mut self.pool.get().await?, id, which, now).await
    }

    async fn outbox_backlog(&self) -> StoreResult<u64> {
        outbox::backlog(&self.pool.get().await?).await
    }

    async fn prune_failed_deliveries(&self, before: i64) -> StoreResult<u64> {
        outbox::prune_failed(&self.pool.get().await?, before).await
    }
}

/// Streams readings of `device_pk` from `next` to `end`, one pooled
/// connection per batch ([`crate::batches`]).
fn stream_from(pool: Pool, device_pk: i64, next: Option<i64>, end: i64) -> ReadingStream {
    batches::stream_from(next, end, batches::REMOTE_BATCH_READINGS, move |from, end, limit| {
        let pool = pool.clone();
        async move { read::read_batch(&pool.get().await?, device_pk, from, end, limit).await }
    })
}

#[cfg(test)]
mod tests {
    use super::pool_option;

    #[test]
    fn the_pool_size_is_taken_off_the_url() {
        let (url, n) = pool_option("postgres://u:p@h/db?pool_max_size=4&application_name=x").expect("ok");
        assert_eq!((url.as_str(), n), ("postgres://u:p@h/db?application_name=x", 4));
        let (url, n) = pool_option("postgres://h/db").expect("ok");
        assert_eq!((url.as_str(), n), ("postgres://h/db", super::DEFAULT_POOL_SIZE));
        assert!(pool_option("postgres://h/db?pool_max_size=0").is_err());
    }
}
