//! The delivery worker of `serve`: claims due deliveries from the outbox
//! (many per claim, a claim being a write transaction), sends each signed,
//! those of a batching subscription together (at most N POSTs at once per
//! endpoint), and hands what came of it by the retry rules to the recorder
//! (record.rs), which writes many outcomes per transaction. Instances share
//! the outbox: a claim leases rows to one worker. Claims and records give
//! the writer to waiting readings first, within a budget (yielding.rs).
//! Time comes from a [`Clock`], so tests can move it.

use super::batch::{Job, jobs};
use super::headers::open_headers;
use super::record::{Outcome, Recorder};
use super::seal::SealingKey;
use super::send::{Sender, Sent};
use super::sign::SigningSecret;
use super::yielding::IngestFirst;
use crate::config::hooks::DeliverySettings;
use crate::metrics::Metrics;
use sensorhub_store::Store;
use sensorhub_store::hooks::{Attempt, Finished};
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
    /// Makes the worker look for due deliveries at once.
    pub fn wake(&self) {
        self.wake.notify_one();
    }
}

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
    /// One semaphore per endpoint (scheme, host and port).
    endpoints: Mutex<HashMap<String, Arc<Semaphore>>>,
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
    let recorder = Recorder::spawn(store.clone(), &settings);
    tokio::spawn(count_backlog(store.clone(), metrics.clone()));
    let endpoints = Mutex::new(HashMap::new());
    let shared = Arc::new(Shared { store, key, sender, settings, metrics, clock, recorder, endpoints });
    tokio::spawn(run(shared, wake.clone()));
    Ok(WorkerHandle { wake })
}

/// The lease of a claim (ms): long enough for a delivery to wait its
/// endpoint's turn behind the others claimed with it and make its attempt.
fn lease(s: &DeliverySettings) -> i64 {
    let rounds = s.in_flight.div_ceil(s.per_endpoint.max(1)) as u32 + 1;
    i64::try_from(s.timeout.saturating_mul(rounds).as_millis()).unwrap_or(i64::MAX)
}

async fn run(shared: Arc<Shared>, wake: Arc<Notify>) {
    let mut tasks = JoinSet::new();
    let lease = lease(&shared.settings);
    let in_flight = shared.settings.in_flight;
    // Whether the last claim filled every free slot (more may be due).
    let mut more_due = false;
    let mut next_look = tokio::time::Instant::now();
    let mut turn = IngestFirst::new(shared.settings.ingest_first);
    loop {
        // A claim is a write transaction: made for many slots at once, when
        // half of them are free and more is due, or at each look.
        let look = tokio::time::Instant::now() >= next_look || (more_due && tasks.len() <= in_flight / 2);
        if tasks.len() < in_flight && look {
            // Readings waiting for the writer go first, within a budget.
            turn.wait(|| shared.store.ingest_waiting()).await;
            while tasks.try_join_next().is_some() {}
            let free = in_flight.saturating_sub(tasks.len());
            next_look = tokio::time::Instant::now() + shared.settings.poll;
            match shared.store.claim_deliveries(shared.clock.now_ms(), lease, free).await {
                Ok(due) => {
                    more_due = due.len() >= free;
                    for job in jobs(due) {
                        tasks.spawn(deliver(shared.clone(), job));
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot claim webhook deliveries; trying again"),
            }
        }
        tokio::select! {
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            () = wake.notified() => next_look = tokio::time::Instant::now(),
            () = tokio::time::sleep_until(next_look) => {}
        }
    }
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

/// The endpoint a URL names, for the per-endpoint cap.
fn endpoint(url: &str) -> String {
    url.parse::<axum::http::Uri>()
        .ok()
        .map(|u| format!("{}://{}", u.scheme_str().unwrap_or(""), u.authority().map_or("", |a| a.as_str())))
        .unwrap_or_else(|| url.to_owned())
}

/// One attempt of `job` (a delivery, or a batch of them), recorded.
async fn deliver(shared: Arc<Shared>, job: Job) {
    let semaphore = {
        let mut endpoints = shared.endpoints.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        endpoints
            .entry(endpoint(&job.lead().url))
            .or_insert_with(|| Arc::new(Semaphore::new(shared.settings.per_endpoint)))
            .clone()
    };
    let sent = match semaphore.acquire().await {
        Ok(_permit) => attempt(&shared, &job).await,
        Err(_) => return,
    };
    let now = shared.clock.now_ms();
    let result =
        shared.settings.policy.judge(&sent, job.attempts(), job.created_at(), now, 0.5 + fastrand::f64() / 2.0);
    record(&shared, &job, now, result);
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
        Attempt::Delivered => "delivered",
        Attempt::Retry { .. } => "retried",
        Attempt::Failed { .. } => "failed",
    };
    for _ in 0..job.size() {
        shared.metrics.deliveries.attempt(outcome);
    }
    let message = job.message_id();
    match &result {
        Attempt::Delivered => {}
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
