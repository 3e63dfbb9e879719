//! The `Store` trait, which speaks sensorhub's domain, and its backends.
//! The trait holds no SQL; each backend keeps its SQL in its own module.
#![forbid(unsafe_code)]

pub mod aggregate;
mod batches;
mod chunk;
mod codec;
mod decide;
mod group;
pub mod hooks;
mod legacy;
pub mod postgres;
pub mod sqlite;
pub mod stats;
mod types;
mod write;

pub use types::*;

use async_trait::async_trait;
use futures_util::stream::BoxStream;
use sensorhub_core::model::{Device, ReadingInput};
use sensorhub_core::provision::{InputError, Provision};
use sensorhub_core::retention::Retention;
use sensorhub_core::secret::KeyDigest;
use sensorhub_core::time::TimeRange;
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
            StoreError::Backend(e) => StoreError::Backend(e.to_string().into()),
        }
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

/// Everything sensorhub keeps: accounts, keys, devices, sensors, readings.
#[async_trait]
pub trait Store: Send + Sync {
    /// Checks that the database answers (readiness).
    async fn ping(&self) -> StoreResult<()>;

    /// A number that grows with every change that may take access away (a
    /// password changed, an account disabled, a key revoked or narrowed, a
    /// device taken from an account or a key), whoever made it: long-lived
    /// things (open streams) read it often and check their caller again
    /// when it moved. One row, read without waiting on writers.
    async fn access_generation(&self) -> StoreResult<i64>;

    /// This installation's random id (32 hex digits), made with the schema.
    async fn installation_id(&self) -> StoreResult<String>;

    /// A fact recorded about this installation under `key` (something done
    /// once, such as draining the MQTT session of an earlier version).
    async fn installation_fact(&self, key: &str) -> StoreResult<Option<String>>;

    /// Records `value` under `key` (replacing what was there); `id` is not
    /// a key it takes.
    async fn record_installation_fact(&self, key: &str, value: &str) -> StoreResult<()>;

    /// The credentials of `username`, for HTTP Basic.
    async fn account_auth(&self, username: &str) -> StoreResult<Option<AccountAuth>>;

    /// The API key with this digest, with its account's state.
    async fn api_key_auth(&self, digest: &KeyDigest) -> StoreResult<Option<ApiKeyAuth>>;

    /// The webhook key with this digest, with its account's state.
    async fn webhook_key_auth(&self, digest: &KeyDigest) -> StoreResult<Option<WebhookKeyAuth>>;

    /// The state of the connection pool.
    fn pool_status(&self) -> PoolStatus;

    /// Writes of readings (webhook ingest, MQTT batches) waiting for the
    /// store's one writer or being written: while it is above 0,
    /// background writers (the delivery worker's bookkeeping) may give
    /// them the writer first. A counter read, no query. 0 where writers do
    /// not queue behind one another (PostgreSQL).
    fn ingest_waiting(&self) -> usize {
        0
    }

    /// Devices visible in `scope`, ordered by `device_id`, with sensors and last update.
    async fn list_devices(&self, scope: Scope) -> StoreResult<Vec<Device>>;

    /// The device `device_id` if it is visible in `scope`.
    async fn find_device(&self, scope: Scope, device_id: &str) -> StoreResult<Option<DeviceHandle>>;

    /// Whether account `account_id` may write the readings of device
    /// `device_pk`: it owns the device, or sees it with a write grant.
    /// Seeing a device does not allow writing it.
    async fn may_write(&self, account_id: i64, device_pk: i64) -> StoreResult<bool>;

    /// Gives every account write permission on every device it sees: the
    /// behaviour before write grants existed, for operators who choose to
    /// keep it on upgrade. Returns how many grants were added.
    async fn grant_write_to_viewers(&self) -> StoreResult<u64>;

    /// Removes the readings of device `device_id` within `range`
    /// (inclusive), atomically, and says what was removed.
    async fn delete_readings(&self, device_id: &str, range: TimeRange) -> StoreResult<DeleteReport>;

    /// Removes the readings that are past their device's retention at
    /// `now` (seconds): the device's own setting, else its owner's, else
    /// `default`. Whole stored hours are dropped and the hour the cutoff
    /// falls in is trimmed, a batch per transaction.
    async fn expire_readings(&self, default: Retention, now: i64) -> StoreResult<RetentionReport>;

    /// Up to `limit` stored hours of device `device_pk` from hour `from` to
    /// hour `to` (inclusive), in order, as stored (aggregated reads).
    async fn read_hours(&self, device_pk: i64, from: i64, to: i64, limit: usize) -> StoreResult<Vec<StoredHour>>;

    /// The device `device_id` visible in `scope` with the newest reading of
    /// each of its sensors that ever reported, by idx; `None` if the device
    /// is not visible. Read from an index kept by every write (a few rows
    /// whatever the history's length), in one round trip.
    async fn latest(&self, scope: Scope, device_id: &str) -> StoreResult<Option<(DeviceHandle, Vec<LatestValue>)>>;

    /// Rewrites the stored hours that have no summaries (written before
    /// aggregated reads used them) with summaries, `batch` hours read per
    /// transaction, pausing between them; the readings are unchanged.
    /// Returns how many hours were rewritten. Safe to run again or to stop:
    /// each transaction commits on its own.
    async fn add_hour_summaries(&self, batch: usize) -> StoreResult<u64>;

    /// Streams the readings of `device` within `range` (inclusive), oldest first.
    fn read_readings(&self, device: &DeviceHandle, range: TimeRange) -> ReadingStream;

    /// The device `device_id` visible in `scope` with the first batch of its
    /// readings in `range` and a stream of the rest; `None` if the device is
    /// not visible. Backends do it in one round trip where they can.
    async fn read_window(&self, scope: Scope, device_id: &str, range: TimeRange) -> StoreResult<Option<Window>>;

    /// Makes a provisioning document true, atomically: all of it or nothing.
    async fn apply(&self, doc: Provision, readings: Vec<ReadingInput>) -> StoreResult<ApplyReport> {
        self.apply_with_hooks(doc, readings, None).await
    }

    /// [`Store::apply`] with the document's webhook subscriptions resolved
    /// (`sensorhub apply` reads their secret references and holds the
    /// sealing key); a document listing subscriptions needs them.
    async fn apply_with_hooks(
        &self,
        doc: Provision,
        readings: Vec<ReadingInput>,
        hooks: Option<hooks::ProvisionedHooks>,
    ) -> StoreResult<ApplyReport>;

    /// Stores readings, atomically: all of them or, on the first error,
    /// none. With [`hooks::Outbox::Deliver`], the deliveries they owe to
    /// subscriptions are written in the same transaction.
    async fn import(&self, source: ReadingSource, outbox: hooks::Outbox) -> StoreResult<ImportReport>;

    /// Stores one reading (webhook ingest), durably, before it returns.
    /// Backends may commit readings that arrive together in one transaction
    /// (group commit); a refused reading is refused alone.
    async fn ingest(&self, reading: ReadingInput) -> StoreResult<()> {
        self.import(Box::new(std::iter::once(Ok(reading))), hooks::Outbox::Deliver).await.map(|_| ())
    }

    /// Stores readings in transactions of at most [`IMPORT_COMMIT_EVERY`]
    /// each, pausing [`IMPORT_PAUSE`] after each commit, so that a long
    /// import never holds the database's writes for long. The first error
    /// stops it; what was committed before stays ([`PartialImport`]).
    /// Deliveries owed are written as by [`Store::import`].
    async fn import_batched(&self, source: ReadingSource, outbox: hooks::Outbox)
    -> Result<ImportReport, PartialImport>;

    /// Whether the store holds no account and no device (demo data may go in).
    async fn is_empty(&self) -> StoreResult<bool>;

    /// All accounts, by username.
    async fn accounts(&self) -> StoreResult<Vec<AccountSummary>>;

    /// All API keys (prefix only), by account and creation.
    async fn api_keys(&self) -> StoreResult<Vec<ApiKeySummary>>;

    /// Revokes the API keys whose id is `id_or_prefix`, or whose shown prefix it is
    /// when exactly one key has that prefix. Returns the prefix of the revoked key.
    async fn revoke_api_key(&self, id_or_prefix: &str) -> StoreResult<String>;

    /// Every row but readings, by natural key, sorted (for `copy`).
    async fn export(&self) -> StoreResult<Installation>;

    /// How many hours of readings are stored, over all devices (the total of `copy`'s progress).
    async fn export_hour_count(&self) -> StoreResult<u64>;

    /// Up to `limit` stored hours of device `device_id` after hour `after`, in order.
    async fn export_hours(&self, device_id: &str, after: Option<i64>, limit: usize) -> StoreResult<Vec<StoredHour>>;

    /// Adds an installation's rows, atomically. Refuses (writing nothing)
    /// when an account, device or key of it already exists here.
    async fn restore(&self, rows: Installation) -> StoreResult<()>;

    /// Adds stored hours of device `device_id` as they are, atomically.
    async fn restore_hours(&self, device_id: &str, hours: Vec<StoredHour>) -> StoreResult<()>;

    /// Adds a webhook subscription. Refuses an unknown account, a device
    /// the account does not see, or an id already taken.
    async fn add_subscription(&self, sub: hooks::NewSubscription) -> StoreResult<()>;

    /// All webhook subscriptions, by account and id.
    async fn subscriptions(&self) -> StoreResult<Vec<hooks::Subscription>>;

    /// Removes webhook subscription `id`.
    async fn remove_subscription(&self, id: &str) -> StoreResult<()>;

    /// Replaces the sealed signing secret of subscription `id`.
    async fn replace_subscription_secret(&self, id: &str, sealed_secret: Vec<u8>) -> StoreResult<()>;

    /// Turns subscription `id` on or off.
    async fn set_subscription_enabled(&self, id: &str, enabled: bool) -> StoreResult<()>;

    /// Claims up to `req.limit` deliveries due at `now` (ms) of enabled
    /// subscriptions, oldest first, for `lease` ms: no other worker (of
    /// this or another instance) gets them meanwhile; if the claimer
    /// reports nothing by then, they are due again. Each endpoint gets at
    /// most its share of `req.slots` (counting what it holds already). A
    /// subscription that batches gets its claimed rows topped up with its
    /// other due ones, up to its `batch_max`, so readings that arrived
    /// together go together. Due rows whose account is disabled, or no
    /// longer sees the reading's device, are marked `dropped` instead.
    async fn claim_deliveries(&self, now: i64, lease: i64, req: &hooks::ClaimRequest) -> StoreResult<hooks::Claimed>;

    /// Records what attempts came to at `now` (ms), in one transaction, and
    /// whether each subscription is failing since then (by its last outcome).
    async fn finish_deliveries(&self, now: i64, done: Vec<hooks::Finished>) -> StoreResult<()>;

    /// Records what an attempt of delivery `id` of subscription
    /// `subscription_id` came to at `now` (ms).
    async fn finish_delivery(
        &self,
        id: i64,
        subscription_id: &str,
        now: i64,
        attempt: hooks::Attempt,
    ) -> StoreResult<()> {
        let done = hooks::Finished { id, subscription_id: subscription_id.to_owned(), attempt };
        self.finish_deliveries(now, vec![done]).await
    }

    /// The pending and failed deliveries of subscription `id` (only the
    /// failed ones with `failed_only`), oldest first.
    async fn deliveries(&self, id: &str, failed_only: bool) -> StoreResult<Vec<hooks::DeliveryRecord>>;

    /// Makes deliveries of subscription `id` due at `now` (ms) again, with
    /// their attempts reset; returns how many.
    async fn replay_deliveries(&self, id: &str, which: hooks::Replay, now: i64) -> StoreResult<u64>;

    /// Deliveries pending, over all subscriptions.
    async fn outbox_backlog(&self) -> StoreResult<u64>;

    /// Removes failed deliveries whose reading was stored before `before`
    /// (ms); returns how many.
    async fn prune_failed_deliveries(&self, before: i64) -> StoreResult<u64>;
}

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

/// `url` with any password replaced by `***`, for messages and logs.
pub fn redact_url(url: &str) -> String {
    let (url, query) = match url.split_once('?') {
        Some((u, q)) => (u, Some(q)),
        None => (url, None),
    };
    let mut out = match url.split_once("://") {
        Some((scheme, rest)) => {
            let authority_end = rest.find('/').unwrap_or(rest.len());
            match rest[..authority_end].rfind('@') {
                Some(at) => {
                    let userinfo = &rest[..at];
                    let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
                    format!("{scheme}://{user}:***{}", &rest[at..])
                }
                None => url.to_owned(),
            }
        }
        None => url.to_owned(),
    };
    if let Some(q) = query {
        // `?password=…` (libpq, Redis) and its kin: the value is a secret.
        let params: Vec<String> = q
            .split('&')
            .map(|p| match p.split_once('=') {
                Some((k, _)) if k.to_ascii_lowercase().contains("pass") => format!("{k}=***"),
                _ => p.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{InputError, ReadingInput, read_ahead, redact_url};
    use sensorhub_core::model::Origin;

    fn reading(ts: i64) -> ReadingInput {
        ReadingInput { device_id: "D".into(), timestamp: ts, values: vec![], origin: Origin::Item("t".into()) }
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

    #[test]
    fn urls_lose_their_password() {
        assert_eq!(redact_url("postgres://u:secret@h:5432/db"), "postgres://u:***@h:5432/db");
        assert_eq!(redact_url("sqlite://./a.db"), "sqlite://./a.db");
        assert_eq!(redact_url("./a.db"), "./a.db");
        assert_eq!(
            redact_url("postgres://u@h/db?password=hunter2&pool_max_size=4"),
            "postgres://u:***@h/db?password=***&pool_max_size=4"
        );
        assert_eq!(redact_url("postgres://u:a@h/db?sslpassword=x"), "postgres://u:***@h/db?sslpassword=***");
        assert_eq!(redact_url("redis://h:6379/0?password=hunter2"), "redis://h:6379/0?password=***");
    }
}
