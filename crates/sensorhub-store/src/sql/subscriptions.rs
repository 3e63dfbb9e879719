//! Webhook subscriptions added, listed, changed and removed by command,
//! written once for both backends (their provisioning is in
//! [`super::provision`]).

use super::{Param, Sql};
use crate::decide::now;
use crate::delivery::{
    ClaimedSubscription, NewSubscription, Subscription, join_events, no_such_subscription, split_events, unseen_device,
};
use crate::{StoreError, StoreResult};

/// Adds `sub`, inside the caller's transaction.
pub(crate) async fn add(c: &impl Sql, sub: NewSubscription) -> StoreResult<()> {
    let account: i64 = c
        .query_opt("SELECT id FROM accounts WHERE username = $1", &[(&sub.username).into()])
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("no account {:?}", sub.username)))?
        .get(0)?;
    if c.query_opt("SELECT 1 FROM subscriptions WHERE id = $1", &[(&sub.id).into()]).await?.is_some() {
        return Err(StoreError::Conflict(format!("webhook subscription {:?} exists", sub.id)));
    }
    let events = join_events(&sub.events);
    let sql = "INSERT INTO subscriptions (id, account_id, url, all_devices, events, secret, batch, allow_http,
                                          created_at, headers, batch_max)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";
    let params = [
        (&sub.id).into(),
        account.into(),
        (&sub.url).into(),
        sub.devices.is_none().into(),
        (&events).into(),
        sub.sealed_secret.as_slice().into(),
        sub.batch.into(),
        sub.allow_http.into(),
        now().into(),
        sub.sealed_headers.as_deref().into(),
        i32::try_from(sub.batch_max).unwrap_or(i32::MAX).into(),
    ];
    c.execute(sql, &params).await?;
    for device_id in sub.devices.iter().flatten() {
        let sql = "SELECT d.id FROM devices d JOIN account_devices x ON x.device_pk = d.id
                   WHERE x.account_id = $1 AND d.device_id = $2";
        let pk: i64 = c
            .query_opt(sql, &[account.into(), device_id.into()])
            .await?
            .ok_or_else(|| unseen_device(&sub.username, device_id))?
            .get(0)?;
        let sql =
            "INSERT INTO subscription_devices (subscription_id, device_pk) VALUES ($1, $2) ON CONFLICT DO NOTHING";
        c.execute(sql, &[(&sub.id).into(), pk.into()]).await?;
    }
    Ok(())
}

/// Every subscription, by account and id, with its device list.
pub(crate) async fn list(c: &impl Sql) -> StoreResult<Vec<Subscription>> {
    let sql = "SELECT s.id, a.username, s.url, s.all_devices, s.events, s.secret, s.enabled, s.batch, s.allow_http,
                      s.created_at, d.device_id, s.name, s.batch_max
               FROM subscriptions s JOIN accounts a ON a.id = s.account_id
               LEFT JOIN subscription_devices sd ON sd.subscription_id = s.id
               LEFT JOIN devices d ON d.id = sd.device_pk
               ORDER BY a.username, s.id, d.device_id";
    let mut out: Vec<Subscription> = Vec::new();
    for r in c.query(sql, &[]).await? {
        let id: String = r.get(0)?;
        if out.last().is_none_or(|s| s.id != id) {
            let all: bool = r.get(3)?;
            out.push(Subscription {
                id,
                username: r.get(1)?,
                url: r.get(2)?,
                devices: (!all).then(Vec::new),
                events: split_events(&r.get::<String>(4)?),
                sealed_secret: r.get(5)?,
                enabled: r.get(6)?,
                batch: r.get(7)?,
                allow_http: r.get(8)?,
                created_at: r.get(9)?,
                name: r.get(11)?,
                batch_max: r.get::<Option<u32>>(12)?.unwrap_or(1),
            });
        }
        if let (Some(d), Some(s)) = (r.get::<Option<String>>(10)?, out.last_mut()) {
            s.devices.get_or_insert_with(Vec::new).push(d);
        }
    }
    Ok(out)
}

/// Removes subscription `id` with its device list and its deliveries.
pub(crate) async fn remove(c: &impl Sql, id: &str) -> StoreResult<()> {
    c.execute("DELETE FROM subscription_devices WHERE subscription_id = $1", &[id.into()]).await?;
    c.execute("DELETE FROM outbox WHERE subscription_id = $1", &[id.into()]).await?;
    if c.execute("DELETE FROM subscriptions WHERE id = $1", &[id.into()]).await? == 0 {
        return Err(no_such_subscription(id));
    }
    Ok(())
}

/// Replaces subscription `id`'s sealed secret.
pub(crate) async fn set_secret(c: &impl Sql, id: &str, sealed: &[u8]) -> StoreResult<()> {
    update(c, id, "UPDATE subscriptions SET secret = $2 WHERE id = $1", sealed.into()).await
}

/// Turns subscription `id` on or off.
pub(crate) async fn set_enabled(c: &impl Sql, id: &str, enabled: bool) -> StoreResult<()> {
    update(c, id, "UPDATE subscriptions SET enabled = $2 WHERE id = $1", enabled.into()).await
}

/// Whether subscription `sub` may still be sent a delivery of device
/// `device_pk`, of an alarm transition (`alarm`) or a reading, as a claim
/// would decide: it is enabled, of an enabled account that sees the
/// device, lists it (or all), and asks for that kind of event; and as
/// the claim read it: the same URL, secret and headers.
pub(crate) async fn may_deliver(
    c: &impl Sql,
    sub: &ClaimedSubscription,
    device_pk: Option<i64>,
    alarm: bool,
) -> StoreResult<bool> {
    let sql = "SELECT EXISTS (SELECT 1 FROM subscriptions s JOIN accounts a ON a.id = s.account_id
               WHERE s.id = $1 AND s.enabled AND NOT a.disabled
                 AND EXISTS (SELECT 1 FROM account_devices x WHERE x.account_id = a.id AND x.device_pk = $2)
                 AND (s.all_devices OR EXISTS (SELECT 1 FROM subscription_devices sd
                                               WHERE sd.subscription_id = s.id AND sd.device_pk = $2))
                 AND (',' || s.events || ',') LIKE $3
                 AND s.url = $4 AND s.allow_http = $5 AND s.secret = $6 AND s.headers IS NOT DISTINCT FROM $7)";
    let kind = format!("%,{},%", if alarm { crate::delivery::ALARMS } else { crate::delivery::SENSOR_DATA });
    let params = [
        (&sub.id).into(),
        device_pk.into(),
        kind.as_str().into(),
        (&sub.url).into(),
        sub.allow_http.into(),
        sub.sealed_secret.as_slice().into(),
        sub.sealed_headers.as_deref().into(),
    ];
    c.query_one(sql, &params).await?.get(0)
}

/// Runs `sql` (an update of subscription `$1` to `$2`); refuses an unknown id.
async fn update(c: &impl Sql, id: &str, sql: &str, value: Param<'_>) -> StoreResult<()> {
    if c.execute(sql, &[id.into(), value]).await? == 0 {
        return Err(no_such_subscription(id));
    }
    Ok(())
}
