//! The retention task of `serve`: a pass over every device shortly after
//! the start and then every `--retention-every`, removing readings past
//! their retention (the store drops whole hours in short transactions),
//! with what it removed in the log and in `/metrics`, and failed webhook
//! deliveries past [`FAILED_DELIVERIES_KEPT`].

use crate::metrics::Metrics;
use sensorhub_core::retention::Retention;
use sensorhub_store::{RetentionReport, Store};
use std::sync::Arc;
use std::time::Duration;

/// Wait before the first pass, so that a start is not slowed by it.
const FIRST_PASS_AFTER: Duration = Duration::from_secs(10);

/// How long failed webhook deliveries are kept (from when their reading was
/// stored) for `subscription deliveries` and `replay`.
pub const FAILED_DELIVERIES_KEPT: Duration = Duration::from_secs(30 * 24 * 3600);

/// Runs one pass now: what it removed.
pub async fn pass(
    store: &dyn Store,
    default: Retention,
    metrics: &Metrics,
) -> sensorhub_store::StoreResult<RetentionReport> {
    let now = jiff::Timestamp::now();
    let report = store.expire_readings(default, now.as_second()).await?;
    metrics.retention(&report);
    let kept = i64::try_from(FAILED_DELIVERIES_KEPT.as_millis()).unwrap_or(i64::MAX);
    let pruned = store.prune_failed_deliveries(now.as_millisecond().saturating_sub(kept)).await?;
    if pruned > 0 {
        tracing::info!(deliveries = pruned, "failed webhook deliveries older than 30 days removed");
    }
    if !report.is_empty() {
        tracing::info!(
            devices = report.devices,
            readings = report.readings,
            hours_dropped = report.hours_dropped,
            hours_trimmed = report.hours_trimmed,
            bytes_removed = report.bytes,
            bytes_returned = report.returned,
            "readings past their retention removed"
        );
    }
    Ok(report)
}

/// Starts the task; it ends with the process.
pub fn spawn(store: Arc<dyn Store>, default: Retention, every: Duration, metrics: Arc<Metrics>) {
    tokio::spawn(async move {
        tokio::time::sleep(FIRST_PASS_AFTER).await;
        loop {
            if let Err(e) = pass(&*store, default, &metrics).await {
                tracing::warn!(error = %e, "the retention pass failed; it is tried again at the next one");
            }
            tokio::time::sleep(every).await;
        }
    });
}
