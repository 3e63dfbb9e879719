//! Alarm states written at checkpoints on every backend: what an instance
//! evaluated live and kept in memory is what another instance (or the same
//! database after a restart) loads from the stored row and the readings
//! replayed after it, and removing readings keeps the states they left.

use super::{apply, backends, d1_with, reading};
use sensorhub_core::alarm::TransitionKind;
use sensorhub_core::time::TimeRange;
use sensorhub_store::{Scope, Store};

/// A rate rule and a level rule on sensor `a`, and a level rule on sensor `b`.
const RULES: &str = r#"[{"name": "rising", "sensor": "a", "rise": 20, "within": "30m"},
  {"name": "siaga", "sensor": "a", "direction": "above", "deadband": 5, "for": "10m",
   "levels": [{"name": "Siaga 4", "at": 60}, {"name": "Siaga 3", "at": 90}]},
  {"name": "b-high", "sensor": "b", "direction": "above", "deadband": 0, "for": "0s",
   "levels": [{"name": "high", "at": 1000}]}]"#;

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

async fn states(store: &dyn Store) -> Vec<sensorhub_store::alarm::Alarm> {
    store.alarms(Scope::All, "D1").await.expect("alarms").expect("visible")
}

async fn transitions(store: &dyn Store) -> Vec<(String, TransitionKind)> {
    let range = TimeRange { start: 0, end: now() + 3600 };
    let events = store.alarm_events(Scope::All, "D1", range).await.expect("events").expect("visible");
    events.into_iter().map(|e| (e.rule, e.transition)).collect()
}

/// Forty readings a minute apart, one a transaction, that raise nothing:
/// `a` wanders between 10 and 16 (a rate window's minimum of 10 every
/// seven minutes), `b` comes every third reading.
async fn quiet_readings(store: &dyn Store, start: i64) {
    for i in 0..40i64 {
        let a = 10.0 + (i % 7) as f64;
        let values: Vec<(&str, f64)> = if i % 3 == 0 { vec![("a", a), ("b", i as f64)] } else { vec![("a", a)] };
        store.ingest(reading("D1", start + i * 60, &values)).await.expect("ingest");
    }
}

#[tokio::test]
async fn another_instance_loads_the_states_this_one_evaluated() {
    for b in backends().await {
        let s = &*b.store;
        apply(s, &d1_with(RULES)).await.expect("apply");
        let start = now() - 3000;
        quiet_readings(s, start).await;
        let live = states(s).await;
        assert_eq!(live[0].state.timestamp, Some(start + 39 * 60), "the newest reading was evaluated");
        assert_eq!(live[2].state.value, Some(39.0), "b's newest value");
        // A second instance (as after a restart) loads them from the row
        // and the readings stored after it.
        let other = sensorhub_store::open(&b.url).await.expect("a second instance");
        assert_eq!(states(&*other).await, live, "the states as evaluated live, memory included");
        // The rate rule's window holds the 10 of seven minutes ago: a
        // reading of 31 is a rise of 21 within 30 minutes.
        other.ingest(reading("D1", start + 40 * 60, &[("a", 31.0)])).await.expect("ingest");
        assert_eq!(transitions(&*other).await, [("rising".to_owned(), TransitionKind::Raised)]);
        // The first instance learns of it at its next look.
        assert_eq!(states(s).await, states(&*other).await);
        s.ingest(reading("D1", start + 41 * 60, &[("a", 9.0)])).await.expect("ingest");
        assert_eq!(
            transitions(s).await,
            [("rising".to_owned(), TransitionKind::Raised), ("rising".to_owned(), TransitionKind::Cleared)],
            "the first instance cleared the episode the second raised"
        );
    }
}

#[tokio::test]
async fn instances_taking_turns_move_the_states_as_one_would() {
    for b in backends().await {
        let s = &*b.store;
        apply(s, &d1_with(RULES)).await.expect("apply");
        let other = sensorhub_store::open(&b.url).await.expect("a second instance");
        let start = now() - 3000;
        // One reading each in turn; the level needs ten minutes at 60 or
        // more before it raises (readings 30 to 40 are at 62).
        for i in 0..45i64 {
            let store: &dyn Store = if i % 2 == 0 { s } else { &*other };
            let a = if i >= 30 { 62.0 } else { 40.0 + (i % 5) as f64 };
            store.ingest(reading("D1", start + i * 60, &[("a", a)])).await.expect("ingest");
        }
        let moved = transitions(s).await;
        assert_eq!(
            moved,
            [("rising".to_owned(), TransitionKind::Raised), ("siaga".to_owned(), TransitionKind::Raised)]
        );
        let events = s.alarm_events(Scope::All, "D1", TimeRange { start: 0, end: now() + 60 }).await;
        let events = events.expect("events").expect("visible");
        assert_eq!(events[1].timestamp, Some(start + 40 * 60), "raised after ten minutes at Siaga 4");
        assert_eq!(states(s).await, states(&*other).await);
    }
}

#[tokio::test]
async fn removing_readings_keeps_the_states_they_left() {
    for b in backends().await {
        let s = &*b.store;
        apply(s, &d1_with(RULES)).await.expect("apply");
        let start = now() - 3000;
        quiet_readings(s, start).await;
        let live = states(s).await;
        let range = TimeRange { start: start + 30 * 60, end: start + 39 * 60 };
        s.delete_readings("D1", range).await.expect("delete");
        assert_eq!(states(s).await, live, "the states the readings left");
        let other = sensorhub_store::open(&b.url).await.expect("a second instance");
        assert_eq!(states(&*other).await, live, "and so for an instance that loads them");
    }
}

/// A silence rule of ten seconds (and no other rule).
const SILENCE: &str = r#"[{"name": "silent", "no_data_for": "10s"}]"#;

/// The instance that watches the clock need not be the one that stores
/// the readings: it counts silence from the newest data stored, not from
/// the last row written.
#[tokio::test]
async fn silence_is_counted_from_the_newest_data_whoever_stored_it() {
    for b in backends().await {
        let s = &*b.store;
        apply(s, &d1_with(SILENCE)).await.expect("apply");
        s.ingest(reading("D1", now() - 5, &[("a", 1.0)])).await.expect("ingest");
        let first = now();
        tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
        s.ingest(reading("D1", now() - 5, &[("a", 2.0)])).await.expect("ingest");
        let last = now();
        assert!(last >= first + 2, "two seconds apart by the server's clock");
        let watcher = sensorhub_store::open(&b.url).await.expect("a second instance");
        let due = watcher.silence_due(0).await.expect("due");
        watcher.check_silence(due.clone(), first + 10, 0).await.expect("check");
        assert!(transitions(&*watcher).await.is_empty(), "ten seconds after the first reading is not silence");
        watcher.check_silence(due, last + 10, 0).await.expect("check");
        assert_eq!(transitions(&*watcher).await, [("silent".to_owned(), TransitionKind::Raised)]);
    }
}

/// A rate rule on sensor `a` alone.
const RATE_ONLY: &str = r#"[{"name": "rising", "sensor": "a", "rise": 20, "within": "30m"}]"#;

/// Readings of a sensor no rule watches move nothing, are not replayed,
/// and leave the watched sensor's window as it was.
#[tokio::test]
async fn readings_no_rule_hears_leave_the_states_alone() {
    for b in backends().await {
        let s = &*b.store;
        apply(s, &d1_with(RATE_ONLY)).await.expect("apply");
        let start = now() - 3000;
        s.ingest(reading("D1", start, &[("a", 10.0)])).await.expect("ingest");
        s.ingest(reading("D1", start + 60, &[("a", 12.0)])).await.expect("ingest");
        for i in 2..30i64 {
            s.ingest(reading("D1", start + i * 60, &[("b", i as f64)])).await.expect("ingest");
        }
        let live = states(s).await;
        assert_eq!((live[0].state.value, live[0].state.timestamp), (Some(12.0), Some(start + 60)));
        let other = sensorhub_store::open(&b.url).await.expect("a second instance");
        assert_eq!(states(&*other).await, live);
        // 10 is still in the window 29 minutes on: 31 is a rise of 21.
        other.ingest(reading("D1", start + 29 * 60 + 30, &[("a", 31.0)])).await.expect("ingest");
        assert_eq!(transitions(&*other).await, [("rising".to_owned(), TransitionKind::Raised)]);
    }
}

#[tokio::test]
async fn a_rule_hears_its_sensor_after_the_device_is_provisioned_again() {
    for b in backends().await {
        let s = &*b.store;
        let rule = r#"[{"name": "b-high", "sensor": "b", "direction": "above", "deadband": 0, "for": "0s",
            "levels": [{"name": "high", "at": 60}]}]"#;
        apply(s, &d1_with(rule)).await.expect("apply");
        let start = now() - 600;
        s.ingest(reading("D1", start, &[("a", 1.0), ("b", 1.0)])).await.expect("ingest");
        // The same rule, the sensors listed the other way round, and a
        // new one: the device is read again, the rules are not.
        let sensor = |id: &str| format!(r#"{{"sensor_id": "{id}", "name": "{id}", "type": "T", "unit": "cm"}}"#);
        let listed = format!(r#""sensors": [{}, {}]"#, sensor("a"), sensor("b"));
        let original = d1_with(rule).replace(
            r#""sensors": [{"sensor_id": "a", "name": "A", "type": "T", "unit": "cm"},
                 {"sensor_id": "b", "name": "B", "type": "T", "unit": "."}]"#,
            &listed,
        );
        assert_ne!(original, d1_with(rule), "the sensors were found in the document");
        apply(s, &original).await.expect("apply again");
        let turned = format!(r#""sensors": [{}, {}, {}]"#, sensor("c"), sensor("b"), sensor("a"));
        apply(s, &original.replace(&listed, &turned)).await.expect("apply turned round");
        s.ingest(reading("D1", start + 60, &[("a", 100.0), ("b", 1.0), ("c", 100.0)])).await.expect("ingest");
        assert_eq!(transitions(s).await, [], "a's and c's values are not b's");
        s.ingest(reading("D1", start + 120, &[("a", 1.0), ("b", 100.0), ("c", 1.0)])).await.expect("ingest");
        assert_eq!(transitions(s).await, [("b-high".to_owned(), TransitionKind::Raised)]);
    }
}
