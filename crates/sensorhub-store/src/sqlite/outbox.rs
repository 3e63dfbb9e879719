//! The outbox on SQLite: deliveries written with their readings, claimed
//! by the worker (one writer: a claim is one transaction), finished,
//! listed and replayed.

use super::SqliteStore;
use super::outbox_log;
use super::outbox_walk::{self, Walk};
use super::tx::{begin, in_tx, on};
use crate::StoreResult;
use crate::decide::{claim, merge};
use crate::delivery::{
    Attempt, ClaimRequest, Claimed, ClaimedSubscription, DROPPED_DISABLED, DROPPED_UNSEEN, Delivery, DeliveryRecord,
    Finished, Replay, batch_room, failing_changes,
};
use crate::sql::{outbox, subscriptions};
use async_trait::async_trait;
use rusqlite::{Connection, params};
use std::collections::{HashMap, HashSet};

/// Claims due deliveries for `req` at `now`, leased for `lease` ms: first
/// `outbox`'s due rows (retries, and deliveries that waited), topped up
/// for the batching subscriptions among them, then first attempts
/// straight from the log (`outbox_walk.rs`). `key` makes message ids.
pub(super) fn claim(c: &mut Connection, now: i64, lease: i64, req: &ClaimRequest, key: &str) -> StoreResult<Claimed> {
    unsynced(c, |c| {
        let tx = begin(c)?;
        let subs = outbox_walk::subscriptions(&tx)?;
        let listed: Vec<_> = subs.iter().map(|(id, s)| (id.clone(), s.url.clone(), s.enabled)).collect();
        let excluded = claim::excluded(req, &listed);
        let among = excluded.each().then_some(excluded.rest.as_slice());
        let window = claim::window(req.limit);
        let mut picker = claim::Picker::new(req, &excluded);
        let looked = offer_due(&tx, now, window, among, &mut picker)?;
        let mut parts = Parts::default();
        let mut deliveries = lease_rows(&tx, &mut parts, picker.taken(), now + lease)?;
        let mut dropped = 0;
        for (sub, room) in batch_room(&deliveries) {
            let only = [sub];
            let top_up = ClaimRequest::up_to(room);
            let mut picker = claim::Picker::new(&top_up, &claim::Excluded::default());
            let looked = offer_due(&tx, now, room, Some(&only), &mut picker)?;
            let more = picker.finish(looked);
            deliveries.extend(lease_rows(&tx, &mut parts, &more.take, now + lease)?);
            dropped += drop_rows(&tx, &more.drop)?;
        }
        let mut taken: HashMap<String, usize> = HashMap::new();
        for d in &deliveries {
            *taken.entry(d.subscription_id.clone()).or_default() += 1;
        }
        let subs: HashMap<_, _> = subs.into_iter().collect();
        let left_out: HashSet<String> = excluded.subscriptions.iter().cloned().collect();
        let walk = Walk { tx: &tx, now, until: now + lease, key, subs: &subs, excluded: &left_out, taken };
        let walked = walk.run(&mut picker, outbox_log::WALK_BUDGET)?;
        // The picker's takes past `outbox`'s are the walk's flights, leased with their rows.
        let picked = picker.finish(looked + walked.looked);
        dropped += drop_rows(&tx, &picked.drop)? + walked.dropped;
        for f in walked.flights {
            let own = Own { message_id: f.message_id, body: f.body, attempts: 0, created_at: f.created_at };
            deliveries.push(parts.delivery(&tx, &f.subscription_id, f.id, own, Some(f.device_pk))?);
        }
        tx.commit()?;
        let more = picked.more || walked.again;
        Ok(Claimed { deliveries, waiting: picked.waiting, more, dropped, again: walked.again })
    })
}

/// A due row as `offer_due`'s statements read it: its id, the subscription's
/// URL, why it may no longer go; then `next_attempt`, the merge's order.
macro_rules! due_sql {
    ($from:literal, $and:literal) => {
        concat!(
            "SELECT o.id, s.url,
                    CASE WHEN a.disabled = 1 THEN ?3
                         WHEN o.device_pk IS NULL OR NOT EXISTS
                              (SELECT 1 FROM account_devices x WHERE x.account_id = a.id AND x.device_pk = o.device_pk)
                         THEN ?4
                         WHEN s.all_devices = 0 AND NOT EXISTS (SELECT 1 FROM subscription_devices sd
                              WHERE sd.subscription_id = s.id AND sd.device_pk = o.device_pk)
                         THEN '",
            $crate::delivery::dropped_uncovered!(),
            "'
                         ",
            $crate::delivery::unasked_sql!(),
            " END,
                    o.next_attempt
             FROM outbox o ",
            $from,
            " JOIN subscriptions s ON s.id = o.subscription_id JOIN accounts a ON a.id = s.account_id
             WHERE o.state = 'pending' AND o.next_attempt <= ?1 AND (o.leased_until IS NULL OR o.leased_until <= ?1)
               AND s.enabled = 1 ",
            $and,
            " ORDER BY o.next_attempt, o.id LIMIT ?2"
        )
    };
}

/// Offers `picker` up to `limit` due rows (of the subscriptions `among`,
/// if given), oldest first, each with why it may no longer go, until it
/// has what it takes; returns how many it read. Every subscription's in
/// one walk of `outbox_due`, or each of `among`'s apart (`outbox_pending`),
/// a page at a time, merged: a claim that leaves subscriptions out would
/// otherwise walk past every due row of theirs, with the writer held.
fn offer_due(
    tx: &Connection,
    now: i64,
    limit: usize,
    among: Option<&[String]>,
    picker: &mut claim::Picker<'_>,
) -> StoreResult<usize> {
    let Some(subs) = among else {
        // Read as the picker takes them: it may stop early.
        let mut stmt = tx.prepare_cached(due_sql!("", ""))?;
        let rows = stmt.query_map(params![now, limit as i64, DROPPED_DISABLED, DROPPED_UNSEEN], due_row)?;
        return Ok(offer(picker, limit, rows.map(|r| r.map(|(_, c)| c)))?.0);
    };
    let mut pages = merge::Pages::new(subs, limit);
    let mut looked = 0;
    loop {
        let reads = pages.next_reads();
        if reads.is_empty() {
            return Ok(looked);
        }
        for (sub, after) in reads {
            let page = due_page(tx, now, pages.page(), sub, after)?;
            pages.add(sub, page);
        }
        let (n, open) = offer(picker, limit - looked, pages.ready().into_iter().map(Ok))?;
        looked += n;
        if !open || looked >= limit {
            return Ok(looked);
        }
    }
}

/// A row of [`due_sql!`]: its place in the due order, and the candidate.
fn due_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(merge::Key, claim::Candidate)> {
    Ok(((r.get(3)?, r.get(0)?), claim::Candidate { id: r.get(0)?, url: r.get(1)?, refused: r.get(2)? }))
}

/// Up to `n` due rows of subscription `sub`, oldest first, after the one
/// at `after` if given. Rows due at the same time as that one are read by
/// their id apart: SQLite seeks `outbox_pending` on `rowid` only after an
/// equality on `next_attempt` (a row value over both scans every row due
/// at that time, and an import's rows are all due at one time).
fn due_page(
    tx: &Connection,
    now: i64,
    n: usize,
    sub: &str,
    after: Option<merge::Key>,
) -> StoreResult<Vec<(merge::Key, claim::Candidate)>> {
    let fixed = params![now, n as i64, DROPPED_DISABLED, DROPPED_UNSEEN, sub];
    let Some((at, id)) = after else {
        let mut stmt = tx.prepare_cached(due_sql!("INDEXED BY outbox_pending", "AND o.subscription_id = ?5"))?;
        return Ok(stmt.query_map(fixed, due_row)?.collect::<Result<_, _>>()?);
    };
    let mut same = tx.prepare_cached(due_sql!(
        "INDEXED BY outbox_pending",
        "AND o.subscription_id = ?5 AND o.next_attempt = ?6 AND o.id > ?7"
    ))?;
    let mut rows: Vec<_> = same
        .query_map(params![now, n as i64, DROPPED_DISABLED, DROPPED_UNSEEN, sub, at, id], due_row)?
        .collect::<Result<_, _>>()?;
    if rows.len() < n {
        let mut later = tx.prepare_cached(due_sql!(
            "INDEXED BY outbox_pending",
            "AND o.subscription_id = ?5 AND o.next_attempt > ?6"
        ))?;
        let left = (n - rows.len()) as i64;
        let more = later.query_map(params![now, left, DROPPED_DISABLED, DROPPED_UNSEEN, sub, at], due_row)?;
        rows.extend(more.collect::<Result<Vec<_>, _>>()?);
    }
    Ok(rows)
}

/// Offers `picker` `rows` in order until it has what it takes, or `most`
/// have been read; returns how many it read and whether it would take more.
fn offer(
    picker: &mut claim::Picker<'_>,
    most: usize,
    rows: impl Iterator<Item = rusqlite::Result<claim::Candidate>>,
) -> StoreResult<(usize, bool)> {
    let mut looked = 0;
    for candidate in rows.take(most) {
        looked += 1;
        if !picker.offer(candidate?) {
            return Ok((looked, false));
        }
    }
    Ok((looked, true))
}

/// Marks rows dropped, each with its reason.
fn drop_rows(tx: &Connection, rows: &[(i64, String)]) -> StoreResult<usize> {
    let mut stmt = tx.prepare_cached("UPDATE outbox SET state = 'dropped', last_error = ?2 WHERE id = ?1")?;
    for (id, reason) in rows {
        stmt.execute(params![id, reason])?;
    }
    Ok(rows.len())
}

/// Leases rows `ids` until `until` and reads them whole.
fn lease_rows(tx: &Connection, parts: &mut Parts, ids: &[i64], until: i64) -> StoreResult<Vec<Delivery>> {
    let mut lease = tx.prepare_cached(
        "UPDATE outbox SET leased_until = ?2 WHERE id = ?1
         RETURNING subscription_id, message_id, body, attempts, created_at, device_pk",
    )?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let (sub, own, device_pk) = lease.query_row(params![id, until], |r| {
            let own = Own { message_id: r.get(1)?, body: r.get(2)?, attempts: r.get(3)?, created_at: r.get(4)? };
            Ok((r.get::<_, String>(0)?, own, r.get(5)?))
        })?;
        out.push(parts.delivery(tx, &sub, *id, own, device_pk)?);
    }
    Ok(out)
}

/// A delivery's own fields, beside its subscription's.
struct Own {
    message_id: String,
    body: String,
    attempts: u32,
    created_at: i64,
}

/// Each subscription's part of a delivery (its account, URL, secret and
/// headers), read once a claim.
#[derive(Default)]
struct Parts(HashMap<String, Delivery>);

impl Parts {
    /// Delivery `id` of subscription `sub`, of device `device_pk`.
    fn delivery(
        &mut self,
        tx: &Connection,
        sub: &str,
        id: i64,
        own: Own,
        device_pk: Option<i64>,
    ) -> StoreResult<Delivery> {
        if !self.0.contains_key(sub) {
            let part = tx
                .prepare_cached(
                    "SELECT a.username, s.url, s.allow_http, s.secret, s.failing_since, s.headers,
                            CASE WHEN s.batch = 1 THEN max(s.batch_max, 1) ELSE 1 END
                     FROM subscriptions s JOIN accounts a ON a.id = s.account_id WHERE s.id = ?1",
                )?
                .query_row([sub], |r| {
                    Ok(Delivery {
                        id: 0,
                        subscription_id: sub.to_owned(),
                        username: r.get(0)?,
                        url: r.get(1)?,
                        allow_http: r.get(2)?,
                        sealed_secret: r.get(3)?,
                        failing_since: r.get(4)?,
                        sealed_headers: r.get(5)?,
                        batch_max: r.get(6)?,
                        message_id: String::new(),
                        body: String::new(),
                        attempts: 0,
                        created_at: 0,
                        device_pk: None,
                    })
                })?;
            self.0.insert(sub.to_owned(), part);
        }
        let part = self.0.get(sub).ok_or_else(|| crate::StoreError::Backend("a subscription's part".into()))?;
        let Own { message_id, body, attempts, created_at } = own;
        Ok(Delivery { id, message_id, body, attempts, created_at, device_pk, ..part.clone() })
    }
}

/// Runs `f` with `synchronous = NORMAL`: its commit is not waited onto the
/// disk (the next durable commit takes it along). For the outbox's
/// bookkeeping only, log rows moved, leases and outcomes: lost to a power
/// cut, they leave the log rows in place or deliveries due again, which
/// at-least-once delivery allows; they then
/// cost ingest, which shares the one writer, no fsync of their own.
fn unsynced<R>(c: &mut Connection, f: impl FnOnce(&mut Connection) -> StoreResult<R>) -> StoreResult<R> {
    let durable: i64 = c.query_row("PRAGMA synchronous", [], |r| r.get(0))?;
    c.pragma_update(None, "synchronous", "NORMAL")?;
    let result = f(c);
    c.pragma_update(None, "synchronous", durable)?;
    result
}

/// Records outcomes, in one transaction; `key` makes the message ids of
/// deliveries attempted from the log that are to wait in `outbox`.
pub(super) fn finish(c: &mut Connection, now: i64, done: &[Finished], key: &str) -> StoreResult<()> {
    unsynced(c, |c| finish_unsynced(c, now, done, key))
}

fn finish_unsynced(c: &mut Connection, now: i64, done: &[Finished], key: &str) -> StoreResult<()> {
    let tx = begin(c)?;
    {
        let mut delivered = tx.prepare_cached("DELETE FROM outbox WHERE id = ?1")?;
        let mut retry = tx.prepare_cached(
            "UPDATE outbox SET attempts = attempts + 1, next_attempt = ?2, leased_until = NULL, last_status = ?3,
                    last_error = ?4
             WHERE id = ?1",
        )?;
        let mut failed = tx.prepare_cached(
            "UPDATE outbox SET state = 'failed', attempts = attempts + 1, last_status = ?2, last_error = ?3
             WHERE id = ?1",
        )?;
        let mut released =
            tx.prepare_cached("UPDATE outbox SET next_attempt = ?2, leased_until = NULL WHERE id = ?1")?;
        for f in done {
            let in_outbox = match &f.attempt {
                Attempt::Delivered => delivered.execute([f.id])?,
                Attempt::Retry { at, status, error } => retry.execute(params![f.id, at, status, error])?,
                Attempt::Failed { status, error } => failed.execute(params![f.id, status, error])?,
                Attempt::Released { at } => released.execute(params![f.id, at])?,
            };
            if in_outbox == 0 {
                // A first attempt made from the log.
                outbox_log::record(&tx, key, f)?;
            }
        }
        let (succeeded, failing) = failing_changes(done);
        // Only a subscription that was failing: an update that changes
        // nothing still rewrites the row's page, in every record.
        let mut ok = tx.prepare_cached(
            "UPDATE subscriptions SET failing_since = NULL WHERE id = ?1 AND failing_since IS NOT NULL",
        )?;
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

impl SqliteStore {
    /// Spreads the log as it stands now into `outbox`, a bounded unsynced
    /// transaction a turn, so readings waiting for the writer go between
    /// turns (rows written meanwhile stay in the log).
    async fn spread_log(&self) -> StoreResult<()> {
        let Some(upto) = self.reads.run(|c| outbox_log::newest(c)).await? else { return Ok(()) };
        let turn = move |c: &mut Connection| {
            unsynced(c, |c| {
                let tx = begin(c)?;
                let moved = outbox_log::spread(&tx, outbox_log::SPREAD_ROWS, Some(upto))?;
                tx.commit()?;
                Ok(moved)
            })
        };
        while self.writes.run(turn).await? == outbox_log::SPREAD_ROWS {}
        Ok(())
    }
}

#[async_trait]
impl crate::store::Deliveries for SqliteStore {
    async fn add_subscription(&self, sub: crate::delivery::NewSubscription) -> StoreResult<()> {
        self.writes.run(move |c| in_tx(c, async |tx| subscriptions::add(tx, sub).await)).await
    }

    async fn subscriptions(&self) -> StoreResult<Vec<crate::delivery::Subscription>> {
        self.reads.run(|c| on(c, async |c| subscriptions::list(c).await)).await
    }

    async fn remove_subscription(&self, id: &str) -> StoreResult<()> {
        // What the subscription is owed goes with it: the log is spread
        // first, in turns, and what came since in the removal's own transaction.
        self.spread_log().await?;
        let id = id.to_owned();
        self.writes
            .run(move |c| {
                in_tx(c, async |tx| {
                    outbox_log::spread_every(tx.0)?;
                    outbox_log::prune_owed(tx.0)?;
                    subscriptions::remove(tx, &id).await
                })
            })
            .await
    }

    async fn replace_subscription_secret(&self, id: &str, sealed_secret: Vec<u8>) -> StoreResult<()> {
        let id = id.to_owned();
        self.writes.run(move |c| in_tx(c, async |tx| subscriptions::set_secret(tx, &id, &sealed_secret).await)).await
    }

    async fn set_subscription_enabled(&self, id: &str, enabled: bool) -> StoreResult<()> {
        let id = id.to_owned();
        self.writes.run(move |c| in_tx(c, async |tx| subscriptions::set_enabled(tx, &id, enabled).await)).await
    }

    async fn claim_deliveries(&self, now: i64, lease: i64, req: &ClaimRequest) -> StoreResult<Claimed> {
        let (req, key) = (req.clone(), self.message_id_key.clone());
        self.writes.run(move |c| claim(c, now, lease, &req, &key)).await
    }

    async fn finish_deliveries(&self, now: i64, done: Vec<Finished>) -> StoreResult<()> {
        let key = self.message_id_key.clone();
        self.writes.run(move |c| finish(c, now, &done, &key)).await
    }

    async fn deliveries(&self, id: &str, failed_only: bool) -> StoreResult<Vec<DeliveryRecord>> {
        // Every delivery owed when asked is listed from `outbox`.
        self.spread_log().await?;
        let id = id.to_owned();
        self.reads.run(move |c| on(c, async |c| outbox::list(c, &id, failed_only).await)).await
    }

    async fn replay_deliveries(&self, id: &str, which: Replay, now: i64) -> StoreResult<u64> {
        let id = id.to_owned();
        self.writes.run(move |c| in_tx(c, async |tx| outbox::replay(tx, &id, which, now).await)).await
    }

    async fn outbox_backlog(&self) -> StoreResult<u64> {
        self.reads.run(|c| outbox_log::backlog(c)).await
    }

    async fn may_deliver(&self, sub: &ClaimedSubscription, device_pk: Option<i64>, alarm: bool) -> StoreResult<bool> {
        let sub = sub.clone();
        self.reads.run(move |c| on(c, async |c| subscriptions::may_deliver(c, &sub, device_pk, alarm).await)).await
    }

    async fn prune_failed_deliveries(&self, before: i64) -> StoreResult<u64> {
        // The subscription lists no log row names go too (a device's list
        // changes when subscriptions are added or change what they cover).
        self.writes
            .run(move |c| {
                in_tx(c, async |tx| {
                    outbox_log::prune_owed(tx.0)?;
                    outbox::prune_failed(tx, before).await
                })
            })
            .await
    }
}
