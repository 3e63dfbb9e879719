//! The `Store` traits: everything sensorhub keeps, in its domain's words,
//! by capability (health, access, reads, reading writes, provisioning,
//! deliveries, copying). They hold no SQL; each backend implements them
//! with its own. [`Store`] is all of them together: what the binary holds
//! (`Arc<dyn Store>`); a part that needs one capability may take only it.

use crate::alarm::{Alarm, AlarmEvent, SilenceDue};
use crate::{
    AccountAuth, AccountSummary, ApiKeyAuth, ApiKeySummary, ApplyReport, DeleteReport, DeviceHandle, Generations,
    HoursHead, ImportReport, Installation, LatestValue, PartialImport, PoolStatus, ReadingSource, ReadingStream,
    RetentionReport, Scope, StoreResult, StoredHour, WebhookKeyAuth, Window,
};
use async_trait::async_trait;
use sensorhub_core::alarm::AlarmRule;
use sensorhub_core::model::{Device, ReadingInput};
use sensorhub_core::provision::Provision;
use sensorhub_core::retention::Retention;
use sensorhub_core::secret::KeyDigest;
use sensorhub_core::time::TimeRange;
use std::sync::Arc;

/// The installation and its database's health: readiness, the pool,
/// facts recorded once.
#[async_trait]
pub trait Health: Send + Sync {
    /// Checks that the database answers (readiness).
    async fn ping(&self) -> StoreResult<()>;

    /// The state of the connection pool.
    fn pool_status(&self) -> PoolStatus;

    /// Bytes the store keeps in memory between transactions: the hours it
    /// wrote last, decoded (by the estimate that bounds them, 16 MiB).
    fn kept_bytes(&self) -> usize;

    /// This installation's random id (32 hex digits), made with the schema.
    async fn installation_id(&self) -> StoreResult<String>;

    /// A fact recorded about this installation under `key` (something done
    /// once, such as draining the MQTT session of an earlier version).
    async fn installation_fact(&self, key: &str) -> StoreResult<Option<String>>;

    /// Records `value` under `key` (replacing what was there); `id` is not
    /// a key it takes.
    async fn record_installation_fact(&self, key: &str, value: &str) -> StoreResult<()>;

    /// On a PostgreSQL cluster whose autovacuum is off, vacuums (and
    /// analyzes) each of sensorhub's tables past autovacuum's own
    /// thresholds that its role may vacuum, at autovacuum's pace, and says
    /// which it did and which it may not; `None` where the database
    /// reclaims its space itself (autovacuum on, or SQLite, which reuses
    /// freed pages).
    async fn vacuum_when_autovacuum_is_off(&self) -> StoreResult<Option<crate::VacuumPass>> {
        Ok(None)
    }
}

/// Who may do what: credentials, write permission, and the generation
/// that moves whenever access is taken away.
#[async_trait]
pub trait Access: Send + Sync {
    /// The credentials of `username`, for HTTP Basic.
    async fn account_auth(&self, username: &str) -> StoreResult<Option<AccountAuth>>;

    /// The API key with this digest, with its account's state.
    async fn api_key_auth(&self, digest: &KeyDigest) -> StoreResult<Option<ApiKeyAuth>>;

    /// The webhook key with this digest, with its account's state.
    async fn webhook_key_auth(&self, digest: &KeyDigest) -> StoreResult<Option<WebhookKeyAuth>>;

    /// A number that grows with every change that may take access away (a
    /// password changed, an account disabled, a key revoked or narrowed, a
    /// device taken from an account or a key, an owner or a write grant
    /// changed), whoever made it: long-lived
    /// things (open streams) read it often and check their caller again
    /// when it moved. One row, read without waiting on writers.
    async fn access_generation(&self) -> StoreResult<i64>;

    /// The access generation ([`Access::access_generation`]) and the
    /// device generation, which grows with every change of a device or
    /// its sensors, whoever made it: for a cache of devices kept outside
    /// the store (the MQTT writer's), to know when to read them again.
    async fn generations(&self) -> StoreResult<Generations>;

    /// Whether account `account_id` may write the readings of device
    /// `device_pk`: it owns the device, or sees it with a write grant.
    /// Seeing a device does not allow writing it.
    async fn may_write(&self, account_id: i64, device_pk: i64) -> StoreResult<bool>;

    /// The device `device_id` visible to account `account_id` (its own
    /// scope, no key) with whether it may write it ([`Access::may_write`]),
    /// in one round trip; `None` when the account does not see it. With
    /// `seen`, the generations read with the caller's key
    /// ([`WebhookKeyAuth::generations`]), an answer read at exactly those
    /// is kept and given without a round trip.
    async fn writable_device(
        &self,
        account_id: i64,
        device_id: &str,
        seen: Option<Generations>,
    ) -> StoreResult<Option<(Arc<DeviceHandle>, bool)>>;
}

/// Devices and their readings as the API reads them.
#[async_trait]
pub trait Reads: Send + Sync {
    /// Devices visible in `scope`, ordered by `device_id`, with sensors and last update.
    async fn list_devices(&self, scope: Scope) -> StoreResult<Vec<Device>>;

    /// The device `device_id` if it is visible in `scope`.
    async fn find_device(&self, scope: Scope, device_id: &str) -> StoreResult<Option<DeviceHandle>>;

    /// The device `device_id` visible in `scope` with the newest reading of
    /// each of its sensors that ever reported, by idx; `None` if the device
    /// is not visible. Read from an index kept by every write (a few rows
    /// whatever the history's length), in one round trip.
    async fn latest(&self, scope: Scope, device_id: &str) -> StoreResult<Option<(DeviceHandle, Vec<LatestValue>)>>;

    /// The device `device_id` visible in `scope` with the first batch of its
    /// readings in `range` and a stream of the rest; `None` if the device is
    /// not visible. Backends do it in one round trip where they can.
    async fn read_window(&self, scope: Scope, device_id: &str, range: TimeRange) -> StoreResult<Option<Window>>;

    /// Streams the readings of `device` within `range` (inclusive), oldest first.
    fn read_readings(&self, device: &DeviceHandle, range: TimeRange) -> ReadingStream;

    /// Up to `limit` stored hours of device `device_pk` from hour `from` to
    /// hour `to` (inclusive), in order, as stored (aggregated reads).
    async fn read_hours(&self, device_pk: i64, from: i64, to: i64, limit: usize) -> StoreResult<Vec<StoredHour>>;

    /// The device `device_id` visible in `scope` with up to `limit` of its
    /// stored hours from hour `from` to hour `to`, or that it is not visible
    /// (raw windows rendered hour by hour), with the access generation read
    /// in the same statement or before it (so that a caller's access kept
    /// at that generation is confirmed without a lookup of its own).
    /// Backends do it in one round trip where they can.
    async fn window_hours(
        &self,
        scope: Scope,
        device_id: &str,
        from: i64,
        to: i64,
        limit: usize,
    ) -> StoreResult<HoursHead>;
}

/// Readings written (ingest, import) and removed or rewritten (delete,
/// retention, summaries), and who hears of what was written.
#[async_trait]
pub trait ReadingWrites: Send + Sync {
    /// Registers `observer`: every later write of readings (ingest,
    /// import, apply) tells it what it stored once it has committed
    /// ([`crate::observe`]).
    fn observe(&self, observer: std::sync::Arc<dyn crate::observe::AfterCommit>);

    /// Writes of readings (webhook ingest, MQTT batches, imports) waiting
    /// for the store's writer (SQLite's one connection, PostgreSQL's group
    /// committer) or being written: while it is above 0, background
    /// writers (the delivery worker's bookkeeping) may give them the
    /// database first. A counter read, no query; each instance counts its
    /// own.
    fn ingest_waiting(&self) -> usize {
        0
    }

    /// How long no write of readings has been under way (as
    /// [`Self::ingest_waiting`] counts them): zero while one is,
    /// [`std::time::Duration::MAX`] if none ever was. Under a saturating
    /// load the count falls to 0 for moments between writes; a background
    /// writer that gives way only while this is short does not take those
    /// moments for a lull.
    fn ingest_quiet(&self) -> std::time::Duration {
        std::time::Duration::MAX
    }

    /// Stores one reading (webhook ingest), durably, before it returns.
    /// Backends may commit readings that arrive together in one transaction
    /// (group commit); a refused reading is refused alone.
    async fn ingest(&self, reading: ReadingInput) -> StoreResult<()> {
        self.import(Box::new(std::iter::once(Ok(reading))), crate::delivery::Outbox::Deliver).await.map(|_| ())
    }

    /// As [`ReadingWrites::ingest`], only while the store's access and
    /// device generations are still `at` in the reading's transaction
    /// (read under the write lock); else nothing is written and the answer
    /// is [`crate::StoreError::Stale`]. For a caller that decided from
    /// answers kept at `at` (the webhook's kept key and write permission)
    /// and decides again when they moved.
    async fn ingest_at(&self, reading: ReadingInput, at: crate::Generations) -> StoreResult<()>;

    /// Stores readings, atomically: all of them or, on the first error,
    /// none. With [`crate::delivery::Outbox::Deliver`], the deliveries they owe to
    /// subscriptions are written in the same transaction.
    async fn import(&self, source: ReadingSource, outbox: crate::delivery::Outbox) -> StoreResult<ImportReport>;

    /// Stores readings in transactions of at most [`crate::IMPORT_COMMIT_EVERY`]
    /// each, pausing [`crate::IMPORT_PAUSE`] after each commit, so that a long
    /// import never holds the database's writes for long. The first error
    /// stops it; what was committed before stays ([`PartialImport`]).
    /// Deliveries owed are written as by [`ReadingWrites::import`].
    async fn import_batched(
        &self,
        source: ReadingSource,
        outbox: crate::delivery::Outbox,
    ) -> Result<ImportReport, PartialImport>;

    /// Removes the readings of device `device_id` within `range`
    /// (inclusive), atomically, and says what was removed.
    async fn delete_readings(&self, device_id: &str, range: TimeRange) -> StoreResult<DeleteReport>;

    /// Removes the readings that are past their device's retention at
    /// `now` (seconds): the device's own setting, else its owner's, else
    /// `default`. Whole stored hours are dropped and the hour the cutoff
    /// falls in is trimmed, a batch per transaction.
    async fn expire_readings(&self, default: Retention, now: i64) -> StoreResult<RetentionReport>;

    /// Rewrites the stored hours that have no summaries (written before
    /// aggregated reads used them) with summaries, `batch` hours read per
    /// transaction, pausing between them; the readings are unchanged.
    /// Returns how many hours were rewritten. Safe to run again or to stop:
    /// each transaction commits on its own.
    async fn add_hour_summaries(&self, batch: usize) -> StoreResult<u64>;
}

/// Accounts, devices and keys: `apply`'s document and the admin commands.
#[async_trait]
pub trait Provisioning: Send + Sync {
    /// Makes a provisioning document true, atomically: all of it or nothing.
    async fn apply(&self, doc: Provision, readings: Vec<ReadingInput>) -> StoreResult<ApplyReport> {
        self.apply_with_hooks(doc, readings, None).await
    }

    /// [`Provisioning::apply`] with the document's webhook subscriptions resolved
    /// (`sensorhub apply` reads their secret references and holds the
    /// sealing key); a document listing subscriptions needs them.
    async fn apply_with_hooks(
        &self,
        doc: Provision,
        readings: Vec<ReadingInput>,
        hooks: Option<crate::delivery::ProvisionedHooks>,
    ) -> StoreResult<ApplyReport>;

    /// Whether the store holds no account and no device (demo data may go in).
    async fn is_empty(&self) -> StoreResult<bool>;

    /// All accounts, by username.
    async fn accounts(&self) -> StoreResult<Vec<AccountSummary>>;

    /// All API keys (prefix only), by account and creation.
    async fn api_keys(&self) -> StoreResult<Vec<ApiKeySummary>>;

    /// Revokes the API keys whose id is `id_or_prefix`, or whose shown prefix it is
    /// when exactly one key has that prefix. Returns the prefix of the revoked key.
    async fn revoke_api_key(&self, id_or_prefix: &str) -> StoreResult<String>;

    /// Gives every account write permission on every device it sees: the
    /// behaviour before write grants existed, for operators who choose to
    /// keep it on upgrade. Returns how many grants were added.
    async fn grant_write_to_viewers(&self) -> StoreResult<u64>;
}

/// Outgoing webhooks: subscriptions, and the outbox their deliveries wait in.
#[async_trait]
pub trait Deliveries: Send + Sync {
    /// Adds a webhook subscription. Refuses an unknown account, a device
    /// the account does not see, or an id already taken.
    async fn add_subscription(&self, sub: crate::delivery::NewSubscription) -> StoreResult<()>;

    /// All webhook subscriptions, by account and id.
    async fn subscriptions(&self) -> StoreResult<Vec<crate::delivery::Subscription>>;

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
    async fn claim_deliveries(
        &self,
        now: i64,
        lease: i64,
        req: &crate::delivery::ClaimRequest,
    ) -> StoreResult<crate::delivery::Claimed>;

    /// Records what attempts came to at `now` (ms), in one transaction, and
    /// whether each subscription is failing since then (by its last outcome).
    async fn finish_deliveries(&self, now: i64, done: Vec<crate::delivery::Finished>) -> StoreResult<()>;

    /// Records what an attempt of delivery `id` of subscription
    /// `subscription_id` came to at `now` (ms).
    async fn finish_delivery(
        &self,
        id: i64,
        subscription_id: &str,
        now: i64,
        attempt: crate::delivery::Attempt,
    ) -> StoreResult<()> {
        let done = crate::delivery::Finished { id, subscription_id: subscription_id.to_owned(), attempt };
        self.finish_deliveries(now, vec![done]).await
    }

    /// The pending and failed deliveries of subscription `id` (only the
    /// failed ones with `failed_only`), oldest first.
    async fn deliveries(&self, id: &str, failed_only: bool) -> StoreResult<Vec<crate::delivery::DeliveryRecord>>;

    /// Makes deliveries of subscription `id` due at `now` (ms) again, with
    /// their attempts reset; returns how many.
    async fn replay_deliveries(&self, id: &str, which: crate::delivery::Replay, now: i64) -> StoreResult<u64>;

    /// Deliveries pending, over all subscriptions.
    async fn outbox_backlog(&self) -> StoreResult<u64>;

    /// Whether subscription `sub` may still be sent a delivery of device
    /// `device_pk`, of an alarm transition (`alarm`) or a reading (enabled,
    /// of an enabled account that sees the device, listing it, asking for
    /// that kind of event, and still at the URL and with the secret and
    /// headers the claim read): what a claim checked, asked again before
    /// an attempt that waited.
    async fn may_deliver(
        &self,
        sub: &crate::delivery::ClaimedSubscription,
        device_pk: Option<i64>,
        alarm: bool,
    ) -> StoreResult<bool>;

    /// Removes failed deliveries whose reading was stored before `before`
    /// (ms); returns how many.
    async fn prune_failed_deliveries(&self, before: i64) -> StoreResult<u64>;
}

/// A whole installation out and in again (`sensorhub copy`).
#[async_trait]
pub trait Copying: Send + Sync {
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
}

/// Alarms: each device's rules, their states and transitions, and the
/// silence watch's view of them. The transitions a reading causes are
/// written by the reading's own write ([`ReadingWrites`]).
#[async_trait]
pub trait Alarms: Send + Sync {
    /// The alarm rules of device `device_id` (of every device with `None`),
    /// by device and then in order.
    async fn alarm_rules(&self, device_id: Option<&str>) -> StoreResult<Vec<(String, AlarmRule)>>;

    /// Makes `rules` the alarm rules of device `device_id`, in that order;
    /// false when they were so already. A rule removed or changed ends its
    /// episode (an active one is `cleared`). A rule whose sensor is not the
    /// device's is refused.
    async fn set_alarm_rules(&self, device_id: &str, rules: Vec<AlarmRule>) -> StoreResult<bool>;

    /// Changes one of device `device_id`'s rules as [`set_alarm_rules`]
    /// would, the rules read and written in one write transaction: two
    /// edits made at once (by two commands) both hold.
    ///
    /// [`set_alarm_rules`]: Alarms::set_alarm_rules
    async fn edit_alarm_rules(
        &self,
        device_id: &str,
        edit: crate::alarm::RuleEdit,
    ) -> StoreResult<crate::alarm::RuleEdited>;

    /// The alarms of device `device_id` visible in `scope`, in rule order;
    /// `None` when the device is not visible.
    async fn alarms(&self, scope: Scope, device_id: &str) -> StoreResult<Option<Vec<Alarm>>>;

    /// The alarms of those of devices `device_ids` that exist, each in
    /// rule order (empty without rules), by device id: what a caller that
    /// sees every device (the MQTT publisher) reads for many at once.
    async fn alarms_of_devices(&self, device_ids: &[&str]) -> StoreResult<Vec<(String, Vec<Alarm>)>>;

    /// The active alarms of every device visible in `scope`, most severe
    /// first ([`crate::alarm::most_severe_first`]).
    async fn active_alarms(&self, scope: Scope) -> StoreResult<Vec<Alarm>>;

    /// The transitions of device `device_id` visible in `scope` recorded
    /// within `range` (seconds, inclusive), oldest first; `None` when the
    /// device is not visible.
    async fn alarm_events(
        &self,
        scope: Scope,
        device_id: &str,
        range: TimeRange,
    ) -> StoreResult<Option<Vec<AlarmEvent>>>;

    /// Acknowledges the active episode of rule `rule` of device
    /// `device_id` at `now` (seconds): [`crate::StoreError::NotFound`] for
    /// an unknown device or rule, [`crate::StoreError::Conflict`] when it
    /// is not active. An episode acknowledged already (at its level) is
    /// not acknowledged again: its earlier acknowledgement is returned.
    async fn acknowledge_alarm(&self, device_id: &str, rule: &str, now: i64) -> StoreResult<AlarmEvent>;

    /// A number that moves whenever any device's alarm rules change.
    async fn alarm_generation(&self) -> StoreResult<i64>;

    /// When every silence rule would next raise, counted from `started`
    /// (this server's start) when that is later than its last data or
    /// the rule's setting; [`crate::alarm::SilenceDue::ACTIVE`] for those raised.
    async fn silence_due(&self, started: i64) -> StoreResult<Vec<SilenceDue>>;

    /// Raises, in one transaction, those of the silence rules `due` that
    /// have heard nothing for their time at `now`; returns when each would
    /// next raise (none once active). Several instances may call it at
    /// once: each transition is recorded once.
    async fn check_silence(&self, due: Vec<SilenceDue>, now: i64, started: i64) -> StoreResult<Vec<SilenceDue>>;
}

/// Everything sensorhub keeps: every capability at once.
pub trait Store: Health + Access + Reads + ReadingWrites + Provisioning + Deliveries + Copying + Alarms {}

impl<T: Health + Access + Reads + ReadingWrites + Provisioning + Deliveries + Copying + Alarms> Store for T {}
