//! The delivery worker of `serve`: claims due deliveries from the outbox
//! (many per claim, a claim being a write transaction), sends each signed,
//! those of a batching subscription together (at most N POSTs at once per
//! endpoint), and hands what came of it by the retry rules to the recorder
//! (record.rs), which writes many outcomes per transaction. Instances share
//! the outbox: a claim leases rows to one worker. Claims and records give
//! the writer to waiting readings first, within a budget (yielding.rs),
//! except a claim a wake asked for (alarm_wake.rs), at most one each
//! [`WAKE_GAP`].
//! Time comes from a [`Clock`], so tests can move it.

use super::batch::{Job, jobs};
use super::headers::open_headers;
use super::lane::Lane;
use super::record::{Outcome, Recorder};
use super::seal::SealingKey;
use super::send::{Sender, Sent};
use super::sign::SigningSecret;
use super::yielding::IngestFirst;
use crate::config::delivery::{AttemptPriority, DeliverySettings};
use crate::metrics::Metrics;
use sensorhub_store::Store;
use sensorhub_store::delivery::{Attempt, ClaimRequest, Claimed, Finished, endpoint, is_alarm_delivery};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;

/// Where the worker reads the time (milliseconds since the epoch).
pub trait Clock: Send + Sync {
    /// Now.
    fn now_ms(&self) -> i64;
}

/// The system's clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        jiff::Timestamp::now().as_millisecond()
    }
}

/// A running worker: wake it to look at the outbox now.
#[derive(Clone)]
pub struct WorkerHandle {
    wake: Arc<Notify>,
}

impl WorkerHandle {
    /// Makes the worker look for due deliveries soon: at once, or
    /// [`WAKE_GAP`] after its last claim, whichever is later; and without
    /// giving the writer to waiting readings first. Wakes that come while
    /// one is pending make one look.
    pub fn wake(&self) {
        self.wake.notify_one();
    }
}

/// The least time between a claim and the next one a wake makes: however
/// many wakes come, they make at most one claim (a write transaction) in
/// this time.
pub const WAKE_GAP: Duration = Duration::from_millis(25);

/// What every delivery task shares.
struct Shared {
    store: Arc<dyn Store>,
    key: SealingKey,
    sender: Sender,
    settings: DeliverySettings,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
    /// Writes outcomes, many per transaction.
    recorder: Recorder,
    /// Where attempts run (lane.rs).
    lane: Lane,
    /// Per endpoint (scheme, host and port): the semaphore of its attempts
    /// in flight, and how many claimed jobs it holds (running or waiting
    /// their turn), which its share of the slots bounds.
    endpoints: Mutex<HashMap<String, Endpoint>>,
}

/// One endpoint's state in the worker.
struct Endpoint {
    permits: Arc<Semaphore>,
    held: usize,
}

impl Shared {
    /// The endpoints' state, whatever a panicking task left.
    fn endpoints(&self) -> std::sync::MutexGuard<'_, HashMap<String, Endpoint>> {
        self.endpoints.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A claim of up to `limit`, with what each endpoint holds.
    fn request(&self, limit: usize) -> ClaimRequest {
        let held = self.endpoints().iter().filter(|(_, e)| e.held > 0).map(|(k, e)| (k.clone(), e.held)).collect();
        ClaimRequest { limit, slots: self.settings.in_flight, held }
    }

    /// Counts a job of `url`'s endpoint as held; returns its semaphore.
    fn hold(&self, url: &str) -> Arc<Semaphore> {
        let mut endpoints = self.endpoints();
        let per_endpoint = self.settings.per_endpoint;
        let e = endpoints
            .entry(endpoint(url).to_owned())
            .or_insert_with(|| Endpoint { permits: Arc::new(Semaphore::new(per_endpoint)), held: 0 });
        e.held += 1;
        e.permits.clone()
    }

    /// A job of `url`'s endpoint is done; an endpoint that holds nothing is forgotten.
    fn release(&self, url: &str) {
        let mut endpoints = self.endpoints();
        let key = endpoint(url);
        if let Some(e) = endpoints.get_mut(key) {
            e.held = e.held.saturating_sub(1);
            if e.held == 0 {
                endpoints.remove(key);
            }
        }
    }
}

/// Starts the worker over `store`, opening secrets with `key`; fails only
/// when TLS cannot be set up.
pub fn spawn(
    store: Arc<dyn Store>,
    key: SealingKey,
    settings: DeliverySettings,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
) -> Result<WorkerHandle, String> {
    let wake = Arc::new(Notify::new());
    let sender = Sender::new(settings.allow_private, settings.timeout)?;
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let lane = Lane::start(threads, settings.priority == AttemptPriority::Idle)?;
    let recorder = Recorder::spawn(store.clone(), &settings, &lane);
    tokio::spawn(count_backlog(store.clone(), metrics.clone()));
    let endpoints = Mutex::new(HashMap::new());
    let shared =
        Arc::new(Shared { store, key, sender, settings, metrics, clock, recorder, lane: lane.clone(), endpoints });
    // On the lane: an attempt that ends wakes none of the server's threads.
    lane.spawn(run(shared, wake.clone()));
    Ok(WorkerHandle { wake })
}

/// The lease of a claim (ms): long enough for a delivery to wait its
/// endpoint's turn behind the others it holds (at most half the slots)
/// and make its attempt.
fn lease(s: &DeliverySettings) -> i64 {
    let rounds = (s.in_flight / 2).div_ceil(s.per_endpoint.max(1)) as u32 + 1;
    i64::try_from(s.timeout.saturating_mul(rounds).as_millis()).unwrap_or(i64::MAX)
}

async fn run(shared: Arc<Shared>, wake: Arc<Notify>) {
    let mut tasks = JoinSet::new();
    let lease = lease(&shared.settings);
    let in_flight = shared.settings.in_flight;
    // Whether the last claim left due deliveries behind, whether it took
    // any, and the endpoints it left some of for want of room.
    let (mut more_due, mut took, mut waiting) = (false, false, Vec::new());
    let mut next_look = tokio::time::Instant::now();
    // When the last claim was made, and whether a wake asked for the next.
    let (mut last_claim, mut woken) = (next_look, false);
    let mut turn = IngestFirst::new(shared.settings.ingest_first);
    loop {
        // A claim is a write transaction: made for many slots at once, at
        // each look, and when more is due: once an endpoint that was at its
        // share is down to half of it, or (no endpoint being held back) once
        // half of the slots are free.
        let look = tokio::time::Instant::now() >= next_look
            || (more_due
                && if waiting.is_empty() {
                    took && tasks.len() <= in_flight / 2
                } else {
                    room_opened(&shared, &waiting)
                });
        if tasks.len() < in_flight && look {
            // Readings waiting for the writer go first, within a budget;
            // not before a claim a wake asked for (alarms go out at once,
            // and WAKE_GAP bounds how often that is).
            if !std::mem::take(&mut woken) {
                turn.give_way(&*shared.store).await;
            }
            while tasks.try_join_next().is_some() {}
            let free = in_flight.saturating_sub(tasks.len());
            last_claim = tokio::time::Instant::now();
            next_look = last_claim + shared.settings.poll;
            match claim(&shared, lease, free).await {
                Ok(claimed) => {
                    if claimed.again {
                        // The next look is due at once (with a free slot).
                        next_look = tokio::time::Instant::now();
                    }
                    if claimed.dropped > 0 {
                        shared.metrics.deliveries.dropped(claimed.dropped);
                    }
                    (more_due, took, waiting) = (claimed.more, !claimed.deliveries.is_empty(), claimed.waiting);
                    for job in jobs(claimed.deliveries) {
                        let permits = shared.hold(&job.lead().url);
                        // On the lane: an attempt takes only the CPU the server leaves.
                        tasks.spawn_on(deliver(shared.clone(), job, permits, last_claim), shared.lane.handle());
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot claim webhook deliveries; trying again"),
            }
        }
        tokio::select! {
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            () = wake.notified() => {
                woken = true;
                next_look = next_look.min((last_claim + WAKE_GAP).max(tokio::time::Instant::now()));
            }
            // With every slot taken, a look that is due waits for a task to
            // end (rather than fire at once on every turn of the loop).
            () = tokio::time::sleep_until(next_look), if tasks.len() < in_flight => {}
        }
    }
}

/// A claim of up to `free` deliveries leased for `lease` ms, made at home
/// (lane.rs): the transaction never waits on a thread of the idle class.
async fn claim(shared: &Shared, lease: i64, free: usize) -> Result<Claimed, String> {
    let (store, now, req) = (shared.store.clone(), shared.clock.now_ms(), shared.request(free));
    match shared.lane.at_home(async move { store.claim_deliveries(now, lease, &req).await }).await {
        Ok(claimed) => claimed.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// Whether one of the endpoints a claim left rows of has room again.
fn room_opened(shared: &Shared, waiting: &[String]) -> bool {
    if waiting.is_empty() {
        return false;
    }
    let req = shared.request(0);
    waiting.iter().any(|e| req.has_room(e))
}

/// How often the backlog gauge is refreshed, busy or idle.
pub const BACKLOG_EVERY: Duration = Duration::from_secs(2);

/// Keeps the backlog gauge current: a count of the pending deliveries
/// every [`BACKLOG_EVERY`] (a read; it waits on no writer).
async fn count_backlog(store: Arc<dyn Store>, metrics: Arc<Metrics>) {
    let mut tick = tokio::time::interval(BACKLOG_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match store.outbox_backlog().await {
            Ok(n) => metrics.deliveries.backlog(n),
            Err(e) => tracing::debug!(error = %e, "cannot count the webhook outbox"),
        }
    }
}

/// How long a claimed job may wait for its endpoint's turn before its
/// subscription and account are checked again: behind a slow endpoint a
/// job waits up to the lease, and meanwhile access may have been taken
/// or the subscription given a new URL, secret or headers.
pub const RECHECK_AFTER: Duration = Duration::from_secs(1);

/// One attempt of `job` (a delivery, or a batch of them) when its
/// endpoint's turn comes, recorded. A job that waited [`RECHECK_AFTER`] or
/// more since `claimed` (taken before the claim's transaction, whose view
/// of access it went out with) is checked again first, and released
/// unsent (due at once, for the next claim to drop or send) when it may no
/// longer go. The wait counts from the claim, not from the task's first
/// poll: on a busy machine the lane's idle-class threads may take seconds
/// to start it.
async fn deliver(shared: Arc<Shared>, job: Job, permits: Arc<Semaphore>, claimed: tokio::time::Instant) {
    let sent = match permits.acquire().await {
        Ok(_permit) => {
            if claimed.elapsed() >= RECHECK_AFTER && !still_owed(&shared, &job).await {
                shared.release(&job.lead().url);
                let now = shared.clock.now_ms();
                return record(&shared, &job, now, Attempt::Released { at: now });
            }
            attempt(&shared, &job).await
        }
        Err(_) => return shared.release(&job.lead().url),
    };
    shared.release(&job.lead().url);
    let now = shared.clock.now_ms();
    let result =
        shared.settings.policy.judge(&sent, job.attempts(), job.created_at(), now, 0.5 + fastrand::f64() / 2.0);
    record(&shared, &job, now, result);
}

/// Whether every delivery `job` carries may still go, to the URL and
/// with the secret and headers it was claimed with (a store that cannot
/// say: not now).
async fn still_owed(shared: &Shared, job: &Job) -> bool {
    let sub = job.lead().as_claimed();
    let mut devices: Vec<(Option<i64>, bool)> =
        job.members().map(|m| (m.device_pk, is_alarm_delivery(&m.message_id))).collect();
    devices.sort_unstable();
    devices.dedup();
    let store = shared.store.clone();
    let asked = shared.lane.at_home(async move {
        for (device, alarm) in devices {
            if !store.may_deliver(&sub, device, alarm).await? {
                return Ok(false);
            }
        }
        Ok::<_, sensorhub_store::StoreError>(true)
    });
    let error = match asked.await {
        Ok(Ok(owed)) => return owed,
        Ok(Err(e)) => e.to_string(),
        Err(e) => e.to_string(),
    };
    tracing::warn!(%error, "cannot check a waiting webhook delivery again; released for the next claim");
    false
}

/// Signs and sends `job`; a secret that does not open is a failure to retry
/// (the operator may fix the key).
async fn attempt(shared: &Shared, job: &Job) -> Sent {
    let d = job.lead();
    let secret = match shared.key.open(&d.subscription_id, &d.sealed_secret) {
        Ok(bytes) => match SigningSecret::from_bytes(bytes) {
            Ok(secret) => secret,
            Err(e) => return Sent::Network(e.to_string()),
        },
        Err(e) => return Sent::Network(e.to_string()),
    };
    let mut headers = match d.sealed_headers.as_deref().map(|h| open_headers(&shared.key, &d.subscription_id, h)) {
        None => Vec::new(),
        Some(Ok(headers)) => headers,
        Some(Err(e)) => return Sent::Network(e.to_string()),
    };
    let body = job.body();
    // The signed time is when it is sent (receivers check it against their clock).
    let timestamp = jiff::Timestamp::now().as_second();
    let signed = secret.headers(&job.message_id(), timestamp, body.as_bytes());
    headers.extend(signed.into_iter().map(|(name, value)| (name.to_owned(), value)));
    shared.sender.post(&d.url, d.allow_http, &headers, body).await
}

/// Hands the outcome of an attempt of `job` judged at `now` to the
/// recorder, for every delivery it carries.
fn record(shared: &Shared, job: &Job, now: i64, result: Attempt) {
    let d = job.lead();
    let outcome = match &result {
        Attempt::Delivered => Some("delivered"),
        Attempt::Retry { .. } => Some("retried"),
        Attempt::Failed { .. } => Some("failed"),
        Attempt::Released { .. } => None,
    };
    for _ in 0..job.size() {
        outcome.inspect(|o| shared.metrics.deliveries.attempt(o));
    }
    let message = job.message_id();
    match &result {
        Attempt::Delivered => {}
        Attempt::Released { .. } => {
            tracing::info!(subscription = %d.subscription_id, %message, deliveries = job.size(), "webhook delivery not sent: its subscription or account changed while it waited");
        }
        Attempt::Retry { error, .. } => {
            tracing::debug!(subscription = %d.subscription_id, %message, deliveries = job.size(), %error, "webhook delivery to be retried");
        }
        Attempt::Failed { error, .. } => {
            tracing::warn!(subscription = %d.subscription_id, account = %d.username, %message, deliveries = job.size(), %error, "webhook delivery failed");
        }
    }
    let done = job
        .members()
        .map(|m| Finished { id: m.id, subscription_id: m.subscription_id.clone(), attempt: result.clone() })
        .collect();
    shared.recorder.record(Outcome {
        done,
        now,
        subscription_id: d.subscription_id.clone(),
        username: d.username.clone(),
        url: d.url.clone(),
        failing_since: d.failing_since,
    });
}
