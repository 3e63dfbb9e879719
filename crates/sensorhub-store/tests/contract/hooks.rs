//! Webhook subscriptions: stored, listed, changed and removed alike on
//! every backend; an account subscribes only to devices it sees.

use super::{backends, reading};
use sensorhub_core::provision::{Provision, parse_json};
use sensorhub_store::delivery::{
    Attempt, ClaimRequest, Delivery, Finished, NewSubscription, Outbox, ProvisionedHooks, ProvisionedSubscription,
    Replay, SENSOR_DATA, Sealer,
};
use sensorhub_store::{ApplyReport, Store, StoreError};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

fn new(id: &str, username: &str, devices: Option<&[&str]>) -> NewSubscription {
    NewSubscription {
        id: id.into(),
        username: username.into(),
        url: "https://partner.example/hook".into(),
        devices: devices.map(|d| d.iter().map(|s| (*s).to_owned()).collect()),
        events: vec![SENSOR_DATA.into()],
        sealed_secret: vec![1, 2, 3, 0, 255],
        sealed_headers: None,
        batch: false,
        batch_max: 100,
        allow_http: false,
    }
}

/// What a claim of up to `n` at `now` leases (for 30 s).
async fn claim(s: &dyn Store, now: i64, n: usize) -> Vec<Delivery> {
    s.claim_deliveries(now, 30_000, &ClaimRequest::up_to(n)).await.expect("claim").deliveries
}

/// Each delivery as its subscription and the string `field` of its body, sorted.
fn owed_pairs(deliveries: &[Delivery], field: &str) -> Vec<(String, String)> {
    let mut owed: Vec<(String, String)> = deliveries
        .iter()
        .map(|d| {
            let body: serde_json::Value = serde_json::from_str(&d.body).expect("JSON");
            (d.subscription_id.clone(), body[field].as_str().unwrap_or_default().to_owned())
        })
        .collect();
    owed.sort();
    owed
}

#[tokio::test]
async fn subscriptions_are_stored_changed_and_removed() {
    for b in backends().await {
        let s = &*b.store;
        s.add_subscription(new("sub_b", "alice", None)).await.expect("all devices");
        s.add_subscription(NewSubscription { batch: true, ..new("sub_a", "alice", Some(&["D1"])) })
            .await
            .expect("one device");
        let subs = s.subscriptions().await.expect("list");
        let ids: Vec<_> = subs.iter().map(|x| (x.id.as_str(), x.devices.clone(), x.batch, x.enabled)).collect();
        assert_eq!(ids, [("sub_a", Some(vec!["D1".to_owned()]), true, true), ("sub_b", None, false, true)]);
        assert_eq!(subs[0].sealed_secret, [1, 2, 3, 0, 255], "the sealed bytes come back as stored");
        assert_eq!(subs[0].events, [SENSOR_DATA]);

        s.replace_subscription_secret("sub_a", vec![9; 40]).await.expect("rotate");
        s.set_subscription_enabled("sub_a", false).await.expect("disable");
        let subs = s.subscriptions().await.expect("list");
        assert_eq!((subs[0].sealed_secret.clone(), subs[0].enabled), (vec![9; 40], false));

        s.remove_subscription("sub_a").await.expect("remove");
        assert_eq!(s.subscriptions().await.expect("list").len(), 1);
        assert!(matches!(s.remove_subscription("sub_a").await, Err(StoreError::NotFound(_))));
        assert!(matches!(s.replace_subscription_secret("nope", vec![]).await, Err(StoreError::NotFound(_))));
    }
}

#[tokio::test]
async fn only_seen_devices_of_known_accounts_may_be_subscribed() {
    for b in backends().await {
        let s = &*b.store;
        let unseen = s.add_subscription(new("sub_x", "alice", Some(&["D2"]))).await;
        assert!(matches!(unseen, Err(StoreError::NotFound(ref m)) if m.contains("D2")), "{unseen:?}");
        assert!(matches!(s.add_subscription(new("sub_y", "bob", None)).await, Err(StoreError::NotFound(_))));
        s.add_subscription(new("sub_z", "alice", None)).await.expect("add");
        assert!(matches!(s.add_subscription(new("sub_z", "alice", None)).await, Err(StoreError::Conflict(_))));
        assert_eq!(s.subscriptions().await.expect("list").len(), 1, "refusals wrote nothing");
    }
}

#[tokio::test]
async fn stored_readings_owe_deliveries_in_their_transaction() {
    for b in backends().await {
        let s = &*b.store;
        s.add_subscription(new("sub_all", "alice", None)).await.expect("add");
        s.add_subscription(new("sub_d1", "alice", Some(&["D1"]))).await.expect("add");
        s.add_subscription(new("sub_off", "alice", None)).await.expect("add");
        s.set_subscription_enabled("sub_off", false).await.expect("disable");

        s.ingest(reading("D1", T, &[("a", 3.0), ("b", 0.5)])).await.expect("ingest");
        let skipped = s.import(Box::new([Ok(reading("D1", T + 60, &[("a", 1.0)]))].into_iter()), Outbox::Skip);
        skipped.await.expect("history is not delivered");
        let refused = s.import(
            Box::new([Ok(reading("D1", T + 120, &[("a", 1.0)])), Ok(reading("D9", T, &[]))].into_iter()),
            Outbox::Deliver,
        );
        assert!(refused.await.is_err(), "a refused import owes nothing");
        assert_eq!(s.outbox_backlog().await.expect("backlog"), 2, "one per enabled subscription");

        let owed = s.deliveries("sub_all", false).await.expect("deliveries");
        assert_eq!(owed.len(), 1);
        assert_eq!((owed[0].state.as_str(), owed[0].attempts), ("pending", 0));
        assert!(s.deliveries("sub_off", false).await.expect("deliveries").is_empty());
        assert!(matches!(s.deliveries("nope", false).await, Err(StoreError::NotFound(_))));

        let now = jiff::Timestamp::now().as_millisecond() + 1000;
        let claimed = claim(s, now, 10).await;
        assert_eq!(claimed.len(), 2);
        let body: serde_json::Value = serde_json::from_str(&claimed[0].body).expect("JSON");
        assert_eq!(
            body,
            serde_json::json!({"event": "sensor-data", "device_id": "D1", "timestamp": "2026-05-05T07:00:00Z",
                "data": {"sensors": [{"id": "a", "value": 3.0, "unit": "%"}, {"id": "b", "value": 0.5, "unit": "."}]}})
        );
        assert_ne!(claimed[0].message_id, claimed[1].message_id);
        assert!(claim(s, now, 10).await.is_empty(), "claimed ones are leased");

        let (first, second) = (&claimed[0], &claimed[1]);
        s.finish_delivery(first.id, &first.subscription_id, now, Attempt::Delivered).await.expect("finish");
        let failed = Attempt::Failed { status: Some(400), error: "400 Bad Request".into() };
        s.finish_delivery(second.id, &second.subscription_id, now, failed).await.expect("finish");
        assert_eq!(s.outbox_backlog().await.expect("backlog"), 0);
        let kept = s.deliveries(&second.subscription_id, true).await.expect("failed ones");
        assert_eq!((kept[0].state.as_str(), kept[0].attempts, kept[0].last_status), ("failed", 1, Some(400)));
        let subs = s.subscriptions().await.expect("list");
        assert!(subs.iter().all(|x| x.id != second.subscription_id || x.enabled), "one failure disables nothing");

        assert_eq!(s.replay_deliveries(&second.subscription_id, Replay::Failed, now).await.expect("replay"), 1);
        let again = claim(s, now, 10).await;
        assert_eq!((again.len(), again[0].message_id.as_str(), again[0].attempts), (1, second.message_id.as_str(), 0));
        assert!(again[0].failing_since.is_some(), "the subscription is failing since the 400");
        let retry = Attempt::Retry { at: now + 5000, status: Some(503), error: "503".into() };
        s.finish_delivery(again[0].id, &again[0].subscription_id, now, retry).await.expect("finish");
        assert!(claim(s, now + 4999, 10).await.is_empty(), "not yet due");
        assert_eq!(claim(s, now + 5000, 10).await.len(), 1, "due at its time");
        let missing = s.replay_deliveries(&second.subscription_id, Replay::One(-1), now).await;
        assert!(matches!(missing, Err(StoreError::NotFound(_))));
        s.remove_subscription(&second.subscription_id).await.expect("remove");
        assert_eq!(s.outbox_backlog().await.expect("backlog"), 0, "a removed subscription owes nothing");
    }
}

/// A claimed delivery is in flight until its lease ends: no claim takes it
/// before, the next one at its end takes it again with its message id,
/// and the listing gives the lease's end as its next attempt.
#[tokio::test]
async fn a_delivery_in_flight_is_claimed_again_only_when_its_lease_ends() {
    for b in backends().await {
        let s = &*b.store;
        s.add_subscription(new("sub_l", "alice", None)).await.expect("add");
        s.ingest(reading("D1", T, &[("a", 1.0)])).await.expect("ingest");
        s.ingest(reading("D1", T + 60, &[("a", 2.0)])).await.expect("ingest");
        let now = jiff::Timestamp::now().as_millisecond() + 1000;
        let first = s.claim_deliveries(now, 30_000, &ClaimRequest::up_to(1)).await.expect("claim").deliveries;
        assert_eq!(first.len(), 1, "{}", b.url);
        let listed = s.deliveries("sub_l", false).await.expect("deliveries");
        let shown = listed.iter().find(|d| d.id == first[0].id).expect("listed");
        assert_eq!((shown.state.as_str(), shown.next_attempt), ("pending", now + 30_000), "{}", b.url);
        let second = claim(s, now + 29_999, 10).await;
        assert_eq!(second.len(), 1, "{}: only the other one", b.url);
        assert_ne!(second[0].id, first[0].id);
        s.finish_delivery(second[0].id, "sub_l", now, Attempt::Delivered).await.expect("finish");
        let again = claim(s, now + 30_000, 10).await;
        assert_eq!(again.len(), 1, "{}: due again at the lease's end", b.url);
        assert_eq!((again[0].id, again[0].message_id.as_str()), (first[0].id, first[0].message_id.as_str()));
        let retry = Attempt::Retry { at: now + 40_000, status: Some(503), error: "503".into() };
        s.finish_delivery(again[0].id, "sub_l", now + 30_000, retry).await.expect("finish");
        assert!(claim(s, now + 39_999, 10).await.is_empty(), "{}: a retry waits for its time", b.url);
        assert_eq!(claim(s, now + 40_000, 10).await.len(), 1, "{}: not for the lease before it", b.url);
    }
}

/// What a subscription was owed goes with it: added again under its id
/// (ids are the caller's), it is owed only what is written after.
#[tokio::test]
async fn a_subscription_added_again_under_its_id_is_owed_nothing_from_before() {
    for b in backends().await {
        let s = &*b.store;
        s.add_subscription(new("sub_x", "alice", None)).await.expect("add");
        s.ingest(reading("D1", T, &[("a", 1.0)])).await.expect("ingest");
        // Counted, not listed: a listing could move what is owed where it is kept.
        let owed = s.outbox_backlog().await.expect("backlog");
        s.remove_subscription("sub_x").await.expect("remove");
        assert_eq!(owed - s.outbox_backlog().await.expect("backlog"), 1, "{}: sub_x's went with it", b.url);
        s.add_subscription(new("sub_x", "alice", None)).await.expect("added again");
        assert!(s.deliveries("sub_x", false).await.expect("listed").is_empty(), "{}: nothing from before", b.url);
        s.ingest(reading("D1", T + 60, &[("a", 2.0)])).await.expect("ingest");
        let now = jiff::Timestamp::now().as_millisecond() + 1000;
        let mine: Vec<_> = claim(s, now, 100).await.into_iter().filter(|d| d.subscription_id == "sub_x").collect();
        let want = [("sub_x".to_owned(), "2026-05-05T07:01:00Z".to_owned())];
        assert_eq!(owed_pairs(&mine, "timestamp"), want, "{}", b.url);
    }
}

#[tokio::test]
async fn each_device_of_a_transaction_owes_its_own_subscriptions() {
    for b in backends().await {
        let s = &*b.store;
        s.add_subscription(new("sub_all", "alice", None)).await.expect("add");
        s.add_subscription(new("sub_d1", "alice", Some(&["D1"]))).await.expect("add");
        // Both devices are looked up together; alice sees D1 only, so D2's reading owes nothing.
        let readings = [Ok(reading("D2", T, &[("a", 1.0)])), Ok(reading("D1", T, &[("a", 2.0)]))];
        s.import(Box::new(readings.into_iter()), Outbox::Deliver).await.expect("import");
        let now = jiff::Timestamp::now().as_millisecond() + 1000;
        let claimed = claim(s, now, 10).await;
        let want = [("sub_all", "D1"), ("sub_d1", "D1")].map(|(s, d)| (s.to_owned(), d.to_owned()));
        assert_eq!(owed_pairs(&claimed, "device_id"), want);
        for d in claimed {
            s.finish_delivery(d.id, &d.subscription_id, now, Attempt::Delivered).await.expect("finish");
        }
        // Now alice sees both: the devices, kept since, are asked together
        // again, and each gets its own list from the one answer.
        super::access::outside(
            &b,
            "INSERT INTO account_devices (account_id, device_pk)
             SELECT a.id, d.id FROM accounts a, devices d WHERE a.username = 'alice' AND d.device_id = 'D2';",
        )
        .await;
        let readings = [Ok(reading("D1", T + 60, &[("a", 3.0)])), Ok(reading("D2", T + 60, &[("a", 4.0)]))];
        s.import(Box::new(readings.into_iter()), Outbox::Deliver).await.expect("import");
        let owed = owed_pairs(&claim(s, now + 60_000, 10).await, "device_id");
        let want = [("sub_all", "D1"), ("sub_all", "D2"), ("sub_d1", "D1")].map(|(s, d)| (s.to_owned(), d.to_owned()));
        assert_eq!(owed, want, "{}", b.url);
    }
}

// A device kept between transactions has its subscriptions asked with
// its lookup (by the key it was kept with): each write still owes exactly
// what the subscriptions and grants are at that write, changed between
// writes by the store or by SQL from another connection, and when the
// kept key has become another device's.
#[tokio::test]
async fn a_kept_device_owes_what_its_subscriptions_are_at_each_write() {
    for b in backends().await {
        let s = &*b.store;
        let at = |ts: i64| jiff::Timestamp::from_second(ts).map(|t| t.to_string()).unwrap_or_default();
        let owed_by = async |ts: i64| {
            s.ingest(reading("D1", ts, &[("a", 1.0)])).await.expect("ingest");
            // Every row written is claimed (none dropped as unseen), then delivered.
            let written = s.outbox_backlog().await.expect("backlog");
            let now = jiff::Timestamp::now().as_millisecond() + 1000;
            let claimed = claim(s, now, 10).await;
            assert_eq!(written, claimed.len() as u64, "rows written at {ts} that no claim takes");
            for d in &claimed {
                s.finish_delivery(d.id, &d.subscription_id, now, Attempt::Delivered).await.expect("finish");
            }
            owed_pairs(&claimed, "timestamp")
        };
        let pairs = |subs: &[&str], ts: i64| subs.iter().map(|x| ((*x).to_owned(), at(ts))).collect::<Vec<_>>();

        s.add_subscription(new("sub_d1", "alice", Some(&["D1"]))).await.expect("add");
        assert_eq!(owed_by(T).await, pairs(&["sub_d1"], T));
        s.add_subscription(new("sub_all", "alice", None)).await.expect("add");
        assert_eq!(owed_by(T + 60).await, pairs(&["sub_all", "sub_d1"], T + 60), "one added since");
        s.set_subscription_enabled("sub_d1", false).await.expect("disable");
        assert_eq!(owed_by(T + 120).await, pairs(&["sub_all"], T + 120), "one disabled since");
        let outside = |sql| super::access::outside(&b, sql);
        outside("UPDATE subscriptions SET enabled = TRUE WHERE id = 'sub_d1'").await;
        assert_eq!(owed_by(T + 180).await, pairs(&["sub_all", "sub_d1"], T + 180), "enabled again by SQL");

        // D1 and D2 swap ids: the key D1 was kept with is now D2's, whose
        // subscriptions those were; the device now named D1 is one alice
        // does not see.
        outside(
            "UPDATE devices SET device_id = 'swap' WHERE device_id = 'D1';
             UPDATE devices SET device_id = 'D1' WHERE device_id = 'D2';
             UPDATE devices SET device_id = 'D2' WHERE device_id = 'swap';",
        )
        .await;
        assert_eq!(owed_by(T + 240).await, [], "the kept key's subscriptions are not the device's");
        outside(
            "INSERT INTO account_devices (account_id, device_pk)
             SELECT a.id, d.id FROM accounts a, devices d WHERE a.username = 'alice' AND d.device_id = 'D1';",
        )
        .await;
        assert_eq!(owed_by(T + 300).await, pairs(&["sub_all"], T + 300), "sub_d1 names the other device");
        // Each change below is made by SQL from another connection, between
        // writes that would otherwise use the device's kept subscriptions.
        outside("UPDATE accounts SET disabled = TRUE WHERE username = 'alice'").await;
        assert_eq!(owed_by(T + 310).await, [], "the account disabled");
        outside("UPDATE accounts SET disabled = FALSE WHERE username = 'alice'").await;
        assert_eq!(owed_by(T + 320).await, pairs(&["sub_all"], T + 320), "enabled again");
        outside("UPDATE subscriptions SET all_devices = FALSE WHERE id = 'sub_all'").await;
        assert_eq!(owed_by(T + 330).await, [], "it lists devices now, none yet");
        outside(
            "INSERT INTO subscription_devices (subscription_id, device_pk)
             SELECT 'sub_all', id FROM devices WHERE device_id = 'D1'",
        )
        .await;
        assert_eq!(owed_by(T + 340).await, pairs(&["sub_all"], T + 340), "the device listed");
        outside("UPDATE subscriptions SET events = 'alarm' WHERE id = 'sub_all'").await;
        assert_eq!(owed_by(T + 350).await, [], "it takes other events now");
        outside("UPDATE subscriptions SET events = 'sensor-data' WHERE id = 'sub_all'").await;
        outside("DELETE FROM account_devices").await;
        assert_eq!(owed_by(T + 360).await, [], "no account sees the device any more");
    }
}

#[tokio::test]
async fn a_batching_subscription_claims_its_due_rows_together_and_records_them_as_one() {
    for b in backends().await {
        let s = &*b.store;
        s.add_subscription(NewSubscription { batch: true, batch_max: 3, ..new("sub_batch", "alice", None) })
            .await
            .expect("add");
        s.add_subscription(new("sub_single", "alice", None)).await.expect("add");
        let five = (0..5).map(|i| Ok(reading("D1", T + i * 60, &[("a", i as f64)])));
        s.import(Box::new(five.collect::<Vec<_>>().into_iter()), Outbox::Deliver).await.expect("import");
        let now = jiff::Timestamp::now().as_millisecond() + 1000;

        // One row asked for; the batching subscription's first is topped up to 3.
        let mut first = claim(s, now, 1).await;
        if first[0].subscription_id == "sub_single" {
            first.extend(claim(s, now, 1).await);
        }
        let batch: Vec<_> = first.iter().filter(|d| d.subscription_id == "sub_batch").collect();
        assert_eq!(batch.len(), 3, "{first:?}");
        assert!(batch.iter().all(|d| d.batch_max == 3));
        assert!(first.iter().filter(|d| d.subscription_id == "sub_single").all(|d| d.batch_max == 1));

        let retry = Attempt::Retry { at: now + 5000, status: Some(503), error: "answered 503".into() };
        let done = batch
            .iter()
            .map(|d| Finished { id: d.id, subscription_id: d.subscription_id.clone(), attempt: retry.clone() })
            .collect();
        s.finish_deliveries(now, done).await.expect("finish");
        let owed = s.deliveries("sub_batch", false).await.expect("deliveries");
        let retried: Vec<_> = owed.iter().filter(|d| d.attempts == 1).collect();
        assert_eq!(retried.len(), 3, "every member got the outcome: {owed:?}");
        assert!(retried.iter().all(|d| d.next_attempt == now + 5000 && d.last_status == Some(503)));
        let subs = s.subscriptions().await.expect("list");
        assert!(subs.iter().find(|x| x.id == "sub_batch").is_some_and(|x| x.batch && x.batch_max == 3));
    }
}

#[tokio::test]
async fn failed_deliveries_are_pruned_by_age_and_nothing_else() {
    for b in backends().await {
        let s = &*b.store;
        s.add_subscription(new("sub_p", "alice", None)).await.expect("add");
        let three = (0..3).map(|i| Ok(reading("D1", T + i * 60, &[("a", 1.0)])));
        s.import(Box::new(three.collect::<Vec<_>>().into_iter()), Outbox::Deliver).await.expect("import");
        let now = jiff::Timestamp::now().as_millisecond() + 1000;
        let claimed = claim(s, now, 10).await;
        let failed = Attempt::Failed { status: Some(410), error: "answered 410".into() };
        let done = claimed[..2]
            .iter()
            .map(|d| Finished { id: d.id, subscription_id: d.subscription_id.clone(), attempt: failed.clone() })
            .collect();
        s.finish_deliveries(now, done).await.expect("finish");
        let stored = claimed[0].created_at;
        assert_eq!(s.prune_failed_deliveries(stored).await.expect("prune"), 0, "none stored before");
        assert_eq!(s.prune_failed_deliveries(stored + 1).await.expect("prune"), 2, "the two failed ones");
        let left = s.deliveries("sub_p", false).await.expect("deliveries");
        assert_eq!((left.len(), left[0].state.as_str()), (1, "pending"), "pending ones stay");
    }
}

/// A sealer for the test: a counter byte, then the bytes (so that each
/// sealing differs, as the real one's nonce makes it).
#[derive(Default)]
pub(super) struct Counting(AtomicU8);

impl Sealer for Counting {
    fn seal_secret(&self, _: &str, secret: &[u8]) -> Result<Vec<u8>, String> {
        Ok([&[self.0.fetch_add(1, Ordering::SeqCst)], secret].concat())
    }
    fn open_secret(&self, _: &str, sealed: &[u8]) -> Result<Vec<u8>, String> {
        sealed.get(1..).map(<[u8]>::to_vec).ok_or_else(|| "too short".to_owned())
    }
    fn seal_headers(&self, id: &str, headers: &[(String, String)]) -> Result<Vec<u8>, String> {
        self.seal_secret(id, serde_json::to_string(headers).map_err(|e| e.to_string())?.as_bytes())
    }
    fn open_headers(&self, id: &str, sealed: &[u8]) -> Result<Vec<(String, String)>, String> {
        serde_json::from_slice(&self.open_secret(id, sealed)?).map_err(|e| e.to_string())
    }
}

/// Alice's subscription `name` to `url` as `apply` resolves it.
pub(super) fn provisioned(name: &str, url: &str, devices: Option<&[&str]>, secret: u8) -> ProvisionedSubscription {
    ProvisionedSubscription {
        username: "alice".into(),
        at: "accounts[0].subscriptions[0]".into(),
        name: name.into(),
        url: url.into(),
        devices: devices.map(|d| d.iter().map(|s| (*s).to_owned()).collect()),
        events: vec![SENSOR_DATA.into()],
        enabled: None,
        headers: vec![("X-API-KEY".into(), "k".into())],
        batch: false,
        batch_max: 100,
        allow_http: false,
        secret: vec![secret; 32],
    }
}

/// Applies a document naming alice's subscriptions, with `subs` resolved.
pub(super) async fn apply_subs(
    s: &dyn Store,
    sealer: &Arc<Counting>,
    subs: Vec<ProvisionedSubscription>,
) -> Result<ApplyReport, StoreError> {
    let listed: Vec<_> =
        subs.iter().map(|p| serde_json::json!({"name": p.name, "url": p.url, "secret": {"env": "UNUSED"}})).collect();
    let mut doc: Provision =
        parse_json(&serde_json::json!({"accounts": [{"username": "alice", "subscriptions": listed}]}).to_string())?;
    let readings = doc.check()?;
    let hooks = ProvisionedHooks { subscriptions: subs, sealer: sealer.clone() };
    s.apply_with_hooks(doc, readings, Some(hooks)).await
}

#[tokio::test]
async fn provisioned_subscriptions_are_found_by_name_and_reapplied_without_change() {
    for b in backends().await {
        let s = &*b.store;
        let sealer = Arc::new(Counting::default());
        let one = provisioned("partner", "https://p.example/hook", Some(&["D1"]), 1);
        let report = apply_subs(s, &sealer, vec![one.clone()]).await.expect("apply");
        assert_eq!((report.subscriptions.created, report.subscriptions.updated), (1, 0));
        let first = s.subscriptions().await.expect("list");
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].name.as_deref(), Some("partner"));
        assert_eq!((first[0].devices.clone(), first[0].enabled), (Some(vec!["D1".to_owned()]), true));
        assert_eq!(sealer.open_secret(&first[0].id, &first[0].sealed_secret), Ok(vec![1; 32]));

        let again = apply_subs(s, &sealer, vec![one.clone()]).await.expect("re-apply");
        assert!(again.is_noop(), "{again:?}");
        assert_eq!(s.subscriptions().await.expect("list"), first, "the same row, the same sealed secret");

        // Turned off by command (or by a failing endpoint): an omitted `enabled` leaves it off.
        s.set_subscription_enabled(&first[0].id, false).await.expect("disable");
        assert!(apply_subs(s, &sealer, vec![one.clone()]).await.expect("re-apply").is_noop());
        // A new URL, all devices and a new secret update it in place.
        let moved = provisioned("partner", "https://p.example/v2", None, 2);
        let report = apply_subs(s, &sealer, vec![moved]).await.expect("apply");
        assert_eq!((report.subscriptions.created, report.subscriptions.updated), (0, 1));
        let now = s.subscriptions().await.expect("list");
        assert_eq!(
            (now.len(), now[0].id.as_str(), now[0].url.as_str()),
            (1, first[0].id.as_str(), "https://p.example/v2")
        );
        assert_eq!((now[0].devices.clone(), now[0].enabled), (None, false));
        assert_eq!(sealer.open_secret(&now[0].id, &now[0].sealed_secret), Ok(vec![2; 32]));

        // A device the account does not see refuses the whole document.
        let before = s.subscriptions().await.expect("list");
        let unseen = provisioned("other", "https://o.example/", Some(&["D1", "D2"]), 3);
        let e = apply_subs(s, &sealer, vec![unseen]).await.expect_err("D2 is not alice's");
        assert!(e.to_string().contains("accounts[0].subscriptions[0].devices[1]"), "{e}");
        assert_eq!(s.subscriptions().await.expect("list"), before, "nothing was written");

        // Without resolved secrets a document with subscriptions is refused.
        let mut doc: Provision = parse_json(
            r#"{"accounts":[{"username":"alice","subscriptions":[{"name":"x","url":"https://x.example/","secret":{"env":"X"}}]}]}"#,
        )
        .expect("parse");
        let readings = doc.check().expect("check");
        let e = s.apply(doc, readings).await.expect_err("unresolved");
        assert!(e.to_string().contains("accounts[0].subscriptions"), "{e}");
    }
}

/// 2026-05-05T07:00:00Z.
const T: i64 = 1_777_964_400;
