//! The outbox on SQLite: deliveries written with their readings, claimed
//! by the worker (one writer: a claim is one transaction), finished,
//! listed and replayed.

use super::write::begin;
use crate::decide::outbox::OutboxRow;
use crate::hooks::{
    Attempt, Delivery, DeliveryRecord, Finished, Replay, SENSOR_DATA, batch_room, failing_changes, no_such_subscription,
};
use crate::{StoreError, StoreResult};
use rusqlite::{Connection, OptionalExtension, Transaction, params};

/// The enabled subscriptions to sensor data that cover device `pk`: all
/// of their account's devices, or a list naming it.
pub(super) fn subscriptions_of(tx: &Connection, pk: i64) -> StoreResult<Vec<String>> {
    let mut stmt = tx.prepare_cached(
        "SELECT s.id FROM subscriptions s
         WHERE s.enabled = 1 AND instr(',' || s.events || ',', ',' || ?2 || ',') > 0
           AND ((s.all_devices = 1
                 AND EXISTS (SELECT 1 FROM account_devices x WHERE x.account_id = s.account_id AND x.device_pk = ?1))
                OR EXISTS (SELECT 1 FROM subscription_devices sd WHERE sd.subscription_id = s.id AND sd.device_pk = ?1))
         ORDER BY s.id",
    )?;
    let ids = stmt.query_map(params![pk, SENSOR_DATA], |r| r.get(0))?.collect::<Result<_, _>>()?;
    Ok(ids)
}

/// Writes the deliveries gathered by a transaction of readings, due now.
pub(super) fn insert(tx: &Connection, rows: &[OutboxRow]) -> StoreResult<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let now = jiff::Timestamp::now().as_millisecond();
    let mut stmt = tx.prepare_cached(
        "INSERT INTO outbox (subscription_id, device_pk, message_id, body, created_at, next_attempt)
         VALUES (?1, ?2, ?3, ?4, ?5, ?5)",
    )?;
    for row in rows {
        stmt.execute(params![row.subscription_id, row.device_pk, row.message_id, row.body, now])?;
    }
    Ok(())
}

pub(super) fn claim(c: &mut Connection, now: i64, lease: i64, limit: usize) -> StoreResult<Vec<Delivery>> {
    unsynced(c, |c| {
        let tx = begin(c)?;
        let mut claimed = claim_due(&tx, now, lease, limit, None)?;
        for (sub, room) in batch_room(&claimed) {
            claimed.extend(claim_due(&tx, now, lease, room, Some(&sub))?);
        }
        tx.commit()?;
        Ok(claimed)
    })
}

/// Runs `f` with `synchronous = NORMAL`: its commit is not waited onto the
/// disk (the next durable commit takes it along). For the outbox's
/// bookkeeping only, leases and outcomes: lost to a power cut, they leave
/// deliveries due again, which at-least-once delivery allows; they then
/// cost ingest, which shares the one writer, no fsync of their own.
fn unsynced<R>(c: &mut Connection, f: impl FnOnce(&mut Connection) -> StoreResult<R>) -> StoreResult<R> {
    let durable: i64 = c.query_row("PRAGMA synchronous", [], |r| r.get(0))?;
    c.pragma_update(None, "synchronous", "NORMAL")?;
    let result = f(c);
    c.pragma_update(None, "synchronous", durable)?;
    result
}

/// Leases up to `limit` due rows (of subscription `only`, if given), oldest first.
fn claim_due(
    tx: &Transaction<'_>,
    now: i64,
    lease: i64,
    limit: usize,
    only: Option<&str>,
) -> StoreResult<Vec<Delivery>> {
    let claimed: Vec<Delivery> = {
        let mut stmt = tx.prepare_cached(
            "SELECT o.id, o.subscription_id, a.username, s.url, s.allow_http, s.secret, o.message_id, o.body,
                    o.attempts, o.created_at, s.failing_since, s.headers,
                    CASE WHEN s.batch = 1 THEN max(s.batch_max, 1) ELSE 1 END
             FROM outbox o JOIN subscriptions s ON s.id = o.subscription_id JOIN accounts a ON a.id = s.account_id
             WHERE o.state = 'pending' AND o.next_attempt <= ?1 AND s.enabled = 1
               AND (?3 IS NULL OR o.subscription_id = ?3)
             ORDER BY o.next_attempt, o.id LIMIT ?2",
        )?;
        stmt.query_map(params![now, limit as i64, only], |r| {
            Ok(Delivery {
                id: r.get(0)?,
                subscription_id: r.get(1)?,
                username: r.get(2)?,
                url: r.get(3)?,
                allow_http: r.get(4)?,
                sealed_secret: r.get(5)?,
                message_id: r.get(6)?,
                body: r.get(7)?,
                attempts: r.get(8)?,
                created_at: r.get(9)?,
                failing_since: r.get(10)?,
                sealed_headers: r.get(11)?,
                batch_max: r.get(12)?,
            })
        })?
        .collect::<Result<_, _>>()?
    };
    let mut lease_stmt = tx.prepare_cached("UPDATE outbox SET next_attempt = ?2 WHERE id = ?1")?;
    for d in &claimed {
        lease_stmt.execute(params![d.id, now + lease])?;
    }
    Ok(claimed)
}

/// Records outcomes, in one transaction.
pub(super) fn finish(c: &mut Connection, now: i64, done: &[Finished]) -> StoreResult<()> {
    unsynced(c, |c| finish_unsynced(c, now, done))
}

fn finish_unsynced(c: &mut Connection, now: i64, done: &[Finished]) -> StoreResult<()> {
    let tx = begin(c)?;
    {
        let mut delivered = tx.prepare_cached("DELETE FROM outbox WHERE id = ?1")?;
        let mut retry = tx.prepare_cached(
            "UPDATE outbox SET attempts = attempts + 1, next_attempt = ?2, last_status = ?3, last_error = ?4
             WHERE id = ?1",
        )?;
        let mut failed = tx.prepare_cached(
            "UPDATE outbox SET state = 'failed', attempts = attempts + 1, last_status = ?2, last_error = ?3
             WHERE id = ?1",
        )?;
        for f in done {
            match &f.attempt {
                Attempt::Delivered => delivered.execute([f.id])?,
                Attempt::Retry { at, status, error } => retry.execute(params![f.id, at, status, error])?,
                Attempt::Failed { status, error } => failed.execute(params![f.id, status, error])?,
            };
        }
        let (succeeded, failing) = failing_changes(done);
        let mut ok = tx.prepare_cached("UPDATE subscriptions SET failing_since = NULL WHERE id = ?1")?;
        for sub in succeeded {
            ok.execute([sub])?;
        }
        // Failing since `now` unless it already was.
        let mut since =
            tx.prepare_cached("UPDATE subscriptions SET failing_since = coalesce(failing_since, ?2) WHERE id = ?1")?;
        for sub in failing {
            since.execute(params![sub, now])?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// Refuses an unknown subscription.
fn require(c: &Connection, id: &str) -> StoreResult<()> {
    let found = c.query_row("SELECT 1 FROM subscriptions WHERE id = ?1", [id], |_| Ok(())).optional()?;
    found.ok_or_else(|| no_such_subscription(id))
}

pub(super) fn list(c: &mut Connection, id: &str, failed_only: bool) -> StoreResult<Vec<DeliveryRecord>> {
    require(c, id)?;
    let mut stmt = c.prepare_cached(
        "SELECT id, message_id, state, attempts, created_at, next_attempt, last_status, last_error FROM outbox
         WHERE subscription_id = ?1 AND (?2 = 0 OR state = 'failed') ORDER BY id",
    )?;
    let rows = stmt.query_map(params![id, failed_only], |r| {
        Ok(DeliveryRecord {
            id: r.get(0)?,
            message_id: r.get(1)?,
            state: r.get(2)?,
            attempts: r.get(3)?,
            created_at: r.get(4)?,
            next_attempt: r.get(5)?,
            last_status: r.get(6)?,
            last_error: r.get(7)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(super) fn replay(c: &mut Connection, id: &str, which: Replay, now: i64) -> StoreResult<u64> {
    let tx = begin(c)?;
    require(&tx, id)?;
    let n = match which {
        Replay::Failed => tx.execute(
            "UPDATE outbox SET state = 'pending', attempts = 0, next_attempt = ?2
             WHERE subscription_id = ?1 AND state = 'failed'",
            params![id, now],
        )?,
        Replay::One(row) => tx.execute(
            "UPDATE outbox SET state = 'pending', attempts = 0, next_attempt = ?3 WHERE subscription_id = ?1 AND id = ?2",
            params![id, row, now],
        )?,
    };
    if let (Replay::One(row), 0) = (which, n) {
        return Err(StoreError::NotFound(format!("subscription {id:?} has no delivery {row}")));
    }
    tx.commit()?;
    Ok(n as u64)
}

pub(super) fn backlog(c: &mut Connection) -> StoreResult<u64> {
    let n: i64 = c.query_row("SELECT count(*) FROM outbox WHERE state = 'pending'", [], |r| r.get(0))?;
    Ok(n as u64)
}

pub(super) fn prune_failed(c: &mut Connection, before: i64) -> StoreResult<u64> {
    let tx = begin(c)?;
    let n = tx.execute("DELETE FROM outbox WHERE state = 'failed' AND created_at < ?1", [before])?;
    tx.commit()?;
    Ok(n as u64)
}
