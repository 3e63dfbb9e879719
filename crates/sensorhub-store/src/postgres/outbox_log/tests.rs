//! Tests of the outbox log on PostgreSQL (outbox_log.rs).

use super::*;
use crate::decide::outbox::id_text;
use crate::postgres::PgStore;

/// Account 1, devices 7 and 8, and subscriptions `sub_a` and `sub_b` of
/// that account to all its devices.
async fn subscriptions(c: &tokio_postgres::Client) {
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
}

/// A migrated database with subscriptions `sub_a` and `sub_b` of an
/// account that sees device 7 (and device 8).
async fn database() -> (sensorhub_testing::TempDatabase, PgStore) {
    let url =
        std::env::var("SENSORHUB_TEST_POSTGRES").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let pg = sensorhub_testing::TempDatabase::create(&url).await.expect("a PostgreSQL test database");
    let store = PgStore::open_with(pg.url(), crate::OpenOptions::default()).await.expect("open");
    let c = store.pool.get().await.expect("connection");
    subscriptions(&c).await;
    drop(c);
    (pg, store)
}

/// A log row's devices, deliveries of each, subscriptions (by number),
/// bytes of seed, fixed ids and bodies.
type LogRow = (Vec<i64>, Vec<i32>, Vec<Option<i32>>, i32, Option<Vec<String>>, Vec<String>);

/// The random id of the delivery at `place` (from 1) of a log row with
/// `seed`, made here as the spread makes it in SQL.
fn seeded(seed: &[u8], place: i32) -> String {
    use sha2::Digest;
    let hash = sha2::Sha256::new().chain_update(seed).chain_update(place.to_be_bytes()).finalize();
    id_text(&hash[..16])
}

fn row(sub: &str, msg: Option<&str>, pk: i64, body: &str) -> OutboxRow {
    OutboxRow { subscription_id: sub.into(), device_pk: pk, message_id: msg.map(Into::into), body: body.into() }
}

async fn write(c: &tokio_postgres::Client, rows: &[OutboxRow]) {
    let mut ids: Vec<&str> = rows.iter().map(|r| &*r.subscription_id).collect();
    ids.sort_unstable();
    ids.dedup();
    let nums = numbers(c, &ids).await.expect("numbers");
    let number = |id: &str| nums.iter().find(|(known, _)| known == id).map(|(_, n)| *n);
    let mut tail = tail(c).await.expect("the log's tail");
    for (sql, params) in insert(rows, number, &mut tail).expect("statements") {
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
    let sql = "SELECT devices, counts, subs, octet_length(seed), ids, bodies, seed, nonce IS NULL FROM outbox_log ORDER BY id";
    let log = c.query(sql, &[]).await.expect("log");
    let shape: Vec<LogRow> = log.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5))).collect();
    let (a, b) = (num(&c, "sub_a").await, num(&c, "sub_b").await);
    assert_ne!(a, b);
    assert_eq!(
        shape,
        [(
            vec![7, 8, 7],
            vec![3, 2, 1],
            vec![a, None, b, a, b, b],
            16,
            Some(strings(&["", "", "", "msg_alarm_1", "msg_alarm_2", ""])),
            strings(&["one", "alarm", "two"]),
        )],
        "subscriptions by number, one written meanwhile gone (NULL)"
    );
    let seed: Vec<u8> = log[0].get(6);
    assert!(log[0].get::<_, bool>(7), "one seed for the row, no random bytes a delivery");
    let neither = "INSERT INTO outbox_log (created_at, devices, counts, subs, n, cum, bodies) VALUES (0, '{7}', '{1}', '{1}', 1, 1, '{x}')";
    let refused = c.execute(neither, &[]).await.expect_err("a row without a seed or bytes of its own is refused");
    assert_eq!(refused.as_db_error().and_then(|e| e.constraint()), Some("outbox_log_seed_or_nonce"));
    assert_eq!(backlog(&**c).await.expect("backlog"), 6, "the log's deliveries count");

    assert_eq!(spread(&**c, 2, None, Others::Skip).await.expect("spread"), 1);
    assert_eq!(
        outbox(&c).await,
        [
            want("sub_a", seeded(&seed, 1), 7, "one"),
            want("sub_b", seeded(&seed, 3), 7, "one"),
            want("sub_a", "msg_alarm_1".into(), 8, "alarm"),
            want("sub_b", "msg_alarm_2".into(), 8, "alarm"),
            want("sub_b", seeded(&seed, 6), 7, "two"),
        ],
        "a removed subscription is owed nothing; each delivery has its seeded id or its fixed one"
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
    let sql = "SELECT cardinality(counts), n, cum, octet_length(seed), seed FROM outbox_log ORDER BY id";
    let log = c.query(sql, &[]).await.expect("log");
    let shape: Vec<(i32, i64, i64, i32)> = log.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3))).collect();
    assert_eq!(shape, [(21, 63, 63, 16), (9, 27, 90, 16), (1, 70, 160, 16), (1, 1, 161, 16)]);
    let seeds: Vec<Vec<u8>> = log.iter().map(|r| r.get(4)).collect();
    assert!(seeds.windows(2).all(|w| w[0] != w[1]), "a seed of its own for each row");
    assert_eq!(backlog(&**c).await.expect("backlog"), 161);
    assert_eq!(spread(&**c, 10, None, Others::Wait).await.expect("spread"), 4);
    let mut expected = Vec::new();
    for i in 0..30 {
        let (seed, place) = if i < 21 { (&seeds[0], i * 3) } else { (&seeds[1], (i - 21) * 3) };
        expected.push(want("sub_a", seeded(seed, place + 1), 7, &format!("r{i}")));
        expected.push(want("sub_b", seeded(seed, place + 3), 7, &format!("r{i}")));
    }
    expected.extend((1..=70).map(|p| want("sub_a", seeded(&seeds[2], p), 8, "wide")));
    expected.push(want("sub_b", seeded(&seeds[3], 1), 7, "last"));
    assert_eq!(outbox(&c).await, expected, "in the order written, across rows");
}

/// A database at schema `version` with subscriptions `sub_a` and
/// `sub_b` of an account, devices 7 and 8, and `then` run on it; then
/// opened by this release, which upgrades it.
async fn upgraded_from(version: usize, then: &str) -> (sensorhub_testing::TempDatabase, PgStore) {
    let url =
        std::env::var("SENSORHUB_TEST_POSTGRES").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
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
    subscriptions(&c).await;
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
    let bodies: Vec<String> =
        c.query("SELECT body FROM outbox ORDER BY body", &[]).await.expect("outbox").iter().map(|r| r.get(0)).collect();
    let mut want: Vec<String> = (0..10).map(|i| format!("r{i}")).collect();
    want.sort();
    assert_eq!(bodies, want, "each reading owed once");
    assert_eq!(spread(&**c, 100, None, Others::Wait).await.expect("spread"), 0);
}

/// Each log row's running total and count, in order.
async fn totals(c: &tokio_postgres::Client) -> Vec<(i64, i64)> {
    let rows = c.query("SELECT cum, n FROM outbox_log ORDER BY id", &[]).await.expect("log");
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

/// Writes one reading owing `subs` in a writing transaction of `store`.
async fn owe(store: &PgStore, body: &str, subs: &[&str]) {
    use crate::write::tx::Tx;
    let rows: Vec<OutboxRow> = subs.iter().map(|s| row(s, None, 7, body)).collect();
    store.in_tx(async |tx| tx.insert_outbox(&rows).await).await.expect("written");
}

#[tokio::test]
async fn a_writer_keeps_the_logs_running_total_and_looks_it_up_when_another_wrote() {
    let (pg, first) = database().await;
    let second = PgStore::open_with(pg.url(), crate::OpenOptions::default()).await.expect("a second instance");
    let c = first.pool.get().await.expect("connection");
    owe(&first, "r1", &["sub_a", "sub_b"]).await;
    owe(&first, "r2", &["sub_a"]).await;
    // The first instance knows where the log ends: it does not read it
    // again (a row changed behind its back shows it).
    c.execute("UPDATE outbox_log SET cum = 1000 WHERE cum = 3", &[]).await.expect("update");
    owe(&first, "r3", &["sub_b"]).await;
    assert_eq!(totals(&c).await, [(2, 2), (1000, 1), (4, 1)]);
    c.execute("UPDATE outbox_log SET cum = 3 WHERE cum = 1000", &[]).await.expect("update");
    // The other instance's row moves the sequence on: each looks the tail up.
    owe(&second, "r4", &["sub_a", "sub_b"]).await;
    owe(&first, "r5", &["sub_a"]).await;
    // A transaction rolled back leaves nothing, and its row's number taken.
    let rows = [row("sub_a", None, 7, "gone")];
    let failed = first
        .in_tx(async |tx| {
            crate::write::tx::Tx::insert_outbox(tx, &rows).await?;
            Err::<(), _>(crate::StoreError::Backend("refused".into()))
        })
        .await;
    assert!(failed.is_err());
    owe(&first, "r6", &["sub_b"]).await;
    assert_eq!(totals(&c).await, [(2, 2), (3, 1), (4, 1), (6, 2), (7, 1), (8, 1)]);
    assert_eq!(backlog(&**c).await.expect("backlog"), 8);
    // Spread to empty, the log goes on from where it was.
    assert_eq!(spread(&**c, 100, None, Others::Wait).await.expect("spread"), 6);
    owe(&first, "r7", &["sub_a", "sub_b"]).await;
    assert_eq!(backlog(&**c).await.expect("backlog"), 8 + 2);
    assert_eq!(totals(&c).await, [(10, 2)]);
}

#[tokio::test]
async fn the_logs_bodies_are_compressed_with_lz4_where_the_server_has_it() {
    let (_pg, store) = database().await;
    let c = store.pool.get().await.expect("connection");
    let has_lz4: bool = c
        .query_one(
            "SELECT current_setting('server_version_num')::integer >= 140000 AND EXISTS (
                SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals))",
            &[],
        )
        .await
        .expect("settings")
        .get(0);
    let method: String = c
        .query_one(
            "SELECT attcompression::text FROM pg_attribute WHERE attrelid = 'outbox_log'::regclass AND attname = 'bodies'",
            &[],
        )
        .await
        .expect("column")
        .get(0);
    assert_eq!(method, if has_lz4 { "l" } else { "" });
    // A group's row of eight readings' bodies, written and spread as before.
    let rows: Vec<OutboxRow> = (0..8)
        .flat_map(|i| {
            let body =
                format!(r#"{{"event":"sensor-data","device_id":"AWLR-{i:04}","value":{}}}"#, "1.25,".repeat(120));
            ["sub_a", "sub_b"].map(|s| row(s, None, 7, &body))
        })
        .collect();
    write(&c, &rows).await;
    if has_lz4 {
        let sql = "SELECT pg_column_compression(bodies) FROM outbox_log";
        let used: Option<String> = c.query_one(sql, &[]).await.expect("log").get(0);
        assert_eq!(used.as_deref(), Some("lz4"));
    }
    assert_eq!(spread(&**c, 10, None, Others::Wait).await.expect("spread"), 1);
    let spread: Vec<String> = outbox(&c).await.into_iter().map(|(_, _, _, body)| body).collect();
    let written: Vec<String> = rows.iter().map(|r| r.body.to_string()).collect();
    assert_eq!(spread, written, "the bodies come back as written");
}
