//! Provisioning's primitive operations on SQLite
//! ([`crate::write::tx::ProvisionTx`], [`crate::write::tx::SubscriptionTx`]).

use super::tx::SqliteTx;
use crate::StoreResult;
use crate::decide::subscriptions::SubscriptionRow;
use crate::decide::{Links, StoredAccount, StoredKey, now};
use crate::write::tx::{DeviceFields, KeyKind, NewKey, ProvisionTx, RetentionOf, SubscriptionTx};
use rusqlite::{Connection, OptionalExtension, params};
use sensorhub_core::model::SensorMeta;
use std::collections::BTreeSet;

fn pk_set(c: &Connection, sql: &str, id: impl rusqlite::ToSql) -> StoreResult<BTreeSet<i64>> {
    let mut stmt = c.prepare_cached(sql)?;
    let set = stmt.query_map([id], |r| r.get(0))?.collect::<Result<_, _>>()?;
    Ok(set)
}

/// Replaces the rows of a link table for `owner` with `pks`.
fn set_links(
    c: &Connection,
    table: &str,
    owner_col: &str,
    owner: &dyn rusqlite::ToSql,
    pks: &BTreeSet<i64>,
) -> StoreResult<()> {
    c.execute(&format!("DELETE FROM {table} WHERE {owner_col} = ?1"), [owner])?;
    let mut stmt = c.prepare_cached(&format!("INSERT INTO {table} ({owner_col}, device_pk) VALUES (?1, ?2)"))?;
    for pk in pks {
        stmt.execute(params![owner, pk])?;
    }
    Ok(())
}

impl ProvisionTx for SqliteTx<'_> {
    async fn device_row(&self, device_id: &str) -> StoreResult<Option<(i64, DeviceFields)>> {
        let sql = "SELECT id, name, type, lat, long, interval_seconds FROM devices WHERE device_id = ?1";
        let row = self.0.query_row(sql, [device_id], |r| {
            let row = DeviceFields {
                name: r.get(1)?,
                kind: r.get(2)?,
                lat: r.get(3)?,
                long: r.get(4)?,
                interval_seconds: r.get(5)?,
            };
            Ok((r.get(0)?, row))
        });
        Ok(row.optional()?)
    }

    async fn insert_device(&self, device_id: &str, d: &DeviceFields) -> StoreResult<i64> {
        self.0.execute(
            "INSERT INTO devices (device_id, name, type, lat, long, interval_seconds) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![device_id, d.name, d.kind, d.lat, d.long, d.interval_seconds],
        )?;
        Ok(self.0.last_insert_rowid())
    }

    async fn update_device(&self, pk: i64, d: &DeviceFields) -> StoreResult<()> {
        self.0.execute(
            "UPDATE devices SET name = ?2, type = ?3, lat = ?4, long = ?5, interval_seconds = ?6 WHERE id = ?1",
            params![pk, d.name, d.kind, d.lat, d.long, d.interval_seconds],
        )?;
        Ok(())
    }

    async fn put_sensor(&self, pk: i64, idx: usize, s: &SensorMeta, new: bool) -> StoreResult<()> {
        let sql = if new {
            "INSERT INTO sensors (device_pk, idx, sensor_id, name, type, unit) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
        } else {
            "UPDATE sensors SET sensor_id = ?3, name = ?4, type = ?5, unit = ?6 WHERE device_pk = ?1 AND idx = ?2"
        };
        self.0.execute(sql, params![pk, idx as i64, s.sensor_id, s.name, s.kind, s.unit])?;
        Ok(())
    }

    async fn set_retention(&self, of: RetentionOf, seconds: Option<i64>) -> StoreResult<bool> {
        let (table, id) = match of {
            RetentionOf::Account(id) => ("accounts", id),
            RetentionOf::Device(id) => ("devices", id),
        };
        let sql = format!("UPDATE {table} SET retention_seconds = ?2 WHERE id = ?1 AND retention_seconds IS NOT ?2");
        Ok(self.0.prepare_cached(&sql)?.execute(params![id, seconds])? > 0)
    }

    async fn account_row(&self, username: &str) -> StoreResult<Option<StoredAccount>> {
        let sql = "SELECT id, password_hash, disabled FROM accounts WHERE username = ?1";
        let row = self.0.query_row(sql, [username], |r| {
            Ok(StoredAccount { id: r.get(0)?, password_hash: r.get(1)?, disabled: r.get(2)? })
        });
        Ok(row.optional()?)
    }

    async fn insert_account(&self, username: &str, hash: &str, disabled: bool, created_at: i64) -> StoreResult<i64> {
        self.0.execute(
            "INSERT INTO accounts (username, password_hash, disabled, created_at) VALUES (?1, ?2, ?3, ?4)",
            params![username, hash, disabled, created_at],
        )?;
        Ok(self.0.last_insert_rowid())
    }

    async fn update_account(&self, id: i64, password_hash: Option<&str>, disabled: Option<bool>) -> StoreResult<()> {
        self.0.execute(
            "UPDATE accounts SET password_hash = coalesce(?2, password_hash), disabled = coalesce(?3, disabled) WHERE id = ?1",
            params![id, password_hash, disabled],
        )?;
        Ok(())
    }

    async fn links_of(&self, id: i64) -> StoreResult<Links> {
        let mut stmt =
            self.0.prepare_cached("SELECT device_pk, can_write FROM account_devices WHERE account_id = ?1")?;
        let links = stmt.query_map([id], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?;
        Ok(links)
    }

    async fn set_links_of(&self, id: i64, links: &Links) -> StoreResult<()> {
        self.0.execute("DELETE FROM account_devices WHERE account_id = ?1", [id])?;
        let mut stmt = self
            .0
            .prepare_cached("INSERT INTO account_devices (account_id, device_pk, can_write) VALUES (?1, ?2, ?3)")?;
        for (pk, can_write) in links {
            stmt.execute(params![id, pk, can_write])?;
        }
        Ok(())
    }

    async fn owned_by(&self, id: i64) -> StoreResult<BTreeSet<i64>> {
        pk_set(self.0, "SELECT id FROM devices WHERE owner_id = ?1", id)
    }

    async fn set_owner(&self, device_id: &str, account: i64) -> StoreResult<bool> {
        let changed = self.0.execute(
            "UPDATE devices SET owner_id = ?2 WHERE device_id = ?1 AND owner_id IS NOT ?2",
            params![device_id, account],
        )? > 0;
        let linked = self.0.execute(
            "INSERT INTO account_devices (account_id, device_pk) SELECT ?1, id FROM devices WHERE device_id = ?2
             ON CONFLICT DO NOTHING",
            params![account, device_id],
        )? > 0;
        Ok(changed || linked)
    }

    async fn key_row(&self, kind: KeyKind, digest: &[u8]) -> StoreResult<Option<StoredKey>> {
        let sql = match kind {
            KeyKind::Api => "SELECT id, account_id, scoped, revoked FROM api_keys WHERE digest = ?1",
            KeyKind::Webhook => "SELECT id, account_id, 0, revoked FROM webhook_keys WHERE digest = ?1",
        };
        let key = self
            .0
            .query_row(sql, [digest], |r| {
                Ok(StoredKey {
                    id: r.get(0)?,
                    account_id: r.get(1)?,
                    scoped: r.get(2)?,
                    revoked: r.get(3)?,
                    devices: BTreeSet::new(),
                })
            })
            .optional()?;
        match key {
            Some(k) if kind == KeyKind::Api => {
                let devices = pk_set(self.0, "SELECT device_pk FROM api_key_devices WHERE key_id = ?1", k.id)?;
                Ok(Some(StoredKey { devices, ..k }))
            }
            other => Ok(other),
        }
    }

    async fn insert_key(&self, k: NewKey<'_>) -> StoreResult<i64> {
        match k.kind {
            KeyKind::Api => self.0.execute(
                "INSERT INTO api_keys (digest, prefix, account_id, scoped, revoked, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![k.digest, k.prefix, k.account_id, k.scoped, k.revoked, k.created_at],
            )?,
            KeyKind::Webhook => self.0.execute(
                "INSERT INTO webhook_keys (digest, prefix, account_id, revoked, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![k.digest, k.prefix, k.account_id, k.revoked, k.created_at],
            )?,
        };
        Ok(self.0.last_insert_rowid())
    }

    async fn update_key(&self, kind: KeyKind, id: i64, scoped: Option<bool>, revoked: bool) -> StoreResult<()> {
        match kind {
            KeyKind::Api => self.0.execute(
                "UPDATE api_keys SET scoped = coalesce(?2, scoped), revoked = ?3 WHERE id = ?1",
                params![id, scoped, revoked],
            )?,
            KeyKind::Webhook => {
                self.0.execute("UPDATE webhook_keys SET revoked = ?2 WHERE id = ?1", params![id, revoked])?
            }
        };
        Ok(())
    }

    async fn set_key_devices(&self, id: i64, devices: &BTreeSet<i64>) -> StoreResult<()> {
        set_links(self.0, "api_key_devices", "key_id", &id, devices)
    }

    async fn api_keys_matching(&self, digest: &[u8], prefix: &str) -> StoreResult<Vec<(i64, String)>> {
        let mut stmt = self.0.prepare("SELECT id, prefix FROM api_keys WHERE digest = ?1")?;
        let mut found: Vec<(i64, String)> =
            stmt.query_map([digest], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?;
        if found.is_empty() && !prefix.is_empty() {
            let mut stmt = self.0.prepare("SELECT id, prefix FROM api_keys WHERE prefix = ?1 AND revoked = 0")?;
            found = stmt.query_map([prefix], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?;
        }
        Ok(found)
    }
}

impl SubscriptionTx for SqliteTx<'_> {
    async fn subscription_row(&self, account: i64, name: &str) -> StoreResult<Option<SubscriptionRow>> {
        let row = self
            .0
            .query_row(
                "SELECT id, url, all_devices, events, enabled, batch, batch_max, allow_http, secret, headers
                 FROM subscriptions WHERE account_id = ?1 AND name = ?2",
                params![account, name],
                |r| {
                    Ok(SubscriptionRow {
                        id: r.get(0)?,
                        url: r.get(1)?,
                        devices: (!r.get::<_, bool>(2)?).then(BTreeSet::new),
                        events: r.get(3)?,
                        enabled: r.get(4)?,
                        batch: r.get(5)?,
                        batch_max: r.get(6)?,
                        allow_http: r.get(7)?,
                        secret: r.get(8)?,
                        headers: r.get(9)?,
                    })
                },
            )
            .optional()?;
        let Some(mut row) = row else { return Ok(None) };
        if let Some(set) = &mut row.devices {
            *set = pk_set(self.0, "SELECT device_pk FROM subscription_devices WHERE subscription_id = ?1", &row.id)?;
        }
        Ok(Some(row))
    }

    async fn put_subscription(&self, account: i64, name: &str, row: &SubscriptionRow) -> StoreResult<()> {
        // One statement for both: an update keeps the name and creation time.
        self.0.execute(
            "INSERT INTO subscriptions (id, account_id, name, url, all_devices, events, secret, headers, enabled,
                                        batch, batch_max, allow_http, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
             ON CONFLICT (id) DO UPDATE SET url = excluded.url, all_devices = excluded.all_devices,
                 events = excluded.events, secret = excluded.secret, headers = excluded.headers,
                 enabled = excluded.enabled, batch = excluded.batch, batch_max = excluded.batch_max,
                 allow_http = excluded.allow_http",
            params![
                row.id,
                account,
                name,
                row.url,
                row.devices.is_none(),
                row.events,
                row.secret,
                row.headers,
                row.enabled,
                row.batch,
                row.batch_max,
                row.allow_http,
                now()
            ],
        )?;
        set_links(self.0, "subscription_devices", "subscription_id", &row.id, &row.devices.clone().unwrap_or_default())
    }
}
