//! sensorhub's own vacuum: on a PostgreSQL cluster whose autovacuum is
//! off, a pass shortly after the start and then every [`EVERY`] vacuums and analyzes
//! its tables past autovacuum's own thresholds (the outbox, `latest` and
//! the open hours are updated or deleted by every write and delivery, and
//! would otherwise grow without end), at autovacuum's pace. It says once
//! that it does so, once which tables its role may not vacuum, and once
//! when autovacuum is on again; elsewhere a pass does nothing.
//! Several instances may each run it: a table one of them is vacuuming is
//! skipped by the others (named in a debug line, not counted), and tried
//! again at their next pass.

use crate::metrics::Metrics;
use sensorhub_store::{Health, Store};
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
pub async fn pass(store: &dyn Health, metrics: &Metrics, said: &mut Said) {
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
            for table in pass.busy {
                tracing::debug!(%table, "table not vacuumed: another session holds it; tried again at the next pass");
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::CacheBytes;
    use sensorhub_store::{PoolStatus, StoreResult, VacuumPass, Vacuumed};
    use std::sync::Mutex;

    /// A store whose passes answer what the test scripts, in order.
    struct Scripted(Mutex<Vec<Option<VacuumPass>>>);

    #[async_trait::async_trait]
    impl Health for Scripted {
        async fn ping(&self) -> StoreResult<()> {
            Ok(())
        }
        fn pool_status(&self) -> PoolStatus {
            PoolStatus { max: 1, in_use: 0, idle: 1 }
        }
        fn kept_bytes(&self) -> usize {
            0
        }
        async fn installation_id(&self) -> StoreResult<String> {
            Ok("test".into())
        }
        async fn installation_fact(&self, _: &str) -> StoreResult<Option<String>> {
            Ok(None)
        }
        async fn record_installation_fact(&self, _: &str, _: &str) -> StoreResult<()> {
            Ok(())
        }
        async fn vacuum_when_autovacuum_is_off(&self) -> StoreResult<Option<VacuumPass>> {
            Ok(self.0.lock().expect("script").remove(0))
        }
    }

    fn pass_of(vacuumed: &[&str], not_permitted: &[&str]) -> Option<VacuumPass> {
        Some(VacuumPass {
            vacuumed: vacuumed.iter().map(|t| Vacuumed { table: (*t).to_owned(), dead_rows: 100 }).collect(),
            not_permitted: not_permitted.iter().map(|t| (*t).to_owned()).collect(),
            busy: Vec::new(),
        })
    }

    #[tokio::test]
    async fn a_table_another_session_holds_is_not_counted() {
        let busy = VacuumPass { busy: vec!["outbox".to_owned()], ..pass_of(&["hours"], &[]).expect("a pass") };
        let store = Scripted(Mutex::new(vec![Some(busy), pass_of(&["outbox"], &[])]));
        let metrics = Metrics::default();
        let mut said = Said::default();
        pass(&store, &metrics, &mut said).await;
        let count =
            |metrics: &Metrics| metrics.render(PoolStatus { max: 1, in_use: 0, idle: 1 }, CacheBytes::default());
        let text = count(&metrics);
        assert!(text.contains("sensorhub_tables_vacuumed_total{table=\"hours\"} 1"), "{text}");
        assert!(!text.contains("table=\"outbox\""), "a busy table is not counted: {text}");
        assert!(said.not_permitted.is_empty(), "busy is not refused: {said:?}");
        // At the next pass it is free, vacuumed and counted.
        pass(&store, &metrics, &mut said).await;
        assert!(count(&metrics).contains("sensorhub_tables_vacuumed_total{table=\"outbox\"} 1"));
    }

    #[tokio::test]
    async fn a_table_it_may_not_vacuum_is_named_once_and_never_counted() {
        let store = Scripted(Mutex::new(vec![
            pass_of(&["hours"], &["latest"]),
            pass_of(&[], &["latest", "outbox"]),
            pass_of(&["latest"], &[]),
            None,
        ]));
        let metrics = Metrics::default();
        let mut said = Said::default();
        let refused = |said: &Said| said.not_permitted.iter().cloned().collect::<Vec<_>>();
        pass(&store, &metrics, &mut said).await;
        assert!(said.vacuuming);
        assert_eq!(refused(&said), ["latest"]);
        // Named already: only `outbox` is new (the warning names what is new).
        pass(&store, &metrics, &mut said).await;
        assert_eq!(refused(&said), ["latest", "outbox"]);
        // Given back to sensorhub's role, `latest` is vacuumed and counted.
        pass(&store, &metrics, &mut said).await;
        assert_eq!(refused(&said), ["outbox"]);
        let text = metrics.render(PoolStatus { max: 1, in_use: 0, idle: 1 }, CacheBytes::default());
        assert!(text.contains("sensorhub_tables_vacuumed_total{table=\"hours\"} 1"), "{text}");
        assert!(text.contains("sensorhub_tables_vacuumed_total{table=\"latest\"} 1"), "{text}");
        assert!(!text.contains("table=\"outbox\""), "a table it may not vacuum is not counted: {text}");
        // Autovacuum on again: nothing left to say.
        pass(&store, &metrics, &mut said).await;
        assert_eq!(said, Said::default());
    }
}
