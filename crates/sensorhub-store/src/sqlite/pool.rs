//! The SQLite backend's connections: a pool for reads and one for writes,
//! each connection used on a blocking thread (or the group committer's
//! own, [`Pool::run_here`]), so that a write waiting for
//! the database's single write lock (held by another process's import, say)
//! never holds a reader's place. Writes wait a bounded time ([`WRITE_WAIT`])
//! for their turn and then fail with [`StoreError::Busy`].
//!
//! Hand-written rather than deadpool-sqlite: that pool pings every
//! connection on each checkout (one more blocking hop per query) and pins the
//! rusqlite version; SQLite connections need no health check.

use crate::{StoreError, StoreResult};
use rusqlite::Connection;
use rusqlite::functions::FunctionFlags;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;

/// How long a write waits for its turn: for this process's other writes
/// (the write connection) and then for the file's write lock. Past it the
/// write fails with [`StoreError::Busy`] (503 with `Retry-After`).
pub(crate) const WRITE_WAIT: Duration = Duration::from_secs(5);

/// How long a read waits for a lock (only in rare cases: WAL recovery, an
/// exclusive lock taken from outside).
const READ_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings applied to every connection (the busy handling is set per role).
/// `busy_timeout` comes first: switching to WAL takes a lock that another
/// process may hold for a moment.
const PRAGMAS: &str = "PRAGMA busy_timeout = 10000;
PRAGMA journal_mode = WAL;
PRAGMA foreign_keys = ON;
PRAGMA cache_size = -128;";

/// The write connection's page cache, in KiB (as `PRAGMA cache_size` takes
/// it, negated). A write touches the `latest` entries, alarm states, chunk
/// index and outbox of every device in its transaction: with the readers'
/// 128 KiB those pages are read back from the OS for each transaction. There
/// is one write connection per database file, so this bounds the extra
/// memory; it survives between transactions because no other connection of
/// this process writes (in WAL mode SQLite keeps a connection's cache while
/// the file is unchanged by others).
const WRITE_CACHE_KIB: i64 = 8192;

/// The write connection's cache of prepared statements. Readings, their
/// outbox log, alarms and the delivery worker's claims and records all
/// write on this one connection, more distinct statements between them than
/// rusqlite's default of 16: past it each would be parsed again in turn.
const WRITE_STATEMENTS: usize = 64;

/// What the connections of a pool are for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Role {
    /// Reads: never wait on writers (WAL), so several run side by side.
    Read,
    /// Writes: one at a time, waiting at most [`WRITE_WAIT`].
    Write,
}

/// A bounded set of connections to one database file.
#[derive(Clone)]
pub(crate) struct Pool {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    size: usize,
    role: Role,
    /// `synchronous` for this file (`FULL` or `NORMAL`).
    synchronous: &'static str,
    idle: Mutex<Vec<Connection>>,
    permits: Arc<Semaphore>,
}

impl Pool {
    /// A pool of at most `size` connections to `path` for `role`.
    pub(crate) fn new(path: &Path, size: usize, role: Role, synchronous: &'static str) -> Self {
        Self {
            inner: Arc::new(Inner {
                path: path.to_owned(),
                size,
                role,
                synchronous,
                idle: Mutex::new(Vec::with_capacity(size)),
                permits: Arc::new(Semaphore::new(size)),
            }),
        }
    }

    /// Connections in use and idle.
    pub(crate) fn status(&self) -> crate::PoolStatus {
        let in_use = self.inner.size - self.inner.permits.available_permits();
        let idle = self.inner.idle.lock().map(|v| v.len()).unwrap_or(0);
        crate::PoolStatus { max: self.inner.size, in_use, idle }
    }

    /// A place in the pool: at once for reads, within [`WRITE_WAIT`] for writes.
    async fn permit(&self) -> StoreResult<tokio::sync::OwnedSemaphorePermit> {
        let acquire = self.inner.permits.clone().acquire_owned();
        let permit = match self.inner.role {
            Role::Read => acquire.await,
            Role::Write => tokio::time::timeout(WRITE_WAIT, acquire).await.map_err(|_| {
                StoreError::Busy(format!("other writes held the database for {} s", WRITE_WAIT.as_secs()))
            })?,
        };
        permit.map_err(|e| StoreError::Backend(Box::new(e)))
    }

    /// Runs `f` with a connection on a blocking thread.
    pub(crate) async fn run<R, F>(&self, f: F) -> StoreResult<R>
    where
        R: Send + 'static,
        F: FnOnce(&mut Connection) -> StoreResult<R> + Send + 'static,
    {
        let permit = self.permit().await?;
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let idle = inner.idle.lock().ok().and_then(|mut v| v.pop());
            let mut conn = match idle {
                Some(c) => c,
                None => open_connection(&inner.path, inner.role, inner.synchronous)?,
            };
            let result = f(&mut conn);
            inner.put_back(conn);
            drop(permit);
            result
        })
        .await
        .map_err(|e| StoreError::Backend(Box::new(e)))?
    }

    /// Runs `f` with a connection right on the calling thread, which may
    /// block: for a thread of the store's own that does nothing else (the
    /// group committer, [`crate::group`]).
    pub(crate) async fn run_here<R>(&self, f: impl FnOnce(&mut Connection) -> StoreResult<R>) -> StoreResult<R> {
        let _permit = self.permit().await?;
        let idle = self.inner.idle.lock().ok().and_then(|mut v| v.pop());
        let mut conn = match idle {
            Some(c) => c,
            None => open_connection(&self.inner.path, self.inner.role, self.inner.synchronous)?,
        };
        let result = f(&mut conn);
        self.inner.put_back(conn);
        result
    }

    /// Runs a short read (an indexed lookup, or one bounded batch) with an
    /// idle connection right on the calling thread: a hop to the blocking
    /// pool costs more than such a query. Reads in WAL mode do not wait on
    /// writers, so this does not stall the runtime; with no idle connection
    /// (one must be opened), it falls back to [`Pool::run`].
    pub(crate) async fn run_short<R, F>(&self, f: F) -> StoreResult<R>
    where
        R: Send + 'static,
        F: Fn(&mut Connection) -> StoreResult<R> + Send + 'static,
    {
        let permit = self.permit().await?;
        let idle = self.inner.idle.lock().ok().and_then(|mut v| v.pop());
        let Some(mut conn) = idle else {
            drop(permit);
            return self.run(move |c| in_read_tx(c, f)).await;
        };
        // Never wait on a lock here: that would stall the runtime. A reader
        // meets one only in rare cases (WAL recovery, an exclusive lock taken
        // from outside); it is then retried where waiting is harmless.
        let _ = conn.busy_timeout(Duration::ZERO);
        let result = in_read_tx(&mut conn, &f);
        let _ = conn.busy_timeout(READ_BUSY_TIMEOUT);
        self.inner.put_back(conn);
        drop(permit);
        match result {
            Err(StoreError::Busy(_)) => self.run(move |c| in_read_tx(c, f)).await,
            other => other,
        }
    }
}

impl Inner {
    /// Returns `conn` to the idle connections, unless a transaction is
    /// still open on it (one whose end failed): that one is closed, so that
    /// no later read runs in its old snapshot or pins the WAL.
    fn put_back(&self, conn: Connection) {
        if !conn.is_autocommit() {
            tracing::warn!("a database connection was left in a transaction; closing it");
            return;
        }
        if let Ok(mut v) = self.idle.lock() {
            v.push(conn);
        }
    }
}

/// Runs `f` in one read transaction: its statements read one snapshot,
/// and the WAL's read lock (a lock of the `-shm` file, a system call each
/// way under a mutex that the process's connections share) is taken once
/// rather than once for each statement. A transaction that does not end
/// is left open for [`Inner::put_back`] to close the connection.
fn in_read_tx<R>(conn: &mut Connection, f: impl FnOnce(&mut Connection) -> StoreResult<R>) -> StoreResult<R> {
    conn.prepare_cached("BEGIN")?.execute([])?;
    let result = f(conn);
    if conn.is_autocommit() {
        return result;
    }
    // A read has no write to undo: COMMIT only lets go of the snapshot.
    match conn.prepare_cached("COMMIT").and_then(|mut s| s.execute([])) {
        Ok(_) => result,
        Err(e) => {
            if conn.execute_batch("ROLLBACK").is_err() {
                tracing::warn!(error = %e, "a read transaction would not end");
            }
            result.and(Err(e.into()))
        }
    }
}

/// The write connection's busy handler: polls the lock every millisecond
/// (SQLite's default backs off to 100 ms, so it would miss the short gaps
/// a batched import leaves between its transactions) for at most
/// [`WRITE_WAIT`].
fn poll_for_write_lock(attempts: i32) -> bool {
    if u128::try_from(attempts).unwrap_or(u128::MAX) >= WRITE_WAIT.as_millis() {
        return false;
    }
    std::thread::sleep(Duration::from_millis(1));
    true
}

/// Opens one connection with sensorhub's settings and SQL functions.
pub(crate) fn open_connection(path: &Path, role: Role, synchronous: &str) -> StoreResult<Connection> {
    let new_file = std::fs::metadata(path).map_or(true, |m| m.len() == 0);
    let conn = Connection::open(path)?;
    if new_file {
        // Before the file turns to WAL and has tables: pages that retention
        // frees are then returned by `PRAGMA incremental_vacuum`. (On a file
        // with tables the pragma changes nothing but would wait for the
        // write lock.)
        conn.execute_batch("PRAGMA auto_vacuum = INCREMENTAL")?;
    }
    // Switching a new file to WAL takes a lock that does not wait on the busy
    // handler; when several processes open a new file at once, retry briefly.
    let mut tries = 0;
    loop {
        match conn.execute_batch(PRAGMAS) {
            Ok(()) => break,
            Err(rusqlite::Error::SqliteFailure(e, _)) if e.code == rusqlite::ErrorCode::DatabaseBusy && tries < 100 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(e.into()),
        }
    }
    conn.pragma_update(None, "synchronous", synchronous)?;
    // The query planner's stability guarantee: a plan does not depend on
    // the values bound to it. Without it SQLite re-prepares a statement
    // whose `LIMIT ?` (or STAT4 range) it read at prepare time whenever a
    // new value is bound: a tenth of a cached day window's CPU.
    conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    match role {
        Role::Read => conn.busy_timeout(READ_BUSY_TIMEOUT)?,
        Role::Write => {
            conn.busy_handler(Some(poll_for_write_lock))?;
            conn.pragma_update(None, "cache_size", -WRITE_CACHE_KIB)?;
            conn.set_prepared_statement_cache_capacity(WRITE_STATEMENTS);
        }
    }
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    conn.create_scalar_function("sh_last_second", 2, flags, |ctx| {
        let chunk = super::key_chunk(ctx.get(0)?);
        let data = ctx.get_raw(1).as_blob().map_err(|e| rusqlite::Error::UserFunctionError(Box::new(e)))?;
        Ok(crate::chunk::last_second(chunk, data))
    })?;
    conn.create_scalar_function("sh_message_id", 4, flags, |ctx| {
        let key: String = ctx.get(0)?;
        Ok(super::outbox_log::message_id(&key, ctx.get(1)?, ctx.get(2)?, ctx.get(3)?))
    })?;
    Ok(conn)
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DiskFull) => {
                StoreError::Unavailable(format!("the database's disk is full ({e})"))
            }
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
                StoreError::Busy(format!("another writer holds the database ({e})"))
            }
            _ => StoreError::Backend(Box::new(e)),
        }
    }
}
