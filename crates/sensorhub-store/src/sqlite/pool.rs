//! A small pool of SQLite connections, each used on a blocking thread.
//!
//! Hand-written rather than deadpool-sqlite: that pool pings every
//! connection on each checkout (one more blocking hop per query) and pins the
//! rusqlite version; SQLite connections need no health check.

use crate::{StoreError, StoreResult};
use rusqlite::Connection;
use rusqlite::functions::FunctionFlags;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::sync::Semaphore;

/// Settings applied to every connection.
/// `busy_timeout` comes first: switching to WAL takes a lock that another
/// process may hold for a moment.
const PRAGMAS: &str = "PRAGMA busy_timeout = 10000;
PRAGMA journal_mode = WAL;
PRAGMA synchronous = NORMAL;
PRAGMA foreign_keys = ON;
PRAGMA cache_size = -128;";

/// A bounded set of connections to one database file.
#[derive(Clone)]
pub(crate) struct Pool {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    size: usize,
    idle: Mutex<Vec<Connection>>,
    permits: Arc<Semaphore>,
}

impl Pool {
    /// A pool of at most `size` connections to `path`.
    pub(crate) fn new(path: &Path, size: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                path: path.to_owned(),
                size,
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

    /// Runs `f` with a connection on a blocking thread.
    pub(crate) async fn run<R, F>(&self, f: F) -> StoreResult<R>
    where
        R: Send + 'static,
        F: FnOnce(&mut Connection) -> StoreResult<R> + Send + 'static,
    {
        let permit = self.inner.permits.clone().acquire_owned().await.map_err(|e| StoreError::Backend(Box::new(e)))?;
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let idle = inner.idle.lock().ok().and_then(|mut v| v.pop());
            let mut conn = match idle {
                Some(c) => c,
                None => open_connection(&inner.path)?,
            };
            let result = f(&mut conn);
            if let Ok(mut v) = inner.idle.lock() {
                v.push(conn);
            }
            drop(permit);
            result
        })
        .await
        .map_err(|e| StoreError::Backend(Box::new(e)))?
    }
}

impl Pool {
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
        let permit = self.inner.permits.clone().acquire_owned().await.map_err(|e| StoreError::Backend(Box::new(e)))?;
        let idle = self.inner.idle.lock().ok().and_then(|mut v| v.pop());
        let Some(mut conn) = idle else {
            drop(permit);
            return self.run(f).await;
        };
        // Never wait on a lock here: that would stall the runtime. A reader
        // meets one only in rare cases (WAL recovery, an exclusive lock taken
        // from outside); it is then retried where waiting is harmless.
        let _ = conn.busy_timeout(std::time::Duration::ZERO);
        let result = f(&mut conn);
        let _ = conn.busy_timeout(BUSY_TIMEOUT);
        if let Ok(mut v) = self.inner.idle.lock() {
            v.push(conn);
        }
        drop(permit);
        match result {
            Err(StoreError::Backend(e)) if is_busy(&*e) => self.run(f).await,
            other => other,
        }
    }
}

/// How long a statement waits for another connection's lock.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether an error is SQLite's "database is busy/locked".
fn is_busy(e: &(dyn std::error::Error + Send + Sync + 'static)) -> bool {
    matches!(
        e.downcast_ref::<rusqlite::Error>(),
        Some(rusqlite::Error::SqliteFailure(f, _))
            if matches!(f.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// Opens one connection with sensorhub's settings and SQL functions.
pub(crate) fn open_connection(path: &Path) -> StoreResult<Connection> {
    let conn = Connection::open(path)?;
    // Switching a new file to WAL takes a lock that does not wait on the busy
    // handler; when several processes open a new file at once, retry briefly.
    let mut tries = 0;
    loop {
        match conn.execute_batch(PRAGMAS) {
            Ok(()) => break,
            Err(rusqlite::Error::SqliteFailure(e, _)) if e.code == rusqlite::ErrorCode::DatabaseBusy && tries < 100 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) => return Err(e.into()),
        }
    }
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    conn.create_scalar_function("sh_last_second", 2, flags, |ctx| {
        let chunk: i64 = ctx.get(0)?;
        let data = ctx.get_raw(1).as_blob().map_err(|e| rusqlite::Error::UserFunctionError(Box::new(e)))?;
        Ok(crate::chunk::last_second(chunk, data))
    })?;
    Ok(conn)
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DiskFull) => {
                StoreError::Unavailable(format!("the database's disk is full ({e})"))
            }
            _ => StoreError::Backend(Box::new(e)),
        }
    }
}
