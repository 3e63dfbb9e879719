//! Provisioning's primitive operations ([`ProvisionTx`], [`SubscriptionTx`])
//! written once in SQL: every backend whose transaction runs [`Sql`] has
//! them. They live beside the seam they implement, not in [`crate::sql`],
//! so that the statements module never imports the write steps.

use super::tx::{DeviceFields, KeyKind, NewKey, ProvisionTx, RetentionOf, SubscriptionTx, Tx};
use crate::StoreResult;
use crate::decide::subscriptions::SubscriptionRow;
use crate::decide::{Links, StoredAccount, StoredKey, now};
use crate::sql::{Param, Sql};
use sensorhub_core::model::SensorMeta;
use std::collections::BTreeSet;

/// The device numbers `sql` returns for `id`.
pub(crate) async fn pk_set(c: &impl Sql, sql: &str, id: Param<'_>) -> StoreResult<BTreeSet<i64>> {
    c.query(sql, &[id]).await?.iter().map(|r| r.get(0)).collect()
}

/// Replaces the rows of link table `table` for `owner` with `pks`.
pub(crate) async fn set_links(
    c: &impl Sql,
    table: &str,
    owner_col: &str,
    owner: Param<'_>,
    pks: &BTreeSet<i64>,
) -> StoreResult<()> {
    c.execute(&format!("DELETE FROM {table} WHERE {owner_col} = $1"), &[owner]).await?;
    let insert = format!("INSERT INTO {table} ({owner_col}, device_pk) VALUES ($1, $2)");
    for pk in pks {
        c.execute(&insert, &[owner, (*pk).into()]).await?;
    }
    Ok(())
}

impl<T: Tx + Sql> ProvisionTx for T {
    async fn device_row(&self, device_id: &str) -> StoreResult<Option<(i64, DeviceFields)>> {
        let sql = "SELECT id, name, type, lat, long, interval_seconds FROM devices WHERE device_id = $1";
        let Some(r) = self.query_opt(sql, &[device_id.into()]).await? else { return Ok(None) };
        let row = DeviceFields {
            name: r.get(1)?,
            kind: r.get(2)?,
            lat: r.get(3)?,
            long: r.get(4)?,
            interval_seconds: r.get(5)?,
        };
        Ok(Some((r.get(0)?, row)))
    }

    async fn insert_device(&self, device_id: &str, d: &DeviceFields) -> StoreResult<i64> {
        let sql = "INSERT INTO devices (device_id, name, type, lat, long, interval_seconds)
                   VALUES ($1, $2, $3, $4, $5, $6) RETURNING id";
        let params = [device_id.into(), (&d.name).into(), (&d.kind).into(), d.lat.into(), d.long.into()];
        self.query_one(sql, &[&params[..], &[d.interval_seconds.into()]].concat()).await?.get(0)
    }

    async fn update_device(&self, pk: i64, d: &DeviceFields) -> StoreResult<()> {
        let sql = "UPDATE devices SET name = $2, type = $3, lat = $4, long = $5, interval_seconds = $6 WHERE id = $1";
        let params = [pk.into(), (&d.name).into(), (&d.kind).into(), d.lat.into(), d.long.into()];
        self.execute(sql, &[&params[..], &[d.interval_seconds.into()]].concat()).await?;
        Ok(())
    }

    async fn put_sensor(&self, pk: i64, idx: usize, s: &SensorMeta, new: bool) -> StoreResult<()> {
        let sql = if new {
            "INSERT INTO sensors (device_pk, idx, sensor_id, name, type, unit) VALUES ($1, $2, $3, $4, $5, $6)"
        } else {
            "UPDATE sensors SET sensor_id = $3, name = $4, type = $5, unit = $6 WHERE device_pk = $1 AND idx = $2"
        };
        let idx = i16::try_from(idx).unwrap_or(i16::MAX);
        let params =
            [pk.into(), idx.into(), (&s.sensor_id).into(), (&s.name).into(), (&s.kind).into(), (&s.unit).into()];
        self.execute(sql, &params).await?;
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
        Ok(self.execute(&sql, &[id.into(), seconds.into()]).await? > 0)
    }

    async fn account_row(&self, username: &str) -> StoreResult<Option<StoredAccount>> {
        let sql = "SELECT id, password_hash, disabled FROM accounts WHERE username = $1";
        let Some(r) = self.query_opt(sql, &[username.into()]).await? else { return Ok(None) };
        Ok(Some(StoredAccount { id: r.get(0)?, password_hash: r.get(1)?, disabled: r.get(2)? }))
    }

    async fn insert_account(&self, username: &str, hash: &str, disabled: bool, created_at: i64) -> StoreResult<i64> {
        let sql = "INSERT INTO accounts (username, password_hash, disabled, created_at) VALUES ($1, $2, $3, $4)
                   RETURNING id";
        self.query_one(sql, &[username.into(), hash.into(), disabled.into(), created_at.into()]).await?.get(0)
    }

    async fn update_account(&self, id: i64, password_hash: Option<&str>, disabled: Option<bool>) -> StoreResult<()> {
        let sql = "UPDATE accounts SET password_hash = coalesce($2, password_hash), disabled = coalesce($3, disabled)
                   WHERE id = $1";
        self.execute(sql, &[id.into(), password_hash.into(), disabled.into()]).await?;
        Ok(())
    }

    async fn links_of(&self, id: i64) -> StoreResult<Links> {
        let sql = "SELECT device_pk, can_write FROM account_devices WHERE account_id = $1";
        self.query(sql, &[id.into()]).await?.iter().map(|r| Ok((r.get(0)?, r.get(1)?))).collect()
    }

    async fn set_links_of(&self, id: i64, links: &Links) -> StoreResult<()> {
        self.execute("DELETE FROM account_devices WHERE account_id = $1", &[id.into()]).await?;
        let insert = "INSERT INTO account_devices (account_id, device_pk, can_write) VALUES ($1, $2, $3)";
        for (pk, can_write) in links {
            self.execute(insert, &[id.into(), (*pk).into(), (*can_write).into()]).await?;
        }
        Ok(())
    }

    async fn owned_by(&self, id: i64) -> StoreResult<BTreeSet<i64>> {
        pk_set(self, "SELECT id FROM devices WHERE owner_id = $1", id.into()).await
    }

    async fn set_owner(&self, device_id: &str, account: i64) -> StoreResult<bool> {
        let sql = "UPDATE devices SET owner_id = $2 WHERE device_id = $1 AND owner_id IS DISTINCT FROM $2";
        let changed = self.execute(sql, &[device_id.into(), account.into()]).await?;
        let sql = "INSERT INTO account_devices (account_id, device_pk) SELECT $1, id FROM devices WHERE device_id = $2
                   ON CONFLICT DO NOTHING";
        let linked = self.execute(sql, &[account.into(), device_id.into()]).await?;
        Ok(changed + linked > 0)
    }

    async fn key_row(&self, kind: KeyKind, digest: &[u8]) -> StoreResult<Option<StoredKey>> {
        let sql = match kind {
            KeyKind::Api => "SELECT id, account_id, scoped, revoked FROM api_keys WHERE digest = $1",
            KeyKind::Webhook => "SELECT id, account_id, false, revoked FROM webhook_keys WHERE digest = $1",
        };
        let Some(r) = self.query_opt(sql, &[digest.into()]).await? else { return Ok(None) };
        let id: i64 = r.get(0)?;
        let devices = match kind {
            KeyKind::Api => pk_set(self, "SELECT device_pk FROM api_key_devices WHERE key_id = $1", id.into()).await?,
            KeyKind::Webhook => BTreeSet::new(),
        };
        Ok(Some(StoredKey { id, account_id: r.get(1)?, scoped: r.get(2)?, revoked: r.get(3)?, devices }))
    }

    async fn insert_key(&self, k: NewKey<'_>) -> StoreResult<i64> {
        let (digest, prefix, account, revoked, created) =
            (k.digest.into(), k.prefix.into(), k.account_id.into(), k.revoked.into(), k.created_at.into());
        let row = match k.kind {
            KeyKind::Api => {
                let sql = "INSERT INTO api_keys (digest, prefix, account_id, scoped, revoked, created_at)
                           VALUES ($1, $2, $3, $4, $5, $6) RETURNING id";
                self.query_one(sql, &[digest, prefix, account, k.scoped.into(), revoked, created]).await?
            }
            KeyKind::Webhook => {
                let sql = "INSERT INTO webhook_keys (digest, prefix, account_id, revoked, created_at)
                           VALUES ($1, $2, $3, $4, $5) RETURNING id";
                self.query_one(sql, &[digest, prefix, account, revoked, created]).await?
            }
        };
        row.get(0)
    }

    async fn update_key(&self, kind: KeyKind, id: i64, scoped: Option<bool>, revoked: bool) -> StoreResult<()> {
        match kind {
            KeyKind::Api => {
                let sql = "UPDATE api_keys SET scoped = coalesce($2, scoped), revoked = $3 WHERE id = $1";
                self.execute(sql, &[id.into(), scoped.into(), revoked.into()]).await?
            }
            KeyKind::Webhook => {
                self.execute("UPDATE webhook_keys SET revoked = $2 WHERE id = $1", &[id.into(), revoked.into()]).await?
            }
        };
        Ok(())
    }

    async fn set_key_devices(&self, id: i64, devices: &BTreeSet<i64>) -> StoreResult<()> {
        set_links(self, "api_key_devices", "key_id", id.into(), devices).await
    }

    async fn api_keys_matching(&self, digest: &[u8], prefix: &str) -> StoreResult<Vec<(i64, String)>> {
        let mut found = self.query("SELECT id, prefix FROM api_keys WHERE digest = $1", &[digest.into()]).await?;
        if found.is_empty() && !prefix.is_empty() {
            let sql = "SELECT id, prefix FROM api_keys WHERE prefix = $1 AND NOT revoked";
            found = self.query(sql, &[prefix.into()]).await?;
        }
        found.iter().map(|r| Ok((r.get(0)?, r.get(1)?))).collect()
    }
}

impl<T: Tx + Sql> SubscriptionTx for T {
    async fn subscription_row(&self, account: i64, name: &str) -> StoreResult<Option<SubscriptionRow>> {
        let sql = "SELECT id, url, all_devices, events, enabled, batch, batch_max, allow_http, secret, headers
                   FROM subscriptions WHERE account_id = $1 AND name = $2";
        let Some(r) = self.query_opt(sql, &[account.into(), name.into()]).await? else { return Ok(None) };
        let mut row = SubscriptionRow {
            id: r.get(0)?,
            url: r.get(1)?,
            devices: (!r.get::<bool>(2)?).then(BTreeSet::new),
            events: r.get(3)?,
            enabled: r.get(4)?,
            batch: r.get(5)?,
            batch_max: r.get(6)?,
            allow_http: r.get(7)?,
            secret: r.get(8)?,
            headers: r.get(9)?,
        };
        if let Some(set) = &mut row.devices {
            let sql = "SELECT device_pk FROM subscription_devices WHERE subscription_id = $1";
            *set = pk_set(self, sql, (&row.id).into()).await?;
        }
        Ok(Some(row))
    }

    async fn put_subscription(&self, account: i64, name: &str, row: &SubscriptionRow) -> StoreResult<()> {
        // One statement for both: an update keeps the name and creation time.
        let sql = "INSERT INTO subscriptions (id, account_id, name, url, all_devices, events, secret, headers,
                                              enabled, batch, batch_max, allow_http, created_at)
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
                   ON CONFLICT (id) DO UPDATE SET url = excluded.url, all_devices = excluded.all_devices,
                       events = excluded.events, secret = excluded.secret, headers = excluded.headers,
                       enabled = excluded.enabled, batch = excluded.batch, batch_max = excluded.batch_max,
                       allow_http = excluded.allow_http";
        let params = [
            (&row.id).into(),
            account.into(),
            name.into(),
            (&row.url).into(),
            row.devices.is_none().into(),
            (&row.events).into(),
            row.secret.as_slice().into(),
            row.headers.as_deref().into(),
            row.enabled.into(),
            row.batch.into(),
            i32::try_from(row.batch_max).unwrap_or(i32::MAX).into(),
            row.allow_http.into(),
            now().into(),
        ];
        self.execute(sql, &params).await?;
        let devices = row.devices.clone().unwrap_or_default();
        set_links(self, "subscription_devices", "subscription_id", (&row.id).into(), &devices).await
    }
}
