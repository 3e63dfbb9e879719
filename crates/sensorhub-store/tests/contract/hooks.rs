//! Webhook subscriptions: stored, listed, changed and removed alike on
//! every backend; an account subscribes only to devices it sees.

use super::backends;
use sensorhub_store::StoreError;
use sensorhub_store::hooks::{NewSubscription, SENSOR_DATA};

fn new(id: &str, username: &str, devices: Option<&[&str]>) -> NewSubscription {
    NewSubscription {
        id: id.into(),
        username: username.into(),
        url: "https://partner.example/hook".into(),
        devices: devices.map(|d| d.iter().map(|s| (*s).to_owned()).collect()),
        events: vec![SENSOR_DATA.into()],
        sealed_secret: vec![1, 2, 3, 0, 255],
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
