//! Webhook subscriptions on SQLite: their rows and device lists, added by
//! command or made true by a provisioning document.

use super::tx::begin;
use crate::decide::now;
use crate::delivery::{NewSubscription, Subscription, join_events, no_such_subscription, split_events, unseen_device};
use crate::{StoreError, StoreResult};
use rusqlite::{Connection, OptionalExtension, params};

pub(super) fn add(c: &mut Connection, sub: NewSubscription) -> StoreResult<()> {
    let tx = begin(c)?;
    let account: i64 = tx
        .query_row("SELECT id FROM accounts WHERE username = ?1", [&sub.username], |r| r.get(0))
        .optional()?
        .ok_or_else(|| StoreError::NotFound(format!("no account {:?}", sub.username)))?;
    let taken = tx.query_row("SELECT 1 FROM subscriptions WHERE id = ?1", [&sub.id], |_| Ok(())).optional()?;
    if taken.is_some() {
        return Err(StoreError::Conflict(format!("webhook subscription {:?} exists", sub.id)));
    }
    tx.execute(
        "INSERT INTO subscriptions (id, account_id, url, all_devices, events, secret, batch, allow_http, created_at,
                                    headers, batch_max)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        params![
            sub.id,
            account,
            sub.url,
            sub.devices.is_none(),
            join_events(&sub.events),
            sub.sealed_secret,
            sub.batch,
            sub.allow_http,
            now(),
            sub.sealed_headers,
            sub.batch_max
        ],
    )?;
    for device_id in sub.devices.iter().flatten() {
        let pk: i64 = tx
            .query_row(
                "SELECT d.id FROM devices d JOIN account_devices x ON x.device_pk = d.id
                 WHERE x.account_id = ?1 AND d.device_id = ?2",
                params![account, device_id],
                |r| r.get(0),
            )
            .optional()?
            .ok_or_else(|| unseen_device(&sub.username, device_id))?;
        tx.execute(
            "INSERT INTO subscription_devices (subscription_id, device_pk) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
            params![sub.id, pk],
        )?;
    }
    tx.commit()?;
    Ok(())
}

pub(super) fn list(c: &mut Connection) -> StoreResult<Vec<Subscription>> {
    let mut stmt = c.prepare_cached(
        "SELECT s.id, a.username, s.url, s.all_devices, s.events, s.secret, s.enabled, s.batch, s.allow_http,
                s.created_at, d.device_id, s.name, s.batch_max
         FROM subscriptions s JOIN accounts a ON a.id = s.account_id
         LEFT JOIN subscription_devices sd ON sd.subscription_id = s.id LEFT JOIN devices d ON d.id = sd.device_pk
         ORDER BY a.username, s.id, d.device_id",
    )?;
    let mut rows = stmt.query([])?;
    let mut out: Vec<Subscription> = Vec::new();
    while let Some(r) = rows.next()? {
        let id: String = r.get(0)?;
        if out.last().is_none_or(|s| s.id != id) {
            let all: bool = r.get(3)?;
            out.push(Subscription {
                id,
                username: r.get(1)?,
                url: r.get(2)?,
                devices: (!all).then(Vec::new),
                events: split_events(&r.get::<_, String>(4)?),
                sealed_secret: r.get(5)?,
                enabled: r.get(6)?,
                batch: r.get(7)?,
                allow_http: r.get(8)?,
                created_at: r.get(9)?,
                name: r.get(11)?,
                batch_max: r.get(12)?,
            });
        }
        if let (Some(d), Some(s)) = (r.get::<_, Option<String>>(10)?, out.last_mut()) {
            s.devices.get_or_insert_with(Vec::new).push(d);
        }
    }
    Ok(out)
}

pub(super) fn remove(c: &mut Connection, id: &str) -> StoreResult<()> {
    let tx = begin(c)?;
    tx.execute("DELETE FROM subscription_devices WHERE subscription_id = ?1", [id])?;
    tx.execute("DELETE FROM outbox WHERE subscription_id = ?1", [id])?;
    if tx.execute("DELETE FROM subscriptions WHERE id = ?1", [id])? == 0 {
        return Err(no_such_subscription(id));
    }
    tx.commit()?;
    Ok(())
}

pub(super) fn set_secret(c: &mut Connection, id: &str, sealed: &[u8]) -> StoreResult<()> {
    update(c, id, "UPDATE subscriptions SET secret = ?2 WHERE id = ?1", &sealed)
}

pub(super) fn set_enabled(c: &mut Connection, id: &str, enabled: bool) -> StoreResult<()> {
    update(c, id, "UPDATE subscriptions SET enabled = ?2 WHERE id = ?1", &enabled)
}

/// Runs `sql` (an update of subscription `?1` to `?2`); refuses an unknown id.
fn update(c: &mut Connection, id: &str, sql: &str, value: &dyn rusqlite::ToSql) -> StoreResult<()> {
    let tx = begin(c)?;
    if tx.execute(sql, params![id, value])? == 0 {
        return Err(no_such_subscription(id));
    }
    tx.commit()?;
    Ok(())
}
