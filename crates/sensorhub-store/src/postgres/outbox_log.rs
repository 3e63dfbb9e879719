//! The outbox's log on PostgreSQL (schema 17), as on SQLite
//! (`sqlite/outbox_log.rs`): a transaction of readings appends one row per
//! reading (its body once, the subscriptions it owes by their numbers, the
//! random bytes of their message ids), and claims spread those rows into
//! `outbox`, one row per delivery, in their own unsynced transactions, as
//! far as each claim needs.
//!
//! Why: a reading's commit waits for the disk, and one `outbox` row per
//! subscription, each with the body and three index entries, was what a
//! subscription cost ingest most (bench/RESULTS.md, the twenty-sixth
//! step). The spread deletes the log rows it moves in the statement that
//! inserts their deliveries: a crash loses both or neither. Claims of
//! several instances skip the log rows another is moving (`SKIP LOCKED`);
//! the listing and a subscription's removal wait for them instead, so that
//! they see every delivery owed.

use super::ahead::Params;
use crate::StoreResult;
use crate::decide::outbox::{ID_BYTES, OutboxRow, id_bytes};
use tokio_postgres::GenericClient;

/// The most log rows one spread moves in one go.
pub(super) const SPREAD_ROWS: usize = 2_048;
/// The most log rows one claim moves: a claim stays short however long
/// the workers were away (the worker claims again at once while the log
/// holds more).
pub(super) const FEED_BUDGET: usize = 16_384;

/// The statement that writes the deliveries gathered by a transaction,
/// due now, with its parameters (`None` for no rows): one log row per run
/// of rows with the same device and body (a reading's, or an alarm
/// transition's, one row for each subscription it owes), naming the run's
/// subscriptions by their numbers (schema 20: 36 bytes for three, against
/// 168 spelled out), with [`ID_BYTES`] random bytes a delivery unless every
/// id is fixed, and the fixed ids if any. `number` gives a subscription's
/// number: the transaction looked them up with the subscriptions it owes
/// ([`numbers`]); one it does not know (gone meanwhile) is a NULL, owed
/// nothing, that keeps the others' places in the random bytes.
pub(super) fn insert(
    rows: &[OutboxRow],
    number: impl Fn(&str) -> Option<i32>,
) -> StoreResult<Option<(&'static str, Params)>> {
    if rows.is_empty() {
        return Ok(None);
    }
    let now = jiff::Timestamp::now().as_millisecond();
    let random = id_bytes(rows.len())?;
    let mut runs = Runs::default();
    // The running total of deliveries up to each row, from the log's newest.
    let mut total = 0;
    let mut start = 0;
    while start < rows.len() {
        let first = &rows[start];
        let len = rows[start..].iter().take_while(|r| r.device_pk == first.device_pk && r.body == first.body).count();
        let run = &rows[start..start + len];
        runs.device.push(first.device_pk);
        total += len as i64;
        runs.cum.push(total);
        runs.n.push(len as i64);
        runs.subs.push(numbered(run.iter().map(|r| number(&r.subscription_id))));
        runs.ids.push(match run.iter().any(|r| r.message_id.is_some()) {
            true => Some(listed(run.iter().map(|r| r.message_id.as_deref().unwrap_or("")))?),
            false => None,
        });
        // A run whose every id is fixed (an alarm's) needs no random bytes.
        runs.nonce.push(match run.iter().all(|r| r.message_id.is_some()) {
            true => Vec::new(),
            false => random[start * ID_BYTES..(start + len) * ID_BYTES].to_vec(),
        });
        runs.body.push(first.body.clone());
        start += len;
    }
    // Each log row's lists travel as one text, split in the statement: a
    // slice of one array of the whole write for each row copied the whole
    // array each time (a second for an import of 20,000 readings). The
    // numbers come from the transaction, not from a join in this statement:
    // that join (and the `DISTINCT` of the lists before it) made this
    // insert cost a group of webhook readings more than all its other
    // statements together (bench/RESULTS.md, the thirty-second step).
    let sql = "INSERT INTO outbox_log (device_pk, created_at, subs, n, cum, nonce, ids, body)
               SELECT t.d, $1, string_to_array(t.s, ',', '')::integer[], t.l,
                      coalesce((SELECT cum FROM outbox_log ORDER BY id DESC LIMIT 1), 0) + t.c,
                      t.n, string_to_array(t.i, ','), t.b
               FROM unnest($2::bigint[], $3::text[], $4::bytea[], $5::text[], $6::text[], $7::bigint[], $8::bigint[])
                    WITH ORDINALITY AS t (d, s, n, i, b, c, l, k)
               ORDER BY t.k";
    let params: Params = vec![
        Box::new(now),
        Box::new(runs.device),
        Box::new(runs.subs),
        Box::new(runs.nonce),
        Box::new(runs.ids),
        Box::new(runs.body),
        Box::new(runs.cum),
        Box::new(runs.n),
    ];
    Ok(Some((sql, params)))
}

/// The numbers of subscriptions `ids` (those that exist), as a
/// transaction that has not looked them up with the readings it writes
/// learns them (an alarm transition's deliveries).
pub(super) async fn numbers(c: &impl GenericClient, ids: &[&str]) -> StoreResult<Vec<(String, i32)>> {
    let rows = c.query("SELECT id, num FROM subscriptions WHERE id = ANY ($1)", &[&ids]).await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Subscription numbers as one text, `,` between them, an unknown one empty
/// (a NULL once split).
fn numbered(nums: impl Iterator<Item = Option<i32>>) -> String {
    let mut out = String::new();
    for (i, num) in nums.enumerate() {
        if i > 0 {
            out.push(',');
        }
        if let Some(num) = num {
            out.push_str(&num.to_string());
        }
    }
    out
}

/// `ids` (subscriptions' or message ids, which sensorhub makes of letters,
/// digits and `_`; an empty one is a delivery whose id is made of its
/// random bytes) as one text, `,` between them.
fn listed<'a>(ids: impl Iterator<Item = &'a str>) -> StoreResult<String> {
    let mut out = String::new();
    for (i, id) in ids.enumerate() {
        if id.contains(',') {
            return Err(crate::StoreError::Backend(format!("an outbox id cannot be listed: {id:?}").into()));
        }
        if i > 0 {
            out.push(',');
        }
        out.push_str(id);
    }
    Ok(out)
}

/// The log rows of one write, as columns for `unnest`.
#[derive(Default)]
struct Runs {
    device: Vec<i64>,
    subs: Vec<String>,
    nonce: Vec<Vec<u8>>,
    ids: Vec<Option<String>>,
    body: Vec<String>,
    cum: Vec<i64>,
    /// Deliveries of each row (its subscriptions, gone ones included).
    n: Vec<i64>,
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
/// given) into `outbox`: one row per subscription that still exists (a
/// removed one's are owed nothing), in the order they were written, each
/// with the id it must keep or `msg_` and its random bytes in hex, due at
/// once. Returns how many log rows it moved.
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

/// The spread's statement, `$lock` how it locks the log rows it moves.
macro_rules! spread_sql {
    ($lock:literal) => {
        concat!(
            "WITH moved AS (
                DELETE FROM outbox_log WHERE id = ANY (ARRAY (
                    SELECT id FROM outbox_log WHERE $2::bigint IS NULL OR id <= $2 ORDER BY id LIMIT $1 FOR UPDATE ",
            $lock,
            "))
                RETURNING id, device_pk, created_at, subs, nonce, ids, body),
            spread AS (
                INSERT INTO outbox (subscription_id, device_pk, message_id, body, created_at, next_attempt)
                SELECT x.id, m.device_pk,
                       coalesce(nullif(m.ids[u.k], ''), 'msg_' || encode(substring(m.nonce FROM (u.k::integer - 1) * 16 + 1 FOR 16), 'hex')),
                       m.body, m.created_at, m.created_at
                FROM moved m CROSS JOIN LATERAL unnest(m.subs) WITH ORDINALITY AS u (s, k)
                JOIN subscriptions x ON x.num = u.s
                ORDER BY m.id, u.k)
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

    /// A log row's subscriptions (by number), bytes of nonce, fixed ids and body.
    type LogRow = (Vec<Option<i32>>, i32, Option<Vec<String>>, String);

    fn row(sub: &str, msg: Option<&str>, pk: i64, body: &str) -> OutboxRow {
        OutboxRow { subscription_id: sub.into(), device_pk: pk, message_id: msg.map(Into::into), body: body.into() }
    }

    async fn write(c: &tokio_postgres::Client, rows: &[OutboxRow]) {
        let mut ids: Vec<&str> = rows.iter().map(|r| r.subscription_id.as_str()).collect();
        ids.dedup();
        let nums = numbers(c, &ids).await.expect("numbers");
        let number = |id: &str| nums.iter().find(|(known, _)| known == id).map(|(_, n)| *n);
        let (sql, params) = insert(rows, number).expect("statement").expect("rows");
        let stmt = c.prepare(sql).await.expect("prepare");
        c.execute_raw(&stmt, params).await.expect("insert");
    }

    #[tokio::test]
    async fn a_write_is_one_log_row_a_body_and_spreads_in_order_with_random_or_kept_ids() {
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
        let log = c.query("SELECT subs, octet_length(nonce), ids, body, nonce FROM outbox_log ORDER BY id", &[]).await;
        let log = log.expect("log");
        let shape: Vec<LogRow> = log.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3))).collect();
        let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let num = |id: &'static str| {
            let c = &c;
            async move {
                let row = c.query_one("SELECT num FROM subscriptions WHERE id = $1", &[&id]).await;
                Some(row.expect("a subscription's number").get::<_, i32>(0))
            }
        };
        let (a, b) = (num("sub_a").await, num("sub_b").await);
        assert_ne!(a, b);
        assert_eq!(
            shape,
            [
                (vec![a, None, b], 48, None, "one".to_string()),
                (vec![a, b], 0, Some(owned(&["msg_alarm_1", "msg_alarm_2"])), "alarm".to_string()),
                (vec![b], 16, None, "two".to_string()),
            ],
            "subscriptions by number, one written meanwhile gone (NULL)"
        );
        let nonce: Vec<u8> = log[0].get(4);
        assert_eq!(backlog(&**c).await.expect("backlog"), 6, "the log's deliveries count");

        assert_eq!(spread(&**c, 2, None, Others::Skip).await.expect("spread"), 2);
        let outbox: Vec<(String, String, i64, String)> = c
            .query("SELECT subscription_id, message_id, device_pk, body FROM outbox ORDER BY id", &[])
            .await
            .expect("outbox")
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect();
        let want = |s: &str, m: String, pk: i64, b: &str| (s.to_string(), m, pk, b.to_string());
        assert_eq!(
            outbox,
            [
                want("sub_a", id_text(&nonce[..16]), 7, "one"),
                want("sub_b", id_text(&nonce[32..]), 7, "one"),
                want("sub_a", "msg_alarm_1".into(), 8, "alarm"),
                want("sub_b", "msg_alarm_2".into(), 8, "alarm"),
            ],
            "a removed subscription is owed nothing; each delivery keeps its bytes' id or its fixed one"
        );
        assert_eq!(backlog(&**c).await.expect("backlog"), 5);
        assert!(newest(&**c).await.expect("newest").is_some());
        assert_eq!(spread(&**c, 10, None, Others::Wait).await.expect("spread"), 1);
        assert_eq!(newest(&**c).await.expect("newest"), None, "the log is empty once spread");
        assert_eq!(backlog(&**c).await.expect("backlog"), 5);
        write(&c, &[row("sub_a", None, 7, "three"), row("sub_b", None, 7, "three")]).await;
        write(&c, &[row("sub_a", None, 7, "four")]).await;
        assert_eq!(backlog(&**c).await.expect("backlog"), 8, "the running total goes on from the log's newest row");
        assert_eq!(spread(&**c, 1, None, Others::Skip).await.expect("spread"), 1);
        assert_eq!(backlog(&**c).await.expect("backlog"), 8);
    }

    #[tokio::test]
    async fn a_version_19_log_names_its_subscriptions_by_number_after_the_upgrade() {
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
        for (i, sql) in super::super::MIGRATIONS[..19].iter().enumerate() {
            c.batch_execute(sql).await.expect("migration");
            c.execute("INSERT INTO sensorhub_schema (version) VALUES ($1)", &[&(i as i32 + 1)]).await.expect("version");
        }
        c.batch_execute(
            "INSERT INTO accounts (id, username, password_hash, created_at) VALUES (1, 'a', 'x', 0);
             INSERT INTO devices (id, device_id, name, type, lat, long, interval_seconds) VALUES (7, 'D7', 'n', 'T', 0, 0, 60);
             INSERT INTO subscriptions (id, account_id, url, all_devices, events, secret, created_at)
             VALUES ('sub_a', 1, 'http://a', true, 'sensor-data', '\\x00', 0),
                    ('sub_b', 1, 'http://b', true, 'sensor-data', '\\x00', 0);
             INSERT INTO outbox_log (device_pk, created_at, subs, n, cum, nonce, body)
             VALUES (7, 5, ARRAY['sub_b', 'sub_gone', 'sub_a'], 3, 3, decode(repeat('ab', 16) || repeat('cd', 16) || repeat('ef', 16), 'hex'), 'old');",
        )
        .await
        .expect("a version 19 log row");
        drop(c);
        conn.await.expect("connection task").expect("connection");
        let store = PgStore::open_with(pg.url(), crate::OpenOptions::default()).await.expect("upgrade");
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
    async fn claimers_of_two_connections_never_spread_one_log_row_twice() {
        let (_pg, store) = database().await;
        let mut first = store.pool.get().await.expect("connection");
        let mut second = store.pool.get().await.expect("connection");
        let rows: Vec<OutboxRow> = (0..10).map(|i| row("sub_a", None, 7, &format!("r{i}"))).collect();
        write(&first, &rows).await;
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
