//! The `Store` trait, which speaks sensorhub's domain, and its backends.
//! The trait holds no SQL; each backend keeps its SQL in its own module.
#![forbid(unsafe_code)]

mod access_cache;
pub mod aggregate;
pub mod alarm;
mod batches;
mod chunk;
mod codec;
mod decide;
pub mod delivery;
mod group;
mod legacy;
pub mod observe;
pub mod postgres;
mod redact;
mod sql;
pub mod sqlite;
pub mod stats;
mod store;
mod stored_value;
mod types;
mod write;

pub use redact::redact_url;

pub use store::{Access, Alarms, Copying, Deliveries, Health, Provisioning, ReadingWrites, Reads, Store};

/// The `Store` traits, to call any capability on an `Arc<dyn Store>`.
pub mod prelude {
    pub use crate::store::{Access, Alarms, Copying, Deliveries, Health, Provisioning, ReadingWrites, Reads, Store};
}
pub use stored_value::StoredValue;
pub use types::*;

use futures_util::stream::BoxStream;
use sensorhub_core::model::ReadingInput;
use sensorhub_core::provision::InputError;
use sensorhub_core::retention::Retention;
use std::sync::Arc;

/// Errors of a store operation.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The input (provisioning file, import row, argument) is wrong; nothing was written.
    #[error("{0}")]
    Invalid(#[from] InputError),
    /// The named thing does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The operation clashes with what is stored.
    #[error("{0}")]
    Conflict(String),
    /// The database URL names a backend this build cannot use.
    #[error("{0}")]
    Unsupported(String),
    /// The database cannot take this work now but may later (its disk is
    /// full); nothing was written.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// Other writes held the database for longer than a write may wait
    /// (or a statement ran past its time limit); nothing was written, and
    /// the same request may be retried.
    #[error("database busy: {0}")]
    Busy(String),
    /// The database failed.
    #[error("database error: {0}")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A write asked to be made only at generations the store has moved
    /// past ([`crate::store::ReadingWrites::ingest_at`]): what its caller
    /// decided from an answer kept at them (a webhook key, a device's
    /// write permission) must be decided again. Nothing was written.
    #[error("access or devices changed since the answer this write was decided on")]
    Stale,
}

impl StoreError {
    /// The same error again, for telling several callers of one failed
    /// operation (a group commit) what happened; a backend's error is kept
    /// as its text.
    pub fn duplicate(&self) -> StoreError {
        match self {
            StoreError::Invalid(e) => StoreError::Invalid(e.clone()),
            StoreError::NotFound(s) => StoreError::NotFound(s.clone()),
            StoreError::Conflict(s) => StoreError::Conflict(s.clone()),
            StoreError::Unsupported(s) => StoreError::Unsupported(s.clone()),
            StoreError::Unavailable(s) => StoreError::Unavailable(s.clone()),
            StoreError::Busy(s) => StoreError::Busy(s.clone()),
            StoreError::Stale => StoreError::Stale,
            StoreError::Backend(e) => {
                // With its causes: a PostgreSQL error says only "db error" itself.
                let mut said = e.to_string();
                let mut cause = e.source();
                while let Some(c) = cause {
                    said = format!("{said}: {c}");
                    cause = c.source();
                }
                StoreError::Backend(said.into())
            }
        }
    }

    /// Of the errors of statements sent together in one transaction
    /// (`first`, then the others'), the one to report: one failing aborts
    /// the transaction and the others then fail with its echo ("current
    /// transaction is aborted"), in whatever order their answers are
    /// polled. A lock or a statement that ran out of time (Busy) is the
    /// cause wherever it is; else `first`.
    pub(crate) fn cause(first: StoreError, others: impl IntoIterator<Item = StoreError>) -> StoreError {
        if matches!(first, StoreError::Busy(_)) {
            return first;
        }
        others.into_iter().find(|e| matches!(e, StoreError::Busy(_))).unwrap_or(first)
    }
}

/// Result of a store operation.
pub type StoreResult<T> = Result<T, StoreError>;

/// Refuses a database whose schema `version` is newer than the `known`
/// migrations of this build: an older sensorhub never writes to it.
pub(crate) fn check_schema_version(version: usize, known: usize) -> StoreResult<()> {
    if version > known {
        return Err(StoreError::Conflict(format!(
            "the database has schema version {version}, newer than this sensorhub knows ({known}); upgrade sensorhub"
        )));
    }
    Ok(())
}

/// How long one transaction of a batched import writes before it commits.
pub const IMPORT_COMMIT_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// The pause after each commit of a batched import: other writers' turn.
pub const IMPORT_PAUSE: std::time::Duration = std::time::Duration::from_millis(5);

/// One retention pass over `settings` (each device with its own and its
/// owner's stored retention), shared by the backends: `batch(pk, cutoff)`
/// runs one transaction of a device's expiry and says whether the device
/// is done; between transactions other writers get [`IMPORT_PAUSE`].
pub(crate) async fn expire_in_steps<F, Fut>(
    settings: Vec<decide::RetentionSettings>,
    default: Retention,
    now: i64,
    mut batch: F,
) -> StoreResult<RetentionReport>
where
    F: FnMut(i64, i64) -> Fut,
    Fut: std::future::Future<Output = StoreResult<(RetentionReport, bool)>>,
{
    let mut total = RetentionReport::default();
    for (pk, device, owner) in settings {
        let Some(cutoff) = decide::retention_cutoff(device, owner, default, now) else { continue };
        let mut this = RetentionReport::default();
        loop {
            let (report, done) = batch(pk, cutoff).await?;
            this.add(&report);
            if done {
                break;
            }
            tokio::time::sleep(IMPORT_PAUSE).await;
        }
        this.devices = u64::from(!this.is_empty());
        total.add(&this);
    }
    Ok(total)
}

/// A batched import that an error stopped: what was committed before it.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct PartialImport {
    /// Readings committed (and kept) before the error.
    pub committed: ImportReport,
    /// What stopped the import.
    #[source]
    pub error: StoreError,
}

/// Readings of one device, in ascending time order, in batches.
pub type ReadingStream = BoxStream<'static, StoreResult<ReadingBatch>>;

/// Readings to import, parsed lazily so that a large file is never held in memory.
pub type ReadingSource = Box<dyn Iterator<Item = Result<ReadingInput, InputError>> + Send>;

impl Window {
    /// The window of `device` whose first batch (of at most
    /// [`batches::FIRST_BATCH`]) is `first`; `rest(next)` streams the
    /// readings from second `next` on, when the first batch was full.
    pub(crate) fn after_first(
        device: DeviceHandle,
        first: ReadingBatch,
        end: i64,
        rest: impl FnOnce(Option<i64>) -> ReadingStream,
    ) -> Self {
        let next = batches::after(&first, end, batches::FIRST_BATCH);
        Window { device, first, rest: rest(next), complete: next.is_none() }
    }
}

/// A device's readings in a range: the first batch, read, and the rest.
pub struct Window {
    /// The device.
    pub device: DeviceHandle,
    /// The first readings (empty when there are none).
    pub first: ReadingBatch,
    /// The readings after `first`.
    pub rest: ReadingStream,
    /// Whether `first` holds every reading of the range (`rest` is empty).
    pub complete: bool,
}

/// A batched import, the same loop on every backend: `step` stores one
/// transaction's worth of `source` and hands back the rest while there may
/// be more; between two steps other writers get [`IMPORT_PAUSE`].
pub(crate) async fn import_in_steps<F, Fut>(source: ReadingSource, mut step: F) -> Result<ImportReport, PartialImport>
where
    F: FnMut(ReadingSource) -> Fut,
    Fut: std::future::Future<Output = StoreResult<(ImportReport, Option<ReadingSource>)>>,
{
    let mut committed = ImportReport::default();
    let mut next = Some(source);
    while let Some(source) = next.take() {
        let (report, rest) = step(source).await.map_err(|error| PartialImport { committed, error })?;
        committed += report;
        if rest.is_some() {
            tokio::time::sleep(IMPORT_PAUSE).await;
        }
        next = rest;
    }
    Ok(committed)
}

/// Runs `source` on a thread of its own, up to a few thousand readings ahead
/// of the consumer, so that parsing a file and writing it use two cores.
/// The first error ends the source, as it would unread; if the reading
/// thread dies, the consumer gets an error rather than a short input.
pub fn read_ahead(source: ReadingSource) -> ReadingSource {
    const CHUNK: usize = 1024;
    /// What the reading thread sends: readings, then `None` at the end.
    type Message = Option<Vec<Result<ReadingInput, InputError>>>;
    let (tx, rx) = std::sync::mpsc::sync_channel::<Message>(4);
    std::thread::spawn(move || {
        let mut chunk = Vec::with_capacity(CHUNK);
        for item in source {
            let failed = item.is_err();
            chunk.push(item);
            if chunk.len() == CHUNK || failed {
                // A closed channel means the consumer stopped: stop too.
                if tx.send(Some(std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK)))).is_err() {
                    return;
                }
                if failed {
                    let _ = tx.send(None);
                    return;
                }
            }
        }
        let _ = tx.send(Some(chunk));
        let _ = tx.send(None);
    });
    let mut finished = false;
    let items = std::iter::from_fn(move || {
        if finished {
            return None;
        }
        match rx.recv() {
            Ok(Some(chunk)) => Some(chunk),
            Ok(None) => {
                finished = true;
                None
            }
            // The reading thread ended without saying so: it panicked.
            Err(_) => {
                finished = true;
                Some(vec![Err(InputError::new("input", "reading the input failed unexpectedly"))])
            }
        }
    });
    Box::new(items.flatten())
}

/// The stored hour format, open to the benchmark's codec comparison
/// (`bench/src/codecs.rs`); the store itself goes through [`Store`].
pub mod format {
    /// The stored form of one hour of a device's readings: each reading its
    /// second within the hour (ascending, below 3600) and its (sensor idx,
    /// value) pairs.
    pub fn encode_hour(readings: &[(u16, Vec<(u8, f64)>)]) -> Vec<u8> {
        let rows: Vec<crate::chunk::Row> = readings
            .iter()
            .map(|(t, pairs)| {
                let mut pairs = pairs.clone();
                crate::chunk::normalize(&mut pairs);
                (*t, pairs)
            })
            .collect();
        crate::chunk::encode(&rows)
    }

    /// A stored hour without its summaries (the format written before
    /// them), for tests and the codec comparison; `None` if malformed.
    pub fn without_summaries(data: &[u8]) -> Option<Vec<u8>> {
        crate::stats::body(data).map(<[u8]>::to_vec)
    }

    /// Decodes a stored hour as a window read does; `None` if malformed.
    pub fn decode_hour(data: &[u8]) -> Option<crate::ReadingBatch> {
        let mut batch = crate::ReadingBatch::default();
        crate::chunk::decode_into(0, data, 0, crate::chunk::CHUNK_SECONDS, &mut batch, usize::MAX)?;
        Some(batch)
    }
}

/// Hours of readings an upgrade converts per transaction, by default.
pub const UPGRADE_BATCH_HOURS: usize = 1024;

/// How a store is opened.
#[derive(Debug, Clone, Copy)]
pub struct OpenOptions {
    /// Hours of readings converted per transaction when the stored format
    /// is upgraded on open (each batch commits on its own, so a killed
    /// upgrade resumes at the next open).
    pub upgrade_batch_hours: usize,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self { upgrade_batch_hours: UPGRADE_BATCH_HOURS }
    }
}

/// `key` as an installation fact's key: anything but `id`, which the
/// installation's random id holds for good.
pub(crate) fn fact_key(key: &str) -> StoreResult<String> {
    if key == "id" {
        return Err(StoreError::Conflict("the installation id is made once and never replaced".into()));
    }
    Ok(key.to_owned())
}

/// Opens the store named by `url`: a file path or `sqlite://PATH` (created
/// when missing; `?synchronous=normal` trades durability on power loss for
/// cheaper commits), or `postgres://…` (the database must exist). Either is
/// migrated on open, and readings stored by an older schema are upgraded.
pub async fn open(url: &str) -> StoreResult<Arc<dyn Store>> {
    open_with(url, OpenOptions::default()).await
}

/// [`open`] with options.
pub async fn open_with(url: &str, options: OpenOptions) -> StoreResult<Arc<dyn Store>> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(Arc::new(postgres::PgStore::open_with(url, options).await?));
    }
    let (path, durability) = sqlite_target(url)?;
    Ok(Arc::new(sqlite::SqliteStore::open_with(path, durability, options).await?))
}

/// The file a SQLite database `url` names (`None` for PostgreSQL or a URL
/// that is not a database's).
pub fn sqlite_file(url: &str) -> Option<&str> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return None;
    }
    sqlite_target(url).ok().map(|(path, _)| path)
}

/// The file and durability a SQLite `url` names (a path or `sqlite://…`,
/// with at most the option `?synchronous=full|normal`).
fn sqlite_target(url: &str) -> StoreResult<(&str, sqlite::Durability)> {
    let path = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:")).unwrap_or(url);
    let (path, durability) = match path.split_once('?') {
        None => (path, sqlite::Durability::Full),
        Some((path, "synchronous=full")) => (path, sqlite::Durability::Full),
        Some((path, "synchronous=normal")) => (path, sqlite::Durability::Normal),
        Some(_) => ("", sqlite::Durability::Full),
    };
    if path.is_empty() || path.contains("://") || path.contains(":memory:") {
        return Err(StoreError::Unsupported(format!(
            "unsupported database {:?}: use a SQLite file path, a sqlite:// URL (no in-memory database; the one \
             option is ?synchronous=full or ?synchronous=normal) or a postgres:// URL",
            redact_url(url)
        )));
    }
    Ok((path, durability))
}

#[cfg(test)]
mod tests {
    use super::{InputError, ReadingInput, read_ahead};
    use sensorhub_core::model::Origin;

    fn reading(ts: i64) -> ReadingInput {
        ReadingInput { device_id: "D".into(), timestamp: ts, values: vec![], origin: Origin::Item("t".into()) }
    }

    #[test]
    fn a_timeout_is_the_cause_of_the_errors_sent_with_it() {
        use super::StoreError::{Backend, Busy};
        let echo = || Backend("current transaction is aborted".into());
        let cause = |first, others: Vec<_>| super::StoreError::cause(first, others).to_string();
        assert_eq!(cause(echo(), vec![Busy("lock timeout".into()), echo()]), "database busy: lock timeout");
        assert_eq!(cause(Busy("statement timeout".into()), vec![echo()]), "database busy: statement timeout");
        assert_eq!(cause(Backend("disk".into()), vec![echo()]), "database error: disk", "else the first");
    }

    #[test]
    fn reading_ahead_keeps_order_and_errors() {
        let source = (0..5000).map(|i| if i == 4000 { Err(InputError::new("x", "bad")) } else { Ok(reading(i)) });
        let got: Vec<_> = read_ahead(Box::new(source)).collect();
        assert_eq!(got.len(), 4001, "stops after the first error");
        assert!(got[..4000].iter().enumerate().all(|(i, r)| r.as_ref().is_ok_and(|r| r.timestamp == i as i64)));
        assert!(got[4000].is_err());
    }

    #[test]
    fn a_dying_reader_is_an_error_not_an_end() {
        let source = (0..10).map(|i| if i == 5 { panic!("parser bug") } else { Ok(reading(i)) });
        let got: Vec<_> = read_ahead(Box::new(source)).collect();
        assert!(got.last().is_some_and(Result::is_err), "{} items", got.len());
    }

    #[test]
    fn sqlite_urls_name_a_file_and_its_durability() {
        use super::sqlite::Durability::{Full, Normal};
        assert_eq!(super::sqlite_target("./a.db").ok(), Some(("./a.db", Full)), "durable by default");
        assert_eq!(super::sqlite_target("sqlite://a.db?synchronous=normal").ok(), Some(("a.db", Normal)));
        assert_eq!(super::sqlite_target("sqlite:///x/a.db?synchronous=full").ok(), Some(("/x/a.db", Full)));
        for bad in ["a.db?cache=shared", "sqlite::memory:", "", "sqlite://?synchronous=normal"] {
            assert!(super::sqlite_target(bad).is_err(), "{bad}");
        }
    }
}
