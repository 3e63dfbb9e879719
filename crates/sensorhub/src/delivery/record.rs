//! Recording what delivery attempts came to, many at a time. Each attempt
//! hands its outcome to one recorder task, which writes what gathered over
//! [`GATHER_FOR`] (or [`GATHER_ROWS`] rows) in one transaction: on SQLite
//! every write transaction waits for the one writer and an fsync, so one
//! per attempt would compete with ingest. An outcome not yet written when
//! the process dies is lost with its lease, and the delivery made again:
//! at least once, as before. Readings waiting for the writer go first,
//! within a budget (yielding.rs). After writing, subscriptions whose endpoint
//! has failed for too long are disabled.

use super::lane::Lane;
use super::yielding::IngestFirst;
use crate::config::delivery::DeliverySettings;
use sensorhub_store::Store;
use sensorhub_store::delivery::{Attempt, Finished};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// How long outcomes gather after the first before they are written.
pub const GATHER_FOR: Duration = Duration::from_millis(50);
/// The most outcome rows one transaction writes.
pub const GATHER_ROWS: usize = 512;

/// What one attempt (of one delivery or a batch) came to.
pub struct Outcome {
    /// Its rows, each with the outcome.
    pub done: Vec<Finished>,
    /// When it was judged (ms).
    pub now: i64,
    /// The subscription, its account and URL (named when it is disabled).
    pub subscription_id: String,
    pub username: String,
    pub url: String,
    /// Since when the subscription failed with no success, as claimed.
    pub failing_since: Option<i64>,
}

/// Hands outcomes to the recorder task.
#[derive(Clone)]
pub struct Recorder(mpsc::UnboundedSender<Outcome>);

impl Recorder {
    /// Starts the recorder over `store`, on `lane` (its writes sent home);
    /// a subscription failing for `settings.disable_after` is disabled.
    pub fn spawn(store: Arc<dyn Store>, settings: &DeliverySettings, lane: &Lane) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let turn = IngestFirst::new(settings.ingest_first);
        lane.spawn(run(store, settings.disable_after, turn, lane.clone(), rx));
        Self(tx)
    }

    /// Queues `outcome` to be written.
    pub fn record(&self, outcome: Outcome) {
        // The recorder lives as long as the worker that holds this sender.
        let _ = self.0.send(outcome);
    }
}

async fn run(
    store: Arc<dyn Store>,
    disable_after: Duration,
    mut turn: IngestFirst,
    lane: Lane,
    mut rx: mpsc::UnboundedReceiver<Outcome>,
) {
    let limit = i64::try_from(disable_after.as_millis()).unwrap_or(i64::MAX);
    while let Some(first) = rx.recv().await {
        let deadline = tokio::time::Instant::now() + GATHER_FOR;
        let mut rows = first.done.len();
        let mut gathered = vec![first];
        while rows < GATHER_ROWS {
            tokio::select! {
                next = rx.recv() => match next {
                    Some(o) => {
                        rows += o.done.len();
                        gathered.push(o);
                    }
                    None => break,
                },
                () = tokio::time::sleep_until(deadline) => break,
            }
        }
        // Readings waiting for the writer go first, within a budget; what
        // arrives meanwhile joins this transaction.
        turn.give_way(&*store).await;
        while rows < GATHER_ROWS {
            let Ok(o) = rx.try_recv() else { break };
            rows += o.done.len();
            gathered.push(o);
        }
        let store = store.clone();
        if let Err(e) = lane.at_home(async move { write(&*store, limit, gathered).await }).await {
            tracing::warn!(error = %e, "recording webhook deliveries stopped; they will be made again");
        }
    }
}

/// Writes `gathered` in one transaction, then disables the subscriptions
/// that have failed for `limit` ms or more.
async fn write(store: &dyn Store, limit: i64, gathered: Vec<Outcome>) {
    let now = gathered.iter().map(|o| o.now).max().unwrap_or(0);
    let done: Vec<Finished> = gathered.iter().flat_map(|o| o.done.iter().cloned()).collect();
    let rows = done.len();
    if let Err(e) = store.finish_deliveries(now, done).await {
        // The leases run out and the deliveries are made again: at least once.
        tracing::warn!(error = %e, deliveries = rows, "cannot record webhook deliveries; they will be made again");
        return;
    }
    let mut disabled = std::collections::BTreeSet::new();
    for o in &gathered {
        let failed =
            o.done.first().is_some_and(|f| matches!(f.attempt, Attempt::Retry { .. } | Attempt::Failed { .. }));
        let Some(since) = o.failing_since.filter(|since| failed && o.now.saturating_sub(*since) >= limit) else {
            continue;
        };
        if !disabled.insert(o.subscription_id.as_str()) {
            continue;
        }
        match store.set_subscription_enabled(&o.subscription_id, false).await {
            Ok(()) => tracing::warn!(
                account = %o.username,
                subscription = %o.subscription_id,
                endpoint = %sensorhub_store::delivery::endpoint(&o.url),
                failing_for_s = (o.now - since) / 1000,
                "webhook endpoint failing for too long: subscription disabled (`sensorhub subscription enable` turns it on again)"
            ),
            Err(e) => {
                tracing::warn!(subscription = %o.subscription_id, error = %e, "cannot disable a failing webhook subscription")
            }
        }
    }
}
