//! Tests of the claim's walk of the outbox log (outbox_walk.rs).

use super::super::outbox::{claim, finish};
use super::super::outbox_log::tests::{OWING, count, database, outbox, reading};
use super::super::outbox_log::{self, PER_ROW, message_id_key, write};
use crate::decide::outbox::OutboxRow;
use crate::delivery::{Attempt, ClaimRequest, DROPPED_DISABLED, DROPPED_UNSEEN, Delivery, Finished};
use rusqlite::Connection;

fn log(c: &mut Connection, rows: &[OutboxRow]) {
    let tx = c.transaction().expect("tx");
    write(&tx, rows).expect("write");
    tx.commit().expect("commit");
}

fn claimed(c: &mut Connection, now: i64, req: &ClaimRequest) -> Vec<Delivery> {
    let key = message_id_key(c).expect("key");
    claim(c, now, LEASE, req, &key).expect("claim").deliveries
}

fn record(c: &mut Connection, now: i64, done: &[(&Delivery, Attempt)]) {
    let key = message_id_key(c).expect("key");
    let done: Vec<_> = (done.iter())
        .map(|(d, a)| Finished { id: d.id, subscription_id: d.subscription_id.clone(), attempt: a.clone() })
        .collect();
    finish(c, now, &done, &key).expect("finish");
}

/// The log rows owing deliveries: (id, created_at, leased_until, done).
fn rows(c: &Connection) -> Vec<(i64, i64, Option<i64>, i64)> {
    let mut stmt =
        c.prepare("SELECT id, created_at, leased_until, done FROM outbox_log WHERE n > 0 ORDER BY id").expect("sql");
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .expect("sql")
        .map(|r| r.expect("row"))
        .collect()
}

const LEASE: i64 = 30_000;

fn now() -> i64 {
    jiff::Timestamp::now().as_millisecond() + 1000
}

fn pair(body: &str) -> [OutboxRow; 2] {
    [reading("sub_a", 7, body), reading("sub_b", 7, body)]
}

#[tokio::test]
async fn first_attempts_go_straight_from_the_log_and_write_no_outbox_row() {
    let dir = tempfile::tempdir().expect("dir");
    let mut c = database(&dir).await;
    log(&mut c, &pair("one"));
    log(&mut c, &pair("two"));
    let (now, key) = (now(), message_id_key(&c).expect("key"));
    let got = claimed(&mut c, now, &ClaimRequest::up_to(10));
    let logged = rows(&c);
    let key = key.as_str();
    let expected: Vec<_> = (logged.iter())
        .flat_map(|&(row, at, _, _)| (0..2).map(move |j| (row * PER_ROW + j, outbox_log::message_id(key, row, at, j))))
        .collect();
    let ids: Vec<_> = got.iter().map(|d| (d.id, d.message_id.clone())).collect();
    assert_eq!(ids, expected, "numbered by row and place, ids made from the row");
    let bodies: Vec<_> = got.iter().map(|d| (d.subscription_id.as_str(), d.body.as_str(), d.attempts)).collect();
    assert_eq!(bodies, [("sub_a", "one", 0), ("sub_b", "one", 0), ("sub_a", "two", 0), ("sub_b", "two", 0)]);
    assert!(outbox(&c).is_empty(), "nothing written to outbox");
    assert!(logged.iter().all(|r| r.2 == Some(now + LEASE) && r.3 == 0), "leased, none done: {logged:?}");
    assert!(claimed(&mut c, now + LEASE - 1, &ClaimRequest::up_to(10)).is_empty(), "in flight");
    record(&mut c, now, &[(&got[0], Attempt::Delivered), (&got[1], Attempt::Delivered)]);
    assert_eq!(rows(&c).len(), 1, "a row all delivered goes");
    record(&mut c, now, &[(&got[2], Attempt::Delivered), (&got[3], Attempt::Delivered)]);
    assert_eq!((count(&c, OWING), count(&c, "SELECT count(*) FROM outbox_log")), (0, 1), "the newest stays");
    assert!(outbox(&c).is_empty());
    assert_eq!(outbox_log::backlog(&c).expect("backlog"), 0);
    log(&mut c, &pair("three"));
    let next = claimed(&mut c, now, &ClaimRequest::up_to(10));
    assert!(next[0].id > got[3].id, "a number is never given twice");
}

#[tokio::test]
async fn a_first_attempt_to_try_again_or_failed_waits_in_outbox_under_its_number_and_id() {
    let dir = tempfile::tempdir().expect("dir");
    let mut c = database(&dir).await;
    log(&mut c, &pair("one"));
    let now = now();
    let got = claimed(&mut c, now, &ClaimRequest::up_to(10));
    let retry = Attempt::Retry { at: now + 5000, status: Some(503), error: "503".into() };
    let failed = Attempt::Failed { status: Some(400), error: "400".into() };
    record(&mut c, now, &[(&got[0], retry), (&got[1], failed)]);
    let kept: Vec<(i64, String, String, i64, i64, Option<i64>)> = c
        .prepare("SELECT id, message_id, state, attempts, next_attempt, last_status FROM outbox ORDER BY id")
        .expect("sql")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)))
        .expect("sql")
        .map(|r| r.expect("row"))
        .collect();
    let created = got[1].created_at;
    assert_eq!(
        kept,
        [
            (got[0].id, got[0].message_id.clone(), "pending".into(), 1, now + 5000, Some(503)),
            (got[1].id, got[1].message_id.clone(), "failed".into(), 1, created, Some(400))
        ]
    );
    assert_eq!(count(&c, OWING), 0, "the log owes nothing more");
    assert!(claimed(&mut c, now + 4999, &ClaimRequest::up_to(10)).is_empty(), "not yet due");
    let again = claimed(&mut c, now + 5000, &ClaimRequest::up_to(10));
    let seen: Vec<_> = again.iter().map(|d| (d.id, d.message_id.as_str(), d.attempts)).collect();
    assert_eq!(seen, [(got[0].id, got[0].message_id.as_str(), 1)], "the same delivery, from outbox");
    record(&mut c, now + 5000, &[(&again[0], Attempt::Delivered)]);
    assert_eq!(outbox(&c).len(), 1, "delivered; the failed one stays");
}

#[tokio::test]
async fn an_attempt_whose_lease_ran_out_is_made_again_with_its_number_and_id() {
    let dir = tempfile::tempdir().expect("dir");
    let mut c = database(&dir).await;
    log(&mut c, &[reading("sub_a", 7, "one")]);
    let now = now();
    let first = claimed(&mut c, now, &ClaimRequest::up_to(1));
    assert!(claimed(&mut c, now + LEASE - 1, &ClaimRequest::up_to(1)).is_empty());
    let again = claimed(&mut c, now + LEASE, &ClaimRequest::up_to(1));
    assert_eq!((again[0].id, &again[0].message_id), (first[0].id, &first[0].message_id));
    record(&mut c, now, &[(&first[0], Attempt::Delivered)]);
    let late = Attempt::Retry { at: now + LEASE + 5000, status: None, error: "late".into() };
    record(&mut c, now + LEASE, &[(&again[0], late)]);
    assert!(outbox(&c).is_empty(), "the outcome recorded first stands: delivered");
}

#[tokio::test]
async fn what_the_claim_may_not_take_now_waits_in_outbox_or_is_dropped_and_the_log_moves_on() {
    let dir = tempfile::tempdir().expect("dir");
    let mut c = database(&dir).await;
    c.execute_batch(
        "INSERT INTO accounts (id, username, password_hash, created_at, disabled) VALUES (2, 'gone', 'x', 0, 1);
         INSERT INTO subscriptions (id, account_id, url, all_devices, events, secret, created_at, enabled)
         VALUES ('sub_x', 2, 'http://x', 1, 'sensor-data', x'00', 0, 1);",
    )
    .expect("an account disabled");
    let mut owed = Vec::from(pair("one"));
    owed.extend([reading("sub_off", 7, "one"), reading("sub_x", 7, "one"), reading("sub_gone", 7, "one")]);
    log(&mut c, &owed);
    log(&mut c, &[reading("sub_b", 8, "unseen")]);
    let now = now();
    // Endpoint a holds its share: its subscription is left out.
    let req = ClaimRequest { limit: 10, slots: 128, held: [("http://a".to_owned(), 64)].into() };
    let key = message_id_key(&c).expect("key");
    let got = claim(&mut c, now, LEASE, &req, &key).expect("claim");
    let took: Vec<_> = got.deliveries.iter().map(|d| (d.subscription_id.as_str(), d.body.as_str())).collect();
    assert_eq!(took, [("sub_b", "one")]);
    assert_eq!((got.dropped, got.waiting.as_slice()), (2, &["http://a".to_owned()][..]));
    let states: Vec<(String, String, Option<String>)> = c
        .prepare("SELECT subscription_id, state, last_error FROM outbox ORDER BY id")
        .expect("sql")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .expect("sql")
        .map(|r| r.expect("row"))
        .collect();
    let state = |s: &str, st: &str, e: Option<&str>| (s.to_owned(), st.to_owned(), e.map(str::to_owned));
    assert_eq!(
        states,
        [
            state("sub_a", "pending", None),
            state("sub_off", "pending", None),
            state("sub_x", "dropped", Some(DROPPED_DISABLED)),
            state("sub_b", "dropped", Some(DROPPED_UNSEEN)),
        ]
    );
    let first = rows(&c)[0];
    assert_eq!((first.2, first.3), (Some(now + LEASE), 0b11101), "leased for sub_b alone, the rest done");
    // A listing moves the delivery in flight to outbox, leased; its outcome goes there.
    let tx = c.transaction().expect("tx");
    outbox_log::spread_every(&tx).expect("spread");
    tx.commit().expect("commit");
    let moved: (i64, String, Option<i64>) = c
        .query_row(
            "SELECT id, message_id, leased_until FROM outbox WHERE subscription_id = 'sub_b' AND state = 'pending'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .expect("moved");
    assert_eq!(moved, (got.deliveries[0].id, got.deliveries[0].message_id.clone(), Some(now + LEASE)));
    record(&mut c, now, &[(&got.deliveries[0], Attempt::Delivered)]);
    assert_eq!(count(&c, "SELECT count(*) FROM outbox WHERE subscription_id = 'sub_b' AND state = 'pending'"), 0);
}

#[tokio::test]
async fn a_batch_is_topped_up_from_the_log_and_a_full_claim_leaves_the_rest_there() {
    let dir = tempfile::tempdir().expect("dir");
    let mut c = database(&dir).await;
    c.execute("UPDATE subscriptions SET batch = 1, batch_max = 3 WHERE id = 'sub_a'", []).expect("batching");
    for i in 0..5 {
        log(&mut c, &[reading("sub_a", 7, &format!("r{i}"))]);
    }
    log(&mut c, &[reading("sub_b", 7, "b")]);
    let now = now();
    let got = claimed(&mut c, now, &ClaimRequest::up_to(1));
    let bodies: Vec<_> = got.iter().map(|d| d.body.as_str()).collect();
    assert_eq!(bodies, ["r0", "r1", "r2"], "one slot, a batch of three");
    assert!(outbox(&c).is_empty(), "the claim being complete, the rest wait in the log");
    let left: Vec<_> = rows(&c).iter().map(|r| r.2.is_some()).collect();
    assert_eq!(left, [true, true, true, false, false, false]);
    let next = claimed(&mut c, now, &ClaimRequest::up_to(2));
    let bodies: Vec<_> = next.iter().map(|d| d.body.as_str()).collect();
    assert_eq!(bodies, ["r3", "r4", "b"]);
}
