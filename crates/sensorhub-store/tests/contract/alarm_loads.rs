//! Alarm states loaded elsewhere (another store on the same database, as
//! after a restart or on another instance) agree with what was recorded:
//! a backfill heard by level rules only is no episode, and states a store
//! kept from a transaction that was rolled back are read again.

use super::alarms::{katulampa, now, t, transitions};
use super::{apply, backends, d1_with, import, reading};
use sensorhub_core::alarm::TransitionKind;
use sensorhub_store::Scope;

/// A backfill heard by level rules only (no silence rule on the device)
/// writes the device's states all the same, so that a load elsewhere (a
/// restart, another instance) does not replay the history as live: no
/// phantom episode, and the next live reading raises as it should.
#[tokio::test]
async fn a_backfill_heard_by_level_rules_only_is_no_episode_after_a_load() {
    for b in backends().await {
        let s = &*b.store;
        let only_levels = d1_with(
            r#"[{"name": "siaga", "sensor": "a", "direction": "above", "deadband": 0, "for": "0s",
                 "levels": [{"name": "Siaga 3", "at": 90}, {"name": "Siaga 1", "at": 210}]}]"#,
        );
        apply(s, &only_levels).await.expect("apply");
        let yesterday = now() - 86_400;
        let history = (0..30).map(|i| Ok(reading("D1", yesterday + i * 60, &[("a", 250.0)]))).collect();
        import(s, history).await.expect("backfill");
        assert!(transitions(s).await.is_empty());
        let elsewhere = sensorhub_store::open(&b.url).await.expect("a second store");
        let alarms = elsewhere.alarms(Scope::All, "D1").await.expect("alarms").expect("visible");
        assert_eq!(alarms[0].level_name(), None, "history is no episode, loaded anywhere: {:?}", alarms[0].state);
        elsewhere.ingest(reading("D1", now() - 30, &[("a", 100.0)])).await.expect("live");
        assert_eq!(transitions(s).await, [t("siaga", TransitionKind::Raised, Some("Siaga 3"))]);
    }
}

/// States a store kept from a transaction that was then rolled back are
/// never taken for the stored ones, even after exactly one other state
/// write (a count of writes would be back at the kept number then). The
/// rollback is made by hand: the rows put back as they were before.
#[tokio::test]
async fn states_kept_from_a_rolled_back_transaction_are_read_again() {
    for b in backends().await {
        let s = &*b.store;
        apply(s, &katulampa(0.0)).await.expect("apply");
        let other = sensorhub_store::open(&b.url).await.expect("a second store");
        let start = now() - 600;
        super::access::outside(
            &b,
            "CREATE TABLE snap_states AS SELECT * FROM alarm_states;
             CREATE TABLE snap_marks AS SELECT * FROM alarm_generation",
        )
        .await;
        s.ingest(reading("D1", start, &[("a", 100.0)])).await.expect("raise");
        assert_eq!(transitions(s).await, [t("siaga", TransitionKind::Raised, Some("Siaga 3"))]);
        super::access::outside(
            &b,
            "DELETE FROM alarm_states; INSERT INTO alarm_states SELECT * FROM snap_states;
             DELETE FROM alarm_generation; INSERT INTO alarm_generation SELECT * FROM snap_marks;
             DELETE FROM alarm_events",
        )
        .await;
        // One state write by someone else: it replays the stored reading
        // (its states say nothing of it) and clears at a low one.
        other.ingest(reading("D1", start + 60, &[("a", 20.0)])).await.expect("low");
        let cleared = t("siaga", TransitionKind::Cleared, None);
        assert_eq!(
            transitions(s).await.into_iter().map(|(r, k, _)| (r, k)).collect::<Vec<_>>(),
            [(cleared.0, cleared.1)]
        );
        s.ingest(reading("D1", start + 120, &[("a", 100.0)])).await.expect("raise again");
        let last = transitions(s).await.pop();
        assert_eq!(last, Some(t("siaga", TransitionKind::Raised, Some("Siaga 3"))), "judged from the stored states");
    }
}
