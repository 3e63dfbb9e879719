//! The outbox's log on SQLite: a transaction of readings writes one row
//! per reading (its body once, with the subscriptions and message ids it
//! owes), and the delivery worker's claims spread those rows into
//! `outbox`, one row per delivery, in their own unsynced transactions, as
//! far as each claim needs ([`feed`]).
//!
//! Why: a reading's commit is durable (`fsync`), and one `outbox` row per
//! subscription, each in the table and its two indexes, made that commit
//! write about ten times the pages (bench/RESULTS.md, the fourteenth and
//! sixteenth steps). A log row is appended at the table's end, without an
//! index; `outbox` keeps one index fewer too (no claim used the one by
//! subscription). The spread moves the log's rows to `outbox` and deletes
//! them in one transaction: a power cut loses both or neither, so a
//! delivery owed is never lost nor owed twice.
//!
//! A reading's deliveries get their message ids when they are spread
//! (`randomblob`, SQLite's ChaCha20 generator seeded from the operating
//! system), not random bytes in the log row: 48 of a row's 217 bytes with
//! three subscriptions, through the WAL of every durable commit
//! (bench/RESULTS.md, the thirty-sixth step). Rows logged before carry
//! their bytes, and their ids are made of them as before.
//!
//! Deliveries owed faster than they can be made wait in the log: a claim
//! spreads only until `outbox` holds what it may take (not counting an
//! endpoint at its share), so the one writer moves a delivery about when it
//! is to be made. The listing and a subscription's removal spread the log
//! as it stands first, and the backlog counts it too, so no answer tells
//! the log from `outbox`; a retry now due may go before a fresh delivery
//! still in the log.

use crate::decide::outbox::OutboxRow;
use crate::{StoreError, StoreResult};
use rusqlite::{Connection, OptionalExtension, params};

/// The most log rows one spread moves in one go.
pub(super) const SPREAD_ROWS: usize = 2_048;
/// The most log rows one claim moves: a claim stays short however long
/// the worker was away (it claims again at once while the log holds more).
pub(super) const FEED_BUDGET: usize = 16_384;

/// Writes the deliveries gathered by a transaction, due now: one log row
/// per run of rows with the same device and body (a reading's, or an
/// alarm event's, one row for each subscription it owes). The row names
/// the run's subscriptions by a list kept once in `outbox_owed`, and the
/// ids that must be kept (`ids`, an alarm's) if any; [`spread`] makes the
/// others. `n` is the row's deliveries and `cum` the log's running total
/// up to it, so the backlog is two lookups.
pub(super) fn write(tx: &Connection, rows: &[OutboxRow]) -> StoreResult<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let now = jiff::Timestamp::now().as_millisecond();
    let mut cum: i64 = tx
        .prepare_cached("SELECT cum FROM outbox_log ORDER BY id DESC LIMIT 1")?
        .query_row([], |r| r.get(0))
        .optional()?
        .unwrap_or(0);
    let mut stmt = tx.prepare_cached(
        "INSERT INTO outbox_log (device_pk, n, cum, created_at, owed, nonce, ids, body)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?;
    // The lists this write named: a group interleaves a few devices.
    let mut lists: Vec<(String, i64)> = Vec::new();
    let mut start = 0;
    while start < rows.len() {
        let first = &rows[start];
        let run = &rows[start..];
        let run = &run[..run.iter().take_while(|r| r.device_pk == first.device_pk && r.body == first.body).count()];
        let subs = serde_json::to_string(&run.iter().map(|r| r.subscription_id.as_str()).collect::<Vec<_>>());
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
        // No random bytes: the spread makes the ids.
        stmt.execute(params![first.device_pk, run.len() as i64, cum, now, set, &[] as &[u8], ids, first.body])?;
        start += run.len();
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

/// Moves up to `limit` of the oldest log rows (none after id `upto`, if
/// given) into `outbox`: one row per subscription that still exists (a
/// removed one's were spread before it went), in the order they were
/// written, each with the id it must keep or `msg_` and
/// [`ID_BYTES`](crate::decide::outbox::ID_BYTES) random bytes in hex: the
/// row's own if it has them (logged before the ids were made here), or
/// new ones. Returns how many it moved.
pub(super) fn spread(tx: &Connection, limit: usize, upto: Option<i64>) -> StoreResult<usize> {
    if limit == 0 {
        return Ok(0);
    }
    let bound: Option<i64> = tx
        .prepare_cached(
            "SELECT max(id) FROM (SELECT id FROM outbox_log WHERE ?2 IS NULL OR id <= ?2 ORDER BY id LIMIT ?1)",
        )?
        .query_row(params![limit as i64, upto], |r| r.get(0))
        .optional()?
        .flatten();
    let Some(bound) = bound else { return Ok(0) };
    tx.prepare_cached(
        "INSERT INTO outbox (subscription_id, device_pk, message_id, body, created_at, next_attempt)
         SELECT j.value, l.device_pk,
                coalesce(json_extract(l.ids, '$[' || j.key || ']'),
                         'msg_' || lower(hex(CASE WHEN length(l.nonce) = 0 THEN randomblob(16)
                                                  ELSE substr(l.nonce, j.key * 16 + 1, 16) END))),
                l.body, l.created_at, l.created_at
         FROM outbox_log l JOIN outbox_owed w ON w.id = l.owed, json_each(w.subs) j
         WHERE l.id <= ?1 AND EXISTS (SELECT 1 FROM subscriptions s WHERE s.id = j.value)
         ORDER BY l.id",
    )?
    .execute([bound])?;
    let moved = tx.prepare_cached("DELETE FROM outbox_log WHERE id <= ?1")?.execute([bound])?;
    Ok(moved)
}

/// The deliveries a claim may take at `?1` among `outbox`'s pending rows
/// (at most `?2`): `offer_due`'s conditions, less the rows it would drop.
/// `$from` and `$and` pick the rows looked at (with `?3` and `?4`).
macro_rules! ready_sql {
    ($from:literal, $and:literal) => {
        concat!(
            "SELECT count(*) FROM (SELECT 1 FROM outbox o ",
            $from,
            " JOIN subscriptions s ON s.id = o.subscription_id JOIN accounts a ON a.id = s.account_id
             WHERE o.state = 'pending' AND o.next_attempt <= ?1 AND (o.leased_until IS NULL OR o.leased_until <= ?1)
               AND s.enabled = 1 AND a.disabled = 0 ",
            $and,
            " AND EXISTS (SELECT 1 FROM account_devices x WHERE x.account_id = a.id AND x.device_pk = o.device_pk)
             LIMIT ?2)"
        )
    };
}

/// Spreads the log as far as a claim needs: until `outbox` holds `window`
/// deliveries the claim may take at `now` (of the subscriptions `among`,
/// if given, each counted apart by the index `outbox_pending`: the claim
/// leaves the others out, endpoints at their share and disabled ones) or
/// the log is empty, moving at most `budget` rows (what it moves is taken
/// from it). Deliveries owed faster than they can be made wait in the log,
/// appended, rather than be moved to the table and its index on every
/// claim; an endpoint at its share, or rows the claim would drop, do not
/// hold back other deliveries behind them in the log, since they do not
/// count. Returns whether the budget ran out first (the log may hold more
/// the claim could take).
pub(super) fn feed(
    tx: &Connection,
    now: i64,
    window: usize,
    among: Option<&[String]>,
    budget: &mut usize,
) -> StoreResult<bool> {
    let mut ready = match among {
        None => ready(tx, ready_sql!("", ""), params![now, window as i64])?,
        Some(subs) => {
            let mut ready = 0;
            for sub in subs {
                if ready == window {
                    break;
                }
                let sql = ready_sql!("INDEXED BY outbox_pending", "AND o.subscription_id = ?3");
                ready += self::ready(tx, sql, params![now, (window - ready) as i64, sub])?;
            }
            ready
        }
    };
    let among = among.map(|subs| serde_json::Value::from(subs).to_string());
    while ready < window {
        if *budget == 0 {
            return Ok(true);
        }
        // Each log row owes at least one delivery.
        let chunk = (window - ready).clamp(64, SPREAD_ROWS).min(*budget);
        let before: i64 = tx.prepare_cached("SELECT coalesce(max(id), 0) FROM outbox")?.query_row([], |r| r.get(0))?;
        let moved = spread(tx, chunk, None)?;
        *budget -= moved;
        // Only the rows this chunk added (by rowid, not by an index, which
        // would step over the due rows again).
        let sql = ready_sql!(
            "NOT INDEXED",
            "AND o.id > ?4 AND (?3 IS NULL OR o.subscription_id IN (SELECT value FROM json_each(?3)))"
        );
        ready += self::ready(tx, sql, params![now, (window - ready) as i64, among, before])?;
        if moved < chunk {
            break;
        }
    }
    Ok(false)
}

/// The count of [`ready_sql!`] statement `sql` with `params`.
fn ready(tx: &Connection, sql: &str, params: impl rusqlite::Params) -> StoreResult<usize> {
    let n: i64 = tx.prepare_cached(sql)?.query_row(params, |r| r.get(0))?;
    Ok(usize::try_from(n).unwrap_or(0))
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

/// Deliveries pending: `outbox`'s and the log's (a subscription's removal
/// spreads the log first, so every delivery the log owes is to one that
/// exists).
pub(super) fn backlog(c: &Connection) -> StoreResult<u64> {
    let n: i64 = c
        .prepare_cached(
            "SELECT (SELECT count(*) FROM outbox WHERE state = 'pending')
                  + coalesce((SELECT cum FROM outbox_log ORDER BY id DESC LIMIT 1), 0)
                  - coalesce((SELECT cum - n FROM outbox_log ORDER BY id LIMIT 1), 0)",
        )?
        .query_row(params![], |r| r.get(0))?;
    Ok(u64::try_from(n).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::outbox::{ID_BYTES, id_text};
    use crate::sqlite::{Durability, SqliteStore};

    /// A delivery whose message id must be `msg` (an alarm's).
    fn row(sub: &str, msg: &str, pk: i64, body: &str) -> OutboxRow {
        OutboxRow { subscription_id: sub.into(), device_pk: pk, message_id: Some(msg.into()), body: body.into() }
    }

    /// A reading's delivery: its message id is made when it is spread.
    fn reading(sub: &str, pk: i64, body: &str) -> OutboxRow {
        OutboxRow { subscription_id: sub.into(), device_pk: pk, message_id: None, body: body.into() }
    }

    fn outbox(c: &Connection) -> Vec<(String, String, i64, String)> {
        let mut stmt =
            c.prepare("SELECT subscription_id, message_id, device_pk, body FROM outbox ORDER BY id").expect("sql");
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .expect("sql")
            .map(|r| r.expect("row"))
            .collect()
    }

    /// A migrated database with subscriptions `sub_a`, `sub_b` and, disabled,
    /// `sub_off`, of an account that sees device 7 and not device 8.
    async fn database(dir: &tempfile::TempDir) -> Connection {
        let path = dir.path().join("l.db");
        drop(SqliteStore::open(path.to_str().expect("utf-8"), Durability::Full).await.expect("create"));
        let c = Connection::open(&path).expect("open");
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
        let logged: i64 = tx.query_row("SELECT count(*) FROM outbox_log", [], |r| r.get(0)).expect("count");
        assert_eq!(logged, 3, "a run of one device and body is one row; another device is another");
        let random: i64 = tx.query_row("SELECT sum(length(nonce)) FROM outbox_log", [], |r| r.get(0)).expect("sum");
        assert_eq!(random, 0, "fixed message ids: no random bytes stored");
        assert_eq!(backlog(&tx).expect("backlog"), 5, "the log counts all it owes");
        assert_eq!(spread(&tx, 1, None).expect("spread"), 1, "one log row at most");
        let one = |s: &str, m: &str, pk, b: &str| (s.to_owned(), m.to_owned(), pk, b.to_owned());
        assert_eq!(outbox(&tx), [one("sub_a", "m_a1", 7, "one"), one("sub_b", "m_b1", 7, "one")]);
        assert_eq!(backlog(&tx).expect("backlog"), 4, "moved, not counted twice; none for one that is gone");
        spread_every(&tx).expect("the rest");
        assert_eq!(
            outbox(&tx)[2..],
            [one("sub_a", "m_a2", 7, "two"), one("sub_b", "m_b2", 8, "two")],
            "in the order written, each message id kept"
        );
        let left: i64 = tx.query_row("SELECT count(*) FROM outbox_log", [], |r| r.get(0)).expect("count");
        assert_eq!((left, spread(&tx, 10, None).expect("empty")), (0, 0));
        let due: Vec<(i64, i64)> = tx
            .prepare("SELECT created_at, next_attempt FROM outbox")
            .expect("sql")
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("sql")
            .map(|r| r.expect("row"))
            .collect();
        assert!(due.iter().all(|(created, next)| created == next && *created > 0), "due when written: {due:?}");
    }

    #[tokio::test]
    async fn a_readings_log_row_names_a_shared_list_and_its_deliveries_get_random_ids_when_spread() {
        let dir = tempfile::tempdir().expect("dir");
        let mut c = database(&dir).await;
        let tx = c.transaction().expect("tx");
        let owed = |body: &str| [reading("sub_a", 7, body), reading("sub_b", 7, body)];
        write(&tx, &owed("one").into_iter().chain(owed("two")).collect::<Vec<_>>()).expect("write");
        write(&tx, &owed("three")).expect("write");
        write(&tx, &[reading("sub_b", 7, "four")]).expect("write");
        assert_eq!(count(&tx, "SELECT count(*) FROM outbox_log"), 4);
        assert_eq!(count(&tx, "SELECT count(*) FROM outbox_owed"), 2, "one row a list, across transactions");
        let (bytes, ids) = (
            count(&tx, "SELECT sum(length(nonce)) FROM outbox_log"),
            count(&tx, "SELECT count(*) FROM outbox_log WHERE ids IS NOT NULL"),
        );
        assert_eq!((bytes, ids), (0, 0), "no random bytes logged, no ids spelled out");
        spread_every(&tx).expect("spread");
        let spread = outbox(&tx);
        let order: Vec<_> = spread.iter().map(|(s, _, _, b)| (s.as_str(), b.as_str())).collect();
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
        let ids: std::collections::HashSet<_> = spread.iter().map(|(_, m, _, _)| m.clone()).collect();
        assert_eq!(ids.len(), 7, "every delivery its own id");
        let hex = |m: &str| m.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        assert!(ids.iter().all(|m| m.len() == 36 && m.starts_with("msg_") && hex(&m[4..])), "{ids:?}");
        assert_eq!(prune_owed(&tx).expect("prune"), 2, "no log row names them any more");
        write(&tx, &owed("five")).expect("write");
        assert_eq!(prune_owed(&tx).expect("prune"), 0, "a list a row names stays");
    }

    #[tokio::test]
    async fn a_row_logged_with_random_bytes_spreads_ids_made_of_them() {
        let dir = tempfile::tempdir().expect("dir");
        let mut c = database(&dir).await;
        let tx = c.transaction().expect("tx");
        // As a version before the ids were made in the spread logged a
        // reading owed to two subscriptions.
        let list = owed_list(&tx, r#"["sub_a","sub_b"]"#).expect("list");
        let nonce: Vec<u8> = (0..2 * ID_BYTES as u8).collect();
        tx.execute(
            "INSERT INTO outbox_log (device_pk, n, cum, created_at, owed, nonce, ids, body)
             VALUES (7, 2, 2, 1, ?1, ?2, NULL, 'old')",
            params![list, nonce],
        )
        .expect("old row");
        spread_every(&tx).expect("spread");
        let ids: Vec<_> = outbox(&tx).into_iter().map(|(_, m, _, _)| m).collect();
        assert_eq!(ids, [id_text(&nonce[..ID_BYTES]), id_text(&nonce[ID_BYTES..])], "the SQL's hex is the Rust text");
    }

    fn count(c: &Connection, sql: &str) -> i64 {
        c.query_row(sql, [], |r| r.get(0)).expect("count")
    }

    /// `feed` with a claim's whole budget, of every subscription or of `among`.
    fn fed(tx: &Connection, now: i64, window: usize, among: Option<&[&str]>) -> bool {
        let mut budget = FEED_BUDGET;
        feed(tx, now, window, strings(among).as_deref(), &mut budget).expect("feed")
    }

    fn strings(among: Option<&[&str]>) -> Option<Vec<String>> {
        among.map(|subs| subs.iter().map(|s| (*s).to_owned()).collect())
    }

    #[tokio::test]
    async fn a_claim_spreads_until_outbox_holds_what_it_may_take_past_an_endpoint_at_its_share() {
        let dir = tempfile::tempdir().expect("dir");
        let mut c = database(&dir).await;
        let tx = c.transaction().expect("tx");
        let off: Vec<_> = (0..3).map(|i| row("sub_off", &format!("o{i}"), 7, &format!("off {i}"))).collect();
        write(&tx, &off).expect("write");
        let unseen: Vec<_> = (0..100).map(|i| row("sub_b", &format!("u{i}"), 8, &format!("unseen {i}"))).collect();
        write(&tx, &unseen).expect("write");
        spread_every(&tx).expect("spread");
        let mut owed: Vec<_> = (0..200).map(|i| row("sub_a", &format!("a{i}"), 7, &format!("body {i}"))).collect();
        owed.push(row("sub_b", "b0", 7, "last"));
        write(&tx, &owed).expect("write");
        assert_eq!(backlog(&tx).expect("backlog"), 304, "103 wait in outbox, 201 in the log");
        let now = jiff::Timestamp::now().as_millisecond() + 1000;
        let sub_a = "SELECT count(*) FROM outbox WHERE subscription_id = 'sub_a'";
        assert!(!fed(&tx, now, 4, None), "rows a claim would not take or would drop do not count");
        assert_eq!(count(&tx, sub_a), 64, "one chunk is enough");
        assert!(!fed(&tx, now, 4, None));
        assert_eq!(count(&tx, sub_a), 64, "four are ready: nothing more moves");
        assert!(!fed(&tx, now - 2000, 4, Some(&["sub_b"])), "none due before it was written");
        assert_eq!(count(&tx, "SELECT count(*) FROM outbox_log"), 0, "so the log is spread looking for them");
        assert_eq!(count(&tx, "SELECT count(*) FROM outbox WHERE subscription_id = 'sub_b' AND device_pk = 7"), 1);
        assert_eq!(backlog(&tx).expect("backlog"), 304, "moved, not counted twice");

        let many: Vec<_> = (0..17_000).map(|i| row("sub_a", &format!("m{i}"), 7, &format!("many {i}"))).collect();
        write(&tx, &many).expect("write");
        write(&tx, &[row("sub_b", "b1", 7, "after many")]).expect("write");
        let mut budget = 10_000;
        assert!(
            feed(&tx, now, 4, strings(Some(&["sub_b"])).as_deref(), &mut budget).expect("feed"),
            "at its share, not counted"
        );
        assert_eq!(budget, 0, "the budget is spent exactly");
        let left = count(&tx, "SELECT count(*) FROM outbox_log");
        assert_eq!(left, 7_001, "a claim moves at most its budget");
        assert!(!fed(&tx, now, 4, Some(&["sub_b"])), "the next claim reaches sub_b's");
        assert_eq!(count(&tx, "SELECT count(*) FROM outbox WHERE subscription_id = 'sub_b' AND device_pk = 7"), 2);
        assert_eq!(backlog(&tx).expect("backlog"), 304 + 17_001);
    }
}
