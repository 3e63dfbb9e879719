//! sensorhub's own vacuum: on a PostgreSQL cluster whose autovacuum is
//! off, a pass shortly after the start and then every [`EVERY`] vacuums and analyzes
//! its tables past autovacuum's own thresholds (the outbox, `latest` and
//! the open hours are updated or deleted by every write and delivery, and
//! would otherwise grow without end). It says once that it does so, and
//! once when autovacuum is on again; elsewhere a pass does nothing.
//! Several instances may each run it: a table one of them is vacuuming is
//! skipped by the others.

use crate::metrics::Metrics;
use sensorhub_store::Store;
use std::sync::Arc;
use std::time::Duration;

/// Wait before the first pass, so that a start is not slowed by it.
const FIRST_PASS_AFTER: Duration = Duration::from_secs(10);

/// How often the tables' dead rows are looked at.
pub const EVERY: Duration = Duration::from_secs(30);

/// Starts the task; it ends with the process.
pub fn spawn(store: Arc<dyn Store>, metrics: Arc<Metrics>) {
    tokio::spawn(async move {
        tokio::time::sleep(FIRST_PASS_AFTER).await;
        let mut vacuuming = false;
        loop {
            vacuuming = pass(&*store, &metrics, vacuuming).await;
            tokio::time::sleep(EVERY).await;
        }
    });
}

/// Runs one pass; whether sensorhub vacuums (`was`: whether it did before,
/// so that a change is said once).
pub async fn pass(store: &dyn Store, metrics: &Metrics, was: bool) -> bool {
    match store.vacuum_when_autovacuum_is_off().await {
        Ok(None) => {
            if was {
                tracing::info!("the PostgreSQL cluster's autovacuum is on again: sensorhub leaves vacuuming to it");
            }
            false
        }
        Ok(Some(tables)) => {
            if !was {
                tracing::warn!(
                    every_seconds = EVERY.as_secs(),
                    "the PostgreSQL cluster's autovacuum is off: sensorhub vacuums its own tables when they pass \
                     autovacuum's thresholds (turn autovacuum on to leave this to PostgreSQL)"
                );
            }
            for t in tables {
                tracing::debug!(table = %t.table, dead_rows = t.dead_rows, "table vacuumed");
                metrics.vacuumed(&t.table);
            }
            true
        }
        Err(e) => {
            tracing::warn!(error = %e, "the vacuum pass failed; it is tried again at the next one");
            was
        }
    }
}
