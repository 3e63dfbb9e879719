//! sensorhub's own vacuum: on a PostgreSQL cluster whose autovacuum is
//! off, a pass shortly after the start and then every [`EVERY`] vacuums and analyzes
//! its tables past autovacuum's own thresholds (the outbox, `latest` and
//! the open hours are updated or deleted by every write and delivery, and
//! would otherwise grow without end), at autovacuum's pace. It says once
//! that it does so, once which tables its role may not vacuum, and once
//! when autovacuum is on again; elsewhere a pass does nothing.
//! Several instances may each run it: a table one of them is vacuuming is
//! skipped by the others.

use crate::metrics::Metrics;
use sensorhub_store::Store;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// Wait before the first pass, so that a start is not slowed by it.
const FIRST_PASS_AFTER: Duration = Duration::from_secs(10);

/// How often the tables' dead rows are looked at.
pub const EVERY: Duration = Duration::from_secs(30);

/// What the passes have said, so that each thing is said once.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Said {
    /// That sensorhub vacuums (the cluster's autovacuum is off).
    pub vacuuming: bool,
    /// The tables its role may not vacuum, named in a warning.
    pub not_permitted: BTreeSet<String>,
}

/// Starts the task; it ends with the process.
pub fn spawn(store: Arc<dyn Store>, metrics: Arc<Metrics>) {
    tokio::spawn(async move {
        tokio::time::sleep(FIRST_PASS_AFTER).await;
        let mut said = Said::default();
        loop {
            pass(&*store, &metrics, &mut said).await;
            tokio::time::sleep(EVERY).await;
        }
    });
}

/// Runs one pass, saying what changed since `said`.
pub async fn pass(store: &dyn Store, metrics: &Metrics, said: &mut Said) {
    match store.vacuum_when_autovacuum_is_off().await {
        Ok(None) => {
            if said.vacuuming {
                tracing::info!("the PostgreSQL cluster's autovacuum is on again: sensorhub leaves vacuuming to it");
            }
            *said = Said::default();
        }
        Ok(Some(pass)) => {
            if !said.vacuuming {
                tracing::warn!(
                    every_seconds = EVERY.as_secs(),
                    "the PostgreSQL cluster's autovacuum is off: sensorhub vacuums its own tables when they pass \
                     autovacuum's thresholds, at its pace (turn autovacuum on to leave this to PostgreSQL)"
                );
                said.vacuuming = true;
            }
            for t in pass.vacuumed {
                tracing::debug!(table = %t.table, dead_rows = t.dead_rows, "table vacuumed");
                metrics.vacuumed(&t.table);
                said.not_permitted.remove(&t.table);
            }
            let new: Vec<String> = pass.not_permitted.into_iter().filter(|t| !said.not_permitted.contains(t)).collect();
            if !new.is_empty() {
                tracing::warn!(
                    tables = %new.join(", "),
                    "sensorhub's database role may not vacuum these tables of its own (another role owns them), \
                     and the cluster's autovacuum is off: vacuum them as their owner, give them back to sensorhub's \
                     role, or turn autovacuum on"
                );
                said.not_permitted.extend(new);
            }
        }
        Err(e) => tracing::warn!(error = %e, "the vacuum pass failed; it is tried again at the next one"),
    }
}
