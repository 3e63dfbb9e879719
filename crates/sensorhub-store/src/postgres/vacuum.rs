//! sensorhub's own vacuum on a PostgreSQL cluster whose autovacuum is off:
//! its tables past autovacuum's own thresholds (dead rows, rows inserted,
//! rows changed since the last analyze) vacuumed and analyzed at
//! autovacuum's pace, so that the outbox, `latest` and the open hours,
//! which every write and delivery updates or deletes, do not grow without
//! end. A table its role may not vacuum is named instead of tried; one
//! another session holds (another instance's vacuum) is named as busy.

use super::PgStore;
use crate::{StoreResult, VacuumPass, Vacuumed};
use tokio_postgres::error::SqlState;

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
/// with their dead rows and whether this role may vacuum them: PostgreSQL
/// lets the database's owner vacuum its tables, and a table's owner (up
/// to 16) or a role with `MAINTAIN` on it (17 on, which its owner has).
/// `{inserted}` is the test of the rows inserted or nothing, `{table}`
/// the version's test of the table.
const DUE: &str = "SELECT s.relname::text, s.n_dead_tup, pg_has_role(d.datdba, 'USAGE') OR {table}
    FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
    JOIN pg_database d ON d.datname = current_database()
    WHERE s.schemaname = current_schema() AND s.relname::text = ANY($1)
      AND (s.n_dead_tup > 50 + 0.2 * s.n_live_tup
           OR s.n_mod_since_analyze > 50 + 0.1 * s.n_live_tup {inserted})
    ORDER BY s.n_dead_tup DESC, s.relname";

/// [`DUE`]'s test of the rows inserted (PostgreSQL 13 on).
const INSERTED: &str = "OR s.n_ins_since_vacuum > 1000 + 0.2 * s.n_live_tup";

/// [`DUE`]'s test of the table: its owner's privileges (up to 16), or
/// `MAINTAIN` on it (17 on).
const OWNER: &str = "pg_has_role(c.relowner, 'USAGE')";
const MAINTAIN: &str = "has_table_privilege(c.oid, 'MAINTAIN')";

/// The session as a vacuum runs in it: as long as the table asks, past a
/// request's limit, and at autovacuum's pace (its cost delay and limit,
/// or the plain ones where it says `-1`), not as fast as a `VACUUM` typed
/// by hand, so that ingest keeps its share of a small machine; and giving
/// up on a table whose lock another session holds (another instance's
/// vacuum) after 100 ms rather than queueing for it. `VACUUM (SKIP_LOCKED)`
/// would not wait at all, but it only warns of a table it skipped, in a
/// notice the pooled connection does not pass on, so the pass counted it
/// vacuumed; a lock not had in time is an error of its own (`55P03`),
/// which names the table busy.
const PACED: &str = "SELECT set_config('statement_timeout', '0', false),
    set_config('lock_timeout', '100ms', false),
    set_config('vacuum_cost_delay', CASE current_setting('autovacuum_vacuum_cost_delay')
        WHEN '-1' THEN current_setting('vacuum_cost_delay') ELSE current_setting('autovacuum_vacuum_cost_delay') END, false),
    set_config('vacuum_cost_limit', CASE current_setting('autovacuum_vacuum_cost_limit')
        WHEN '-1' THEN current_setting('vacuum_cost_limit') ELSE current_setting('autovacuum_vacuum_cost_limit') END, false)";

/// Back to the pooled session's own settings.
const UNPACED: &str = "RESET statement_timeout; RESET lock_timeout; RESET vacuum_cost_delay; RESET vacuum_cost_limit";

impl PgStore {
    /// Vacuums the tables due when the cluster's autovacuum is off; `None`
    /// when it is on (PostgreSQL keeps them then).
    pub(super) async fn vacuum_when_autovacuum_is_off(&self) -> StoreResult<Option<VacuumPass>> {
        let sql = "SELECT current_setting('autovacuum'), current_setting('server_version_num')::int";
        let row = self.pool.get().await?.query_one(sql, &[]).await?;
        let (on, version): (String, i32) = (row.get(0), row.get(1));
        if on == "on" {
            return Ok(None);
        }
        // The vacuum's own connection, not a request's.
        let client = self.vacuum.get().await?;
        let due = DUE
            .replace("{inserted}", if version >= 130_000 { INSERTED } else { "" })
            .replace("{table}", if version >= 170_000 { MAINTAIN } else { OWNER });
        let due = client.query(&due, &[&TABLES]).await?;
        let mut pass = VacuumPass::default();
        if due.is_empty() {
            return Ok(Some(pass));
        }
        client.batch_execute(PACED).await?;
        let mut result = Ok(());
        for row in &due {
            let (table, dead, permitted): (String, i64, bool) = (row.get(0), row.get(1), row.get(2));
            if !permitted {
                pass.not_permitted.push(table);
                continue;
            }
            // The name is one of TABLES, never the caller's.
            match client.batch_execute(&format!("VACUUM (ANALYZE) {table}")).await {
                Ok(()) => pass.vacuumed.push(Vacuumed { table, dead_rows: u64::try_from(dead).unwrap_or(0) }),
                // Another session holds it (another instance's vacuum):
                // left to it, and tried again at the next pass.
                Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => pass.busy.push(table),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        client.batch_execute(UNPACED).await?;
        result?;
        Ok(Some(pass))
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
