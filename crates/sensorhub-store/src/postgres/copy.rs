//! Whole-installation export and restore of the PostgreSQL backend, for
//! `sensorhub copy`: rows by natural key, ids renumbered on the way in,
//! hours of readings sent with binary `COPY`.

use super::PgStore;
use super::on::On;
use crate::sql::copy;
use crate::{Installation, StoreResult, StoredHour};
use async_trait::async_trait;
use deadpool_postgres::GenericClient;

pub(super) async fn export_hours(
    c: &impl GenericClient,
    device_id: &str,
    after: Option<i64>,
    limit: usize,
) -> StoreResult<Vec<StoredHour>> {
    let stmt = c
        .prepare_cached(
            "SELECT r.chunk, r.data FROM hours r JOIN devices d ON d.id = r.device_pk
             WHERE d.device_id = $1 AND r.chunk > $2 ORDER BY r.chunk LIMIT $3",
        )
        .await?;
    let rows = c.query(&stmt, &[&device_id, &after.unwrap_or(i64::MIN), &(limit as i64)]).await?;
    Ok(rows.iter().map(|r| StoredHour { chunk: r.get(0), data: r.get(1) }).collect())
}

#[async_trait]
impl crate::store::Copying for PgStore {
    async fn export(&self) -> StoreResult<Installation> {
        // One snapshot: a repeatable-read transaction.
        let mut client = self.pool.get().await?;
        let tx =
            client.build_transaction().isolation_level(tokio_postgres::IsolationLevel::RepeatableRead).start().await?;
        let out = copy::export(&On(&tx)).await?;
        tx.commit().await?;
        Ok(out)
    }

    async fn export_hour_count(&self) -> StoreResult<u64> {
        self.on(async |c| copy::hour_count(c).await).await
    }

    async fn export_hours(&self, device_id: &str, after: Option<i64>, limit: usize) -> StoreResult<Vec<StoredHour>> {
        export_hours(&self.pool.get().await?, device_id, after, limit).await
    }

    async fn restore(&self, rows: Installation) -> StoreResult<()> {
        self.in_bulk_tx(async |tx| crate::write::copy::restore(tx, rows).await).await
    }

    async fn restore_hours(&self, device_id: &str, hours: Vec<StoredHour>) -> StoreResult<()> {
        self.in_bulk_tx(async |tx| crate::write::copy::restore_hours(tx, device_id, hours).await).await
    }
}
