//! The migration loop, once for every backend: the migrations a database
//! has not seen yet run in order, in the caller's transaction, each
//! recorded as it runs; a database made by a newer sensorhub is refused.
//! Each backend keeps its own SQL files and where it records the version.

use super::remove::fill_latest;
use super::tx::Tx;
use crate::StoreResult;

/// The migration that adds the `latest` index, filled from the stored
/// hours in the same transaction.
const LATEST_INDEX_MIGRATION: usize = 5;

/// Where a backend keeps its schema version, and how it runs a migration.
pub(crate) trait MigrationTx: Tx {
    /// How many migrations the database has seen (0 for a new one).
    async fn schema_version(&self) -> StoreResult<usize>;

    /// Runs one migration's SQL.
    async fn run_migration(&self, sql: &str) -> StoreResult<()>;

    /// Records that `version` migrations have run.
    async fn set_schema_version(&self, version: usize) -> StoreResult<()>;

    /// Whether schema version 2's `readings` table is still there
    /// ([`super::upgrade`]).
    async fn has_old_readings(&self) -> StoreResult<bool>;
}

/// Runs the `migrations` the database has not seen, in order.
pub(crate) async fn migrate(tx: &impl MigrationTx, migrations: &[&str]) -> StoreResult<()> {
    let version = tx.schema_version().await?;
    crate::check_schema_version(version, migrations.len())?;
    for (i, sql) in migrations.iter().enumerate().skip(version) {
        tx.run_migration(sql).await?;
        tx.set_schema_version(i + 1).await?;
        tracing::info!(version = i + 1, "applied migration");
    }
    // Filled once every migration is in, so that its statements see the
    // index's newest columns (they are in the same transaction).
    if version < LATEST_INDEX_MIGRATION && migrations.len() >= LATEST_INDEX_MIGRATION {
        fill_latest(tx).await?;
    }
    Ok(())
}
