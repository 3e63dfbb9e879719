//! Webhook subscriptions: stored, listed, changed and removed alike on
//! every backend; an account subscribes only to devices it sees.

use super::{backends, reading};
use sensorhub_store::StoreError;
use sensorhub_store::hooks::{Attempt, NewSubscription, Outbox, Replay, SENSOR_DATA};

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
        allow_http: false,
    }
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
        let claimed = s.claim_deliveries(now, 30_000, 10).await.expect("claim");
        assert_eq!(claimed.len(), 2);
        let body: serde_json::Value = serde_json::from_str(&claimed[0].body).expect("JSON");
        assert_eq!(
            body,
            serde_json::json!({"event": "sensor-data", "device_id": "D1", "timestamp": "2026-05-05T07:00:00Z",
                "data": {"sensors": [{"id": "a", "value": 3.0, "unit": "%"}, {"id": "b", "value": 0.5, "unit": "."}]}})
        );
        assert_ne!(claimed[0].message_id, claimed[1].message_id);
        assert!(s.claim_deliveries(now, 30_000, 10).await.expect("claim").is_empty(), "claimed ones are leased");

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
        let again = s.claim_deliveries(now, 30_000, 10).await.expect("claim");
        assert_eq!((again.len(), again[0].message_id.as_str(), again[0].attempts), (1, second.message_id.as_str(), 0));
        assert!(again[0].failing_since.is_some(), "the subscription is failing since the 400");
        let retry = Attempt::Retry { at: now + 5000, status: Some(503), error: "503".into() };
        s.finish_delivery(again[0].id, &again[0].subscription_id, now, retry).await.expect("finish");
        assert!(s.claim_deliveries(now + 4999, 30_000, 10).await.expect("claim").is_empty(), "not yet due");
        assert_eq!(s.claim_deliveries(now + 5000, 30_000, 10).await.expect("claim").len(), 1, "due at its time");
        let missing = s.replay_deliveries(&second.subscription_id, Replay::One(-1), now).await;
        assert!(matches!(missing, Err(StoreError::NotFound(_))));
        s.remove_subscription(&second.subscription_id).await.expect("remove");
        assert_eq!(s.outbox_backlog().await.expect("backlog"), 0, "a removed subscription owes nothing");
    }
}

/// 2026-05-05T07:00:00Z.
const T: i64 = 1_777_964_400;
