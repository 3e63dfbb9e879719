//! A claim's walk of the outbox log on SQLite: first attempts taken
//! straight from the log rows, oldest first, after the due rows of
//! `outbox` (retries, and deliveries that waited). Of each row not in
//! flight, a delivery the claim takes is leased with its row; one that
//! must wait (its subscription left out of the claim: an endpoint without
//! room, a disabled subscription; or its endpoint out of room in this
//! claim) is moved to `outbox`, and one its account may no longer have
//! is written there dropped, with the reason; each of these is marked
//! done in the row. So a leased row's deliveries not done are exactly
//! those in flight, and the one writer writes nothing more a delivery
//! that goes at once (bench/RESULTS.md, the thirty-seventh step).

use super::outbox_log::{self, MAX_OWED, all_done, number};
use crate::StoreResult;
use crate::decide::claim::{Candidate, Offered, Picker};
use crate::delivery::{DROPPED_DISABLED, DROPPED_UNSEEN, endpoint};
use rusqlite::{Connection, params};
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

/// Log rows a claim reads at a time.
const CHUNK: i64 = 64;

/// A subscription as the walk decides on its deliveries.
pub(super) struct Sub {
    pub url: String,
    pub enabled: bool,
    /// The most deliveries of one POST (1: it does not batch).
    pub batch_max: usize,
    pub account: i64,
    pub account_disabled: bool,
}

/// Every subscription, by id, in id order.
pub(super) fn subscriptions(tx: &Connection) -> StoreResult<Vec<(String, Sub)>> {
    let mut stmt = tx.prepare_cached(
        "SELECT s.id, s.url, s.enabled, CASE WHEN s.batch = 1 THEN max(s.batch_max, 1) ELSE 1 END,
                s.account_id, a.disabled
         FROM subscriptions s JOIN accounts a ON a.id = s.account_id ORDER BY s.id",
    )?;
    let rows = stmt.query_map([], |r| {
        let batch_max: i64 = r.get(3)?;
        let sub = Sub {
            url: r.get(1)?,
            enabled: r.get(2)?,
            batch_max: usize::try_from(batch_max).unwrap_or(1),
            account: r.get(4)?,
            account_disabled: r.get(5)?,
        };
        Ok((r.get(0)?, sub))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// A delivery the walk took: attempted from its log row.
pub(super) struct Flight {
    pub id: i64,
    pub subscription_id: String,
    pub message_id: String,
    pub body: String,
    pub created_at: i64,
}

/// What the walk did.
#[derive(Default)]
pub(super) struct Walked {
    pub flights: Vec<Flight>,
    /// Deliveries written dropped.
    pub dropped: usize,
    /// Deliveries offered to the picker.
    pub looked: usize,
    /// Whether it stopped for its budget of rows (the log may hold more
    /// the claim could take).
    pub again: bool,
}

/// What the walk knows for a claim.
pub(super) struct Walk<'a> {
    pub tx: &'a Connection,
    pub now: i64,
    /// The lease's end.
    pub until: i64,
    /// The installation's key for message ids.
    pub key: &'a str,
    pub subs: &'a HashMap<String, Sub>,
    /// The subscriptions the claim leaves out.
    pub excluded: &'a HashSet<String>,
    /// Deliveries taken so far, by subscription (a batching one is
    /// topped up to its `batch_max` past the picker).
    pub taken: HashMap<String, usize>,
}

/// One log row as the walk reads it.
struct LogRow {
    id: i64,
    device_pk: i64,
    n: i64,
    created_at: i64,
    ids: Option<String>,
    done: i64,
    owed: i64,
    body: String,
}

/// What becomes of one delivery of a row.
enum Fate {
    /// Its subscription is gone: owed nothing.
    Gone,
    /// It waits in `outbox` (its subscription is left out of the claim).
    Wait,
    /// It is written dropped, with the reason.
    Drop(&'static str),
    /// It goes now.
    Take,
    /// Not now (its endpoint has no room left in this claim, or the claim
    /// is complete): it stays in the log, unless the row is leased for
    /// others, when it waits in `outbox`.
    Later,
}

/// The walk's state between rows.
struct State {
    out: Walked,
    /// Endpoints out of room in this claim.
    full: HashSet<String>,
    /// Whether the picker will take no more.
    complete: bool,
    /// Whether an account sees a device, as looked up.
    seen: HashMap<(i64, i64), bool>,
}

impl Walk<'_> {
    /// Walks the log rows not in flight, oldest first, offering `picker`
    /// their deliveries until it is complete, every endpoint it may take
    /// from is out of room, the log ends, or `budget` rows have been read.
    pub(super) fn run(mut self, picker: &mut Picker<'_>, mut budget: usize) -> StoreResult<Walked> {
        let open: HashSet<String> = (self.subs.iter())
            .filter(|(id, s)| s.enabled && !self.excluded.contains(*id))
            .map(|(_, s)| endpoint(&s.url).to_owned())
            .collect();
        let mut state = State { out: Walked::default(), full: HashSet::new(), complete: false, seen: HashMap::new() };
        let mut lists: HashMap<i64, Vec<String>> = HashMap::new();
        let mut after = 0;
        // Once the claim is complete, rows still read for batches with room.
        let mut extra: Option<usize> = None;
        // With every endpoint left out, there is nothing to take.
        while !open.is_empty() && extra != Some(0) {
            let rows = self.rows(after)?;
            if rows.is_empty() {
                break;
            }
            for row in rows {
                if budget == 0 {
                    state.out.again = true;
                    return Ok(state.out);
                }
                if let Some(left) = extra.as_mut() {
                    if *left == 0 {
                        break;
                    }
                    *left -= 1;
                }
                budget -= 1;
                after = row.id;
                if row.done == all_done(row.n) {
                    // Kept while it was the newest: it goes once it is not.
                    outbox_log::remove_unless_newest(self.tx, row.id)?;
                    continue;
                }
                let list = match lists.entry(row.owed) {
                    Entry::Occupied(known) => known.into_mut(),
                    Entry::Vacant(new) => new.insert(self.owed(row.owed)?),
                };
                self.row(&row, list, picker, &mut state)?;
                // Nothing more may be taken: the rows after stay untouched,
                // but for batches under way that have room.
                state.complete |= open.iter().all(|e| state.full.contains(e));
                if state.complete && extra.is_none() {
                    extra = Some(self.batch_room());
                }
            }
        }
        Ok(state.out)
    }

    /// The most deliveries a batch under way may still take.
    fn batch_room(&self) -> usize {
        (self.taken.iter())
            .filter_map(|(sub, n)| self.subs.get(sub).map(|s| s.batch_max.saturating_sub(*n)))
            .filter(|room| *room > 0)
            .max()
            .unwrap_or(0)
    }

    /// Whether a batch of `sub` is under way in this claim with room for more.
    fn tops_up(&self, sub: &str, s: &Sub) -> bool {
        s.batch_max > 1 && (1..s.batch_max).contains(&self.taken.get(sub).copied().unwrap_or(0))
    }

    /// Decides each delivery of `row` not done (`list` its subscriptions)
    /// and writes what came of them.
    fn row(&mut self, row: &LogRow, list: &[String], picker: &mut Picker<'_>, state: &mut State) -> StoreResult<()> {
        let (mut done, mut later, mut flying) = (row.done, Vec::new(), 0);
        for (j, sub) in list.iter().enumerate().take(MAX_OWED) {
            if done & (1 << j) != 0 {
                continue;
            }
            match self.fate(row, sub, number(row.id, j), picker, state)? {
                Fate::Gone => done |= 1 << j,
                Fate::Wait => {
                    self.wait(row, j, sub, None)?;
                    done |= 1 << j;
                }
                Fate::Drop(reason) => {
                    self.wait(row, j, sub, Some(reason))?;
                    state.out.dropped += 1;
                    done |= 1 << j;
                }
                Fate::Later => later.push(j),
                Fate::Take => {
                    *self.taken.entry(sub.clone()).or_default() += 1;
                    flying += 1;
                    state.out.flights.push(Flight {
                        id: number(row.id, j),
                        subscription_id: sub.clone(),
                        message_id: self.message_id(row, j)?,
                        body: row.body.clone(),
                        created_at: row.created_at,
                    });
                }
            }
        }
        if flying == 0 {
            return if done == row.done { Ok(()) } else { outbox_log::mark(self.tx, row.id, row.n, done) };
        }
        // A leased row's deliveries not done are those in flight.
        for j in later {
            self.wait(row, j, &list[j], None)?;
            done |= 1 << j;
        }
        let sql = "UPDATE outbox_log SET leased_until = ?2, done = ?3 WHERE id = ?1";
        self.tx.prepare_cached(sql)?.execute(params![row.id, self.until, done])?;
        Ok(())
    }

    /// What becomes of delivery `id` of `row`, to subscription `sub`.
    fn fate(
        &mut self,
        row: &LogRow,
        sub: &str,
        id: i64,
        picker: &mut Picker<'_>,
        state: &mut State,
    ) -> StoreResult<Fate> {
        let Some(s) = self.subs.get(sub) else { return Ok(Fate::Gone) };
        if !s.enabled || self.excluded.contains(sub) {
            return Ok(Fate::Wait);
        }
        // A batch under way takes more without a slot of its own.
        let top_up = self.tops_up(sub, s);
        if state.complete && !top_up {
            return Ok(Fate::Later);
        }
        if s.account_disabled {
            return Ok(Fate::Drop(DROPPED_DISABLED));
        }
        let key = (s.account, row.device_pk);
        let sees = match state.seen.get(&key) {
            Some(sees) => *sees,
            None => {
                let sees = self.sees(key)?;
                state.seen.insert(key, sees);
                sees
            }
        };
        if !sees {
            return Ok(Fate::Drop(DROPPED_UNSEEN));
        }
        if top_up {
            return Ok(Fate::Take);
        }
        state.out.looked += 1;
        Ok(match picker.decide(Candidate { id, url: s.url.clone(), refused: None }) {
            Offered::Taken => Fate::Take,
            Offered::Passed => {
                state.full.insert(endpoint(&s.url).to_owned());
                Fate::Later
            }
            Offered::Complete | Offered::Dropped => {
                state.complete = true;
                Fate::Later
            }
        })
    }

    /// Up to [`CHUNK`] log rows after `after` not in flight, oldest first.
    fn rows(&self, after: i64) -> StoreResult<Vec<LogRow>> {
        let mut stmt = self.tx.prepare_cached(
            "SELECT id, device_pk, n, created_at, ids, done, owed, body FROM outbox_log
             WHERE id > ?1 AND (leased_until IS NULL OR leased_until <= ?2) ORDER BY id LIMIT ?3",
        )?;
        let rows = stmt.query_map(params![after, self.now, CHUNK], |r| {
            Ok(LogRow {
                id: r.get(0)?,
                device_pk: r.get(1)?,
                n: r.get(2)?,
                created_at: r.get(3)?,
                ids: r.get(4)?,
                done: r.get(5)?,
                owed: r.get(6)?,
                body: r.get(7)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The subscriptions list `owed` names, in order.
    fn owed(&self, owed: i64) -> StoreResult<Vec<String>> {
        let text: String =
            self.tx.prepare_cached("SELECT subs FROM outbox_owed WHERE id = ?1")?.query_row([owed], |r| r.get(0))?;
        serde_json::from_str(&text).map_err(|e| crate::StoreError::Backend(e.into()))
    }

    /// Whether account `key.0` sees device `key.1`.
    fn sees(&self, key: (i64, i64)) -> StoreResult<bool> {
        let sql = "SELECT EXISTS (SELECT 1 FROM account_devices WHERE account_id = ?1 AND device_pk = ?2)";
        Ok(self.tx.prepare_cached(sql)?.query_row(params![key.0, key.1], |r| r.get(0))?)
    }

    /// The message id of `row`'s `j`-th delivery.
    fn message_id(&self, row: &LogRow, j: usize) -> StoreResult<String> {
        outbox_log::log_message_id(self.key, row.id, row.created_at, row.ids.as_deref(), j)
    }

    /// Writes `row`'s `j`-th delivery (of `sub`) to `outbox`, due when it
    /// was written, or dropped for `reason`.
    fn wait(&self, row: &LogRow, j: usize, sub: &str, reason: Option<&str>) -> StoreResult<()> {
        let message_id = self.message_id(row, j)?;
        self.tx
            .prepare_cached(
                "INSERT INTO outbox (id, subscription_id, device_pk, message_id, body, created_at, next_attempt,
                                     state, last_error)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, CASE WHEN ?7 IS NULL THEN 'pending' ELSE 'dropped' END, ?7)",
            )?
            .execute(params![number(row.id, j), sub, row.device_pk, message_id, row.body, row.created_at, reason])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
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
        let mut stmt = c
            .prepare("SELECT id, created_at, leased_until, done FROM outbox_log WHERE n > 0 ORDER BY id")
            .expect("sql");
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
            .flat_map(|&(row, at, _, _)| {
                (0..2).map(move |j| (row * PER_ROW + j, outbox_log::message_id(key, row, at, j)))
            })
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
}
