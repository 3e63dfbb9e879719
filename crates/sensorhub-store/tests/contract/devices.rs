//! Devices and sensors as the reading writer sees them on every backend: a
//! store keeps them between its writes, and a change made by anyone else
//! holds at its next reading.

use super::{BASE, apply, backends, import, reading};
use sensorhub_core::model::{ReadingInput, ValueInput};
use sensorhub_store::StoreError;

/// BASE with D1's sensor `a` in millimetres, a sensor `c` added to D1, and a device D3.
const CHANGED: &str = r#"{
  "accounts": [{"username": "alice", "password": "pw", "devices": ["D1"]}],
  "devices": [
    {"device_id": "D1", "name": "one", "type": "AWS", "lat": 1, "long": 2, "interval_seconds": 60,
     "sensors": [{"sensor_id": "a", "name": "A", "type": "T", "unit": "mm"},
                 {"sensor_id": "b", "name": "B", "type": "T", "unit": "."},
                 {"sensor_id": "c", "name": "C", "type": "T", "unit": "."}]},
    {"device_id": "D3", "name": "three", "type": "AWLR", "lat": 1, "long": 2, "interval_seconds": 60,
     "sensors": [{"sensor_id": "a", "name": "A", "type": "T", "unit": "cm"}]}
  ]
}"#;

/// A reading of D1's sensor `a` that names its unit.
fn with_unit(ts: i64, unit: &str) -> ReadingInput {
    let mut r = reading("D1", ts, &[("a", 1.0)]);
    r.values = vec![ValueInput { sensor_id: "a".into(), value: 1.0, unit: Some(unit.into()) }];
    r
}

fn refused(result: Result<(), StoreError>) -> bool {
    matches!(result, Err(StoreError::Invalid(_)))
}

/// Devices and sensors added or changed through a second instance (another
/// process) are the ones the first checks its next readings against,
/// by `ingest` and by `import`, never the ones it had kept.
#[tokio::test]
async fn devices_changed_by_another_instance_hold_at_the_next_reading() {
    for b in backends().await {
        let s = &*b.store;
        apply(s, BASE).await.expect("apply");
        // The first instance looks D1 up (and keeps it), and finds no D3.
        s.ingest(with_unit(100, "%")).await.expect("a is in per cent");
        assert!(refused(s.ingest(reading("D1", 110, &[("c", 1.0)])).await), "D1 has no sensor c yet");
        assert!(refused(s.ingest(reading("D3", 120, &[("a", 1.0)])).await), "there is no D3 yet");

        let other = sensorhub_store::open(&b.url).await.expect("a second instance");
        apply(&*other, CHANGED).await.expect("apply elsewhere");

        s.ingest(reading("D1", 130, &[("c", 2.0)])).await.expect("D1's new sensor c");
        s.ingest(reading("D3", 140, &[("a", 3.0)])).await.expect("the new device D3");
        assert!(refused(s.ingest(with_unit(150, "%")).await), "a is in millimetres now");
        s.ingest(with_unit(160, "mm")).await.expect("a in millimetres");
        import(s, vec![Ok(reading("D1", 170, &[("c", 4.0)])), Ok(reading("D3", 180, &[("a", 5.0)]))])
            .await
            .expect("an import sees them too");
    }
}

/// A reading written into a station's live hour by a second instance
/// (another process) is in the hour the first one appends to next: what a
/// store may keep of an hour between its writes (as it keeps devices) must
/// give way to what is stored.
#[tokio::test]
async fn an_hour_written_by_another_instance_is_appended_to_as_stored() {
    for b in backends().await {
        let s = &*b.store;
        apply(s, BASE).await.expect("apply");
        let now = jiff::Timestamp::now().as_second();
        // Three seconds in one hour, all in the past.
        let start = (now - 3600).div_euclid(3600) * 3600;
        s.ingest(reading("D1", start + 1, &[("a", 1.0)])).await.expect("first");
        s.ingest(reading("D1", start + 2, &[("a", 2.0)])).await.expect("second, appended");
        let other = sensorhub_store::open(&b.url).await.expect("a second instance");
        other.ingest(reading("D1", start + 3, &[("a", 3.0)])).await.expect("third, elsewhere");
        s.ingest(reading("D1", start + 4, &[("a", 4.0)])).await.expect("fourth");
        let all = sensorhub_core::time::TimeRange { start, end: start + 3599 };
        let w = s.read_window(sensorhub_store::Scope::All, "D1", all).await.expect("read").expect("visible");
        assert_eq!(w.first.timestamps, [start + 1, start + 2, start + 3, start + 4], "every reading, in order");
    }
}

/// A device moved to another owner by `apply` leaves the view of an
/// account the same document lists without it in that run (not the next:
/// a second run changes nothing), and an account may scope a key to a
/// device the document makes it the owner of.
#[tokio::test]
async fn an_owner_moved_by_apply_leaves_the_old_owners_view_in_one_run() {
    for b in backends().await {
        let s = &*b.store;
        let d2 = |owner: &str| {
            format!(
                r#""devices":[{{"device_id":"D2","name":"two","type":"AWLR","lat":1,"long":2,"interval_seconds":60,"owner":"{owner}"}}]"#
            )
        };
        apply(s, &format!(r#"{{"accounts":[{{"username":"bob","password":"pw","devices":[]}}],{}}}"#, d2("bob")))
            .await
            .expect("bob owns D2");
        let sees = async |user: &str| {
            let id = s.account_auth(user).await.expect("auth").expect("known").account_id;
            let scope = sensorhub_store::Scope::Account { account_id: id, key: None };
            let list = s.list_devices(scope).await.expect("list");
            list.into_iter().map(|d| d.device_id).collect::<Vec<_>>()
        };
        assert_eq!(sees("bob").await, ["D2"], "an owner sees its device");

        let moved = format!(r#"{{"accounts":[{{"username":"bob","devices":[]}}],{}}}"#, d2("alice"));
        apply(s, &moved).await.expect("D2 moves to alice");
        assert!(sees("bob").await.is_empty(), "bob lists no device and owns none now");
        assert_eq!(sees("alice").await, ["D1", "D2"]);
        assert!(apply(s, &moved).await.expect("again").is_noop(), "a second run changes nothing");

        let keyed = format!(
            r#"{{"accounts":[{{"username":"carol","password":"pw","devices":[],
                 "api_keys":[{{"id":"k-carol","devices":["D2"]}}]}}],{}}}"#,
            d2("carol")
        );
        apply(s, &keyed).await.expect("a key of the device the document gives carol");
        assert_eq!(sees("carol").await, ["D2"]);
    }
}
