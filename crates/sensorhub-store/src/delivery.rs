//! Outgoing webhook subscriptions as the store keeps them: who subscribed,
//! to what, where deliveries go, and the sealed signing secret (the store
//! never sees it in clear).

/// The event kind of a stored reading.
pub const SENSOR_DATA: &str = "sensor-data";
/// The event kind of an alarm transition.
pub const ALARMS: &str = "alarms";

/// How an alarm transition's message ids begin; a reading's are `msg_`
/// and hex digits, so the two never meet.
pub const ALARM_MESSAGE_PREFIX: &str = "msg_alarm_";

/// Whether the delivery of message `message_id` is an alarm transition's
/// (else a reading's).
pub fn is_alarm_delivery(message_id: &str) -> bool {
    message_id.starts_with(ALARM_MESSAGE_PREFIX)
}

/// Whether a subscription to `events` (as [`Subscription::events`]) asks
/// for the deliveries of alarm transitions (`alarm`) or of readings.
pub fn asks_for(events: &[String], alarm: bool) -> bool {
    let kind = if alarm { ALARMS } else { SENSOR_DATA };
    events.iter().any(|e| e == kind)
}

/// Whether a write of readings owes deliveries to subscriptions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Outbox {
    /// Each stored reading is delivered to the enabled subscriptions that
    /// cover its device (webhook ingest, MQTT, `import --deliver`).
    #[default]
    Deliver,
    /// The readings are stored only (`import`'s default: history is not news).
    Skip,
}

/// A subscription to create.
#[derive(Debug, Clone)]
pub struct NewSubscription {
    /// Its id (`sub_…`), chosen by the caller: the sealed secret is bound to it.
    pub id: String,
    /// The owning account.
    pub username: String,
    /// Where deliveries are POSTed.
    pub url: String,
    /// The devices it covers; `None` for all that the account sees.
    pub devices: Option<Vec<String>>,
    /// Event kinds, e.g. [`SENSOR_DATA`].
    pub events: Vec<String>,
    /// The signing secret, sealed (see `sensorhub::hooks::seal`).
    pub sealed_secret: Vec<u8>,
    /// Extra request headers, sealed; `None` for none.
    pub sealed_headers: Option<Vec<u8>>,
    /// Whether readings that arrive together go out in one delivery.
    pub batch: bool,
    /// The most readings in one batched delivery.
    pub batch_max: u32,
    /// Whether a plain `http://` URL is allowed.
    pub allow_http: bool,
}

/// A stored subscription.
#[derive(Clone, PartialEq, Eq)]
pub struct Subscription {
    /// Its id.
    pub id: String,
    /// The owning account.
    pub username: String,
    /// Where deliveries are POSTed.
    pub url: String,
    /// The devices it covers; `None` for all that the account sees.
    pub devices: Option<Vec<String>>,
    /// Event kinds.
    pub events: Vec<String>,
    /// The signing secret, sealed.
    pub sealed_secret: Vec<u8>,
    /// Whether deliveries are made (an operator, or a failing endpoint, turns it off).
    pub enabled: bool,
    /// Whether readings that arrive together go out in one delivery.
    pub batch: bool,
    /// The most readings in one batched delivery.
    pub batch_max: u32,
    /// Whether a plain `http://` URL is allowed.
    pub allow_http: bool,
    /// When it was created (seconds since the epoch).
    pub created_at: i64,
    /// Its name in the provisioning file that made it (`apply`), if any.
    pub name: Option<String>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("id", &self.id)
            .field("username", &self.username)
            .field("url", &self.url)
            .field("devices", &self.devices)
            .field("enabled", &self.enabled)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Joins event kinds for storage.
pub(crate) fn join_events(events: &[String]) -> String {
    events.join(",")
}

/// Splits stored event kinds.
pub(crate) fn split_events(stored: &str) -> Vec<String> {
    stored.split(',').filter(|e| !e.is_empty()).map(str::to_owned).collect()
}

/// The error for a subscription id that matches nothing.
pub(crate) fn no_such_subscription(id: &str) -> crate::StoreError {
    crate::StoreError::NotFound(format!("no webhook subscription {id:?}"))
}

/// The error for a device the subscribing account does not see.
pub(crate) fn unseen_device(username: &str, device_id: &str) -> crate::StoreError {
    crate::StoreError::NotFound(format!("account {username:?} does not see a device {device_id:?}"))
}

/// A delivery a worker has claimed: what to send, where, and with which
/// (sealed) secret.
#[derive(Clone)]
pub struct Delivery {
    /// The outbox row.
    pub id: i64,
    /// The subscription.
    pub subscription_id: String,
    /// The subscription's account (named when its endpoint is disabled).
    pub username: String,
    /// Where to POST.
    pub url: String,
    /// Whether a plain `http://` URL is allowed.
    pub allow_http: bool,
    /// The subscription's signing secret, sealed.
    pub sealed_secret: Vec<u8>,
    /// Extra request headers, sealed.
    pub sealed_headers: Option<Vec<u8>>,
    /// The `webhook-id`, the same for every attempt.
    pub message_id: String,
    /// The JSON body.
    pub body: String,
    /// Attempts made before this one.
    pub attempts: u32,
    /// When the reading was stored (milliseconds since the epoch).
    pub created_at: i64,
    /// Since when the subscription's deliveries fail with no success (ms).
    pub failing_since: Option<i64>,
    /// The most deliveries of its subscription one POST carries: 1 unless
    /// the subscription batches.
    pub batch_max: u32,
    /// The device whose reading or alarm it carries (`None` once removed),
    /// for the worker to check access again before a late attempt.
    pub device_pk: Option<i64>,
}

impl Delivery {
    /// Its subscription as the claim read it, for a late attempt to check
    /// against the subscription as it is ([`crate::Deliveries::may_deliver`]).
    pub fn as_claimed(&self) -> ClaimedSubscription {
        ClaimedSubscription {
            id: self.subscription_id.clone(),
            url: self.url.clone(),
            allow_http: self.allow_http,
            sealed_secret: self.sealed_secret.clone(),
            sealed_headers: self.sealed_headers.clone(),
        }
    }
}

/// A subscription as a claim read it for its deliveries: where they go
/// and how they are signed. An attempt that waited goes only while the
/// subscription still says all of this: after a new URL, secret or
/// headers, what was claimed under the old ones is released and claimed
/// again under the new.
#[derive(Clone)]
pub struct ClaimedSubscription {
    /// The subscription.
    pub id: String,
    /// Where to POST.
    pub url: String,
    /// Whether a plain `http://` URL is allowed.
    pub allow_http: bool,
    /// The signing secret, sealed.
    pub sealed_secret: Vec<u8>,
    /// Extra request headers, sealed.
    pub sealed_headers: Option<Vec<u8>>,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("id", &self.id)
            .field("subscription_id", &self.subscription_id)
            .field("message_id", &self.message_id)
            .field("attempts", &self.attempts)
            .finish_non_exhaustive()
    }
}

/// What a claim gave.
#[derive(Debug, Default)]
pub struct Claimed {
    /// The deliveries leased to the claimer, oldest first.
    pub deliveries: Vec<Delivery>,
    /// Endpoints with due deliveries left behind: they were at their share.
    pub waiting: Vec<String>,
    /// Whether more deliveries may be due than were claimed.
    pub more: bool,
    /// How many were dropped, their account having lost access.
    pub dropped: usize,
    /// Whether the store left work a claim does for the next one (on
    /// SQLite, deliveries still to move out of its log past the claim's
    /// budget): claim again as soon as there is a free slot.
    pub again: bool,
}

/// Why a delivery of a reading of a device is no longer made: the
/// subscription's account is disabled, or no longer sees the device.
pub const DROPPED_DISABLED: &str = "dropped: the account is disabled";
/// See [`DROPPED_DISABLED`].
pub const DROPPED_UNSEEN: &str = "dropped: the account no longer sees the device";
/// [`DROPPED_UNCOVERED`] as a literal, for the claims' statements built
/// with `concat!`.
macro_rules! dropped_uncovered {
    () => {
        "dropped: the subscription no longer covers the device"
    };
}
pub(crate) use dropped_uncovered;
/// Why a delivery of a device's reading or alarm is no longer made: its
/// subscription was narrowed to devices without it (the claims' SQL
/// spells the same text out, from one macro).
pub const DROPPED_UNCOVERED: &str = dropped_uncovered!();
/// [`DROPPED_UNASKED`] as a literal, for the claims' statements.
macro_rules! dropped_unasked {
    () => {
        "dropped: the subscription no longer asks for the event"
    };
}
pub(crate) use dropped_unasked;
/// Why a delivery of a reading or of an alarm transition is no longer
/// made: its subscription's `events` no longer name that kind.
pub const DROPPED_UNASKED: &str = dropped_unasked!();

/// The claims' branches that drop a delivery of a kind its subscription
/// (`s`) no longer asks for (`o` the outbox row, by its message id), for
/// the `CASE` that says why a row may no longer go.
macro_rules! unasked_sql {
    () => {
        concat!(
            "WHEN substr(o.message_id, 1, 10) = 'msg_alarm_' AND (',' || s.events || ',') NOT LIKE '%,alarms,%'
             THEN '",
            $crate::delivery::dropped_unasked!(),
            "'
             WHEN substr(o.message_id, 1, 10) <> 'msg_alarm_' AND (',' || s.events || ',') NOT LIKE '%,sensor-data,%'
             THEN '",
            $crate::delivery::dropped_unasked!(),
            "'"
        )
    };
}
pub(crate) use unasked_sql;

/// What an attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// The endpoint took it (2xx): the row is removed.
    Delivered,
    /// Try again at `at` (ms); `status` is the answer's, if there was one.
    Retry { at: i64, status: Option<u16>, error: String },
    /// Given up: the row stays, failed, for `deliveries` and `replay`.
    Failed { status: Option<u16>, error: String },
    /// Not attempted (its subscription or account changed while it waited
    /// for its endpoint): due again at `at` (ms), for the next claim to
    /// check; its attempts, last answer and the subscription's failing
    /// state are left as they were.
    Released { at: i64 },
}

/// The batching subscriptions among `claimed` with room for more rows in
/// their batch, and how many more.
pub(crate) fn batch_room(claimed: &[Delivery]) -> Vec<(String, usize)> {
    let mut counts: std::collections::BTreeMap<&str, (usize, usize)> = std::collections::BTreeMap::new();
    for d in claimed.iter().filter(|d| d.batch_max > 1) {
        counts.entry(&d.subscription_id).or_insert((0, d.batch_max as usize)).0 += 1;
    }
    counts.into_iter().filter(|(_, (n, max))| n < max).map(|(sub, (n, max))| (sub.to_owned(), max - n)).collect()
}

/// What came of an attempt of one outbox row, to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// The outbox row.
    pub id: i64,
    /// Its subscription.
    pub subscription_id: String,
    /// The outcome.
    pub attempt: Attempt,
}

/// The subscriptions whose failing state a list of outcomes changes, each
/// by its last outcome: `(succeeded, failing)`.
pub(crate) fn failing_changes(done: &[Finished]) -> (Vec<&str>, Vec<&str>) {
    let mut last: std::collections::BTreeMap<&str, bool> = std::collections::BTreeMap::new();
    for f in done {
        if !matches!(f.attempt, Attempt::Released { .. }) {
            last.insert(&f.subscription_id, f.attempt == Attempt::Delivered);
        }
    }
    let (ok, failing): (Vec<_>, Vec<_>) = last.into_iter().partition(|(_, delivered)| *delivered);
    (ok.into_iter().map(|(s, _)| s).collect(), failing.into_iter().map(|(s, _)| s).collect())
}

/// A delivery as `subscription deliveries` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRecord {
    /// The outbox row (what `replay` takes).
    pub id: i64,
    /// The `webhook-id`.
    pub message_id: String,
    /// `pending`, `failed`, or `dropped` (its account lost access).
    pub state: String,
    /// Attempts made.
    pub attempts: u32,
    /// When the reading was stored (ms).
    pub created_at: i64,
    /// When the next attempt is due (ms; pending only).
    pub next_attempt: i64,
    /// The last answer's status.
    pub last_status: Option<u16>,
    /// The last attempt's error.
    pub last_error: Option<String>,
}

/// Which deliveries `replay` makes due again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replay {
    /// Every failed delivery of the subscription.
    Failed,
    /// One delivery (failed or pending), by outbox row.
    One(i64),
}

/// Seals and opens subscription secrets and headers for `apply`, which
/// compares what a provisioning file gives with what is stored (sealed
/// bytes differ at each sealing). The key lives in the binary; the store
/// sees only this.
pub trait Sealer: Send + Sync {
    /// `secret` sealed for subscription `id`.
    fn seal_secret(&self, id: &str, secret: &[u8]) -> Result<Vec<u8>, String>;
    /// The secret of subscription `id` that `seal_secret` sealed.
    fn open_secret(&self, id: &str, sealed: &[u8]) -> Result<Vec<u8>, String>;
    /// `headers` sealed for subscription `id`.
    fn seal_headers(&self, id: &str, headers: &[(String, String)]) -> Result<Vec<u8>, String>;
    /// The headers of subscription `id` that `seal_headers` sealed.
    fn open_headers(&self, id: &str, sealed: &[u8]) -> Result<Vec<(String, String)>, String>;
}

/// A subscription of a provisioning document with its references resolved
/// (by `sensorhub apply`), for the store to make true.
#[derive(Clone)]
pub struct ProvisionedSubscription {
    /// The owning account (one of the document's).
    pub username: String,
    /// Where it is in the document, e.g. `accounts[0].subscriptions[1]`.
    pub at: String,
    /// Its name, unique per account: how a re-apply finds it.
    pub name: String,
    /// Where deliveries are POSTed (checked).
    pub url: String,
    /// The devices it covers; `None` for all that the account sees.
    pub devices: Option<Vec<String>>,
    /// Event kinds.
    pub events: Vec<String>,
    /// On or off; `None` leaves a stored one as it is (new: on).
    pub enabled: Option<bool>,
    /// Extra request headers, resolved and checked, by name.
    pub headers: Vec<(String, String)>,
    /// Whether readings that arrive together go out in one delivery.
    pub batch: bool,
    /// The most readings in one batched delivery.
    pub batch_max: u32,
    /// Whether a plain `http://` URL is allowed.
    pub allow_http: bool,
    /// The signing secret's bytes (read from its reference).
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for ProvisionedSubscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProvisionedSubscription")
            .field("username", &self.username)
            .field("name", &self.name)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// The subscriptions of a provisioning document, and what seals their secrets.
#[derive(Clone)]
pub struct ProvisionedHooks {
    /// Every account's subscriptions, in document order.
    pub subscriptions: Vec<ProvisionedSubscription>,
    /// Seals secrets and headers (the operator's key).
    pub sealer: std::sync::Arc<dyn Sealer>,
}

impl std::fmt::Debug for ProvisionedHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProvisionedHooks").field("subscriptions", &self.subscriptions).finish_non_exhaustive()
    }
}

/// What a worker asks of a claim.
#[derive(Debug, Clone, Default)]
pub struct ClaimRequest {
    /// The most deliveries to claim (the worker's free slots).
    pub limit: usize,
    /// The worker's slots in all: each endpoint's share is cut from them.
    pub slots: usize,
    /// The claimed deliveries (POSTs) each endpoint holds now, by [`endpoint`].
    pub held: std::collections::HashMap<String, usize>,
}

impl ClaimRequest {
    /// Up to `limit` deliveries for a worker of `2 × limit` slots holding
    /// none: one endpoint gets them all.
    pub fn up_to(limit: usize) -> Self {
        Self { limit, slots: limit.saturating_mul(2), held: std::collections::HashMap::new() }
    }
}

/// The endpoint of a delivery URL: its scheme, host and port as written
/// (`https://partner.example:8443`); what the per-endpoint share counts.
pub fn endpoint(url: &str) -> &str {
    let start = url.find("://").map_or(0, |i| i + 3);
    let end = url[start..].find(['/', '?', '#']).map_or(url.len(), |i| start + i);
    &url[..end]
}
