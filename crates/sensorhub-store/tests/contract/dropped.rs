//! Deliveries keep to what their account may see while they wait: a claim
//! drops those of a disabled account, of a device taken from it or from
//! the subscription's own devices, or of an event kind taken from its
//! events (the reason stays, for `subscription deliveries`), a re-enabled
//! account is owed new readings only; each endpoint gets its share of a claim; each
//! subscription numbers its own message ids. On every backend.

use super::hooks::{Counting, apply_subs, provisioned};
use super::{apply, backends, reading};
use sensorhub_store::Store;
use sensorhub_store::delivery::{
    ALARMS, Attempt, ClaimRequest, ClaimedSubscription, DROPPED_DISABLED, DROPPED_UNASKED, DROPPED_UNCOVERED,
    DROPPED_UNSEEN, Finished, NewSubscription, Outbox, ProvisionedSubscription, SENSOR_DATA, is_alarm_delivery,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

const T: i64 = 1_777_964_400;

fn subscription(id: &str, url: &str, devices: Option<&[&str]>) -> NewSubscription {
    NewSubscription {
        id: id.into(),
        username: "alice".into(),
        url: url.into(),
        devices: devices.map(|d| d.iter().map(|s| (*s).to_owned()).collect()),
        events: vec![SENSOR_DATA.into()],
        sealed_secret: vec![1],
        sealed_headers: None,
        batch: false,
        batch_max: 100,
        allow_http: false,
    }
}

/// A time at which everything stored so far is due.
fn later() -> i64 {
    jiff::Timestamp::now().as_millisecond() + 60_000
}

async fn store_readings(s: &dyn Store, from: i64, n: i64) {
    let readings: Vec<_> = (0..n).map(|i| Ok(reading("D1", from + 60 * i, &[("a", i as f64)]))).collect();
    s.import(Box::new(readings.into_iter()), Outbox::Deliver).await.expect("import");
}

/// Subscription `sub`'s deliveries as (state, last error).
async fn states(s: &dyn Store, sub: &str) -> Vec<(String, Option<String>)> {
    let list = s.deliveries(sub, false).await.expect("deliveries");
    list.into_iter().map(|d| (d.state, d.last_error)).collect()
}

#[tokio::test]
async fn a_disabled_accounts_deliveries_are_dropped_and_it_resumes_with_new_readings_only() {
    for b in backends().await {
        let s = &*b.store;
        s.add_subscription(subscription("sub_a", "https://a.example/h", None)).await.expect("add");
        store_readings(s, T, 2).await;
        apply(s, r#"{"accounts":[{"username":"alice","disabled":true}]}"#).await.expect("disable");
        store_readings(s, T + 600, 3).await;
        assert_eq!(s.outbox_backlog().await.expect("backlog"), 2, "a disabled account is owed nothing new");

        let claimed = s.claim_deliveries(later(), 30_000, &ClaimRequest::up_to(10)).await.expect("claim");
        assert!(claimed.deliveries.is_empty(), "{:?}", claimed.deliveries);
        assert_eq!(claimed.dropped, 2);
        let dropped = ("dropped".to_owned(), Some(DROPPED_DISABLED.to_owned()));
        assert_eq!(states(s, "sub_a").await, [dropped.clone(), dropped]);
        assert_eq!(s.outbox_backlog().await.expect("backlog"), 0);

        apply(s, r#"{"accounts":[{"username":"alice","disabled":false}]}"#).await.expect("enable");
        store_readings(s, T + 1200, 1).await;
        let claimed = s.claim_deliveries(later(), 30_000, &ClaimRequest::up_to(10)).await.expect("claim");
        let bodies: Vec<_> = claimed.deliveries.iter().map(|d| d.body.contains("2026-05-05T07:20:00Z")).collect();
        assert_eq!(bodies, [true], "only the reading stored after re-enabling");
        assert_eq!(
            s.prune_failed_deliveries(later()).await.expect("prune"),
            2,
            "dropped ones are pruned with failed ones"
        );
    }
}

#[tokio::test]
async fn deliveries_of_a_device_taken_from_the_account_are_dropped() {
    for b in backends().await {
        let s = &*b.store;
        s.add_subscription(subscription("sub_all", "https://a.example/h", None)).await.expect("add");
        s.add_subscription(subscription("sub_d1", "https://b.example/h", Some(&["D1"]))).await.expect("add");
        store_readings(s, T, 1).await;
        assert_eq!(s.outbox_backlog().await.expect("backlog"), 2);
        apply(s, r#"{"accounts":[{"username":"alice","devices":["D2"]}]}"#).await.expect("take D1 away");
        store_readings(s, T + 60, 1).await;
        assert_eq!(s.outbox_backlog().await.expect("backlog"), 2, "a device the account no longer sees owes nothing");

        let claimed = s.claim_deliveries(later(), 30_000, &ClaimRequest::up_to(10)).await.expect("claim");
        assert!(claimed.deliveries.is_empty());
        assert_eq!(claimed.dropped, 2);
        for sub in ["sub_all", "sub_d1"] {
            assert_eq!(states(s, sub).await, [("dropped".to_owned(), Some(DROPPED_UNSEEN.to_owned()))], "{sub}");
        }
    }
}

#[tokio::test]
async fn deliveries_of_a_device_a_subscription_no_longer_lists_are_dropped() {
    for b in backends().await {
        let s = &*b.store;
        apply(s, r#"{"accounts":[{"username":"alice","devices":["D1","D2"]}]}"#).await.expect("grant D2");
        let sealer = Arc::new(Counting::default());
        let both = provisioned("partner", "https://p.example/hook", Some(&["D1", "D2"]), 1);
        apply_subs(s, &sealer, vec![both]).await.expect("subscribe to D1 and D2");
        let id = s.subscriptions().await.expect("list")[0].id.clone();
        let store = |device: &'static str, at: i64| {
            let r = Ok(reading(device, at, &[("a", 1.0)]));
            s.import(Box::new(std::iter::once(r)), Outbox::Deliver)
        };
        // One of D2's deliveries waits for a retry (an `outbox` row); one of
        // each device's is still in the log.
        store("D2", T).await.expect("import");
        let first = s.claim_deliveries(later(), 30_000, &ClaimRequest::up_to(10)).await.expect("claim");
        assert_eq!(first.deliveries.len(), 1);
        let retry = Attempt::Retry { at: 0, status: Some(503), error: "answered 503".into() };
        let done = vec![Finished { id: first.deliveries[0].id, subscription_id: id.clone(), attempt: retry }];
        s.finish_deliveries(later(), done).await.expect("finish");
        store("D2", T + 60).await.expect("import");
        store("D1", T + 60).await.expect("import");

        let narrowed = provisioned("partner", "https://p.example/hook", Some(&["D1"]), 1);
        apply_subs(s, &sealer, vec![narrowed]).await.expect("narrow to D1");
        let claimed = s.claim_deliveries(later() + 60_000, 30_000, &ClaimRequest::up_to(10)).await.expect("claim");
        let bodies: Vec<_> = claimed.deliveries.iter().map(|d| d.body.contains(r#""device_id":"D1""#)).collect();
        assert_eq!(bodies, [true], "only D1's goes: {:?}", claimed.deliveries);
        assert_eq!(claimed.dropped, 2, "D2's waiting retry and D2's in the log");
        let dropped: Vec<_> = states(s, &id).await.into_iter().filter(|(state, _)| state == "dropped").collect();
        assert_eq!(dropped, vec![("dropped".to_owned(), Some(DROPPED_UNCOVERED.to_owned())); 2]);
    }
}

#[tokio::test]
async fn deliveries_of_an_event_kind_a_subscription_no_longer_asks_for_are_dropped() {
    for b in backends().await {
        let s = &*b.store;
        apply(s, &super::alarms::katulampa(5.0)).await.expect("rules on D1");
        let sealer = Arc::new(Counting::default());
        let both = |name: &str, url: &str, events: &[&str]| {
            let mut p = provisioned(name, url, None, 1);
            p.events = events.iter().map(|e| (*e).to_owned()).collect();
            p
        };
        let subs = |readings: &[&str], alarms: &[&str]| {
            vec![both("readings", "https://r.example/hook", readings), both("alarms", "https://a.example/hook", alarms)]
        };
        apply_subs(s, &sealer, subs(&[SENSOR_DATA, ALARMS], &[SENSOR_DATA, ALARMS])).await.expect("subscribe");
        let now = super::alarms::now();
        let store = |at: i64, value: f64| {
            let r = Ok(reading("D1", at, &[("a", value)]));
            s.import(Box::new(std::iter::once(r)), Outbox::Deliver)
        };
        // Siaga 3 raised: a reading and an alarm owed to each; all four
        // wait for a retry (`outbox` rows). Then Siaga 2: four more in the
        // log.
        store(now - 600, 100.0).await.expect("import");
        let first = s.claim_deliveries(later(), 30_000, &ClaimRequest::up_to(10)).await.expect("claim");
        assert_eq!(first.deliveries.len(), 4);
        let as_claimed: BTreeMap<_, _> =
            first.deliveries.iter().map(|d| (d.subscription_id.clone(), d.as_claimed())).collect();
        let retry = || Attempt::Retry { at: 0, status: Some(503), error: "answered 503".into() };
        let done = first.deliveries.iter().map(|d| Finished {
            id: d.id,
            subscription_id: d.subscription_id.clone(),
            attempt: retry(),
        });
        s.finish_deliveries(later(), done.collect()).await.expect("finish");
        store(now - 300, 170.0).await.expect("import");

        // One narrowed to readings, the other to alarms.
        apply_subs(s, &sealer, subs(&[SENSOR_DATA], &[ALARMS])).await.expect("narrow");
        let ids: BTreeMap<String, String> =
            s.subscriptions().await.expect("list").into_iter().map(|sub| (sub.url.clone(), sub.id)).collect();
        let (readings, alarms) = (&ids["https://r.example/hook"], &ids["https://a.example/hook"]);
        let d1 = Some(1);
        for (sub, alarm, may) in [(readings, false, true), (readings, true, false), (alarms, true, true)] {
            let asked = s.may_deliver(&as_claimed[sub], d1, alarm).await.expect("may");
            assert_eq!(asked, may, "{sub} alarm {alarm}");
        }
        let claimed = s.claim_deliveries(later() + 60_000, 30_000, &ClaimRequest::up_to(20)).await.expect("claim");
        let mut went: Vec<(bool, bool)> = claimed
            .deliveries
            .iter()
            .map(|d| (&d.subscription_id == readings, is_alarm_delivery(&d.message_id)))
            .collect();
        went.sort_unstable();
        assert_eq!(went, [(false, true), (false, true), (true, false), (true, false)], "{:?}", claimed.deliveries);
        assert_eq!(claimed.dropped, 4, "each one's two of the other kind, a retry and one in the log");
        for sub in [readings, alarms] {
            let dropped: Vec<_> = states(s, sub).await.into_iter().filter(|(state, _)| state == "dropped").collect();
            assert_eq!(dropped, vec![("dropped".to_owned(), Some(DROPPED_UNASKED.to_owned())); 2], "{sub}");
        }
    }
}

/// A claimed delivery that may no longer go is released unsent: due
/// again, its attempts and the subscription's failing state as they were,
/// from SQLite's log (a first attempt) and from `outbox` (a retry) alike;
/// `may_deliver` says what the next claim will decide.
#[tokio::test]
async fn a_released_delivery_is_due_again_with_its_attempts_as_they_were() {
    for b in backends().await {
        let s = &*b.store;
        s.add_subscription(subscription("sub_a", "https://a.example/h", Some(&["D1"]))).await.expect("add");
        store_readings(s, T, 2).await;
        let now = later();
        let first = s.claim_deliveries(now, 30_000, &ClaimRequest::up_to(10)).await.expect("claim").deliveries;
        assert_eq!(first.len(), 2);
        let d1 = first[0].device_pk;
        assert!(d1.is_some(), "a claimed delivery names its device");
        let sub_a = first[0].as_claimed();
        let sub_gone = ClaimedSubscription { id: "sub_gone".into(), ..sub_a.clone() };
        assert!(s.may_deliver(&sub_a, d1, false).await.expect("may"));
        assert!(!s.may_deliver(&sub_a, d1, true).await.expect("may"), "an alarm's, to a subscription to readings");
        assert!(!s.may_deliver(&sub_gone, d1, false).await.expect("may"), "no such subscription");
        assert!(!s.may_deliver(&sub_a, None, false).await.expect("may"), "a removed device");
        let retry = Attempt::Retry { at: now, status: Some(503), error: "answered 503".into() };
        let finish = |d: &sensorhub_store::delivery::Delivery, attempt: Attempt| Finished {
            id: d.id,
            subscription_id: "sub_a".into(),
            attempt,
        };
        s.finish_deliveries(now, vec![finish(&first[1], retry)]).await.expect("a retry: failing from now");
        s.finish_deliveries(now, vec![finish(&first[0], Attempt::Released { at: now + 5 })]).await.expect("release");
        let again = s.claim_deliveries(now + 10, 30_000, &ClaimRequest::up_to(10)).await.expect("claim").deliveries;
        let mut attempts: Vec<_> = again.iter().map(|d| d.attempts).collect();
        attempts.sort_unstable();
        assert_eq!(attempts, [0, 1], "the released one due again with no attempt counted");
        let retried = again.iter().find(|d| d.attempts == 1).expect("the retried one");
        s.finish_deliveries(now + 10, vec![finish(retried, Attempt::Released { at: now + 20 })])
            .await
            .expect("release");
        let listed = s.deliveries("sub_a", false).await.expect("list");
        let retried = listed.iter().find(|d| d.attempts == 1).expect("listed");
        assert_eq!((retried.next_attempt, retried.last_status), (now + 20, Some(503)), "its last answer kept");
        let third = s.claim_deliveries(now + 30, 30_000, &ClaimRequest::up_to(10)).await.expect("claim").deliveries;
        let failing: Vec<_> = third.iter().map(|d| (d.attempts, d.failing_since)).collect();
        assert!(
            failing.contains(&(1, Some(now))),
            "a release leaves the failing state as the retry set it: {failing:?}"
        );

        apply(s, r#"{"accounts":[{"username":"alice","disabled":true}]}"#).await.expect("disable");
        assert!(!s.may_deliver(&sub_a, d1, false).await.expect("may"), "a disabled account");
    }
}

/// A delivery claimed before its subscription was given a new URL, secret
/// or headers may not go as it was claimed (it would carry the old
/// headers to the old address): `may_deliver` compares what the claim
/// read with what the subscription says now, and once released the
/// delivery is claimed again under the new.
#[tokio::test]
async fn a_delivery_claimed_before_its_endpoint_changed_may_not_go_as_claimed() {
    for b in backends().await {
        let s = &*b.store;
        let sealer = Arc::new(Counting::default());
        let mut partner = provisioned("partner", "https://p.example/hook", None, 1);
        apply_subs(s, &sealer, vec![partner.clone()]).await.expect("subscribe");
        store_readings(s, T, 1).await;
        let mut at = later();
        let claim_one = async |at: i64| {
            let claimed = s.claim_deliveries(at, 30_000, &ClaimRequest::up_to(10)).await.expect("claim").deliveries;
            let [d] = <[_; 1]>::try_from(claimed).expect("one delivery");
            d
        };
        let mut d = claim_one(at).await;
        assert!(s.may_deliver(&d.as_claimed(), d.device_pk, false).await.expect("may"), "nothing changed");
        let changes: [(&str, fn(&mut _)); 4] = [
            ("a new URL", |p: &mut ProvisionedSubscription| p.url = "https://q.example/hook".into()),
            ("a new secret", |p| p.secret = vec![2; 32]),
            ("new headers", |p| p.headers = vec![("X-API-KEY".into(), "k2".into())]),
            ("http allowed", |p| p.allow_http = true),
        ];
        for (what, change) in changes {
            change(&mut partner);
            apply_subs(s, &sealer, vec![partner.clone()]).await.expect("change");
            assert!(!s.may_deliver(&d.as_claimed(), d.device_pk, false).await.expect("may"), "{what}");
            let released =
                Finished { id: d.id, subscription_id: d.subscription_id.clone(), attempt: Attempt::Released { at } };
            s.finish_deliveries(at, vec![released]).await.expect("release");
            at += 1_000;
            d = claim_one(at).await;
            assert_eq!((d.url.as_str(), d.allow_http), (partner.url.as_str(), partner.allow_http), "{what}");
            assert!(
                s.may_deliver(&d.as_claimed(), d.device_pk, false).await.expect("may"),
                "claimed again after {what}"
            );
        }
    }
}

#[tokio::test]
async fn a_claim_gives_an_endpoint_no_more_than_its_share() {
    for b in backends().await {
        let s = &*b.store;
        s.add_subscription(subscription("sub_hole", "https://hole.example:8443/h", None)).await.expect("add");
        s.add_subscription(subscription("sub_good", "https://good.example/in?x=1", None)).await.expect("add");
        store_readings(s, T, 10).await;

        let req = ClaimRequest { limit: 8, slots: 8, held: [("https://hole.example:8443".to_owned(), 4)].into() };
        let claimed = s.claim_deliveries(later(), 30_000, &req).await.expect("claim");
        let subs: BTreeSet<_> = claimed.deliveries.iter().map(|d| d.subscription_id.as_str()).collect();
        assert_eq!(subs, BTreeSet::from(["sub_good"]), "the endpoint at its share gets nothing");
        assert_eq!(claimed.deliveries.len(), 4, "the other gets its share: half of 8 slots");
        let waiting = ["https://good.example", "https://hole.example:8443"];
        assert_eq!(claimed.waiting, waiting, "both have rows left for want of room");
        assert!(claimed.more);

        let req = ClaimRequest { limit: 8, slots: 8, held: Default::default() };
        let claimed = s.claim_deliveries(later(), 30_000, &req).await.expect("claim");
        let mut per: BTreeMap<&str, usize> = BTreeMap::new();
        for d in &claimed.deliveries {
            *per.entry(d.subscription_id.as_str()).or_default() += 1;
        }
        assert_eq!(per, BTreeMap::from([("sub_good", 4), ("sub_hole", 4)]), "half of the slots each");
    }
}

#[tokio::test]
async fn a_claim_past_an_endpoint_at_its_share_and_a_disabled_subscription_takes_the_others_oldest_first() {
    for b in backends().await {
        let s = &*b.store;
        let add = |id: &'static str, url: &'static str| s.add_subscription(subscription(id, url, None));
        add("sub_hole", "https://hole.example:8443/h").await.expect("add");
        add("sub_off", "https://off.example/h").await.expect("add");
        // The hole's and the disabled subscription's deliveries come first
        // in the due order; the claim reads each other subscription's rows
        // apart and merges them.
        store_readings(s, T, 3).await;
        s.set_subscription_enabled("sub_off", false).await.expect("disable");
        add("sub_a", "https://a.example/h").await.expect("add");
        add("sub_b", "https://b.example/h").await.expect("add");
        store_readings(s, T + 600, 3).await;

        let req = ClaimRequest { limit: 8, slots: 16, held: [("https://hole.example:8443".to_owned(), 8)].into() };
        let claimed = s.claim_deliveries(later(), 30_000, &req).await.expect("claim");
        let order: Vec<_> = claimed
            .deliveries
            .iter()
            .map(|d| {
                let body: serde_json::Value = serde_json::from_str(&d.body).expect("JSON");
                (d.subscription_id.as_str(), body["timestamp"].as_str().unwrap_or_default().to_owned())
            })
            .collect();
        let at = |i: i64| jiff::Timestamp::from_second(T + 600 + 60 * i).expect("time").to_string();
        let want: Vec<_> = (0..3).flat_map(|i| [("sub_a", at(i)), ("sub_b", at(i))]).collect();
        assert_eq!(order, want, "the two subscriptions with room, merged oldest first");
        assert_eq!(claimed.dropped, 0, "nothing is dropped for being left out");
        assert_eq!(claimed.waiting, ["https://hole.example:8443"]);

        s.set_subscription_enabled("sub_off", true).await.expect("enable");
        let claimed = s.claim_deliveries(later(), 30_000, &ClaimRequest::up_to(8)).await.expect("claim");
        let subs: Vec<_> = claimed.deliveries.iter().map(|d| d.subscription_id.as_str()).collect();
        let want = ["sub_hole", "sub_off", "sub_hole", "sub_off", "sub_hole", "sub_off", "sub_hole", "sub_hole"];
        assert_eq!(subs, want, "re-enabled, its deliveries go in their turn");
    }
}

#[tokio::test]
async fn every_delivery_of_a_reading_has_its_own_random_message_id() {
    for b in backends().await {
        let s = &*b.store;
        s.add_subscription(subscription("sub_1", "https://a.example/h", None)).await.expect("add");
        s.add_subscription(subscription("sub_2", "https://b.example/h", None)).await.expect("add");
        store_readings(s, T, 3).await;
        store_readings(s, T + 3, 3).await;
        let mut all = BTreeSet::new();
        for sub in ["sub_1", "sub_2"] {
            let ids: Vec<_> = s.deliveries(sub, false).await.expect("list").into_iter().map(|d| d.message_id).collect();
            assert_eq!(ids.len(), 6, "{sub}: {ids:?}");
            for id in ids {
                let hex = id.strip_prefix("msg_").unwrap_or_default();
                let random = hex.len() == 32 && hex.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c));
                assert!(random, "msg_ and 128 random bits in lowercase hex, no counter: {id}");
                all.insert(id);
            }
        }
        assert_eq!(all.len(), 12, "no two deliveries share an id, within a write or across them");
    }
}

#[tokio::test]
async fn claims_past_an_endpoint_at_its_share_take_many_subscriptions_rows_in_the_due_order() {
    for b in backends().await {
        let s = &*b.store;
        let add = |id: String, url: String| s.add_subscription(subscription(&id, &url, None));
        add("sub_hole".into(), "https://hole.example:8443/h".into()).await.expect("add");
        add("sub_a".into(), "https://a.example/h".into()).await.expect("add");
        // sub_a's first 30 deliveries are due before any of eleven others'
        // 5: a claim reads a page of each of the twelve (16 rows of the 192
        // it looks at), so sub_a's first page ends before the others' rows
        // begin, and its other rows are read before any of theirs is given.
        store_readings(s, T, 30).await;
        for i in 0..11 {
            add(format!("sub_{i:02}"), format!("https://e{i}.example/h")).await.expect("add");
        }
        store_readings(s, T + 3600, 5).await;

        let req = ClaimRequest { limit: 64, slots: 128, held: [("https://hole.example:8443".to_owned(), 64)].into() };
        let mut taken = Vec::new();
        for _ in 0..10 {
            let claimed = s.claim_deliveries(later(), 30_000, &req).await.expect("claim");
            if claimed.deliveries.is_empty() {
                assert!(!claimed.more || claimed.waiting == ["https://hole.example:8443"], "{claimed:?}");
                break;
            }
            for d in claimed.deliveries {
                let body: serde_json::Value = serde_json::from_str(&d.body).expect("JSON");
                let at = body["timestamp"].as_str().unwrap_or_default().to_owned();
                taken.push((d.subscription_id, at.parse::<jiff::Timestamp>().expect("time").as_second()));
            }
        }
        assert_eq!(taken.len(), 35 + 11 * 5, "every delivery once, none of the hole's");
        let a: Vec<i64> = taken[..30].iter().filter(|(sub, _)| sub == "sub_a").map(|(_, t)| *t).collect();
        assert_eq!(a, (0..30).map(|i| T + 60 * i).collect::<Vec<_>>(), "sub_a's first, oldest first");
        assert!(taken.windows(2).all(|w| w[0].1 <= w[1].1), "the due order across claims: {taken:?}");
        let others: BTreeSet<&str> = taken[30..].iter().map(|(sub, _)| sub.as_str()).collect();
        assert_eq!(others.len(), 12, "sub_a's last and the eleven others: {others:?}");
    }
}
