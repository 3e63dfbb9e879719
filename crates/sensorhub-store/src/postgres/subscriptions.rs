//! Webhook subscriptions on PostgreSQL: their rows and device lists, added
//! by command or made true by a provisioning document.

use super::write::begin;
use crate::decide::now;
use crate::delivery::{NewSubscription, Subscription, join_events, no_such_subscription, split_events, unseen_device};
use crate::{StoreError, StoreResult};
use deadpool_postgres::{Client, GenericClient};
use tokio_postgres::types::ToSql;

pub(super) async fn add(c: &mut Client, sub: NewSubscription) -> StoreResult<()> {
    let tx = begin(c).await?;
    let account: i64 = tx
        .query_opt("SELECT id FROM accounts WHERE username = $1", &[&sub.username])
        .await?
        .map(|r| r.get(0))
        .ok_or_else(|| StoreError::NotFound(format!("no account {:?}", sub.username)))?;
    if tx.query_opt("SELECT 1 FROM subscriptions WHERE id = $1", &[&sub.id]).await?.is_some() {
        return Err(StoreError::Conflict(format!("webhook subscription {:?} exists", sub.id)));
    }
    tx.execute(
        "INSERT INTO subscriptions (id, account_id, url, all_devices, events, secret, batch, allow_http, created_at,
                                    headers, batch_max)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        &[
            &sub.id,
            &account,
            &sub.url,
            &sub.devices.is_none(),
            &join_events(&sub.events),
            &sub.sealed_secret,
            &sub.batch,
            &sub.allow_http,
            &now(),
            &sub.sealed_headers,
            &i32::try_from(sub.batch_max).unwrap_or(i32::MAX),
        ],
    )
    .await?;
    for device_id in sub.devices.iter().flatten() {
        let pk: i64 = tx
            .query_opt(
                "SELECT d.id FROM devices d JOIN account_devices x ON x.device_pk = d.id
                 WHERE x.account_id = $1 AND d.device_id = $2",
                &[&account, device_id],
            )
            .await?
            .map(|r| r.get(0))
            .ok_or_else(|| unseen_device(&sub.username, device_id))?;
        tx.execute(
            "INSERT INTO subscription_devices (subscription_id, device_pk) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            &[&sub.id, &pk],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

pub(super) async fn list(c: &impl GenericClient) -> StoreResult<Vec<Subscription>> {
    let rows = c
        .query(
            "SELECT s.id, a.username, s.url, s.all_devices, s.events, s.secret, s.enabled, s.batch, s.allow_http,
                    s.created_at, d.device_id, s.name, s.batch_max
             FROM subscriptions s JOIN accounts a ON a.id = s.account_id
             LEFT JOIN subscription_devices sd ON sd.subscription_id = s.id LEFT JOIN devices d ON d.id = sd.device_pk
             ORDER BY a.username, s.id, d.device_id",
            &[],
        )
        .await?;
    let mut out: Vec<Subscription> = Vec::new();
    for r in rows {
        let id: String = r.get(0);
        if out.last().is_none_or(|s| s.id != id) {
            let all: bool = r.get(3);
            out.push(Subscription {
                id,
                username: r.get(1),
                url: r.get(2),
                devices: (!all).then(Vec::new),
                events: split_events(r.get(4)),
                sealed_secret: r.get(5),
                enabled: r.get(6),
                batch: r.get(7),
                allow_http: r.get(8),
                created_at: r.get(9),
                name: r.get(11),
                batch_max: u32::try_from(r.get::<_, i32>(12)).unwrap_or(1),
            });
        }
        if let (Some(d), Some(s)) = (r.get::<_, Option<String>>(10), out.last_mut()) {
            s.devices.get_or_insert_with(Vec::new).push(d);
        }
    }
    Ok(out)
}

pub(super) async fn remove(c: &mut Client, id: &str) -> StoreResult<()> {
    let tx = begin(c).await?;
    tx.execute("DELETE FROM subscription_devices WHERE subscription_id = $1", &[&id]).await?;
    tx.execute("DELETE FROM outbox WHERE subscription_id = $1", &[&id]).await?;
    if tx.execute("DELETE FROM subscriptions WHERE id = $1", &[&id]).await? == 0 {
        return Err(no_such_subscription(id));
    }
    tx.commit().await?;
    Ok(())
}

pub(super) async fn set_secret(c: &mut Client, id: &str, sealed: &[u8]) -> StoreResult<()> {
    update(c, id, "UPDATE subscriptions SET secret = $2 WHERE id = $1", &sealed).await
}

pub(super) async fn set_enabled(c: &mut Client, id: &str, enabled: bool) -> StoreResult<()> {
    update(c, id, "UPDATE subscriptions SET enabled = $2 WHERE id = $1", &enabled).await
}

/// Runs `sql` (an update of subscription `$1` to `$2`); refuses an unknown id.
async fn update(c: &mut Client, id: &str, sql: &str, value: &(dyn ToSql + Sync)) -> StoreResult<()> {
    let tx = begin(c).await?;
    if tx.execute(sql, &[&id, value]).await? == 0 {
        return Err(no_such_subscription(id));
    }
    tx.commit().await?;
    Ok(())
}
