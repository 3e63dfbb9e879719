//! The outbox's log on PostgreSQL (schema 17, one row a group since
//! schema 22): a transaction of readings appends one row for the
//! deliveries they owe (each reading's body once, the subscriptions it
//! owes by their numbers, one random seed for their message ids), and
//! claims spread those rows into `outbox`, one row per delivery, in their
//! own unsynced transactions, as far as each claim needs.
//!
//! Why: a reading's commit waits for the disk, and one `outbox` row per
//! subscription, each with the body and three index entries, was what a
//! subscription cost ingest most (bench/RESULTS.md, the twenty-sixth
//! step); a log row per reading still cost a group of four readings'
//! transaction two to three times what one row for all four costs
//! (`bench/pg-log-group`, the thirty-ninth step).
//! The spread deletes the log rows it moves in the statement that inserts
//! their deliveries: a crash loses both or neither. Claims of several
//! instances skip the log rows another is moving (`SKIP LOCKED`); the
//! listing and a subscription's removal wait for them instead, so that
//! they see every delivery owed.

use super::ahead::Params;
use crate::StoreResult;
use crate::decide::outbox::{ID_BYTES, OutboxRow, id_bytes};
use bytes::BytesMut;
use std::sync::Arc;
use tokio_postgres::GenericClient;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

/// The most deliveries a log row holds, unless one reading owes more: a
/// group of live readings is one row, an import's transaction many.
pub(super) const ROW_DELIVERIES: usize = 64;
/// The most log rows one spread moves in one go.
pub(super) const SPREAD_ROWS: usize = 256;
/// The most log rows one claim moves: a claim stays short however long
/// the workers were away (the worker claims again at once while the log
/// holds more).
pub(super) const FEED_BUDGET: usize = 2_048;

/// The statement that appends one log row, and its parameters: the
/// row's running total (`$6`) comes from the writer ([`Tail`]).
const INSERT: &str = "INSERT INTO outbox_log (created_at, devices, counts, subs, n, cum, seed, ids, bodies)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";

/// Where the log ends: the last value of its id sequence, and the running
/// total the next row adds to (the newest row's, 0 for an empty log).
/// Every log row is written under the write lock, so a writer that holds
/// it and knows the tail need not look it up: the gauge's running total
/// (`cum`) cost each group's row a look-up of the newest row, the largest
/// single piece of what the outbox cost a group (bench/RESULTS.md, the
/// forty-second step).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Tail {
    seq: i64,
    cum: i64,
}

impl Tail {
    /// After one more row of `n` deliveries: its running total.
    fn append(&mut self, n: i64) -> i64 {
        self.seq += 1;
        self.cum += n;
        self.cum
    }
}

/// The tail as this process's last writing transaction committed it. It
/// holds only while the sequence stands where that transaction left it:
/// another instance's row, a rolled-back one, or a row of this process
/// whose transaction has not told this yet, moves it on, and the writer
/// looks the tail up instead ([`tail`]).
#[derive(Default)]
pub(super) struct KnownTail(std::sync::Mutex<Option<Tail>>);

impl KnownTail {
    /// The tail, if the sequence's last value `seq` (read under the write
    /// lock) is where it was left.
    pub(super) fn at(&self, seq: Option<i64>) -> Option<Tail> {
        let known = *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        known.filter(|t| Some(t.seq) == seq)
    }

    /// Records the tail a transaction committed.
    pub(super) fn committed(&self, tail: Option<Tail>) {
        if let Some(tail) = tail {
            *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(tail);
        }
    }
}

/// The tail looked up, under the write lock (in a statement after the one
/// that took it: it sees every row committed before).
pub(super) async fn tail(c: &impl GenericClient) -> StoreResult<Tail> {
    let row = c
        .query_one(
            "SELECT coalesce(pg_sequence_last_value('outbox_log_id_seq'::regclass), 0),
                    coalesce((SELECT cum FROM outbox_log ORDER BY id DESC LIMIT 1), 0)",
            &[],
        )
        .await?;
    Ok(Tail { seq: row.try_get(0)?, cum: row.try_get(1)? })
}

/// The statements that write the deliveries gathered by a transaction,
/// due now, with their parameters (none for no rows): one log row for up
/// to [`ROW_DELIVERIES`] of them (a row never splits a reading's). Each
/// run of rows with the same device and body (a reading's, or an alarm
/// transition's, one row for each subscription it owes) is one body in
/// the log row, with its device and how many deliveries it owes; the
/// deliveries' subscriptions are named by their numbers (schema 20: 36
/// bytes for three, against 168 spelled out), with the fixed ids if any
/// (`''` for a random one), and the row has a random seed ([`ID_BYTES`])
/// that the spread makes the other ids from (schema 25). `number`
/// gives a subscription's number: the transaction looked them up with the
/// subscriptions it owes ([`numbers`]); one it does not know (gone
/// meanwhile) is a NULL, owed nothing, that keeps the others' places.
/// `tail` is where the log ends, and moves on with each row.
pub(super) fn insert(
    rows: &[OutboxRow],
    number: impl Fn(&str) -> Option<i32>,
    tail: &mut Tail,
) -> StoreResult<Vec<(&'static str, Params)>> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let now = jiff::Timestamp::now().as_millisecond();
    let mut statements = Vec::new();
    let mut log = LogRow::default();
    let mut start = 0;
    while start < rows.len() {
        let first = &rows[start];
        // A reading's rows share its body: the pointers match, the text is
        // compared only for rows from elsewhere (an alarm transition's).
        let same = |r: &OutboxRow| Arc::ptr_eq(&r.body, &first.body) || r.body == first.body;
        let len = rows[start..].iter().take_while(|r| r.device_pk == first.device_pk && same(r)).count();
        if !log.devices.is_empty() && log.subs.len() + len > ROW_DELIVERIES {
            statements.push((INSERT, std::mem::take(&mut log).params(now, tail)?));
        }
        let run = &rows[start..start + len];
        log.devices.push(first.device_pk);
        log.counts.push(i32::try_from(len).map_err(|_| too_many(len))?);
        log.subs.extend(run.iter().map(|r| number(&r.subscription_id)));
        log.ids.extend(run.iter().map(|r| r.message_id.clone().unwrap_or_default()));
        log.bodies.push(Shared(first.body.clone()));
        start += len;
    }
    statements.push((INSERT, log.params(now, tail)?));
    Ok(statements)
}

/// The error of a reading owing more deliveries than a row can count.
fn too_many(len: usize) -> crate::StoreError {
    crate::StoreError::Backend(format!("one reading owes {len} deliveries").into())
}

/// The numbers of subscriptions `ids` (those that exist), as a
/// transaction that has not looked them up with the readings it writes
/// learns them (an alarm transition's deliveries).
pub(super) async fn numbers(c: &impl GenericClient, ids: &[&str]) -> StoreResult<Vec<(String, i32)>> {
    let rows = c.query("SELECT id, num FROM subscriptions WHERE id = ANY ($1)", &[&ids]).await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// One log row being gathered: a body, device and count of deliveries
/// for each reading; a subscription and a fixed id (empty for none) for
/// each delivery.
#[derive(Default)]
struct LogRow {
    devices: Vec<i64>,
    counts: Vec<i32>,
    subs: Vec<Option<i32>>,
    ids: Vec<String>,
    bodies: Vec<Shared>,
}

impl LogRow {
    /// The parameters of [`INSERT`] for this row, written at `now` after
    /// `tail`, with a seed drawn for its ids.
    fn params(self, now: i64, tail: &mut Tail) -> StoreResult<Params> {
        let seed = id_bytes(1)?;
        let n = self.subs.len() as i64;
        let cum = tail.append(n);
        // No fixed id (a reading's deliveries): none stored.
        let ids = self.ids.iter().any(|id| !id.is_empty()).then_some(self.ids);
        Ok(vec![
            Box::new(now),
            Box::new(self.devices),
            Box::new(self.counts),
            Box::new(self.subs),
            Box::new(n),
            Box::new(cum),
            Box::new(seed),
            Box::new(ids),
            Box::new(self.bodies),
        ])
    }
}

/// A body shared with the transaction's rows, sent as text without a copy.
#[derive(Debug)]
struct Shared(Arc<str>);

impl ToSql for Shared {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        (&*self.0).to_sql(ty, out)
    }

    fn accepts(ty: &Type) -> bool {
        <&str as ToSql>::accepts(ty)
    }

    to_sql_checked!();
}

/// How a spread treats log rows another transaction is moving.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Others {
    /// Skips them (a claim: the other claimer spreads them).
    Skip,
    /// Waits for them (the listing, a removal: they must see them moved).
    Wait,
}

/// Moves up to `limit` of the oldest log rows (none after id `upto`, if
/// given) into `outbox`: one row per delivery to a subscription that
/// still exists (a removed one's are owed nothing), in the order they were
/// written, each with the id it must keep or `msg_` and, in hex, the
/// first [`ID_BYTES`] of SHA-256 over its row's seed and its place in the
/// row (from 1, four bytes big-endian; a row written before schema 25:
/// its own random bytes), due at once. Returns how many log rows it moved.
pub(super) async fn spread(
    c: &impl GenericClient,
    limit: usize,
    upto: Option<i64>,
    others: Others,
) -> StoreResult<usize> {
    if limit == 0 {
        return Ok(0);
    }
    let sql = match others {
        Others::Skip => SPREAD_SKIPPING,
        Others::Wait => SPREAD_WAITING,
    };
    let moved: i64 = c.query_one(sql, &[&(limit as i64), &upto]).await?.get(0);
    Ok(usize::try_from(moved).unwrap_or(0))
}

/// The spread's statement, `$lock` how it locks the log rows it moves. A
/// reading's deliveries are places `off + 1` to `off + c` of its row's
/// lists, `off` the deliveries of the readings before it.
macro_rules! spread_sql {
    ($lock:literal) => {
        concat!(
            "WITH moved AS (
                DELETE FROM outbox_log WHERE id = ANY (ARRAY (
                    SELECT id FROM outbox_log WHERE $2::bigint IS NULL OR id <= $2 ORDER BY id LIMIT $1 FOR UPDATE ",
            $lock,
            "))
                RETURNING id, created_at, devices, counts, subs, seed, nonce, ids, bodies),
            readings AS (
                SELECT m.id, m.created_at, m.subs, m.seed, m.nonce, m.ids, r.d, r.b, r.c, r.k,
                       (sum(r.c) OVER (PARTITION BY m.id ORDER BY r.k) - r.c)::integer AS off
                FROM moved m CROSS JOIN LATERAL unnest(m.devices, m.counts, m.bodies) WITH ORDINALITY AS r (d, c, b, k)),
            spread AS (
                INSERT INTO outbox (subscription_id, device_pk, message_id, body, created_at, next_attempt)
                SELECT x.id, r.d,
                       coalesce(nullif(r.ids[p], ''), 'msg_' || encode(CASE WHEN r.seed IS NULL
                           THEN substring(r.nonce FROM (p - 1) * 16 + 1 FOR 16)
                           ELSE substring(sha256(r.seed || int4send(p)) FROM 1 FOR 16) END, 'hex')),
                       r.b, r.created_at, r.created_at
                FROM readings r CROSS JOIN LATERAL generate_series(r.off + 1, r.off + r.c) AS p
                JOIN subscriptions x ON x.num = r.subs[p]
                ORDER BY r.id, r.k, p)
            SELECT count(*) FROM moved"
        )
    };
}
// The statement's ids are 16 bytes: a hash's first, or an old row's own.
const _: () = assert!(ID_BYTES == 16);
pub(super) const SPREAD_SKIPPING: &str = spread_sql!("SKIP LOCKED");
const SPREAD_WAITING: &str = spread_sql!("");

/// The newest log row's id, if any.
pub(super) async fn newest(c: &impl GenericClient) -> StoreResult<Option<i64>> {
    Ok(c.query_one("SELECT max(id) FROM outbox_log", &[]).await?.get(0))
}

/// Deliveries pending: `outbox`'s and the log's, the newest log row's
/// running total less the oldest's before it (two index lookups however
/// long the log; a subscription's removal spreads the log first, so every
/// delivery the log owes is to one that existed when it was written).
pub(super) async fn backlog(c: &impl GenericClient) -> StoreResult<u64> {
    let n: i64 = c
        .query_one(
            "SELECT (SELECT count(*) FROM outbox WHERE state = 'pending')
                  + coalesce((SELECT cum FROM outbox_log ORDER BY id DESC LIMIT 1), 0)
                  - coalesce((SELECT cum - n FROM outbox_log ORDER BY id LIMIT 1), 0)",
            &[],
        )
        .await?
        .get(0);
    Ok(u64::try_from(n).unwrap_or(0))
}

#[cfg(test)]
mod tests;
