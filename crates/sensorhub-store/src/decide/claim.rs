//! Which due deliveries a claim takes, shared by every backend: rows whose
//! account was disabled or can no longer see the reading's device are
//! dropped (with the reason); each endpoint (scheme, host and port) gets at
//! most its share of the worker's slots, so an endpoint that never answers
//! holds only its own share and every other endpoint still finds room.
//!
//! An endpoint's share is the worker's slots divided among the endpoints
//! that hold or want some, never more than half of them (so a newcomer
//! always finds room at once); an endpoint is given more only once it is
//! down to half its share, so that a busy endpoint is claimed for many
//! rows at a time rather than one row per finished attempt.

use crate::delivery::{ClaimRequest, endpoint};
use std::collections::{BTreeSet, HashMap};

/// A due row as the claim's first look sees it.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    pub id: i64,
    /// Its subscription's URL.
    pub url: String,
    /// Why it may no longer be delivered, if so.
    pub refused: Option<String>,
}

/// What a claim does with the rows it looked at.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Picked {
    /// Rows to lease, in order.
    pub take: Vec<i64>,
    /// Rows to mark dropped, with the reason.
    pub drop: Vec<(i64, String)>,
    /// Endpoints whose due rows were left for want of room.
    pub waiting: Vec<String>,
    /// Whether more rows may be due than were looked at.
    pub more: bool,
}

/// How many candidate rows a claim of `limit` looks at.
pub(crate) fn window(limit: usize) -> usize {
    limit.saturating_mul(2).saturating_add(SKIP_AT_MOST)
}

/// The share of each endpoint when `active` endpoints hold or want slots.
fn share(req: &ClaimRequest, active: usize) -> usize {
    (req.slots / active.max(1)).min(req.slots / 2).max(1)
}

/// Room for endpoint `e` holding `held` within `share`: none until it is
/// down to half of it.
fn room(share: usize, held: usize) -> usize {
    if held <= share / 2 { share - held } else { 0 }
}

impl ClaimRequest {
    /// Whether `endpoint`, holding what this request says, would be given
    /// more by a claim now (it is down to half of its least share).
    pub fn has_room(&self, endpoint: &str) -> bool {
        has_room(self, endpoint)
    }
}

/// Whether `endpoint` has room under the least share it may have now.
pub(crate) fn has_room(req: &ClaimRequest, endpoint: &str) -> bool {
    let busy = req.held.values().filter(|n| **n > 0).count();
    room(share(req, busy + 1), req.held.get(endpoint).copied().unwrap_or(0)) > 0
}

/// What a claim's query leaves out: the subscriptions whose endpoint has
/// no room whatever else turns up, so that a long backlog of one endpoint
/// does not fill its window, and the disabled ones (their deliveries wait
/// until they are enabled again).
#[derive(Debug, Default)]
pub(crate) struct Excluded {
    pub subscriptions: Vec<String>,
    /// The enabled subscriptions not left out, in the order listed.
    pub rest: Vec<String>,
    /// The endpoints without room: they may have due rows left behind.
    endpoints: BTreeSet<String>,
}

impl Excluded {
    /// Whether the claim reads each subscription of [`Excluded::rest`]'s
    /// due rows apart (the index `outbox_pending`) and merges them, rather
    /// than walking every due row in order: with any left out, the walk
    /// would step over all of their due rows at every claim (51-55 ms a
    /// claim on either backend behind 100,000 owed to one endpoint at its
    /// share, and on SQLite with the writer held).
    pub(crate) fn each(&self) -> bool {
        !self.subscriptions.is_empty()
    }
}

/// The subscriptions of `subs` (id, URL, enabled) a claim of `req` leaves out.
pub(crate) fn excluded(req: &ClaimRequest, subs: &[(String, String, bool)]) -> Excluded {
    let mut out = Excluded::default();
    for (id, url, enabled) in subs {
        let e = endpoint(url);
        if !enabled {
            out.subscriptions.push(id.clone());
        } else if !has_room(req, e) {
            out.subscriptions.push(id.clone());
            out.endpoints.insert(e.to_owned());
        } else {
            out.rest.push(id.clone());
        }
    }
    out
}

/// What [`Picker::decide`] did with a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Offered {
    /// Taken: the claim leases it.
    Taken,
    /// Dropped, with its reason.
    Dropped,
    /// Passed over: its endpoint has no room left in this claim.
    Passed,
    /// Not looked at: the claim is complete.
    Complete,
}

/// How many rows a claim passes over for want of room before it stops
/// looking (the rest wait for the next claim).
const SKIP_AT_MOST: usize = 64;

/// Decides row by row, oldest first, what a claim takes and drops; an
/// endpoint's share is fixed when its first row is seen, among the
/// endpoints that hold slots or were seen before it.
pub(crate) struct Picker<'a> {
    req: &'a ClaimRequest,
    active: BTreeSet<String>,
    rooms: HashMap<String, usize>,
    waiting: BTreeSet<String>,
    skipped: usize,
    picked: Picked,
}

impl<'a> Picker<'a> {
    /// A claim of `req` whose query left out `excluded`.
    pub(crate) fn new(req: &'a ClaimRequest, excluded: &Excluded) -> Self {
        Self {
            req,
            active: req.held.iter().filter(|(_, n)| **n > 0).map(|(e, _)| e.clone()).collect(),
            rooms: HashMap::new(),
            // Endpoints left out may have due rows: they wait for room too.
            waiting: excluded.endpoints.clone(),
            skipped: 0,
            picked: Picked::default(),
        }
    }

    /// Takes, drops or passes over the next due row; `false` once the
    /// claim is complete (that row and any after it are left due).
    pub(crate) fn offer(&mut self, c: Candidate) -> bool {
        self.decide(c) != Offered::Complete
    }

    /// [`Picker::offer`], saying what became of the row.
    pub(crate) fn decide(&mut self, c: Candidate) -> Offered {
        if let Some(reason) = c.refused {
            self.picked.drop.push((c.id, reason));
            return Offered::Dropped;
        }
        if self.picked.take.len() >= self.req.limit || self.skipped >= SKIP_AT_MOST {
            self.picked.more = true;
            // Its endpoint has due rows left too (for want of the worker's
            // slots, or of looking further): the worker claims again once
            // it is down to half its share. Left out of `waiting`, beside an
            // endpoint at its share that never answers, the next claim
            // waited for the next look (half a second): 64 deliveries a look.
            self.waiting.insert(endpoint(&c.url).to_owned());
            return Offered::Complete;
        }
        let e = endpoint(&c.url);
        if !self.rooms.contains_key(e) {
            self.active.insert(e.to_owned());
            let share = share(self.req, self.active.len());
            self.rooms.insert(e.to_owned(), room(share, self.req.held.get(e).copied().unwrap_or(0)));
        }
        match self.rooms.get_mut(e) {
            Some(left) if *left > 0 => {
                *left -= 1;
                self.picked.take.push(c.id);
                Offered::Taken
            }
            _ => {
                self.waiting.insert(e.to_owned());
                self.skipped += 1;
                Offered::Passed
            }
        }
    }

    /// The rows taken so far, in order.
    pub(crate) fn taken(&self) -> &[i64] {
        &self.picked.take
    }

    /// What was decided, `looked` rows having been read of a window of
    /// [`window`]`(limit)`.
    pub(crate) fn finish(mut self, looked: usize) -> Picked {
        self.picked.waiting = self.waiting.into_iter().collect();
        self.picked.more |= looked >= window(self.req.limit) || !self.picked.waiting.is_empty();
        self.picked
    }
}

/// Picks from `candidates` (due rows, oldest first, at most
/// [`window`]`(req.limit)` of them, none of `excluded`) what a claim of
/// `req` takes and drops.
pub(crate) fn pick(candidates: Vec<Candidate>, req: &ClaimRequest, excluded: &Excluded) -> Picked {
    let looked = candidates.len();
    let mut picker = Picker::new(req, excluded);
    for c in candidates {
        if !picker.offer(c) {
            break;
        }
    }
    picker.finish(looked)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(id: i64, url: &str) -> Candidate {
        Candidate { id, url: url.into(), refused: None }
    }

    fn req(limit: usize, slots: usize, held: &[(&str, usize)]) -> ClaimRequest {
        ClaimRequest { limit, slots, held: held.iter().map(|(e, n)| ((*e).to_owned(), *n)).collect() }
    }

    const HOLE: &str = "https://hole.example/hook";
    const GOOD: &str = "https://good.example:8443/in";

    #[test]
    fn an_endpoint_is_the_scheme_host_and_port_as_written() {
        assert_eq!(endpoint("https://a.example:8443/x/y?z"), "https://a.example:8443");
        assert_eq!(endpoint("http://[::1]:9?q"), "http://[::1]:9");
        assert_eq!(endpoint("https://a.example"), "https://a.example");
        assert_eq!(endpoint("https://a.example#f"), "https://a.example");
    }

    #[test]
    fn one_endpoint_alone_gets_half_the_slots_never_all() {
        let rows: Vec<_> = (0..100).map(|i| cand(i, HOLE)).collect();
        let p = pick(rows, &req(64, 64, &[]), &Excluded::default());
        assert_eq!(p.take.len(), 32);
        assert_eq!(p.waiting, ["https://hole.example"]);
        assert!(p.more);
    }

    #[test]
    fn an_endpoint_holding_its_share_leaves_the_rest_to_the_others() {
        let mut rows: Vec<_> = (0..50).map(|i| cand(i, HOLE)).collect();
        rows.extend((50..60).map(|i| cand(i, GOOD)));
        let r = req(32, 64, &[("https://hole.example", 32)]);
        let p = pick(rows, &r, &excluded(&r, &[("s".into(), HOLE.into(), true)]));
        assert_eq!(p.take, (50..60).collect::<Vec<_>>(), "all of the healthy endpoint's rows");
        assert_eq!(p.waiting, ["https://hole.example"]);
    }

    #[test]
    fn an_endpoint_left_at_the_claims_limit_waits_for_room_too() {
        let rows: Vec<_> = (0..10).map(|i| cand(i, GOOD)).collect();
        let r = req(4, 128, &[("https://hole.example", 64)]);
        let p = pick(rows.clone(), &r, &excluded(&r, &[("s".into(), HOLE.into(), true)]));
        assert_eq!(p.take, [0, 1, 2, 3]);
        assert_eq!(p.waiting, ["https://good.example:8443", "https://hole.example"]);
        let p = pick(rows[..4].to_vec(), &r, &Excluded::default());
        assert_eq!((p.take.len(), p.waiting.len()), (4, 0), "nothing left: nothing waits");
    }

    #[test]
    fn a_busy_endpoint_is_topped_up_only_at_half_its_share() {
        let rows: Vec<_> = (0..100).map(|i| cand(i, GOOD)).collect();
        assert!(
            pick(rows.clone(), &req(64, 64, &[("https://good.example:8443", 17)]), &Excluded::default())
                .take
                .is_empty()
        );
        assert_eq!(pick(rows, &req(64, 64, &[("https://good.example:8443", 16)]), &Excluded::default()).take.len(), 16);
    }

    #[test]
    fn refused_rows_are_dropped_with_their_reason_and_take_no_room() {
        let mut rows = vec![cand(1, GOOD), cand(2, GOOD)];
        rows[0].refused = Some("account disabled".into());
        let p = pick(rows, &req(1, 64, &[]), &Excluded::default());
        assert_eq!(p.take, [2]);
        assert_eq!(p.drop, [(1, "account disabled".to_owned())]);
        assert!(!p.more);
    }

    #[test]
    fn subscriptions_of_an_endpoint_without_room_are_left_out_of_the_query() {
        let urls = vec![
            ("a".to_owned(), HOLE.to_owned(), true),
            ("b".to_owned(), GOOD.to_owned(), true),
            ("c".to_owned(), GOOD.to_owned(), false),
        ];
        let r = req(32, 64, &[("https://hole.example", 20)]);
        let left = excluded(&r, &urls);
        assert!(left.each(), "the others' rows are read apart, not walked past the hole's");
        assert_eq!((left.subscriptions, left.rest), (vec!["a".to_owned(), "c".into()], vec!["b".to_owned()]));
        let all = excluded(&req(64, 64, &[]), &urls[..2]);
        assert!(all.subscriptions.is_empty() && !all.each(), "nothing left out: one walk in the due order");
        assert_eq!(excluded(&req(64, 64, &[]), &urls).subscriptions, ["c"], "a disabled subscription is left out");
        let none = pick(Vec::new(), &r, &excluded(&r, &urls));
        assert_eq!(none.waiting, ["https://hole.example"], "an endpoint left out may still have due rows");
        assert!(none.more);
    }
}
