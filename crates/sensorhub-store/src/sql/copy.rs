//! `sensorhub copy`'s reading half, written once for both backends: every
//! row but readings, by natural key, sorted (the caller runs it in one
//! snapshot), and how many stored hours there are.

use super::{Row, Sql};
use crate::{AccountDeviceRow, AccountRow, DeviceRow, Installation, KeyRow, SensorRow, StoreResult};

/// The rows of `sql`, each read by `f`.
async fn rows<T>(c: &impl Sql, sql: &str, f: impl Fn(&Row) -> StoreResult<T>) -> StoreResult<Vec<T>> {
    c.query(sql, &[]).await?.iter().map(f).collect()
}

fn key_row(r: &Row) -> StoreResult<KeyRow> {
    Ok(KeyRow {
        digest: r.get(0)?,
        prefix: r.get(1)?,
        username: r.get(2)?,
        scoped: r.get(3)?,
        revoked: r.get(4)?,
        created_at: r.get(5)?,
    })
}

/// Every row but readings, by natural key, sorted.
pub(crate) async fn export(c: &impl Sql) -> StoreResult<Installation> {
    let accounts = rows(
        c,
        "SELECT username, password_hash, disabled, created_at, retention_seconds FROM accounts ORDER BY username",
        |r| {
            Ok(AccountRow {
                username: r.get(0)?,
                password_hash: r.get(1)?,
                disabled: r.get(2)?,
                created_at: r.get(3)?,
                retention_seconds: r.get(4)?,
            })
        },
    );
    let devices = rows(
        c,
        "SELECT d.device_id, d.name, d.type, d.lat, d.long, d.interval_seconds, a.username, d.retention_seconds
         FROM devices d LEFT JOIN accounts a ON a.id = d.owner_id ORDER BY d.device_id",
        |r| {
            Ok(DeviceRow {
                device_id: r.get(0)?,
                name: r.get(1)?,
                kind: r.get(2)?,
                lat: r.get(3)?,
                long: r.get(4)?,
                interval_seconds: r.get(5)?,
                owner: r.get(6)?,
                retention_seconds: r.get(7)?,
            })
        },
    );
    let sensors = rows(
        c,
        "SELECT d.device_id, s.idx, s.sensor_id, s.name, s.type, s.unit FROM sensors s
         JOIN devices d ON d.id = s.device_pk ORDER BY d.device_id, s.idx",
        |r| Ok(SensorRow { device_id: r.get(0)?, idx: r.get(1)?, sensor: super::access::sensor(r, 2)? }),
    );
    let account_devices = rows(
        c,
        "SELECT a.username, d.device_id, x.can_write FROM account_devices x JOIN accounts a ON a.id = x.account_id
         JOIN devices d ON d.id = x.device_pk ORDER BY a.username, d.device_id",
        |r| Ok(AccountDeviceRow { username: r.get(0)?, device_id: r.get(1)?, can_write: r.get(2)? }),
    );
    let api_keys = rows(
        c,
        "SELECT k.digest, k.prefix, a.username, k.scoped, k.revoked, k.created_at FROM api_keys k
         JOIN accounts a ON a.id = k.account_id ORDER BY k.digest",
        key_row,
    );
    let api_key_devices = rows(
        c,
        "SELECT k.digest, d.device_id FROM api_key_devices x JOIN api_keys k ON k.id = x.key_id
         JOIN devices d ON d.id = x.device_pk ORDER BY k.digest, d.device_id",
        |r| Ok((r.get(0)?, r.get(1)?)),
    );
    let webhook_keys = rows(
        c,
        "SELECT k.digest, k.prefix, a.username, false, k.revoked, k.created_at FROM webhook_keys k
         JOIN accounts a ON a.id = k.account_id ORDER BY k.digest",
        key_row,
    );
    Ok(Installation {
        accounts: accounts.await?,
        devices: devices.await?,
        sensors: sensors.await?,
        account_devices: account_devices.await?,
        api_keys: api_keys.await?,
        api_key_devices: api_key_devices.await?,
        webhook_keys: webhook_keys.await?,
    })
}

/// How many hours of readings are stored, over all devices.
pub(crate) async fn hour_count(c: &impl Sql) -> StoreResult<u64> {
    c.query_one("SELECT count(*) FROM hours", &[]).await?.get(0)
}
