//! Provisioning's primitive operations on PostgreSQL
//! ([`crate::write::tx::ProvisionTx`], [`crate::write::tx::SubscriptionTx`]).

use super::tx::PgTx;
use crate::StoreResult;
use crate::decide::subscriptions::SubscriptionRow;
use crate::decide::{Links, StoredAccount, StoredKey, now};
use crate::write::tx::{DeviceFields, KeyKind, NewKey, ProvisionTx, RetentionOf, SubscriptionTx};
use deadpool_postgres::{GenericClient, Transaction};
use sensorhub_core::model::SensorMeta;
use std::collections::BTreeSet;
use tokio_postgres::types::ToSql;

async fn pk_set(tx: &Transaction<'_>, sql: &str, id: &(dyn ToSql + Sync)) -> StoreResult<BTreeSet<i64>> {
    Ok(tx.query(sql, &[id]).await?.iter().map(|r| r.get(0)).collect())
}

/// Replaces the rows of a link table for `owner` with `pks`.
async fn set_links(
    tx: &Transaction<'_>,
    table: &str,
    owner_col: &str,
    owner: &(dyn ToSql + Sync),
    pks: &BTreeSet<i64>,
) -> StoreResult<()> {
    tx.execute(&format!("DELETE FROM {table} WHERE {owner_col} = $1"), &[owner]).await?;
    let pks: Vec<i64> = pks.iter().copied().collect();
    let sql = format!("INSERT INTO {table} ({owner_col}, device_pk) SELECT $1, unnest($2::bigint[])");
    tx.execute(&sql, &[owner, &pks]).await?;
    Ok(())
}

impl ProvisionTx for PgTx<'_> {
    async fn device_row(&self, device_id: &str) -> StoreResult<Option<(i64, DeviceFields)>> {
        let sql = "SELECT id, name, type, lat, long, interval_seconds FROM devices WHERE device_id = $1";
        Ok(self.tx().query_opt(sql, &[&device_id]).await?.map(|r| {
            let row = DeviceFields {
                name: r.get(1),
                kind: r.get(2),
                lat: r.get(3),
                long: r.get(4),
                interval_seconds: r.get(5),
            };
            (r.get(0), row)
        }))
    }

    async fn insert_device(&self, device_id: &str, d: &DeviceFields) -> StoreResult<i64> {
        let row = self
            .tx()
            .query_one(
                "INSERT INTO devices (device_id, name, type, lat, long, interval_seconds)
                 VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
                &[&device_id, &d.name, &d.kind, &d.lat, &d.long, &d.interval_seconds],
            )
            .await?;
        Ok(row.get(0))
    }

    async fn update_device(&self, pk: i64, d: &DeviceFields) -> StoreResult<()> {
        self.tx()
            .execute(
                "UPDATE devices SET name = $2, type = $3, lat = $4, long = $5, interval_seconds = $6 WHERE id = $1",
                &[&pk, &d.name, &d.kind, &d.lat, &d.long, &d.interval_seconds],
            )
            .await?;
        Ok(())
    }

    async fn put_sensor(&self, pk: i64, idx: usize, s: &SensorMeta, new: bool) -> StoreResult<()> {
        let sql = if new {
            "INSERT INTO sensors (device_pk, idx, sensor_id, name, type, unit) VALUES ($1, $2, $3, $4, $5, $6)"
        } else {
            "UPDATE sensors SET sensor_id = $3, name = $4, type = $5, unit = $6 WHERE device_pk = $1 AND idx = $2"
        };
        self.tx().execute(sql, &[&pk, &(idx as i16), &s.sensor_id, &s.name, &s.kind, &s.unit]).await?;
        Ok(())
    }

    async fn set_retention(&self, of: RetentionOf, seconds: Option<i64>) -> StoreResult<bool> {
        let (table, id) = match of {
            RetentionOf::Account(id) => ("accounts", id),
            RetentionOf::Device(id) => ("devices", id),
        };
        let sql = format!(
            "UPDATE {table} SET retention_seconds = $2 WHERE id = $1 AND retention_seconds IS DISTINCT FROM $2"
        );
        Ok(self.tx().execute(&sql, &[&id, &seconds]).await? > 0)
    }

    async fn account_row(&self, username: &str) -> StoreResult<Option<StoredAccount>> {
        let sql = "SELECT id, password_hash, disabled FROM accounts WHERE username = $1";
        let row = self.tx().query_opt(sql, &[&username]).await?;
        Ok(row.map(|r| StoredAccount { id: r.get(0), password_hash: r.get(1), disabled: r.get(2) }))
    }

    async fn insert_account(&self, username: &str, hash: &str, disabled: bool, created_at: i64) -> StoreResult<i64> {
        let row = self
            .tx()
            .query_one(
                "INSERT INTO accounts (username, password_hash, disabled, created_at) VALUES ($1, $2, $3, $4)
                 RETURNING id",
                &[&username, &hash, &disabled, &created_at],
            )
            .await?;
        Ok(row.get(0))
    }

    async fn update_account(&self, id: i64, password_hash: Option<&str>, disabled: Option<bool>) -> StoreResult<()> {
        self.tx()
            .execute(
                "UPDATE accounts SET password_hash = coalesce($2, password_hash), disabled = coalesce($3, disabled)
                 WHERE id = $1",
                &[&id, &password_hash, &disabled],
            )
            .await?;
        Ok(())
    }

    async fn links_of(&self, id: i64) -> StoreResult<Links> {
        let sql = "SELECT device_pk, can_write FROM account_devices WHERE account_id = $1";
        Ok(self.tx().query(sql, &[&id]).await?.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    async fn set_links_of(&self, id: i64, links: &Links) -> StoreResult<()> {
        self.tx().execute("DELETE FROM account_devices WHERE account_id = $1", &[&id]).await?;
        let (pks, writes): (Vec<i64>, Vec<bool>) = links.iter().map(|(pk, w)| (*pk, *w)).unzip();
        self.tx()
            .execute(
                "INSERT INTO account_devices (account_id, device_pk, can_write)
                 SELECT $1, * FROM unnest($2::bigint[], $3::boolean[])",
                &[&id, &pks, &writes],
            )
            .await?;
        Ok(())
    }

    async fn owned_by(&self, id: i64) -> StoreResult<BTreeSet<i64>> {
        pk_set(self.tx(), "SELECT id FROM devices WHERE owner_id = $1", &id).await
    }

    async fn set_owner(&self, device_id: &str, account: i64) -> StoreResult<bool> {
        let changed = self
            .tx()
            .execute(
                "UPDATE devices SET owner_id = $2 WHERE device_id = $1 AND owner_id IS DISTINCT FROM $2",
                &[&device_id, &account],
            )
            .await?;
        let linked = self
            .tx()
            .execute(
                "INSERT INTO account_devices (account_id, device_pk) SELECT $1, id FROM devices WHERE device_id = $2
                 ON CONFLICT DO NOTHING",
                &[&account, &device_id],
            )
            .await?;
        Ok(changed + linked > 0)
    }

    async fn key_row(&self, kind: KeyKind, digest: &[u8]) -> StoreResult<Option<StoredKey>> {
        let sql = match kind {
            KeyKind::Api => "SELECT id, account_id, scoped, revoked FROM api_keys WHERE digest = $1",
            KeyKind::Webhook => "SELECT id, account_id, false, revoked FROM webhook_keys WHERE digest = $1",
        };
        let Some(r) = self.tx().query_opt(sql, &[&digest]).await? else { return Ok(None) };
        let id: i64 = r.get(0);
        let devices = match kind {
            KeyKind::Api => pk_set(self.tx(), "SELECT device_pk FROM api_key_devices WHERE key_id = $1", &id).await?,
            KeyKind::Webhook => BTreeSet::new(),
        };
        Ok(Some(StoredKey { id, account_id: r.get(1), scoped: r.get(2), revoked: r.get(3), devices }))
    }

    async fn insert_key(&self, k: NewKey<'_>) -> StoreResult<i64> {
        let row = match k.kind {
            KeyKind::Api => {
                self.tx()
                    .query_one(
                        "INSERT INTO api_keys (digest, prefix, account_id, scoped, revoked, created_at)
                         VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
                        &[&k.digest, &k.prefix, &k.account_id, &k.scoped, &k.revoked, &k.created_at],
                    )
                    .await?
            }
            KeyKind::Webhook => {
                self.tx()
                    .query_one(
                        "INSERT INTO webhook_keys (digest, prefix, account_id, revoked, created_at)
                         VALUES ($1, $2, $3, $4, $5) RETURNING id",
                        &[&k.digest, &k.prefix, &k.account_id, &k.revoked, &k.created_at],
                    )
                    .await?
            }
        };
        Ok(row.get(0))
    }

    async fn update_key(&self, kind: KeyKind, id: i64, scoped: Option<bool>, revoked: bool) -> StoreResult<()> {
        match kind {
            KeyKind::Api => {
                self.tx()
                    .execute(
                        "UPDATE api_keys SET scoped = coalesce($2, scoped), revoked = $3 WHERE id = $1",
                        &[&id, &scoped, &revoked],
                    )
                    .await?
            }
            KeyKind::Webhook => {
                self.tx().execute("UPDATE webhook_keys SET revoked = $2 WHERE id = $1", &[&id, &revoked]).await?
            }
        };
        Ok(())
    }

    async fn set_key_devices(&self, id: i64, devices: &BTreeSet<i64>) -> StoreResult<()> {
        set_links(self.tx(), "api_key_devices", "key_id", &id, devices).await
    }

    async fn api_keys_matching(&self, digest: &[u8], prefix: &str) -> StoreResult<Vec<(i64, String)>> {
        let tx = self.tx();
        let mut found = tx.query("SELECT id, prefix FROM api_keys WHERE digest = $1", &[&digest]).await?;
        if found.is_empty() && !prefix.is_empty() {
            found = tx.query("SELECT id, prefix FROM api_keys WHERE prefix = $1 AND NOT revoked", &[&prefix]).await?;
        }
        Ok(found.iter().map(|r| (r.get(0), r.get(1))).collect())
    }
}

impl SubscriptionTx for PgTx<'_> {
    async fn subscription_row(&self, account: i64, name: &str) -> StoreResult<Option<SubscriptionRow>> {
        let row = self
            .tx()
            .query_opt(
                "SELECT id, url, all_devices, events, enabled, batch, batch_max, allow_http, secret, headers
                 FROM subscriptions WHERE account_id = $1 AND name = $2",
                &[&account, &name],
            )
            .await?;
        let Some(r) = row else { return Ok(None) };
        let mut row = SubscriptionRow {
            id: r.get(0),
            url: r.get(1),
            devices: (!r.get::<_, bool>(2)).then(BTreeSet::new),
            events: r.get(3),
            enabled: r.get(4),
            batch: r.get(5),
            batch_max: i64::from(r.get::<_, i32>(6)),
            allow_http: r.get(7),
            secret: r.get(8),
            headers: r.get(9),
        };
        if let Some(set) = &mut row.devices {
            let sql = "SELECT device_pk FROM subscription_devices WHERE subscription_id = $1";
            *set = pk_set(self.tx(), sql, &row.id).await?;
        }
        Ok(Some(row))
    }

    async fn put_subscription(&self, account: i64, name: &str, row: &SubscriptionRow) -> StoreResult<()> {
        // One statement for both: an update keeps the name and creation time.
        self.tx()
            .execute(
                "INSERT INTO subscriptions (id, account_id, name, url, all_devices, events, secret, headers, enabled,
                                            batch, batch_max, allow_http, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
                 ON CONFLICT (id) DO UPDATE SET url = excluded.url, all_devices = excluded.all_devices,
                     events = excluded.events, secret = excluded.secret, headers = excluded.headers,
                     enabled = excluded.enabled, batch = excluded.batch, batch_max = excluded.batch_max,
                     allow_http = excluded.allow_http",
                &[
                    &row.id,
                    &account,
                    &name,
                    &row.url,
                    &row.devices.is_none(),
                    &row.events,
                    &row.secret,
                    &row.headers,
                    &row.enabled,
                    &row.batch,
                    &i32::try_from(row.batch_max).unwrap_or(i32::MAX),
                    &row.allow_http,
                    &now(),
                ],
            )
            .await?;
        let devices = row.devices.clone().unwrap_or_default();
        set_links(self.tx(), "subscription_devices", "subscription_id", &row.id, &devices).await
    }
}
