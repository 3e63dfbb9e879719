//! Webhook subscriptions on PostgreSQL: their rows and device lists, added
//! by command or made true by a provisioning document.

use super::write::{begin, device_pks};
use crate::decide::subscriptions::{SubscriptionRow, SubscriptionWrite, subscription_devices, subscription_write};
use crate::decide::{Change, now};
use crate::hooks::{
    NewSubscription, ProvisionedSubscription, Sealer, Subscription, join_events, no_such_subscription, split_events,
    unseen_device,
};
use crate::{StoreError, StoreResult};
use deadpool_postgres::{Client, GenericClient, Transaction};
use std::collections::BTreeSet;
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

/// Makes provisioned subscription `p` of account `account` (which sees
/// `visible`) true, found by its name.
pub(super) async fn provision(
    tx: &Transaction<'_>,
    account: i64,
    visible: &BTreeSet<i64>,
    p: &ProvisionedSubscription,
    sealer: &dyn Sealer,
) -> StoreResult<Change> {
    let listed = match &p.devices {
        Some(list) => Some(device_pks(tx, list, &format!("{}.devices", p.at)).await?),
        None => None,
    };
    let devices = subscription_devices(listed.as_deref(), visible, &p.at)?;
    let stored = tx
        .query_opt(
            "SELECT id, url, all_devices, events, enabled, batch, batch_max, allow_http, secret, headers
             FROM subscriptions WHERE account_id = $1 AND name = $2",
            &[&account, &p.name],
        )
        .await?
        .map(|r| SubscriptionRow {
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
        });
    let stored = match stored {
        Some(mut row) => {
            if let Some(set) = &mut row.devices {
                let rows = tx
                    .query("SELECT device_pk FROM subscription_devices WHERE subscription_id = $1", &[&row.id])
                    .await?;
                *set = rows.iter().map(|r| r.get(0)).collect();
            }
            Some(row)
        }
        None => None,
    };
    let (row, change) = match subscription_write(p, devices, stored, sealer)? {
        SubscriptionWrite::Unchanged => return Ok(Change::Unchanged),
        SubscriptionWrite::Insert(row) => (row, Change::Created),
        SubscriptionWrite::Update(row) => (row, Change::Updated),
    };
    // One statement for both: an update keeps the name and creation time.
    tx.execute(
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
            &p.name,
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
    tx.execute("DELETE FROM subscription_devices WHERE subscription_id = $1", &[&row.id]).await?;
    let pks: Vec<i64> = row.devices.iter().flatten().copied().collect();
    tx.execute(
        "INSERT INTO subscription_devices (subscription_id, device_pk) SELECT $1, unnest($2::bigint[])",
        &[&row.id, &pks],
    )
    .await?;
    Ok(change)
}
