//! Whole-installation export and restore of the PostgreSQL backend, for
//! `sensorhub copy`: rows by natural key, ids renumbered on the way in,
//! hours of readings sent with binary `COPY`.

use super::PgStore;
use super::tx::PgTx;
use super::write::begin_bulk;
use crate::{AccountDeviceRow, AccountRow, DeviceRow, Installation, KeyRow, SensorRow, StoreResult, StoredHour};
use async_trait::async_trait;
use deadpool_postgres::{Client, GenericClient};
use sensorhub_core::model::SensorMeta;
use tokio_postgres::Row;

fn key_row(r: &Row) -> KeyRow {
    KeyRow {
        digest: r.get(0),
        prefix: r.get(1),
        username: r.get(2),
        scoped: r.get(3),
        revoked: r.get(4),
        created_at: r.get(5),
    }
}

pub(super) async fn export(c: &mut Client) -> StoreResult<Installation> {
    let tx = c.build_transaction().isolation_level(tokio_postgres::IsolationLevel::RepeatableRead).start().await?;
    let q = |sql: &'static str| {
        let tx = &tx;
        async move { tx.query(sql, &[]).await }
    };
    let out = Installation {
        accounts: q("SELECT username, password_hash, disabled, created_at FROM accounts ORDER BY username")
            .await?
            .iter()
            .map(|r| AccountRow {
                username: r.get(0),
                password_hash: r.get(1),
                disabled: r.get(2),
                created_at: r.get(3),
            })
            .collect(),
        devices: q("SELECT d.device_id, d.name, d.type, d.lat, d.long, d.interval_seconds, a.username FROM devices d
                    LEFT JOIN accounts a ON a.id = d.owner_id ORDER BY d.device_id")
        .await?
        .iter()
        .map(|r| DeviceRow {
            device_id: r.get(0),
            name: r.get(1),
            kind: r.get(2),
            lat: r.get(3),
            long: r.get(4),
            interval_seconds: r.get(5),
            owner: r.get(6),
        })
        .collect(),
        sensors: q("SELECT d.device_id, s.idx::bigint, s.sensor_id, s.name, s.type, s.unit FROM sensors s
                    JOIN devices d ON d.id = s.device_pk ORDER BY d.device_id, s.idx")
        .await?
        .iter()
        .map(|r| SensorRow {
            device_id: r.get(0),
            idx: r.get(1),
            sensor: SensorMeta { sensor_id: r.get(2), name: r.get(3), kind: r.get(4), unit: r.get(5) },
        })
        .collect(),
        account_devices: q(
            "SELECT a.username, d.device_id, x.can_write FROM account_devices x JOIN accounts a ON a.id = x.account_id
                            JOIN devices d ON d.id = x.device_pk ORDER BY a.username, d.device_id",
        )
        .await?
        .iter()
        .map(|r| AccountDeviceRow { username: r.get(0), device_id: r.get(1), can_write: r.get(2) })
        .collect(),
        api_keys: q("SELECT k.digest, k.prefix, a.username, k.scoped, k.revoked, k.created_at FROM api_keys k
                     JOIN accounts a ON a.id = k.account_id ORDER BY k.digest")
        .await?
        .iter()
        .map(key_row)
        .collect(),
        api_key_devices: q("SELECT k.digest, d.device_id FROM api_key_devices x JOIN api_keys k ON k.id = x.key_id
                            JOIN devices d ON d.id = x.device_pk ORDER BY k.digest, d.device_id")
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect(),
        webhook_keys: q("SELECT k.digest, k.prefix, a.username, false, k.revoked, k.created_at FROM webhook_keys k
                         JOIN accounts a ON a.id = k.account_id ORDER BY k.digest")
        .await?
        .iter()
        .map(key_row)
        .collect(),
    };
    tx.commit().await?;
    Ok(out)
}

pub(super) async fn export_hour_count(c: &impl GenericClient) -> StoreResult<u64> {
    let row = c.query_one("SELECT count(*) FROM hours", &[]).await?;
    Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
}

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

pub(super) async fn restore(c: &mut Client, rows: Installation) -> StoreResult<()> {
    let tx = begin_bulk(c).await?;
    crate::write::copy::restore(&PgTx::new(&tx), rows).await?;
    tx.commit().await?;
    Ok(())
}

pub(super) async fn restore_hours(c: &mut Client, device_id: &str, hours: Vec<StoredHour>) -> StoreResult<()> {
    let tx = begin_bulk(c).await?;
    crate::write::copy::restore_hours(&PgTx::new(&tx), device_id, hours).await?;
    tx.commit().await?;
    Ok(())
}

#[async_trait]
impl crate::store::Copying for PgStore {
    async fn export(&self) -> StoreResult<Installation> {
        export(&mut self.pool.get().await?).await
    }

    async fn export_hour_count(&self) -> StoreResult<u64> {
        export_hour_count(&self.pool.get().await?).await
    }

    async fn export_hours(&self, device_id: &str, after: Option<i64>, limit: usize) -> StoreResult<Vec<StoredHour>> {
        export_hours(&self.pool.get().await?, device_id, after, limit).await
    }

    async fn restore(&self, rows: Installation) -> StoreResult<()> {
        let _writer = self.writer().await?;
        restore(&mut self.pool.get().await?, rows).await
    }

    async fn restore_hours(&self, device_id: &str, hours: Vec<StoredHour>) -> StoreResult<()> {
        let _writer = self.writer().await?;
        restore_hours(&mut self.pool.get().await?, device_id, hours).await
    }
}
