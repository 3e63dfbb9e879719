//! Whole-installation export and restore of the PostgreSQL backend, for
//! `sensorhub copy`: rows by natural key, ids renumbered on the way in,
//! hours of readings sent with binary `COPY`.

use super::tx::copy_hours;
use super::write::begin_bulk;
use crate::decide::HourRow;
use crate::{
    AccountDeviceRow, AccountRow, DeviceRow, Installation, KeyRow, SensorRow, StoreError, StoreResult, StoredHour,
};
use deadpool_postgres::{Client, GenericClient, Transaction};
use sensorhub_core::model::SensorMeta;
use sensorhub_core::provision::InputError;
use std::collections::HashMap;
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

/// Refuses when `sql` (with `$1`) finds a row.
async fn refuse_existing(
    tx: &Transaction<'_>,
    sql: &str,
    value: &(dyn tokio_postgres::types::ToSql + Sync),
    what: String,
) -> StoreResult<()> {
    if tx.query_opt(sql, &[value]).await?.is_some() {
        return Err(StoreError::Conflict(format!("{what} already exists in the target")));
    }
    Ok(())
}

fn missing(what: &str, id: &str) -> StoreError {
    StoreError::Invalid(InputError::new("copy", format!("{what} {id:?} is not in the copy")))
}

pub(super) async fn restore(c: &mut Client, rows: Installation) -> StoreResult<()> {
    let tx = begin_bulk(c).await?;
    let mut accounts = HashMap::new();
    for a in &rows.accounts {
        refuse_existing(
            &tx,
            "SELECT 1 FROM accounts WHERE username = $1",
            &a.username,
            format!("account {:?}", a.username),
        )
        .await?;
        let row = tx
            .query_one(
                "INSERT INTO accounts (username, password_hash, disabled, created_at) VALUES ($1, $2, $3, $4) RETURNING id",
                &[&a.username, &a.password_hash, &a.disabled, &a.created_at],
            )
            .await?;
        accounts.insert(a.username.as_str(), row.get::<_, i64>(0));
    }
    let account = |name: &str| accounts.get(name).copied().ok_or_else(|| missing("account", name));
    let mut devices = HashMap::new();
    for d in &rows.devices {
        refuse_existing(
            &tx,
            "SELECT 1 FROM devices WHERE device_id = $1",
            &d.device_id,
            format!("device {:?}", d.device_id),
        )
        .await?;
        let owner = d.owner.as_deref().map(&account).transpose()?;
        let row = tx
            .query_one(
                "INSERT INTO devices (device_id, name, type, lat, long, interval_seconds, owner_id)
                 VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
                &[&d.device_id, &d.name, &d.kind, &d.lat, &d.long, &d.interval_seconds, &owner],
            )
            .await?;
        devices.insert(d.device_id.as_str(), row.get::<_, i64>(0));
    }
    let device = |id: &str| devices.get(id).copied().ok_or_else(|| missing("device", id));
    for s in &rows.sensors {
        let m = &s.sensor;
        tx.execute(
            "INSERT INTO sensors (device_pk, idx, sensor_id, name, type, unit) VALUES ($1, $2, $3, $4, $5, $6)",
            &[&device(&s.device_id)?, &(s.idx as i16), &m.sensor_id, &m.name, &m.kind, &m.unit],
        )
        .await?;
    }
    for link in &rows.account_devices {
        tx.execute(
            "INSERT INTO account_devices (account_id, device_pk, can_write) VALUES ($1, $2, $3)",
            &[&account(&link.username)?, &device(&link.device_id)?, &link.can_write],
        )
        .await?;
    }
    let mut keys = HashMap::new();
    for k in &rows.api_keys {
        refuse_existing(&tx, "SELECT 1 FROM api_keys WHERE digest = $1", &k.digest, format!("API key {}…", k.prefix))
            .await?;
        let row = tx
            .query_one(
                "INSERT INTO api_keys (digest, prefix, account_id, scoped, revoked, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
                &[&k.digest, &k.prefix, &account(&k.username)?, &k.scoped, &k.revoked, &k.created_at],
            )
            .await?;
        keys.insert(k.digest.as_slice(), row.get::<_, i64>(0));
    }
    for (digest, dev) in &rows.api_key_devices {
        let key = keys.get(digest.as_slice()).copied().ok_or_else(|| missing("API key", "?"))?;
        tx.execute("INSERT INTO api_key_devices (key_id, device_pk) VALUES ($1, $2)", &[&key, &device(dev)?]).await?;
    }
    for k in &rows.webhook_keys {
        refuse_existing(
            &tx,
            "SELECT 1 FROM webhook_keys WHERE digest = $1",
            &k.digest,
            format!("webhook key {}…", k.prefix),
        )
        .await?;
        tx.execute(
            "INSERT INTO webhook_keys (digest, prefix, account_id, revoked, created_at) VALUES ($1, $2, $3, $4, $5)",
            &[&k.digest, &k.prefix, &account(&k.username)?, &k.revoked, &k.created_at],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

pub(super) async fn restore_hours(c: &mut Client, device_id: &str, hours: Vec<StoredHour>) -> StoreResult<()> {
    let tx = begin_bulk(c).await?;
    let pk: i64 = tx
        .query_opt("SELECT id FROM devices WHERE device_id = $1", &[&device_id])
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("device {device_id:?} is not in the target")))?
        .get(0);
    let rows: Vec<HourRow> =
        hours.into_iter().map(|h| HourRow { device_pk: pk, chunk: h.chunk, data: h.data }).collect();
    copy_hours(&tx, "COPY hours (device_pk, chunk, data) FROM STDIN (FORMAT binary)", &rows).await?;
    let mut newest = crate::decide::latest::Newest::default();
    for r in &rows {
        newest.add_hour(pk, r.chunk, &r.data)?;
    }
    crate::write::tx::Tx::upsert_latest(&super::tx::PgTx::new(&tx), &newest.take()).await?;
    tx.commit().await?;
    Ok(())
}
