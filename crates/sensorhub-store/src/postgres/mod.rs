//! The PostgreSQL backend: tokio-postgres over a deadpool pool, migrations
//! from `migrations/postgres/` applied on open. It stores the same rows as
//! the SQLite backend (readings packed one row per device and hour) and
//! shares its decisions (`decide`), so answers are the same byte for
//! byte. Several sensorhub processes may share one database.

mod ahead;
mod alarms;
mod copy;
mod latest;
mod on;
mod outbox;
mod outbox_log;
mod read;
mod tx;
mod upgrade;
mod vacuum;
mod write;

use crate::sql::access;
use crate::{PoolStatus, StoreError, StoreResult, fact_key};
use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
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
    include_str!("../../migrations/postgres/0009_alarms.sql"),
    include_str!("../../migrations/postgres/0010_alarm_state_writes.sql"),
    include_str!("../../migrations/postgres/0011_device_generation.sql"),
    include_str!("../../migrations/postgres/0012_alarm_checkpoints.sql"),
    include_str!("../../migrations/postgres/0013_write_generation.sql"),
    include_str!("../../migrations/postgres/0014_key_list_changed.sql"),
    include_str!("../../migrations/postgres/0015_webhook_key_changed.sql"),
    include_str!("../../migrations/postgres/0016_outbox_due_order.sql"),
    include_str!("../../migrations/postgres/0017_outbox_log.sql"),
    include_str!("../../migrations/postgres/0018_outbox_pending.sql"),
    include_str!("../../migrations/postgres/0019_outbox_subscription_dropped.sql"),
    include_str!("../../migrations/postgres/0020_outbox_log_subscription_numbers.sql"),
    include_str!("../../migrations/postgres/0021_outbox_leased_until.sql"),
    include_str!("../../migrations/postgres/0022_outbox_log_groups.sql"),
    include_str!("../../migrations/postgres/0023_subscription_generation.sql"),
    include_str!("../../migrations/postgres/0024_outbox_log_lz4.sql"),
    include_str!("../../migrations/postgres/0025_outbox_log_seed.sql"),
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
    /// One connection of its own for sensorhub's own vacuum (made at its
    /// first vacuum, where autovacuum is off), so that a paced vacuum of a
    /// large table does not hold one of the requests' for minutes.
    vacuum: Pool,
    /// Places for this process's writers ([`WRITERS`]).
    writers: std::sync::Arc<tokio::sync::Semaphore>,
    /// Single readings, committed in groups.
    group: crate::group::GroupCommit,
    /// Writes of readings under way (see [`crate::store::ReadingWrites::ingest_waiting`]).
    ingest_waiting: crate::group::IngestWaiting,
    /// Told of committed readings.
    observers: std::sync::Arc<crate::observe::Observers>,
    /// The devices and their alarm rules and states, kept between write transactions.
    kept: std::sync::Arc<crate::write::Kept>,
    /// Where the outbox log ends, as this process's last writer left it.
    tail: std::sync::Arc<outbox_log::KnownTail>,
    /// Webhook callers' devices and write permissions, kept between requests.
    write_targets: crate::access_cache::WriteTargets,
    /// Raw windows' devices, kept between requests.
    visible: crate::access_cache::VisibleDevices,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The pool's config holds the password: show only the size.
        f.debug_struct("PgStore").field("pool_max_size", &self.pool.status().max_size).finish()
    }
}

/// `id`, a name a caller gave (a device, a user, an alarm rule), as
/// PostgreSQL's `text` can hold it: a NUL, which `text` refuses with an
/// error, becomes U+0001. No stored name holds a control character
/// ([`sensorhub_core::model::is_valid_identifier`]), so the look-up finds
/// nothing, as SQLite's does, rather than failing the request.
pub(super) fn lookup_name(id: &str) -> std::borrow::Cow<'_, str> {
    if id.contains('\0') { id.replace('\0', "\u{1}").into() } else { id.into() }
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
        let build = |config: &tokio_postgres::Config, size: usize, wait: u64| {
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
        let pool = build(&config, size, 30)?;
        let writers = std::sync::Arc::new(tokio::sync::Semaphore::new(WRITERS));
        let observers = std::sync::Arc::new(crate::observe::Observers::default());
        let kept = std::sync::Arc::new(crate::write::Kept::default());
        // Groups of single readings are written on a thread of their own,
        // over one connection of their own (not counted in `pool_max_size`),
        // driven on that thread: on the server's shared runtime each of a
        // group's round trips also waited for the connection's task and the
        // writer's to be woken on other worker threads, about half a
        // millisecond each under load (issue 27).
        let tail = std::sync::Arc::new(outbox_log::KnownTail::default());
        let (own, group_writers, group_kept, group_tail) =
            (config.clone(), writers.clone(), kept.clone(), tail.clone());
        let group = crate::group::GroupCommit::start("sensorhub-pg-group", true, observers.clone(), move || {
            let pool = build(&own, 1, 30)?;
            Ok(async move |group: &mut crate::group::Gather<'_>| {
                let _writer = writer_place(&group_writers).await?;
                write::ingest_group(pool.get().await?, group, &group_kept, &group_tail).await
            })
        })?;
        let write_targets = Default::default();
        let visible = Default::default();
        let ping = build(&config, 1, 5)?;
        let mut own = config.clone();
        own.application_name(format!("{} (vacuum)", config.get_application_name().unwrap_or("sensorhub")));
        let vacuum = build(&own, 1, 30)?;
        let ingest_waiting = Default::default();
        let store =
            Self { pool, ping, vacuum, writers, group, ingest_waiting, observers, kept, tail, write_targets, visible };
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
            crate::write::migrate::migrate(&tx::PgTx::new(&tx, None), MIGRATIONS).await?;
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
impl crate::store::Health for PgStore {
    async fn ping(&self) -> StoreResult<()> {
        self.ping.get().await?.query_one("SELECT 1", &[]).await?;
        Ok(())
    }

    fn pool_status(&self) -> PoolStatus {
        let s = self.pool.status();
        PoolStatus { max: s.max_size, in_use: s.size.saturating_sub(s.available), idle: s.available }
    }

    fn kept_bytes(&self) -> usize {
        self.kept.hours.held()
    }

    async fn installation_id(&self) -> StoreResult<String> {
        self.on(async |c| access::installation_id(c).await).await
    }

    async fn installation_fact(&self, key: &str) -> StoreResult<Option<String>> {
        self.on(async |c| access::installation_fact(c, key).await).await
    }

    async fn record_installation_fact(&self, key: &str, value: &str) -> StoreResult<()> {
        let key = fact_key(key)?;
        self.on(async |c| access::record_installation_fact(c, &key, value).await).await
    }

    async fn vacuum_when_autovacuum_is_off(&self) -> StoreResult<Option<crate::VacuumPass>> {
        PgStore::vacuum_when_autovacuum_is_off(self).await
    }
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
