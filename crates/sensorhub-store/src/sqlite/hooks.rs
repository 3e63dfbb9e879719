//! Webhook subscriptions on SQLite: their rows and device lists, added by
//! command or made true by a provisioning document.

use super::write::{begin, device_pks};
use crate::decide::subscriptions::{SubscriptionRow, SubscriptionWrite, subscription_devices, subscription_write};
use crate::decide::{Change, now};
use crate::hooks::{
    NewSubscription, ProvisionedSubscription, Sealer, Subscription, join_events, no_such_subscription, split_events,
    unseen_device,
};
use crate::{StoreError, StoreResult};
use rusqlite::{Connection, OptionalExtension, Transaction, params};
use std::collections::BTreeSet;

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

/// Makes provisioned subscription `p` of account `account` (which sees
/// `visible`) true, found by its name.
pub(super) fn provision(
    tx: &Transaction<'_>,
    account: i64,
    visible: &BTreeSet<i64>,
    p: &ProvisionedSubscription,
    sealer: &dyn Sealer,
) -> StoreResult<Change> {
    let listed = p.devices.as_ref().map(|l| device_pks(tx, l, &format!("{}.devices", p.at))).transpose()?;
    let devices = subscription_devices(listed.as_deref(), visible, &p.at)?;
    let stored = tx
        .query_row(
            "SELECT id, url, all_devices, events, enabled, batch, batch_max, allow_http, secret, headers
             FROM subscriptions WHERE account_id = ?1 AND name = ?2",
            params![account, p.name],
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
    let stored = match stored {
        Some(mut row) => {
            if let Some(set) = &mut row.devices {
                let mut stmt =
                    tx.prepare_cached("SELECT device_pk FROM subscription_devices WHERE subscription_id = ?1")?;
                *set = stmt.query_map([&row.id], |r| r.get(0))?.collect::<Result<_, _>>()?;
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
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
         ON CONFLICT (id) DO UPDATE SET url = excluded.url, all_devices = excluded.all_devices,
             events = excluded.events, secret = excluded.secret, headers = excluded.headers,
             enabled = excluded.enabled, batch = excluded.batch, batch_max = excluded.batch_max,
             allow_http = excluded.allow_http",
        params![
            row.id,
            account,
            p.name,
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
    tx.execute("DELETE FROM subscription_devices WHERE subscription_id = ?1", [&row.id])?;
    let mut stmt =
        tx.prepare_cached("INSERT INTO subscription_devices (subscription_id, device_pk) VALUES (?1, ?2)")?;
    for pk in row.devices.iter().flatten() {
        stmt.execute(params![row.id, pk])?;
    }
    Ok(change)
}
