//! The outbox's log on SQLite: a transaction of readings writes one row
//! per reading (its body once, with the subscriptions it owes), and the
//! delivery worker makes each delivery's first attempt straight from it
//! (`outbox_walk.rs`); a row of `outbox` is written only for a delivery
//! that is to wait.
//!
//! Why: a reading's commit is durable (`fsync`), and one `outbox` row per
//! subscription, each in the table and its two indexes, made that commit
//! write about ten times the pages (bench/RESULTS.md, the fourteenth and
//! sixteenth steps); and moving every delivery through `outbox` before
//! its first attempt (spread, leased, deleted) cost the one writer 46-49
//! pages a claim beside a saturating ingest (the thirty-sixth step). A
//! log row is appended at the table's end, without an index. A claim
//! leases the rows it takes deliveries of (`leased_until`); outcomes mark
//! each delivery of a row done (`done`, bit j for its j-th subscription)
//! and delete a row all done, except the newest: the log always keeps its
//! newest row, so its ids are never given twice.
//!
//! A delivery's number is its row's id * [`PER_ROW`] + j whether it is
//! attempted from the log or waits in `outbox` (a row names at most
//! [`MAX_OWED`] subscriptions), and its message id is made from the row
//! ([`message_id`]), so an attempt made again after its lease ran out
//! carries the first one's. What waits is moved to `outbox` with them
//! ([`spread`]), in the transaction that marks it done: a power cut loses
//! both or neither, so a delivery owed is never lost nor owed twice.
//!
//! The listing and a subscription's removal spread the log as it stands
//! first (deliveries in flight with their lease), and the backlog counts
//! it too, so no answer tells the log from `outbox`; a retry now due may
//! go before a fresh delivery still in the log.

use crate::decide::outbox::{ID_BYTES, OutboxRow, id_text};
use crate::delivery::{Attempt, Finished};
use crate::{StoreError, StoreResult};
use rusqlite::{Connection, OptionalExtension, params};
use sha2::{Digest, Sha256};

/// The most log rows one spread moves in one go.
pub(super) const SPREAD_ROWS: usize = 2_048;
/// The most log rows one claim reads: a claim stays short however long
/// the worker was away, or however many deliveries it moves to `outbox`
/// (an endpoint left out); it claims again at once while the log holds more.
pub(super) const WALK_BUDGET: usize = 8_192;
/// Deliveries a log row's numbers make room for: a delivery's number is
/// its row's id times this, plus its place in the row.
pub(super) const PER_ROW: i64 = 64;
/// The most subscriptions one log row names (one bit of `done` each, so
/// that `(1 << n) - 1` stays a 64-bit integer in SQL); a reading owed to
/// more is logged in several rows.
pub(super) const MAX_OWED: usize = 62;
/// The name in `installation` of the key message ids are made with.
pub(super) const MESSAGE_ID_KEY: &str = "message_id_key";

/// The number of the `j`-th delivery of log row `row`.
pub(super) fn number(row: i64, j: usize) -> i64 {
    row * PER_ROW + j as i64
}

/// The log row and place of delivery number `id`.
pub(super) fn place(id: i64) -> (i64, usize) {
    (id.div_euclid(PER_ROW), id.rem_euclid(PER_ROW) as usize)
}

/// The `done` of a row of `n` deliveries all done.
pub(super) fn all_done(n: i64) -> i64 {
    (1i64 << n.clamp(0, MAX_OWED as i64)) - 1
}

/// The message id of the `j`-th delivery of log row `row`, written at
/// `created_at` (ms): `msg_` and, in lowercase hex, 16 bytes of SHA-256
/// over the installation's secret `key` and those. The same delivery has
/// the same id at every attempt, whether made from the log or from
/// `outbox`; without the key nobody can tell one id from another's row.
/// SQL reaches it as `sh_message_id(key, row, created_at, j)`.
pub(super) fn message_id(key: &str, row: i64, created_at: i64, j: i64) -> String {
    let mut hash = Sha256::new();
    hash.update(b"sensorhub message id\0");
    hash.update(key.as_bytes());
    hash.update(row.to_le_bytes());
    hash.update(created_at.to_le_bytes());
    hash.update(j.to_le_bytes());
    id_text(&hash.finalize()[..ID_BYTES])
}

/// The installation's key for [`message_id`].
pub(super) fn message_id_key(c: &Connection) -> StoreResult<String> {
    let sql = "SELECT value FROM installation WHERE key = ?1";
    Ok(c.prepare_cached(sql)?.query_row([MESSAGE_ID_KEY], |r| r.get(0))?)
}

/// The message id of the `j`-th delivery of log row `row` written at
/// `created_at`: the one `ids` (a JSON array) keeps for it, if any (an
/// alarm transition's), else [`message_id`].
pub(super) fn log_message_id(key: &str, row: i64, created_at: i64, ids: Option<&str>, j: usize) -> StoreResult<String> {
    if let Some(ids) = ids {
        let kept: Vec<Option<String>> = serde_json::from_str(ids).map_err(|e| StoreError::Backend(e.into()))?;
        if let Some(Some(id)) = kept.into_iter().nth(j) {
            return Ok(id);
        }
    }
    Ok(message_id(key, row, created_at, j as i64))
}

/// Writes the deliveries gathered by a transaction, due now: one log row
/// per run of rows with the same device and body (a reading's, or an
/// alarm event's, one row for each subscription it owes; at most
/// [`MAX_OWED`] a row). The row names the run's subscriptions by a list
/// kept once in `outbox_owed`, and the ids that must be kept (`ids`, an
/// alarm's) if any; the others are made from the row ([`message_id`]).
/// `n` is the row's deliveries and `cum` the log's running total up to
/// it, so the backlog is two lookups.
pub(super) fn write(tx: &Connection, rows: &[OutboxRow]) -> StoreResult<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let now = jiff::Timestamp::now().as_millisecond();
    let newest: Option<(i64, i64, i64, i64)> = tx
        .prepare_cached("SELECT id, cum, n, done FROM outbox_log ORDER BY id DESC LIMIT 1")?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .optional()?;
    let mut cum = newest.map_or(0, |(_, cum, _, _)| cum);
    let mut stmt = tx.prepare_cached(
        "INSERT INTO outbox_log (device_pk, n, cum, created_at, owed, nonce, ids, body)
         VALUES (?1, ?2, ?3, ?4, ?5, x'', ?6, ?7)",
    )?;
    // The lists this write named: a group interleaves a few devices.
    let mut lists: Vec<(String, i64)> = Vec::new();
    let mut start = 0;
    while start < rows.len() {
        let first = &rows[start];
        let run = &rows[start..];
        let same = run.iter().take_while(|r| r.device_pk == first.device_pk && r.body == first.body).count();
        let run = &run[..same.min(MAX_OWED)];
        let subs = serde_json::to_string(&run.iter().map(|r| &*r.subscription_id).collect::<Vec<_>>());
        let subs = subs.map_err(|e| StoreError::Backend(e.into()))?;
        let set = match lists.iter().find(|(known, _)| *known == subs) {
            Some((_, id)) => *id,
            None => {
                let id = owed_list(tx, &subs)?;
                lists.push((subs, id));
                id
            }
        };
        let ids = match run.iter().any(|r| r.message_id.is_some()) {
            true => Some(
                serde_json::to_string(&run.iter().map(|r| r.message_id.as_deref()).collect::<Vec<_>>())
                    .map_err(|e| StoreError::Backend(e.into()))?,
            ),
            false => None,
        };
        cum += run.len() as i64;
        stmt.execute(params![first.device_pk, run.len() as i64, cum, now, set, ids, &*first.body])?;
        start += run.len();
    }
    // The newest row, kept only for its id, is no longer needed for it.
    if let Some((id, ..)) = newest.filter(|(_, _, n, done)| *done == all_done(*n)) {
        tx.prepare_cached("DELETE FROM outbox_log WHERE id = ?1")?.execute([id])?;
    }
    Ok(())
}

/// The id of subscription list `subs` (a JSON array) in `outbox_owed`,
/// added if new. A device's readings owe the same list until a
/// subscription is added, removed, or changes what it covers.
fn owed_list(tx: &Connection, subs: &str) -> StoreResult<i64> {
    let found = tx.prepare_cached("SELECT id FROM outbox_owed WHERE subs = ?1")?.query_row([subs], |r| r.get(0));
    if let Some(id) = found.optional()? {
        return Ok(id);
    }
    Ok(tx.prepare_cached("INSERT INTO outbox_owed (subs) VALUES (?1) RETURNING id")?.query_row([subs], |r| r.get(0))?)
}

/// The most log rows [`prune_owed`] reads: past them it leaves the lists
/// for a later pass (a few short rows each), rather than hold the one
/// writer for a read of a long backlog.
const PRUNE_LOG_ROWS: i64 = 10_000;

/// Removes the subscription lists no log row names any more, unless the
/// log holds more than [`PRUNE_LOG_ROWS`] rows; returns how many went.
pub(super) fn prune_owed(tx: &Connection) -> StoreResult<usize> {
    let rows: i64 = tx
        .prepare_cached("SELECT count(*) FROM (SELECT 1 FROM outbox_log LIMIT ?1)")?
        .query_row([PRUNE_LOG_ROWS + 1], |r| r.get(0))?;
    if rows > PRUNE_LOG_ROWS {
        return Ok(0);
    }
    Ok(tx.execute("DELETE FROM outbox_owed WHERE id NOT IN (SELECT owed FROM outbox_log)", [])?)
}

/// Deletes log row `row` unless it is the newest; returns whether it went.
pub(super) fn remove_unless_newest(tx: &Connection, row: i64) -> StoreResult<bool> {
    let sql = "DELETE FROM outbox_log WHERE id = ?1 AND id < (SELECT max(id) FROM outbox_log)";
    Ok(tx.prepare_cached(sql)?.execute([row])? == 1)
}

/// Marks log row `row` with `done`, deleting it once all its deliveries
/// are (`n` of them), unless it is the newest.
pub(super) fn mark(tx: &Connection, row: i64, n: i64, done: i64) -> StoreResult<()> {
    if done == all_done(n) && remove_unless_newest(tx, row)? {
        return Ok(());
    }
    // Kept all done (the newest), it is no longer in flight.
    let sql =
        "UPDATE outbox_log SET done = ?2, leased_until = CASE WHEN ?2 = (1 << n) - 1 THEN NULL ELSE leased_until END
               WHERE id = ?1";
    tx.prepare_cached(sql)?.execute(params![row, done])?;
    Ok(())
}

/// Records outcome `f` of a delivery attempted from its log row (its
/// number not in `outbox`): done in the row, and, unless delivered, written
/// to `outbox` with the attempt counted (due again, or failed), under the
/// same number and message id. Nothing if the row no longer owes it (it
/// was moved to `outbox` meanwhile, whose row then took the outcome, or
/// the subscription was removed).
pub(super) fn record(tx: &Connection, key: &str, f: &Finished) -> StoreResult<()> {
    let (row, j) = place(f.id);
    let found = tx
        .prepare_cached("SELECT device_pk, n, created_at, ids, done, body FROM outbox_log WHERE id = ?1")?
        .query_row([row], |r| {
            let fields: (i64, i64, i64, Option<String>, i64, String) =
                (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?);
            Ok(fields)
        })
        .optional()?;
    let Some((device_pk, n, created_at, ids, done, body)) = found else { return Ok(()) };
    if j >= MAX_OWED || j as i64 >= n || done & (1 << j) != 0 {
        return Ok(());
    }
    let (state, attempts, next, status, error) = match &f.attempt {
        Attempt::Delivered => return mark(tx, row, n, done | (1 << j)),
        Attempt::Retry { at, status, error } => ("pending", 1, *at, *status, Some(error.as_str())),
        Attempt::Failed { status, error } => ("failed", 1, created_at, *status, Some(error.as_str())),
        Attempt::Released { at } => ("pending", 0, *at, None, None),
    };
    let message_id = log_message_id(key, row, created_at, ids.as_deref(), j)?;
    tx.prepare_cached(
        "INSERT INTO outbox (id, subscription_id, device_pk, message_id, body, created_at, state, attempts,
                             next_attempt, last_status, last_error)
         SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?11, ?8, ?9, ?10
         WHERE EXISTS (SELECT 1 FROM subscriptions WHERE id = ?2)",
    )?
    .execute(params![
        f.id,
        f.subscription_id,
        device_pk,
        message_id,
        body,
        created_at,
        state,
        next,
        status,
        error,
        attempts
    ])?;
    mark(tx, row, n, done | (1 << j))
}

/// Moves the deliveries of up to `limit` of the oldest log rows (none
/// after id `upto`, if given) into `outbox` that are not done: one row per
/// subscription that still exists (a removed one's were spread before it
/// went), in the order they were written, each with its number and
/// message id ([`message_id`], or the one it must keep), and those in
/// flight with their lease. The rows go, but for the newest, kept all
/// done. Returns how many rows it moved.
pub(super) fn spread(tx: &Connection, limit: usize, upto: Option<i64>) -> StoreResult<usize> {
    if limit == 0 {
        return Ok(0);
    }
    let (bound, rows): (Option<i64>, i64) = tx
        .prepare_cached(
            "SELECT max(id), count(*) FROM
               (SELECT id FROM outbox_log WHERE (?2 IS NULL OR id <= ?2) AND done != (1 << n) - 1 ORDER BY id LIMIT ?1)",
        )?
        .query_row(params![limit as i64, upto], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let Some(bound) = bound else { return Ok(0) };
    tx.prepare_cached(
        "INSERT INTO outbox (id, subscription_id, device_pk, message_id, body, created_at, next_attempt, leased_until)
         SELECT l.id * 64 + j.key, j.value, l.device_pk,
                coalesce(json_extract(l.ids, '$[' || j.key || ']'),
                         sh_message_id((SELECT value FROM installation WHERE key = 'message_id_key'),
                                       l.id, l.created_at, j.key)),
                l.body, l.created_at, l.created_at, l.leased_until
         FROM outbox_log l JOIN outbox_owed w ON w.id = l.owed, json_each(w.subs) j
         WHERE l.id <= ?1 AND (l.done >> j.key) & 1 = 0
           AND EXISTS (SELECT 1 FROM subscriptions s WHERE s.id = j.value)
         ORDER BY l.id",
    )?
    .execute([bound])?;
    tx.prepare_cached("UPDATE outbox_log SET done = (1 << n) - 1, leased_until = NULL WHERE id <= ?1")?
        .execute([bound])?;
    tx.prepare_cached("DELETE FROM outbox_log WHERE id <= ?1 AND id < (SELECT max(id) FROM outbox_log)")?
        .execute([bound])?;
    Ok(usize::try_from(rows).unwrap_or(0))
}

/// Spreads the whole log within transaction `tx`.
pub(super) fn spread_every(tx: &Connection) -> StoreResult<()> {
    while spread(tx, SPREAD_ROWS, None)? == SPREAD_ROWS {}
    Ok(())
}

/// The newest log row's id, if any.
pub(super) fn newest(c: &Connection) -> StoreResult<Option<i64>> {
    Ok(c.prepare_cached("SELECT max(id) FROM outbox_log")?.query_row([], |r| r.get(0))?)
}

/// Deliveries pending: `outbox`'s and the log's, those in flight from it
/// among them (a subscription's removal spreads the log first, so every
/// delivery the log owes is to one that exists). The log's are counted by
/// rows: a row some of whose deliveries are done counts whole.
pub(super) fn backlog(c: &Connection) -> StoreResult<u64> {
    let n: i64 = c
        .prepare_cached(
            "SELECT (SELECT count(*) FROM outbox WHERE state = 'pending')
                  + coalesce((SELECT cum FROM outbox_log ORDER BY id DESC LIMIT 1), 0)
                  - coalesce((SELECT CASE WHEN done = (1 << n) - 1 THEN cum ELSE cum - n END
                              FROM outbox_log ORDER BY id LIMIT 1), 0)",
        )?
        .query_row(params![], |r| r.get(0))?;
    Ok(u64::try_from(n).unwrap_or(0))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::sqlite::{Durability, SqliteStore};

    /// A delivery whose message id must be `msg` (an alarm's).
    pub(in crate::sqlite) fn row(sub: &str, msg: &str, pk: i64, body: &str) -> OutboxRow {
        OutboxRow { subscription_id: sub.into(), device_pk: pk, message_id: Some(msg.into()), body: body.into() }
    }

    /// A reading's delivery: its message id is made from its log row.
    pub(in crate::sqlite) fn reading(sub: &str, pk: i64, body: &str) -> OutboxRow {
        OutboxRow { subscription_id: sub.into(), device_pk: pk, message_id: None, body: body.into() }
    }

    /// `outbox`'s rows: (number, subscription, message id, device, body).
    pub(in crate::sqlite) fn outbox(c: &Connection) -> Vec<(i64, String, String, i64, String)> {
        let mut stmt =
            c.prepare("SELECT id, subscription_id, message_id, device_pk, body FROM outbox ORDER BY id").expect("sql");
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
            .expect("sql")
            .map(|r| r.expect("row"))
            .collect()
    }

    /// A migrated database with subscriptions `sub_a`, `sub_b` and, disabled,
    /// `sub_off`, of an account that sees device 7 and not device 8.
    pub(in crate::sqlite) async fn database(dir: &tempfile::TempDir) -> Connection {
        let path = dir.path().join("l.db");
        drop(SqliteStore::open(path.to_str().expect("utf-8"), Durability::Full).await.expect("create"));
        let c = super::super::pool::open_connection(&path, super::super::pool::Role::Write, "FULL").expect("open");
        c.execute_batch(
            "INSERT INTO accounts (id, username, password_hash, created_at) VALUES (1, 'a', 'x', 0);
             INSERT INTO devices (id, device_id, name, type, lat, long, interval_seconds)
             VALUES (7, 'D7', 'n', 'T', 0, 0, 60), (8, 'D8', 'n', 'T', 0, 0, 60);
             INSERT INTO account_devices (account_id, device_pk) VALUES (1, 7);
             INSERT INTO subscriptions (id, account_id, url, all_devices, events, secret, created_at, enabled)
             VALUES ('sub_a', 1, 'http://a', 1, 'sensor-data', x'00', 0, 1),
                    ('sub_b', 1, 'http://b', 1, 'sensor-data', x'00', 0, 1),
                    ('sub_off', 1, 'http://o', 1, 'sensor-data', x'00', 0, 0);",
        )
        .expect("subscriptions");
        c
    }

    pub(in crate::sqlite) fn count(c: &Connection, sql: &str) -> i64 {
        c.query_row(sql, [], |r| r.get(0)).expect("count")
    }

    /// Log rows that still owe a delivery.
    pub(in crate::sqlite) const OWING: &str = "SELECT count(*) FROM outbox_log WHERE done != (1 << n) - 1";

    #[tokio::test]
    async fn a_write_is_one_log_row_a_body_and_spreads_in_order_to_subscriptions_that_exist() {
        let dir = tempfile::tempdir().expect("dir");
        let mut c = database(&dir).await;
        let tx = c.transaction().expect("tx");
        let rows = [
            row("sub_a", "m_a1", 7, "one"),
            row("sub_b", "m_b1", 7, "one"),
            row("sub_gone", "m_g1", 7, "one"),
            row("sub_a", "m_a2", 7, "two"),
            row("sub_b", "m_b2", 8, "two"),
        ];
        write(&tx, &rows).expect("write");
        assert_eq!(count(&tx, OWING), 3, "a run of one device and body is one row; another device is another");
        let random: i64 = tx.query_row("SELECT sum(length(nonce)) FROM outbox_log", [], |r| r.get(0)).expect("sum");
        assert_eq!(random, 0, "fixed message ids: no random bytes stored");
        assert_eq!(backlog(&tx).expect("backlog"), 5, "the log counts all it owes");
        let first = count(&tx, "SELECT min(id) FROM outbox_log WHERE n > 0");
        // The row all done the upgrade left is not counted.
        assert_eq!(spread(&tx, 1, None).expect("spread"), 1, "one log row at most");
        let one = |id, s: &str, m: &str, pk, b: &str| (id, s.to_owned(), m.to_owned(), pk, b.to_owned());
        let n = |row, j| row * PER_ROW + j;
        assert_eq!(
            outbox(&tx),
            [one(n(first, 0), "sub_a", "m_a1", 7, "one"), one(n(first, 1), "sub_b", "m_b1", 7, "one")]
        );
        assert_eq!(backlog(&tx).expect("backlog"), 4, "moved, not counted twice; none for one that is gone");
        spread_every(&tx).expect("the rest");
        assert_eq!(
            outbox(&tx)[2..],
            [one(n(first + 1, 0), "sub_a", "m_a2", 7, "two"), one(n(first + 2, 0), "sub_b", "m_b2", 8, "two")],
            "in the order written, each message id kept, each numbered by its row and place"
        );
        let kept = count(&tx, "SELECT count(*) FROM outbox_log");
        assert_eq!(
            (kept, count(&tx, OWING), spread(&tx, 10, None).expect("empty")),
            (1, 0, 0),
            "the newest stays, done"
        );
        let due: Vec<(i64, i64)> = tx
            .prepare("SELECT created_at, next_attempt FROM outbox")
            .expect("sql")
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("sql")
            .map(|r| r.expect("row"))
            .collect();
        assert!(due.iter().all(|(created, next)| created == next && *created > 0), "due when written: {due:?}");
        write(&tx, &[row("sub_a", "m_a3", 7, "three")]).expect("write");
        let after = count(&tx, "SELECT max(id) FROM outbox_log");
        assert_eq!(after, first + 3, "numbers are never given twice: the log keeps its newest row");
    }

    #[tokio::test]
    async fn a_readings_log_row_names_a_shared_list_and_its_deliveries_get_ids_made_from_the_row() {
        let dir = tempfile::tempdir().expect("dir");
        let mut c = database(&dir).await;
        let tx = c.transaction().expect("tx");
        let owed = |body: &str| [reading("sub_a", 7, body), reading("sub_b", 7, body)];
        write(&tx, &owed("one").into_iter().chain(owed("two")).collect::<Vec<_>>()).expect("write");
        write(&tx, &owed("three")).expect("write");
        write(&tx, &[reading("sub_b", 7, "four")]).expect("write");
        assert_eq!(count(&tx, OWING), 4);
        assert_eq!(count(&tx, "SELECT count(*) FROM outbox_owed"), 2, "one row a list, across transactions");
        let (bytes, ids) = (
            count(&tx, "SELECT sum(length(nonce)) FROM outbox_log"),
            count(&tx, "SELECT count(*) FROM outbox_log WHERE ids IS NOT NULL"),
        );
        assert_eq!((bytes, ids), (0, 0), "no random bytes logged, no ids spelled out");
        let rows: Vec<(i64, i64)> = tx
            .prepare("SELECT id, created_at FROM outbox_log WHERE n > 0 ORDER BY id")
            .expect("sql")
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("sql")
            .map(|r| r.expect("row"))
            .collect();
        spread_every(&tx).expect("spread");
        let spread = outbox(&tx);
        let order: Vec<_> = spread.iter().map(|(_, s, _, _, b)| (s.as_str(), b.as_str())).collect();
        assert_eq!(
            order,
            [
                ("sub_a", "one"),
                ("sub_b", "one"),
                ("sub_a", "two"),
                ("sub_b", "two"),
                ("sub_a", "three"),
                ("sub_b", "three"),
                ("sub_b", "four")
            ]
        );
        let ids: std::collections::HashSet<_> = spread.iter().map(|(_, _, m, _, _)| m.clone()).collect();
        assert_eq!(ids.len(), 7, "every delivery its own id");
        let hex = |m: &str| m.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        assert!(ids.iter().all(|m| m.len() == 36 && m.starts_with("msg_") && hex(&m[4..])), "{ids:?}");
        let key = message_id_key(&tx).expect("key");
        assert_eq!(key.len(), 64, "32 random bytes in hex, made by the upgrade");
        let (row, at) = rows[0];
        assert_eq!(spread[1].2, message_id(&key, row, at, 1), "SQL's id is Rust's");
        assert_ne!(message_id(&key, row, at, 1), message_id(&"0".repeat(64), row, at, 1), "the key makes it");
        assert_eq!(prune_owed(&tx).expect("prune"), 1, "no log row names it any more (the newest names the other)");
        write(&tx, &owed("five")).expect("write");
        assert_eq!(prune_owed(&tx).expect("prune"), 1, "the newest row kept all done went, and its list");
        assert_eq!(count(&tx, "SELECT count(*) FROM outbox_owed"), 1, "a list a row names stays");
        assert_eq!(prune_owed(&tx).expect("prune"), 0);
    }

    #[tokio::test]
    async fn a_reading_owed_to_more_subscriptions_than_a_row_names_is_logged_in_rows_enough() {
        let dir = tempfile::tempdir().expect("dir");
        let mut c = database(&dir).await;
        let tx = c.transaction().expect("tx");
        let subs: Vec<_> = (0..MAX_OWED + 3).map(|i| reading(&format!("sub_{i:03}"), 7, "one")).collect();
        write(&tx, &subs).expect("write");
        let rows: Vec<(i64, i64)> = tx
            .prepare("SELECT n, cum FROM outbox_log WHERE n > 0 ORDER BY id")
            .expect("sql")
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("sql")
            .map(|r| r.expect("row"))
            .collect();
        assert_eq!(rows, [(MAX_OWED as i64, MAX_OWED as i64), (3, MAX_OWED as i64 + 3)]);
        assert_eq!(backlog(&tx).expect("backlog"), MAX_OWED as u64 + 3);
        assert_eq!(all_done(MAX_OWED as i64), i64::MAX >> 1, "a row's bits fit");
    }
}
