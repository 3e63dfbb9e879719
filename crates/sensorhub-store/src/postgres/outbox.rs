//! The outbox on PostgreSQL: deliveries written with their readings,
//! claimed by workers of any instance (`FOR UPDATE SKIP LOCKED`: each due
//! row goes to one claimer), finished, listed and replayed. None of this
//! takes the write lock that readings' writes hold.

use super::PgStore;
use super::outbox_log::{self, Others};
use crate::StoreResult;
use crate::decide::{claim, merge};
use crate::delivery::{
    Attempt, ClaimRequest, Claimed, ClaimedSubscription, DROPPED_DISABLED, DROPPED_UNSEEN, Delivery, DeliveryRecord,
    Finished, Replay, batch_room, dropped_uncovered, failing_changes, unasked_sql,
};
use crate::sql::{outbox, subscriptions};
use async_trait::async_trait;
use deadpool_postgres::{Client, GenericClient, Transaction};

/// The enabled subscriptions to sensor data of enabled accounts that
/// cover device `pk`, which their account sees: all of its devices, or a
/// list naming it; with their numbers, which the outbox log names.
pub(super) const SUBSCRIPTIONS_OF: &str =
    "SELECT s.id, s.num FROM subscriptions s JOIN accounts a ON a.id = s.account_id
     WHERE s.enabled AND NOT a.disabled AND $2 = ANY (string_to_array(s.events, ','))
       AND EXISTS (SELECT 1 FROM account_devices x WHERE x.account_id = s.account_id AND x.device_pk = $1)
       AND (s.all_devices
            OR EXISTS (SELECT 1 FROM subscription_devices sd WHERE sd.subscription_id = s.id AND sd.device_pk = $1))
     ORDER BY s.id";

pub(super) async fn claim(c: &mut Client, now: i64, lease: i64, req: &ClaimRequest) -> StoreResult<Claimed> {
    let tx = unsynced(c).await?;
    let subs: Vec<(String, String, bool)> = tx
        .query("SELECT id, url, enabled FROM subscriptions ORDER BY id", &[])
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let excluded = claim::excluded(req, &subs);
    let mut budget = outbox_log::FEED_BUDGET;
    let window = claim::window(req.limit);
    let among = excluded.each().then_some(excluded.rest.as_slice());
    let (found, mut unfed) = fed(&tx, now, window, among, &mut budget).await?;
    let picked = claim::pick(found.rows, req, &excluded);
    let mut deliveries = lease_rows(&tx, &picked.take, now + lease).await?;
    let mut dropped = drop_rows(&tx, &picked.drop).await?;
    for (sub, room) in batch_room(&deliveries) {
        let (found, short) = fed(&tx, now, room, Some(&[sub]), &mut budget).await?;
        unfed |= short;
        let more = claim::pick(found.rows, &ClaimRequest::up_to(room), &claim::Excluded::default());
        deliveries.extend(lease_rows(&tx, &more.take, now + lease).await?);
        dropped += drop_rows(&tx, &more.drop).await?;
    }
    tx.commit().await?;
    // The log may hold more than this claim spread.
    let more = picked.more || found.cut || unfed;
    Ok(Claimed { deliveries, waiting: picked.waiting, more, dropped, again: unfed })
}

/// A claim's candidates ([`candidates`]), the log spread into `outbox`
/// first as far as they need: until `limit` are found or the log holds no
/// more this claim may move, moving at most `budget` log rows (what it
/// moves is taken from it). Deliveries owed faster than they are made wait
/// in the log. Returns the candidates and whether the budget ran out first.
async fn fed(
    tx: &Transaction<'_>,
    now: i64,
    limit: usize,
    among: Option<&[String]>,
    budget: &mut usize,
) -> StoreResult<(Found, bool)> {
    let mut found = candidates(tx, now, limit, among).await?;
    while found.read < limit && !found.cut {
        if *budget == 0 {
            return Ok((found, true));
        }
        // Each log row owes at least one delivery, and a group of live
        // readings' row about a dozen. Enough for the claims after this
        // one too: a claim that spreads makes two more round trips (the
        // spread, the candidates again), and one that takes a few
        // deliveries at a time would otherwise spread at each claim.
        let chunk = (2 * limit - found.read).div_ceil(8).clamp(8, outbox_log::SPREAD_ROWS).min(*budget);
        let moved = outbox_log::spread(tx.client(), chunk, None, Others::Skip).await?;
        *budget -= moved;
        if moved == 0 {
            break;
        }
        found = candidates(tx, now, limit, among).await?;
        if moved < chunk {
            break;
        }
    }
    Ok((found, false))
}

/// A transaction whose commit is not waited onto the disk
/// (`synchronous_commit = off`), for the outbox's bookkeeping only: leases
/// and outcomes lost to a crash leave deliveries due again, which
/// at-least-once delivery allows. Sorts are off in it: a claim's
/// candidates come in the order of the index `outbox_due` (schema 16),
/// which the planner would otherwise trade for reading and sorting every
/// due row when the table's statistics are stale (a backlog that has just
/// grown looks small): tens of milliseconds a claim at 20,000 owed. JIT
/// compilation is off in it too: a sort the statement cannot do without
/// (the log's spread orders the deliveries it makes) is then costed past
/// `jit_above_cost`, and compiling it took 150 ms a spread.
async fn unsynced(c: &mut Client) -> StoreResult<Transaction<'_>> {
    let tx = c.transaction().await?;
    tx.batch_execute("SET LOCAL synchronous_commit = off; SET LOCAL enable_sort = off; SET LOCAL jit = off").await?;
    Ok(tx)
}

/// Due rows, oldest first (`$1` now, `$2` how many at most), each with
/// why it may no longer go (`$3`, `$4`); locked, and skipping rows another
/// claimer holds.
const CANDIDATES: &str = concat!(
    "SELECT o.id, s.url,
        CASE WHEN a.disabled THEN $3
             WHEN o.device_pk IS NULL OR NOT EXISTS
                  (SELECT 1 FROM account_devices x WHERE x.account_id = a.id AND x.device_pk = o.device_pk)
             THEN $4
             WHEN NOT s.all_devices AND NOT EXISTS (SELECT 1 FROM subscription_devices sd
                  WHERE sd.subscription_id = s.id AND sd.device_pk = o.device_pk)
             THEN '",
    dropped_uncovered!(),
    "'
             ",
    unasked_sql!(),
    " END
    FROM outbox o JOIN subscriptions s ON s.id = o.subscription_id JOIN accounts a ON a.id = s.account_id
    WHERE o.state = 'pending' AND o.next_attempt <= $1 AND (o.leased_until IS NULL OR o.leased_until <= $1)
      AND s.enabled
    ORDER BY o.next_attempt, o.id LIMIT $2
    FOR UPDATE OF o SKIP LOCKED"
);

/// [`CANDIDATES`] read subscription by subscription (schema 18's
/// `outbox_pending`): each enabled one of `$5`'s first `$6` due rows (a
/// page, [`merge::Pages`]), merged oldest first, with the subscription and
/// `next_attempt` of each. The walk of [`CANDIDATES`] steps over every due
/// row of the subscriptions it leaves out, at every claim: 51-55 ms behind
/// 100,000 owed to an endpoint at its share, 0.8-1.8 ms this way (`EXPLAIN
/// ANALYZE`). Ordered by the merged rows' own columns so that no plan can
/// walk `outbox_due` instead (sorts are off in the claim's transaction);
/// the outer row is locked, and its state checked again, only for the
/// rows taken.
const CANDIDATES_EACH: &str = concat!(
    "SELECT o.id, s.url,
        CASE WHEN a.disabled THEN $3
             WHEN o.device_pk IS NULL OR NOT EXISTS
                  (SELECT 1 FROM account_devices x WHERE x.account_id = a.id AND x.device_pk = o.device_pk)
             THEN $4
             WHEN NOT s.all_devices AND NOT EXISTS (SELECT 1 FROM subscription_devices sd
                  WHERE sd.subscription_id = s.id AND sd.device_pk = o.device_pk)
             THEN '",
    dropped_uncovered!(),
    "'
             ",
    unasked_sql!(),
    " END,
        s.id, c.next_attempt
    FROM subscriptions s JOIN accounts a ON a.id = s.account_id
    CROSS JOIN LATERAL (SELECT d.id, d.next_attempt FROM outbox d
        WHERE d.subscription_id = s.id AND d.state = 'pending' AND d.next_attempt <= $1
          AND (d.leased_until IS NULL OR d.leased_until <= $1)
        ORDER BY d.next_attempt, d.id LIMIT $6) c
    JOIN outbox o ON o.id = c.id
    WHERE s.enabled AND s.id = ANY ($5::text[])
      AND o.state = 'pending' AND o.next_attempt <= $1 AND (o.leased_until IS NULL OR o.leased_until <= $1)
    ORDER BY c.next_attempt, c.id LIMIT $2
    FOR UPDATE OF o SKIP LOCKED"
);

/// A claim's candidates, as [`candidates`] read them.
struct Found {
    /// The rows the claim may take, oldest first.
    rows: Vec<claim::Candidate>,
    /// How many rows the statement read (more than `rows` if cut).
    read: usize,
    /// Whether rows were left unread, or read and left, for want of a
    /// second page ([`merge::Pages`]): more may be due than were read.
    cut: bool,
}

/// Up to `limit` due rows (of the subscriptions `among` only, if given),
/// oldest first, each with why it may no longer go; locked, and skipping
/// rows another claimer holds. One walk of the due order when `among` is
/// not given, else a page of each subscription's rows, merged up to the
/// first full page's end.
async fn candidates(c: &impl GenericClient, now: i64, limit: usize, among: Option<&[String]>) -> StoreResult<Found> {
    let candidate = |r: &tokio_postgres::Row| claim::Candidate { id: r.get(0), url: r.get(1), refused: r.get(2) };
    let Some(subs) = among else {
        let rows = c.query(CANDIDATES, &[&now, &(limit as i64), &DROPPED_DISABLED, &DROPPED_UNSEEN]).await?;
        return Ok(Found { read: rows.len(), rows: rows.iter().map(candidate).collect(), cut: false });
    };
    let mut pages = merge::Pages::new(subs, limit);
    let page = pages.page() as i64;
    let rows =
        c.query(CANDIDATES_EACH, &[&now, &(limit as i64), &DROPPED_DISABLED, &DROPPED_UNSEEN, &subs, &page]).await?;
    let mut of: std::collections::HashMap<&str, Vec<(merge::Key, claim::Candidate)>> = Default::default();
    for r in &rows {
        of.entry(r.get(3)).or_default().push(((r.get(4), r.get(0)), candidate(r)));
    }
    // One page of each, at once: whatever was not read waits for the next claim.
    for (sub, _) in pages.next_reads() {
        pages.add(sub, of.remove(sub).unwrap_or_default());
    }
    let ready = pages.ready();
    Ok(Found { read: rows.len(), cut: pages.more(), rows: ready })
}

/// Marks rows dropped, each with its reason.
async fn drop_rows(c: &impl GenericClient, rows: &[(i64, String)]) -> StoreResult<usize> {
    if rows.is_empty() {
        return Ok(0);
    }
    let (ids, reasons): (Vec<i64>, Vec<&str>) = rows.iter().map(|(id, r)| (*id, r.as_str())).unzip();
    c.execute(
        "UPDATE outbox o SET state = 'dropped', last_error = t.reason
         FROM unnest($1::bigint[], $2::text[]) AS t (id, reason) WHERE o.id = t.id",
        &[&ids, &reasons],
    )
    .await?;
    Ok(rows.len())
}

/// Leases rows `ids` (locked by this transaction) until `until` and reads
/// them whole, in order.
async fn lease_rows(c: &impl GenericClient, ids: &[i64], until: i64) -> StoreResult<Vec<Delivery>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows = c
        .query(
            "UPDATE outbox o SET leased_until = $2 FROM subscriptions s, accounts a
             WHERE o.id = ANY ($1) AND s.id = o.subscription_id AND a.id = s.account_id
             RETURNING o.id, o.subscription_id, a.username, s.url, s.allow_http, s.secret, o.message_id, o.body,
                       o.attempts, o.created_at, s.failing_since, s.headers,
                       CASE WHEN s.batch THEN greatest(s.batch_max, 1) ELSE 1 END, o.device_pk",
            &[&ids, &until],
        )
        .await?;
    let mut leased: Vec<Delivery> = rows
        .iter()
        .map(|r| Delivery {
            id: r.get(0),
            subscription_id: r.get(1),
            username: r.get(2),
            url: r.get(3),
            allow_http: r.get(4),
            sealed_secret: r.get(5),
            message_id: r.get(6),
            body: r.get(7),
            attempts: u32::try_from(r.get::<_, i32>(8)).unwrap_or(0),
            created_at: r.get(9),
            failing_since: r.get(10),
            sealed_headers: r.get(11),
            batch_max: u32::try_from(r.get::<_, i32>(12)).unwrap_or(1),
            device_pk: r.get(13),
        })
        .collect();
    let order: std::collections::HashMap<i64, usize> = ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
    leased.sort_by_key(|d| order.get(&d.id).copied().unwrap_or(usize::MAX));
    Ok(leased)
}

/// Records outcomes in one transaction, one statement per kind.
pub(super) async fn finish(c: &mut Client, now: i64, done: &[Finished]) -> StoreResult<()> {
    let (mut delivered, mut retry, mut failed) = (Vec::new(), Outcomes::default(), Outcomes::default());
    let mut released = Outcomes::default();
    for f in done {
        match &f.attempt {
            Attempt::Delivered => delivered.push(f.id),
            Attempt::Retry { at, status, error } => retry.push(f.id, *at, *status, error),
            Attempt::Failed { status, error } => failed.push(f.id, 0, *status, error),
            Attempt::Released { at } => released.push(f.id, *at, None, ""),
        }
    }
    let tx = unsynced(c).await?;
    if !delivered.is_empty() {
        tx.execute("DELETE FROM outbox WHERE id = ANY($1)", &[&delivered]).await?;
    }
    if !retry.ids.is_empty() {
        tx.execute(
            "UPDATE outbox o SET attempts = o.attempts + 1, next_attempt = t.at, leased_until = NULL,
                    last_status = t.status, last_error = t.error
             FROM unnest($1::bigint[], $2::bigint[], $3::integer[], $4::text[]) AS t (id, at, status, error)
             WHERE o.id = t.id",
            &[&retry.ids, &retry.at, &retry.status, &retry.error],
        )
        .await?;
    }
    if !released.ids.is_empty() {
        tx.execute(
            "UPDATE outbox o SET next_attempt = t.at, leased_until = NULL
             FROM unnest($1::bigint[], $2::bigint[]) AS t (id, at) WHERE o.id = t.id",
            &[&released.ids, &released.at],
        )
        .await?;
    }
    if !failed.ids.is_empty() {
        tx.execute(
            "UPDATE outbox o SET state = 'failed', attempts = o.attempts + 1, last_status = t.status,
                    last_error = t.error
             FROM unnest($1::bigint[], $2::integer[], $3::text[]) AS t (id, status, error)
             WHERE o.id = t.id",
            &[&failed.ids, &failed.status, &failed.error],
        )
        .await?;
    }
    let (succeeded, failing) = failing_changes(done);
    if !succeeded.is_empty() {
        tx.execute(
            "UPDATE subscriptions SET failing_since = NULL WHERE id = ANY($1) AND failing_since IS NOT NULL",
            &[&succeeded],
        )
        .await?;
    }
    if !failing.is_empty() {
        // Failing since `now` unless it already was.
        tx.execute(
            "UPDATE subscriptions SET failing_since = $2 WHERE id = ANY($1) AND failing_since IS NULL",
            &[&failing, &now],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Outcomes of one kind as columns, for `unnest`.
#[derive(Default)]
struct Outcomes<'a> {
    ids: Vec<i64>,
    at: Vec<i64>,
    status: Vec<Option<i32>>,
    error: Vec<&'a str>,
}

impl<'a> Outcomes<'a> {
    fn push(&mut self, id: i64, at: i64, status: Option<u16>, error: &'a str) {
        self.ids.push(id);
        self.at.push(at);
        self.status.push(status.map(i32::from));
        self.error.push(error);
    }
}

impl PgStore {
    /// Spreads the log as it stands now into `outbox`, a bounded unsynced
    /// transaction a turn (rows written meanwhile stay in the log).
    async fn spread_log(&self) -> StoreResult<()> {
        let mut c = self.pool.get().await?;
        let Some(upto) = outbox_log::newest(&**c).await? else { return Ok(()) };
        loop {
            let tx = unsynced(&mut c).await?;
            let moved = outbox_log::spread(tx.client(), outbox_log::SPREAD_ROWS, Some(upto), Others::Wait).await?;
            tx.commit().await?;
            if moved < outbox_log::SPREAD_ROWS {
                return Ok(());
            }
        }
    }
}

#[async_trait]
impl crate::store::Deliveries for PgStore {
    async fn add_subscription(&self, sub: crate::delivery::NewSubscription) -> StoreResult<()> {
        self.in_tx(async |tx| subscriptions::add(tx, sub).await).await
    }

    async fn subscriptions(&self) -> StoreResult<Vec<crate::delivery::Subscription>> {
        self.on(async |c| subscriptions::list(c).await).await
    }

    async fn remove_subscription(&self, id: &str) -> StoreResult<()> {
        // What the subscription is owed goes with it: the log is spread
        // first, in turns, and what came since in the removal's own transaction.
        self.spread_log().await?;
        self.in_tx(async |tx| {
            let c = tx.settled().await?;
            while outbox_log::spread(c, outbox_log::SPREAD_ROWS, None, Others::Wait).await? == outbox_log::SPREAD_ROWS {
            }
            subscriptions::remove(tx, id).await
        })
        .await
    }

    async fn replace_subscription_secret(&self, id: &str, sealed_secret: Vec<u8>) -> StoreResult<()> {
        self.in_tx(async |tx| subscriptions::set_secret(tx, id, &sealed_secret).await).await
    }

    async fn set_subscription_enabled(&self, id: &str, enabled: bool) -> StoreResult<()> {
        self.in_tx(async |tx| subscriptions::set_enabled(tx, id, enabled).await).await
    }

    async fn claim_deliveries(&self, now: i64, lease: i64, req: &ClaimRequest) -> StoreResult<Claimed> {
        claim(&mut self.pool.get().await?, now, lease, req).await
    }

    async fn finish_deliveries(&self, now: i64, done: Vec<Finished>) -> StoreResult<()> {
        finish(&mut self.pool.get().await?, now, &done).await
    }

    async fn deliveries(&self, id: &str, failed_only: bool) -> StoreResult<Vec<DeliveryRecord>> {
        // Every delivery owed when asked is listed from `outbox`.
        self.spread_log().await?;
        self.on(async |c| outbox::list(c, id, failed_only).await).await
    }

    async fn replay_deliveries(&self, id: &str, which: Replay, now: i64) -> StoreResult<u64> {
        self.in_tx(async |tx| outbox::replay(tx, id, which, now).await).await
    }

    async fn outbox_backlog(&self) -> StoreResult<u64> {
        outbox_log::backlog(&**self.pool.get().await?).await
    }

    async fn may_deliver(&self, sub: &ClaimedSubscription, device_pk: Option<i64>, alarm: bool) -> StoreResult<bool> {
        self.on(async |c| subscriptions::may_deliver(c, sub, device_pk, alarm).await).await
    }

    async fn prune_failed_deliveries(&self, before: i64) -> StoreResult<u64> {
        self.on(async |c| outbox::prune_failed(c, before).await).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new database filled by `fill`, open.
    async fn filled(fill: &str) -> (sensorhub_testing::TempDatabase, PgStore) {
        let url = std::env::var("SENSORHUB_TEST_POSTGRES")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
        let pg = sensorhub_testing::TempDatabase::create(&url).await.expect("a PostgreSQL test database");
        let store = PgStore::open_with(pg.url(), crate::OpenOptions::default()).await.expect("open");
        store.pool.get().await.expect("connection").batch_execute(fill).await.expect("fill");
        (pg, store)
    }

    /// The plan of `sql` with `params` in a claim's transaction.
    async fn plan_in_claim(
        store: &PgStore,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> String {
        let mut c = store.pool.get().await.expect("connection");
        let tx = unsynced(&mut c).await.expect("transaction");
        let rows = tx.query(&format!("EXPLAIN {sql}"), params).await.expect("explain");
        rows.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>().join("\n")
    }

    /// The plan of a claim's candidates (all of them, or of subscriptions
    /// `among` a page at a time) in a claim's transaction, on a new
    /// database whose outbox has just grown to 20,000 due deliveries (its
    /// statistics, never gathered, make it look small).
    async fn candidates_plan(among: Option<&[&str]>) -> String {
        let (_pg, store) = filled(
            "INSERT INTO outbox (subscription_id, message_id, body, created_at, next_attempt)
             SELECT 'sub_' || (g % 3), 'msg_' || g, repeat('x', 300), 0, 0 FROM generate_series(1, 20000) g",
        )
        .await;
        let fixed: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
            [&1_i64, &64_i64, &DROPPED_DISABLED, &DROPPED_UNSEEN];
        let Some(among) = among else { return plan_in_claim(&store, CANDIDATES, &fixed).await };
        let among: Vec<String> = among.iter().map(|s| (*s).to_owned()).collect();
        plan_in_claim(&store, CANDIDATES_EACH, &[fixed[0], fixed[1], fixed[2], fixed[3], &among, &8_i64]).await
    }

    #[tokio::test]
    async fn a_claim_reads_due_deliveries_in_the_index_order_and_sorts_nothing() {
        let plan = candidates_plan(None).await;
        assert!(plan.contains("using outbox_due on outbox"), "{plan}");
        assert!(!plan.contains("Sort"), "a claim reads every due row to sort them: {plan}");
    }

    #[tokio::test]
    async fn a_claim_that_leaves_subscriptions_out_reads_each_others_rows_apart() {
        for among in [&["sub_1", "sub_2"][..], &["sub_1"][..]] {
            let plan = candidates_plan(Some(among)).await;
            assert!(plan.contains("using outbox_pending on outbox"), "{plan}");
            // A walk of the due order would step over every row left out.
            assert!(!plan.contains("outbox_due"), "{plan}");
        }
    }

    #[tokio::test]
    async fn a_claims_spread_of_the_log_walks_its_index_and_compiles_nothing() {
        let (_pg, store) = filled(
            "INSERT INTO outbox_log (devices, counts, created_at, subs, n, cum, nonce, bodies)
             SELECT ARRAY[1, 1], ARRAY[3, 3], 0, ARRAY[1, 2, 3, 1, 2, 3], 6, 6 * g, '\\x00', ARRAY[repeat('x', 300), repeat('y', 300)]
             FROM generate_series(1, 20000) g",
        )
        .await;
        let plan = plan_in_claim(&store, outbox_log::SPREAD_SKIPPING, &[&64_i64, &None::<i64>]).await;
        assert!(plan.contains("Index Scan using outbox_log_pkey"), "{plan}");
        // The sort a spread needs is costed past `jit_above_cost` with sorts
        // off: compiling it took 150 ms a spread.
        assert!(!plan.contains("JIT"), "a spread is compiled: {plan}");
    }
}
