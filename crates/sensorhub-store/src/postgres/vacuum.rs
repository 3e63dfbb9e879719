//! sensorhub's own vacuum on a PostgreSQL cluster whose autovacuum is off:
//! its tables past autovacuum's own thresholds (dead rows, rows inserted,
//! rows changed since the last analyze) vacuumed and analyzed, so that the
//! outbox, `latest` and the open hours, which every write and delivery
//! updates or deletes, do not grow without end.

use super::PgStore;
use crate::{StoreResult, Vacuumed};

/// The tables sensorhub made (its migrations'); no other table in the
/// schema is touched.
const TABLES: &[&str] = &[
    "access_generation",
    "account_devices",
    "accounts",
    "alarm_events",
    "alarm_generation",
    "alarm_rules",
    "alarm_states",
    "api_key_devices",
    "api_keys",
    "device_generation",
    "devices",
    "hours",
    "installation",
    "latest",
    "outbox",
    "outbox_log",
    "readings",
    "sensors",
    "subscription_devices",
    "subscription_generation",
    "subscriptions",
    "webhook_keys",
];

/// sensorhub's tables due, by autovacuum's default thresholds (`50 + 0.2`
/// of the live rows dead, `50 + 0.1` changed since the last analyze, and
/// from PostgreSQL 13 on `1000 + 0.2` inserted since the last vacuum),
/// with their dead rows; `{inserted}` is that last test or nothing.
const DUE: &str = "SELECT relname::text, n_dead_tup FROM pg_stat_user_tables
    WHERE schemaname = current_schema() AND relname::text = ANY($1)
      AND (n_dead_tup > 50 + 0.2 * n_live_tup
           OR n_mod_since_analyze > 50 + 0.1 * n_live_tup {inserted})
    ORDER BY n_dead_tup DESC, relname";

/// [`DUE`]'s test of the rows inserted (PostgreSQL 13 on).
const INSERTED: &str = "OR n_ins_since_vacuum > 1000 + 0.2 * n_live_tup";

impl PgStore {
    /// Vacuums the tables due when the cluster's autovacuum is off; `None`
    /// when it is on (PostgreSQL keeps them then).
    pub(super) async fn vacuum_when_autovacuum_is_off(&self) -> StoreResult<Option<Vec<Vacuumed>>> {
        let client = self.pool.get().await?;
        let sql = "SELECT current_setting('autovacuum'), current_setting('server_version_num')::int";
        let row = client.query_one(sql, &[]).await?;
        let (on, version): (String, i32) = (row.get(0), row.get(1));
        if on == "on" {
            return Ok(None);
        }
        let due = DUE.replace("{inserted}", if version >= 130_000 { INSERTED } else { "" });
        let due = client.query(&due, &[&TABLES]).await?;
        let mut vacuumed = Vec::with_capacity(due.len());
        if due.is_empty() {
            return Ok(Some(vacuumed));
        }
        // A vacuum runs as long as the table asks, past a request's limit;
        // a table another vacuum holds (another instance's) is skipped.
        client.batch_execute("SET statement_timeout = 0").await?;
        let mut result = Ok(());
        for row in &due {
            let table: String = row.get(0);
            let dead: i64 = row.get(1);
            // The name is one of TABLES, never the caller's.
            result = client.batch_execute(&format!("VACUUM (ANALYZE, SKIP_LOCKED) {table}")).await;
            if result.is_err() {
                break;
            }
            vacuumed.push(Vacuumed { table, dead_rows: u64::try_from(dead).unwrap_or(0) });
        }
        client.batch_execute("RESET statement_timeout").await?;
        result?;
        Ok(Some(vacuumed))
    }
}

#[cfg(test)]
mod tests {
    /// The tables the migrations create, by the name after `CREATE TABLE`.
    fn created() -> Vec<String> {
        let mut names: Vec<String> = super::super::MIGRATIONS
            .iter()
            .flat_map(|sql| sql.split("CREATE TABLE ").skip(1))
            .filter_map(|rest| rest.trim_start_matches("IF NOT EXISTS ").split([' ', '(', '\n']).next())
            .map(str::to_owned)
            .collect();
        names.sort();
        names.dedup();
        names
    }

    #[test]
    fn every_table_the_migrations_create_is_looked_after() {
        let tables = created();
        assert!(tables.len() > 20, "the migrations' tables were found: {tables:?}");
        assert_eq!(tables, super::TABLES, "a migration's new table goes into TABLES");
    }
}
