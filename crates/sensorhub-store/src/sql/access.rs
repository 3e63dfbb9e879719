//! Who may do what, and the installation, written once for both backends:
//! credentials by name or digest, a device in a caller's scope with its
//! sensors, write permission, the access generation, installation facts,
//! and the admin commands' lists.

use super::by_keys::ByKeys;
use super::{Row, Sql};
use crate::access_cache::WriteTarget;
use crate::decide::FastMap;
use crate::{
    AccountAuth, AccountSummary, ApiKeyAuth, ApiKeySummary, DeviceHandle, Generations, Scope, StoreResult,
    WebhookKeyAuth,
};
use sensorhub_core::model::SensorMeta;
use sensorhub_core::secret::KeyDigest;

/// The `WHERE` clause selecting the devices `d` of a scope, with
/// parameters `$1` (account, or NULL for all) and `$2` (scoped key or NULL):
/// [`Scope::params`](crate::Scope::params).
/// Each device is looked up by primary key (`EXISTS`): `d.id IN (SELECT …)`
/// made SQLite list every device of the account for each query, so finding
/// one station cost as much as the account's fleet (80 % of a webhook
/// request's time with 10,000 stations).
pub(crate) const SCOPE_FILTER: &str = "(CAST($1 AS bigint) IS NULL
         OR EXISTS (SELECT 1 FROM account_devices scope_a WHERE scope_a.account_id = $1 AND scope_a.device_pk = d.id))
     AND (CAST($2 AS bigint) IS NULL
         OR EXISTS (SELECT 1 FROM api_key_devices scope_k WHERE scope_k.key_id = $2 AND scope_k.device_pk = d.id))";

/// A sensor from columns `from..from + 4` of `r` (id, name, type, unit).
pub(crate) fn sensor(r: &Row, from: usize) -> StoreResult<SensorMeta> {
    Ok(SensorMeta { sensor_id: r.get(from)?, name: r.get(from + 1)?, kind: r.get(from + 2)?, unit: r.get(from + 3)? })
}

/// The credentials of `username`.
pub(crate) async fn account_auth(c: &impl Sql, username: &str) -> StoreResult<Option<AccountAuth>> {
    let sql = "SELECT id, password_hash, disabled FROM accounts WHERE username = $1";
    let Some(r) = c.query_opt(sql, &[username.into()]).await? else { return Ok(None) };
    Ok(Some(AccountAuth { account_id: r.get(0)?, password_hash: r.get(1)?, disabled: r.get(2)? }))
}

/// The API key with `digest`, with its account's state.
pub(crate) async fn api_key_auth(c: &impl Sql, digest: &KeyDigest) -> StoreResult<Option<ApiKeyAuth>> {
    let sql = "SELECT k.id, k.account_id, k.scoped, k.revoked, a.disabled, (SELECT generation FROM access_generation)
               FROM api_keys k JOIN accounts a ON a.id = k.account_id WHERE k.digest = $1";
    let Some(r) = c.query_opt(sql, &[digest[..].into()]).await? else { return Ok(None) };
    Ok(Some(ApiKeyAuth {
        key_id: r.get(0)?,
        account_id: r.get(1)?,
        scoped: r.get(2)?,
        revoked: r.get(3)?,
        account_disabled: r.get(4)?,
        access: r.get(5)?,
    }))
}

/// The webhook key with `digest`, with its account's state and the digest
/// as stored: the caller compares it with the one it computed in constant
/// time (comparing the argument with itself would check nothing). The
/// generations come in the same statement, so that a device's write
/// permission kept since then can be trusted without another round trip.
pub(crate) async fn webhook_key_auth(c: &impl Sql, digest: &KeyDigest) -> StoreResult<Option<WebhookKeyAuth>> {
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "SELECT k.id, k.account_id, k.revoked, a.disabled, k.digest, {GENERATIONS}
             FROM webhook_keys k JOIN accounts a ON a.id = k.account_id WHERE k.digest = $1"
        )
    });
    let Some(r) = c.query_opt(&SQL, &[digest[..].into()]).await? else { return Ok(None) };
    let Ok(stored) = <[u8; 32]>::try_from(r.get::<Vec<u8>>(4)?) else { return Ok(None) };
    Ok(Some(WebhookKeyAuth {
        key_id: r.get(0)?,
        account_id: r.get(1)?,
        digest: stored,
        revoked: r.get(2)?,
        account_disabled: r.get(3)?,
        generations: generations(&r, 5)?,
    }))
}

/// Two columns: the access and device generations, read in the statement
/// that reads what they tag.
pub(crate) const GENERATIONS: &str =
    "(SELECT generation FROM access_generation), (SELECT generation FROM device_generation)";

/// The access and device generations as they stand (in a writing
/// transaction: as they will be when it commits).
pub(crate) async fn current_generations(c: &impl Sql) -> StoreResult<Generations> {
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| format!("SELECT {GENERATIONS}"));
    generations(&c.query_one(&SQL, &[]).await?, 0)
}

/// The [`GENERATIONS`] at columns `from` and `from + 1` of `r`.
fn generations(r: &Row, from: usize) -> StoreResult<Generations> {
    Ok(Generations { access: r.get(from)?, devices: r.get(from + 1)? })
}

/// Whether account `account_id` owns device `pk` or sees it with a write grant.
pub(crate) async fn may_write(c: &impl Sql, account_id: i64, pk: i64) -> StoreResult<bool> {
    let sql = "SELECT EXISTS (SELECT 1 FROM devices WHERE id = $2 AND owner_id = $1)
                   OR EXISTS (SELECT 1 FROM account_devices WHERE account_id = $1 AND device_pk = $2 AND can_write)";
    c.query_one(sql, &[account_id.into(), pk.into()]).await?.get(0)
}

/// The device `device_id` as account `account_id` sees it (its own scope,
/// no key), with whether it may write it (as [`may_write`]) and the
/// generations the answer was read at: one statement for the webhook's,
/// the line protocol's and the acknowledgement's two checks (two made each
/// request begin two read transactions).
pub(crate) async fn writable_device(
    c: &impl Sql,
    account_id: i64,
    device_id: &str,
) -> StoreResult<Option<WriteTarget>> {
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "SELECT d.id, s.idx, s.sensor_id, s.name, s.type, s.unit,
                    COALESCE(d.owner_id = $1, FALSE) OR EXISTS (SELECT 1 FROM account_devices w
                        WHERE w.account_id = $1 AND w.device_pk = d.id AND w.can_write),
                    {GENERATIONS}
             FROM devices d LEFT JOIN sensors s ON s.device_pk = d.id
             WHERE d.device_id = $3 AND {SCOPE_FILTER} ORDER BY s.idx"
        )
    });
    let (account, key) = Scope::Account { account_id, key: None }.params();
    let rows = c.query(&SQL, &[account.into(), key.into(), device_id.into()]).await?;
    let Some(first) = rows.first() else { return Ok(None) };
    let may_write: bool = first.get(6)?;
    let read_at = generations(first, 7)?;
    Ok(device_of(&rows)?.map(|device| WriteTarget { device: std::sync::Arc::new(device), may_write, read_at }))
}

/// The number that moves whenever access may have been taken away.
pub(crate) async fn access_generation(c: &impl Sql) -> StoreResult<i64> {
    c.query_one("SELECT generation FROM access_generation", &[]).await?.get(0)
}

/// The sensors of device `pk`, by idx.
pub(crate) async fn device_sensors(c: &impl Sql, pk: i64) -> StoreResult<Vec<SensorMeta>> {
    let sql = "SELECT idx, sensor_id, name, type, unit FROM sensors WHERE device_pk = $1 ORDER BY idx";
    let rows = c.query(sql, &[pk.into()]).await?;
    let sensors = rows.iter().map(|r| Ok((r.get::<i64>(0)?, sensor(r, 1)?))).collect::<StoreResult<Vec<_>>>()?;
    Ok(crate::decide::sensors_by_idx(sensors))
}

static DEVICES_WITH_SENSORS: ByKeys = ByKeys::new(
    "SELECT d.device_id, d.id, s.idx, s.sensor_id, s.name, s.type, s.unit
     FROM devices d LEFT JOIN sensors s ON s.device_pk = d.id
     WHERE d.device_id IN (",
    ") ORDER BY d.id, s.idx",
);

/// Devices `ids` with their keys and sensors by idx (as [`device_sensors`]),
/// by id, in a few queries however many they are; an id of no device is
/// left out.
pub(crate) async fn devices_with_sensors(
    c: &impl Sql,
    ids: &[&str],
) -> StoreResult<FastMap<String, (i64, Vec<SensorMeta>)>> {
    let mut rows: FastMap<String, (i64, Vec<(i64, SensorMeta)>)> = FastMap::default();
    DEVICES_WITH_SENSORS
        .each(c, ids, |r| {
            let device = rows.entry(r.get(0)?).or_insert_with(|| (0, Vec::new()));
            device.0 = r.get(1)?;
            if let Some(idx) = r.get::<Option<i64>>(2)? {
                device.1.push((idx, sensor(r, 3)?));
            }
            Ok(())
        })
        .await?;
    Ok(rows.into_iter().map(|(id, (pk, sensors))| (id, (pk, crate::decide::sensors_by_idx(sensors)))).collect())
}

/// The device `device_id` visible in `scope`, with its sensors, in one query.
pub(crate) async fn find_device(c: &impl Sql, scope: Scope, device_id: &str) -> StoreResult<Option<DeviceHandle>> {
    let (account, key) = scope.params();
    let sql = format!(
        "SELECT d.id, s.idx, s.sensor_id, s.name, s.type, s.unit
         FROM devices d LEFT JOIN sensors s ON s.device_pk = d.id
         WHERE d.device_id = $3 AND {SCOPE_FILTER} ORDER BY s.idx"
    );
    let rows = c.query(&sql, &[account.into(), key.into(), device_id.into()]).await?;
    device_of(&rows)
}

/// The device of rows `(d.id, s.idx, s.sensor_id, s.name, s.type,
/// s.unit, ...)`, one per sensor (a device without sensors: one with a
/// NULL idx), in idx order; `None` for no rows. Each sensor at its idx
/// (values are stored by it), a gap left by a removed row kept.
fn device_of(rows: &[Row]) -> StoreResult<Option<DeviceHandle>> {
    let Some(first) = rows.first() else { return Ok(None) };
    let mut sensors = Vec::with_capacity(rows.len());
    for r in rows {
        if let Some(idx) = r.get::<Option<i64>>(1)? {
            sensors.push((idx, sensor(r, 2)?));
        }
    }
    Ok(Some(DeviceHandle { pk: first.get(0)?, sensors: crate::decide::sensors_by_idx(sensors) }))
}

/// This installation's random id.
pub(crate) async fn installation_id(c: &impl Sql) -> StoreResult<String> {
    c.query_one("SELECT value FROM installation WHERE key = 'id'", &[]).await?.get(0)
}

/// The fact recorded under `key`.
pub(crate) async fn installation_fact(c: &impl Sql, key: &str) -> StoreResult<Option<String>> {
    c.query_opt("SELECT value FROM installation WHERE key = $1", &[key.into()]).await?.map(|r| r.get(0)).transpose()
}

/// Records `value` under `key`, replacing what was there.
pub(crate) async fn record_installation_fact(c: &impl Sql, key: &str, value: &str) -> StoreResult<()> {
    let sql = "INSERT INTO installation (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = $2";
    c.execute(sql, &[key.into(), value.into()]).await?;
    Ok(())
}

/// Whether there is no account and no device.
pub(crate) async fn is_empty(c: &impl Sql) -> StoreResult<bool> {
    let sql = "SELECT NOT EXISTS (SELECT 1 FROM accounts) AND NOT EXISTS (SELECT 1 FROM devices)";
    c.query_one(sql, &[]).await?.get(0)
}

/// Every account, by username, with the devices it sees and those it may write.
pub(crate) async fn accounts(c: &impl Sql) -> StoreResult<Vec<AccountSummary>> {
    let sql = "SELECT a.username, a.disabled, d.device_id,
                      (ad.can_write OR d.owner_id IS NOT DISTINCT FROM a.id) FROM accounts a
               LEFT JOIN account_devices ad ON ad.account_id = a.id LEFT JOIN devices d ON d.id = ad.device_pk
               ORDER BY a.username, d.device_id";
    let mut out: Vec<AccountSummary> = Vec::new();
    for r in c.query(sql, &[]).await? {
        let username: String = r.get(0)?;
        if out.last().is_none_or(|a| a.username != username) {
            out.push(AccountSummary { username, disabled: r.get(1)?, devices: Vec::new(), writes: Vec::new() });
        }
        if let (Some(d), Some(a)) = (r.get::<Option<String>>(2)?, out.last_mut()) {
            if r.get::<Option<bool>>(3)?.unwrap_or(false) {
                a.writes.push(d.clone());
            }
            a.devices.push(d);
        }
    }
    Ok(out)
}

/// Every API key (its shown prefix), by account and creation, with its device list when scoped.
pub(crate) async fn api_keys(c: &impl Sql) -> StoreResult<Vec<ApiKeySummary>> {
    let sql = "SELECT k.id, k.prefix, a.username, k.scoped, k.revoked, d.device_id FROM api_keys k
               JOIN accounts a ON a.id = k.account_id
               LEFT JOIN api_key_devices kd ON kd.key_id = k.id LEFT JOIN devices d ON d.id = kd.device_pk
               ORDER BY a.username, k.id, d.device_id";
    let mut out: Vec<(i64, ApiKeySummary)> = Vec::new();
    for r in c.query(sql, &[]).await? {
        let id: i64 = r.get(0)?;
        if out.last().is_none_or(|(last, _)| *last != id) {
            let scoped: bool = r.get(3)?;
            let key = ApiKeySummary {
                prefix: r.get(1)?,
                username: r.get(2)?,
                devices: scoped.then(Vec::new),
                revoked: r.get(4)?,
            };
            out.push((id, key));
        }
        if let (Some(d), Some((_, k))) = (r.get::<Option<String>>(5)?, out.last_mut()) {
            k.devices.get_or_insert_with(Vec::new).push(d);
        }
    }
    Ok(out.into_iter().map(|(_, k)| k).collect())
}

/// Gives every account write permission on every device it sees (the
/// behaviour before write grants); how many grants were added.
pub(crate) async fn grant_write_to_viewers(c: &impl Sql) -> StoreResult<u64> {
    let sql = "UPDATE account_devices SET can_write = true WHERE NOT can_write
               AND NOT EXISTS (SELECT 1 FROM devices d WHERE d.id = device_pk AND d.owner_id = account_id)";
    c.execute(sql, &[]).await
}
