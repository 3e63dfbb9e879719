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
use crate::delivery::{
    DROPPED_DISABLED, DROPPED_UNASKED, DROPPED_UNCOVERED, DROPPED_UNSEEN, asks_for, endpoint, is_alarm_delivery,
    split_events,
};
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
    /// Every device the account sees, or only those of `subscription_devices`.
    pub all_devices: bool,
    /// Whether its `events` name readings, and alarm transitions.
    pub asks: (bool, bool),
}

/// Every subscription, by id, in id order.
pub(super) fn subscriptions(tx: &Connection) -> StoreResult<Vec<(String, Sub)>> {
    let mut stmt = tx.prepare_cached(
        "SELECT s.id, s.url, s.enabled, CASE WHEN s.batch = 1 THEN max(s.batch_max, 1) ELSE 1 END,
                s.account_id, a.disabled, s.all_devices, s.events
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
            all_devices: r.get(6)?,
            asks: {
                let events = split_events(&r.get::<_, String>(7)?);
                (asks_for(&events, false), asks_for(&events, true))
            },
        };
        Ok((r.get(0)?, sub))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// A delivery the walk took: attempted from its log row.
pub(super) struct Flight {
    pub id: i64,
    pub device_pk: i64,
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
    /// Whether a subscription of some devices still covers a device, as
    /// looked up: by subscription, then device (looked up without a copy of the id).
    covered: HashMap<String, HashMap<i64, bool>>,
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
        let mut state = State {
            out: Walked::default(),
            full: HashSet::new(),
            complete: false,
            seen: HashMap::new(),
            covered: HashMap::new(),
        };
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
            match self.fate(row, j, sub, picker, state)? {
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
                        device_pk: row.device_pk,
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

    /// What becomes of delivery `j` of `row`, to subscription `sub`.
    fn fate(
        &mut self,
        row: &LogRow,
        j: usize,
        sub: &str,
        picker: &mut Picker<'_>,
        state: &mut State,
    ) -> StoreResult<Fate> {
        let id = number(row.id, j);
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
        if !s.all_devices && !self.covers(sub, row.device_pk, state)? {
            return Ok(Fate::Drop(DROPPED_UNCOVERED));
        }
        if s.asks != (true, true) {
            // Only an alarm's row keeps its ids.
            let alarm = row.ids.is_some() && is_alarm_delivery(&self.message_id(row, j)?);
            if !(if alarm { s.asks.1 } else { s.asks.0 }) {
                return Ok(Fate::Drop(DROPPED_UNASKED));
            }
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

    /// Whether subscription `sub` (of some devices) still lists `device_pk`.
    fn covers(&self, sub: &str, device_pk: i64, state: &mut State) -> StoreResult<bool> {
        if let Some(covers) = state.covered.get(sub).and_then(|devices| devices.get(&device_pk)) {
            return Ok(*covers);
        }
        let sql = "SELECT EXISTS (SELECT 1 FROM subscription_devices WHERE subscription_id = ?1 AND device_pk = ?2)";
        let covers = self.tx.prepare_cached(sql)?.query_row(params![sub, device_pk], |r| r.get(0))?;
        match state.covered.get_mut(sub) {
            Some(devices) => {
                devices.insert(device_pk, covers);
            }
            None => {
                state.covered.insert(sub.to_owned(), HashMap::from([(device_pk, covers)]));
            }
        }
        Ok(covers)
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
mod tests;
