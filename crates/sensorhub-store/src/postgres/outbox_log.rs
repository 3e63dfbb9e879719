//! The outbox's log on PostgreSQL (schema 17, one row a group since
//! schema 22): a transaction of readings appends one row for the
//! deliveries they owe (each reading's body once, the subscriptions it
//! owes by their numbers, the random bytes of their message ids), and
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
use tokio_postgres::GenericClient;

/// The most deliveries a log row holds, unless one reading owes more: a
/// group of live readings is one row, an import's transaction many.
pub(super) const ROW_DELIVERIES: usize = 64;
/// The most log rows one spread moves in one go.
pub(super) const SPREAD_ROWS: usize = 256;
/// The most log rows one claim moves: a claim stays short however long
/// the workers were away (the worker claims again at once while the log
/// holds more).
pub(super) const FEED_BUDGET: usize = 2_048;

/// The statement that appends one log row, and its parameters.
const INSERT: &str = "INSERT INTO outbox_log (created_at, devices, counts, subs, n, cum, nonce, ids, bodies)
    VALUES ($1, $2, $3, $4, $5, coalesce((SELECT cum FROM outbox_log ORDER BY id DESC LIMIT 1), 0) + $5, $6, $7, $8)";

/// The statements that write the deliveries gathered by a transaction,
/// due now, with their parameters (none for no rows): one log row for up
/// to [`ROW_DELIVERIES`] of them (a row never splits a reading's). Each
/// run of rows with the same device and body (a reading's, or an alarm
/// transition's, one row for each subscription it owes) is one body in
/// the log row, with its device and how many deliveries it owes; the
/// deliveries' subscriptions are named by their numbers (schema 20: 36
/// bytes for three, against 168 spelled out), with [`ID_BYTES`] random
/// bytes each, and the fixed ids if any (`''` for a random one). `number`
/// gives a subscription's number: the transaction looked them up with the
/// subscriptions it owes ([`numbers`]); one it does not know (gone
/// meanwhile) is a NULL, owed nothing, that keeps the others' places.
pub(super) fn insert(
    rows: &[OutboxRow],
    number: impl Fn(&str) -> Option<i32>,
) -> StoreResult<Vec<(&'static str, Params)>> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let now = jiff::Timestamp::now().as_millisecond();
    let random = id_bytes(rows.len())?;
    let mut statements = Vec::new();
    let mut log = LogRow::default();
    let mut start = 0;
    while start < rows.len() {
        let first = &rows[start];
        let len = rows[start..].iter().take_while(|r| r.device_pk == first.device_pk && r.body == first.body).count();
        if !log.devices.is_empty() && log.subs.len() + len > ROW_DELIVERIES {
            statements.push((INSERT, std::mem::take(&mut log).params(now)));
        }
        let run = &rows[start..start + len];
        log.devices.push(first.device_pk);
        log.counts.push(i32::try_from(len).map_err(|_| too_many(len))?);
        log.subs.extend(run.iter().map(|r| number(&r.subscription_id)));
        log.nonce.extend_from_slice(&random[start * ID_BYTES..(start + len) * ID_BYTES]);
        log.ids.extend(run.iter().map(|r| r.message_id.clone().unwrap_or_default()));
        log.bodies.push(first.body.clone());
        start += len;
    }
    statements.push((INSERT, log.params(now)));
    Ok(statements)
}

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
/// for each reading; a subscription, 16 random bytes and a fixed id
/// (empty for none) for each delivery.
#[derive(Default)]
struct LogRow {
    devices: Vec<i64>,
    counts: Vec<i32>,
    subs: Vec<Option<i32>>,
    nonce: Vec<u8>,
    ids: Vec<String>,
    bodies: Vec<String>,
}

impl LogRow {
    /// The parameters of [`INSERT`] for this row, written at `now`.
    fn params(self, now: i64) -> Params {
        let n = self.subs.len() as i64;
        // No fixed id (a reading's deliveries): none stored.
        let ids = self.ids.iter().any(|id| !id.is_empty()).then_some(self.ids);
        vec![
            Box::new(now),
            Box::new(self.devices),
            Box::new(self.counts),
            Box::new(self.subs),
            Box::new(n),
            Box::new(self.nonce),
            Box::new(ids),
            Box::new(self.bodies),
        ]
    }
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
/// written, each with the id it must keep or `msg_` and its random bytes
/// in hex, due at once. Returns how many log rows it moved.
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
                RETURNING id, created_at, devices, counts, subs, nonce, ids, bodies),
            readings AS (
                SELECT m.id, m.created_at, m.subs, m.nonce, m.ids, r.d, r.b, r.c, r.k,
                       (sum(r.c) OVER (PARTITION BY m.id ORDER BY r.k) - r.c)::integer AS off
                FROM moved m CROSS JOIN LATERAL unnest(m.devices, m.counts, m.bodies) WITH ORDINALITY AS r (d, c, b, k)),
            spread AS (
                INSERT INTO outbox (subscription_id, device_pk, message_id, body, created_at, next_attempt)
                SELECT x.id, r.d,
                       coalesce(nullif(r.ids[p], ''), 'msg_' || encode(substring(r.nonce FROM (p - 1) * 16 + 1 FOR 16), 'hex')),
                       r.b, r.created_at, r.created_at
                FROM readings r CROSS JOIN LATERAL generate_series(r.off + 1, r.off + r.c) AS p
                JOIN subscriptions x ON x.num = r.subs[p]
                ORDER BY r.id, r.k, p)
            SELECT count(*) FROM moved"
        )
    };
}
// The statement takes 16 random bytes a delivery.
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
mod tests {
    use super::*;
    use crate::decide::outbox::id_text;
    use crate::postgres::PgStore;

    /// A migrated database with subscriptions `sub_a` and `sub_b` of an
    /// account that sees device 7 (and device 8).
    async fn database() -> (sensorhub_testing::TempDatabase, PgStore) {
        let url = std::env::var("SENSORHUB_TEST_POSTGRES")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
        let pg = sensorhub_testing::TempDatabase::create(&url).await.expect("a PostgreSQL test database");
        let store = PgStore::open_with(pg.url(), crate::OpenOptions::default()).await.expect("open");
        let c = store.pool.get().await.expect("connection");
        c.batch_execute(
            "INSERT INTO accounts (id, username, password_hash, created_at) VALUES (1, 'a', 'x', 0);
             INSERT INTO devices (id, device_id, name, type, lat, long, interval_seconds)
             VALUES (7, 'D7', 'n', 'T', 0, 0, 60), (8, 'D8', 'n', 'T', 0, 0, 60);
             INSERT INTO subscriptions (id, account_id, url, all_devices, events, secret, created_at)
             VALUES ('sub_a', 1, 'http://a', true, 'sensor-data', '\\x00', 0),
                    ('sub_b', 1, 'http://b', true, 'sensor-data', '\\x00', 0);",
        )
        .await
        .expect("subscriptions");
        drop(c);
        (pg, store)
    }

    /// A log row's devices, deliveries of each, subscriptions (by number),
    /// bytes of nonce, fixed ids and bodies.
    type LogRow = (Vec<i64>, Vec<i32>, Vec<Option<i32>>, i32, Option<Vec<String>>, Vec<String>);

    fn row(sub: &str, msg: Option<&str>, pk: i64, body: &str) -> OutboxRow {
        OutboxRow { subscription_id: sub.into(), device_pk: pk, message_id: msg.map(Into::into), body: body.into() }
    }

    async fn write(c: &tokio_postgres::Client, rows: &[OutboxRow]) {
        let mut ids: Vec<&str> = rows.iter().map(|r| r.subscription_id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        let nums = numbers(c, &ids).await.expect("numbers");
        let number = |id: &str| nums.iter().find(|(known, _)| known == id).map(|(_, n)| *n);
        for (sql, params) in insert(rows, number).expect("statements") {
            let stmt = c.prepare(sql).await.expect("prepare");
            c.execute_raw(&stmt, params).await.expect("insert");
        }
    }

    /// The outbox's deliveries in order: subscription, message id, device, body.
    async fn outbox(c: &tokio_postgres::Client) -> Vec<(String, String, i64, String)> {
        let rows = c.query("SELECT subscription_id, message_id, device_pk, body FROM outbox ORDER BY id", &[]).await;
        rows.expect("outbox").iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3))).collect()
    }

    /// Subscription `id`'s number.
    async fn num(c: &tokio_postgres::Client, id: &str) -> Option<i32> {
        let row = c.query_one("SELECT num FROM subscriptions WHERE id = $1", &[&id]).await;
        Some(row.expect("a subscription's number").get::<_, i32>(0))
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn want(s: &str, m: String, pk: i64, b: &str) -> (String, String, i64, String) {
        (s.to_string(), m, pk, b.to_string())
    }

    #[tokio::test]
    async fn a_write_is_one_log_row_each_body_once_and_spreads_in_order_with_random_or_kept_ids() {
        let (_pg, store) = database().await;
        let c = store.pool.get().await.expect("connection");
        write(
            &c,
            &[
                row("sub_a", None, 7, "one"),
                row("sub_gone", None, 7, "one"),
                row("sub_b", None, 7, "one"),
                row("sub_a", Some("msg_alarm_1"), 8, "alarm"),
                row("sub_b", Some("msg_alarm_2"), 8, "alarm"),
                row("sub_b", None, 7, "two"),
            ],
        )
        .await;
        let sql = "SELECT devices, counts, subs, octet_length(nonce), ids, bodies, nonce FROM outbox_log ORDER BY id";
        let log = c.query(sql, &[]).await.expect("log");
        let shape: Vec<LogRow> =
            log.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5))).collect();
        let (a, b) = (num(&c, "sub_a").await, num(&c, "sub_b").await);
        assert_ne!(a, b);
        assert_eq!(
            shape,
            [(
                vec![7, 8, 7],
                vec![3, 2, 1],
                vec![a, None, b, a, b, b],
                96,
                Some(strings(&["", "", "", "msg_alarm_1", "msg_alarm_2", ""])),
                strings(&["one", "alarm", "two"]),
            )],
            "subscriptions by number, one written meanwhile gone (NULL)"
        );
        let nonce: Vec<u8> = log[0].get(6);
        assert_eq!(backlog(&**c).await.expect("backlog"), 6, "the log's deliveries count");

        assert_eq!(spread(&**c, 2, None, Others::Skip).await.expect("spread"), 1);
        assert_eq!(
            outbox(&c).await,
            [
                want("sub_a", id_text(&nonce[..16]), 7, "one"),
                want("sub_b", id_text(&nonce[32..48]), 7, "one"),
                want("sub_a", "msg_alarm_1".into(), 8, "alarm"),
                want("sub_b", "msg_alarm_2".into(), 8, "alarm"),
                want("sub_b", id_text(&nonce[80..]), 7, "two"),
            ],
            "a removed subscription is owed nothing; each delivery keeps its bytes' id or its fixed one"
        );
        assert_eq!(newest(&**c).await.expect("newest"), None, "the log is empty once spread");
        assert_eq!(backlog(&**c).await.expect("backlog"), 5);
        write(&c, &[row("sub_a", None, 7, "three"), row("sub_b", None, 7, "three")]).await;
        write(&c, &[row("sub_a", None, 7, "four")]).await;
        assert!(newest(&**c).await.expect("newest").is_some());
        assert_eq!(backlog(&**c).await.expect("backlog"), 8, "the running total goes on from the log's newest row");
        assert_eq!(spread(&**c, 1, None, Others::Skip).await.expect("spread"), 1);
        assert_eq!(backlog(&**c).await.expect("backlog"), 8);
        let ids = c.query_one("SELECT ids FROM outbox_log", &[]).await.expect("log").get::<_, Option<Vec<String>>>(0);
        assert_eq!(ids, None, "no fixed id, none stored");
    }

    #[tokio::test]
    async fn a_large_write_is_rows_of_at_most_64_deliveries_that_never_split_a_reading() {
        let (_pg, store) = database().await;
        let c = store.pool.get().await.expect("connection");
        let mut rows = Vec::new();
        for i in 0..30 {
            for sub in ["sub_a", "sub_gone", "sub_b"] {
                rows.push(row(sub, None, 7, &format!("r{i}")));
            }
        }
        // One reading that owes more than a row holds.
        rows.extend((0..70).map(|_| row("sub_a", None, 8, "wide")));
        rows.push(row("sub_b", None, 7, "last"));
        write(&c, &rows).await;
        let sql = "SELECT cardinality(counts), n, cum, octet_length(nonce), nonce FROM outbox_log ORDER BY id";
        let log = c.query(sql, &[]).await.expect("log");
        let shape: Vec<(i32, i64, i64, i32)> = log.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3))).collect();
        assert_eq!(shape, [(21, 63, 63, 1008), (9, 27, 90, 432), (1, 70, 160, 1120), (1, 1, 161, 16)]);
        let nonces: Vec<Vec<u8>> = log.iter().map(|r| r.get(4)).collect();
        assert_eq!(backlog(&**c).await.expect("backlog"), 161);
        assert_eq!(spread(&**c, 10, None, Others::Wait).await.expect("spread"), 4);
        let mut expected = Vec::new();
        for i in 0..30 {
            let (nonce, place) = if i < 21 { (&nonces[0], i * 3) } else { (&nonces[1], (i - 21) * 3) };
            let id = |p: usize| id_text(&nonce[p * 16..(p + 1) * 16]);
            expected.push(want("sub_a", id(place), 7, &format!("r{i}")));
            expected.push(want("sub_b", id(place + 2), 7, &format!("r{i}")));
        }
        expected.extend((0..70).map(|p| want("sub_a", id_text(&nonces[2][p * 16..(p + 1) * 16]), 8, "wide")));
        expected.push(want("sub_b", id_text(&nonces[3]), 7, "last"));
        assert_eq!(outbox(&c).await, expected, "in the order written, across rows");
    }

    /// A database at schema `version` with subscriptions `sub_a` and
    /// `sub_b` of an account, devices 7 and 8, and `then` run on it; then
    /// opened by this release, which upgrades it.
    async fn upgraded_from(version: usize, then: &str) -> (sensorhub_testing::TempDatabase, PgStore) {
        let url = std::env::var("SENSORHUB_TEST_POSTGRES")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
        let pg = sensorhub_testing::TempDatabase::create(&url).await.expect("a PostgreSQL test database");
        let (c, conn) = tokio_postgres::connect(pg.url(), tokio_postgres::NoTls).await.expect("connect");
        let conn = tokio::spawn(conn);
        c.batch_execute(
            "CREATE TABLE sensorhub_schema (version integer NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
        )
        .await
        .expect("schema table");
        for (i, sql) in super::super::MIGRATIONS[..version].iter().enumerate() {
            c.batch_execute(sql).await.expect("migration");
            c.execute("INSERT INTO sensorhub_schema (version) VALUES ($1)", &[&(i as i32 + 1)]).await.expect("version");
        }
        c.batch_execute(
            "INSERT INTO accounts (id, username, password_hash, created_at) VALUES (1, 'a', 'x', 0);
             INSERT INTO devices (id, device_id, name, type, lat, long, interval_seconds)
             VALUES (7, 'D7', 'n', 'T', 0, 0, 60), (8, 'D8', 'n', 'T', 0, 0, 60);
             INSERT INTO subscriptions (id, account_id, url, all_devices, events, secret, created_at)
             VALUES ('sub_a', 1, 'http://a', true, 'sensor-data', '\\x00', 0),
                    ('sub_b', 1, 'http://b', true, 'sensor-data', '\\x00', 0);",
        )
        .await
        .expect("subscriptions");
        c.batch_execute(then).await.expect("the old rows");
        drop(c);
        conn.await.expect("connection task").expect("connection");
        let store = PgStore::open_with(pg.url(), crate::OpenOptions::default()).await.expect("upgrade");
        (pg, store)
    }

    #[tokio::test]
    async fn a_version_19_log_names_its_subscriptions_by_number_after_the_upgrade() {
        let (_pg, store) = upgraded_from(
            19,
            "INSERT INTO outbox_log (device_pk, created_at, subs, n, cum, nonce, body)
             VALUES (7, 5, ARRAY['sub_b', 'sub_gone', 'sub_a'], 3, 3, decode(repeat('ab', 16) || repeat('cd', 16) || repeat('ef', 16), 'hex'), 'old');",
        )
        .await;
        let c = store.pool.get().await.expect("connection");
        let subs: Vec<Option<i32>> = c.query_one("SELECT subs FROM outbox_log", &[]).await.expect("log").get(0);
        assert_eq!(subs.len(), 3, "each place kept, for its random bytes");
        assert_eq!(subs[1], None, "a subscription already gone is owed nothing");
        write(&c, &[row("sub_a", None, 7, "new")]).await;
        assert_eq!(spread(&**c, 10, None, Others::Wait).await.expect("spread"), 2);
        let outbox: Vec<(String, String, String)> = c
            .query("SELECT subscription_id, message_id, body FROM outbox ORDER BY id", &[])
            .await
            .expect("outbox")
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        let nonce = |b: &str| format!("msg_{}", b.repeat(16));
        assert_eq!(
            outbox[..2],
            [("sub_b".into(), nonce("ab"), "old".into()), ("sub_a".into(), nonce("ef"), "old".into())],
            "the old row's deliveries keep their order and their ids"
        );
        assert_eq!((outbox.len(), outbox[2].0.as_str(), outbox[2].2.as_str()), (3, "sub_a", "new"));
    }

    #[tokio::test]
    async fn a_version_21_log_of_a_reading_and_an_alarm_keeps_its_ids_and_order_after_the_upgrade() {
        let (_pg, store) = upgraded_from(
            21,
            "INSERT INTO outbox_log (device_pk, created_at, subs, n, cum, nonce, ids, body)
             SELECT 7, 5, ARRAY[b.num, NULL, a.num], 3, 3,
                    decode(repeat('ab', 16) || repeat('cd', 16) || repeat('ef', 16), 'hex'), NULL, 'reading'
             FROM subscriptions a, subscriptions b WHERE a.id = 'sub_a' AND b.id = 'sub_b';
             INSERT INTO outbox_log (device_pk, created_at, subs, n, cum, nonce, ids, body)
             SELECT 8, 6, ARRAY[a.num, b.num], 2, 5, '\\x', ARRAY['msg_alarm_1', 'msg_alarm_2'], 'alarm'
             FROM subscriptions a, subscriptions b WHERE a.id = 'sub_a' AND b.id = 'sub_b';",
        )
        .await;
        let c = store.pool.get().await.expect("connection");
        let sql = "SELECT devices, counts, bodies FROM outbox_log ORDER BY id";
        let log: Vec<(Vec<i64>, Vec<i32>, Vec<String>)> =
            c.query(sql, &[]).await.expect("log").iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect();
        assert_eq!(log, [(vec![7], vec![3], strings(&["reading"])), (vec![8], vec![2], strings(&["alarm"]))]);
        assert_eq!(backlog(&**c).await.expect("backlog"), 5, "the running total kept");
        write(&c, &[row("sub_a", None, 7, "new")]).await;
        assert_eq!(spread(&**c, 10, None, Others::Wait).await.expect("spread"), 3);
        let nonce = |b: &str| format!("msg_{}", b.repeat(16));
        assert_eq!(
            outbox(&c).await[..4],
            [
                want("sub_b", nonce("ab"), 7, "reading"),
                want("sub_a", nonce("ef"), 7, "reading"),
                want("sub_a", "msg_alarm_1".into(), 8, "alarm"),
                want("sub_b", "msg_alarm_2".into(), 8, "alarm"),
            ],
            "each old row's deliveries in order, with their random bytes' ids or their kept ones"
        );
        assert_eq!(outbox(&c).await.len(), 5);
    }

    #[tokio::test]
    async fn claimers_of_two_connections_never_spread_one_log_row_twice() {
        let (_pg, store) = database().await;
        let mut first = store.pool.get().await.expect("connection");
        let mut second = store.pool.get().await.expect("connection");
        for i in 0..10 {
            write(&first, &[row("sub_a", None, 7, &format!("r{i}"))]).await;
        }
        let one = first.transaction().await.expect("tx");
        assert_eq!(spread(one.client(), 4, None, Others::Skip).await.expect("spread"), 4);
        // The other claimer skips the four rows the first holds, and moves the rest.
        let two = second.transaction().await.expect("tx");
        assert_eq!(spread(two.client(), 100, None, Others::Skip).await.expect("spread"), 6);
        two.commit().await.expect("commit");
        one.commit().await.expect("commit");
        let c = store.pool.get().await.expect("connection");
        let bodies: Vec<String> = c
            .query("SELECT body FROM outbox ORDER BY body", &[])
            .await
            .expect("outbox")
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut want: Vec<String> = (0..10).map(|i| format!("r{i}")).collect();
        want.sort();
        assert_eq!(bodies, want, "each reading owed once");
        assert_eq!(spread(&**c, 100, None, Others::Wait).await.expect("spread"), 0);
    }
}
