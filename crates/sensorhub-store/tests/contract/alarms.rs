//! Alarms on every backend: rules from a provisioning document, the
//! transitions each reading causes written in its own transaction (with
//! their outbox rows), hysteresis, late data and backfills, concurrent
//! writers, acknowledgement, rule changes and the silence watch.

use super::{apply, backends, d1_with, import, reading};
use sensorhub_core::alarm::{RuleSpec, TransitionKind};
use sensorhub_core::time::TimeRange;
use sensorhub_store::{Scope, Store, StoreError};
use std::sync::Arc;

/// D1 (alice's) with Katulampa's bands on sensor `a` and a silence rule of 30 minutes.
pub(super) fn katulampa(deadband: f64) -> String {
    katulampa_silent(deadband, "30m")
}

/// D1 with Katulampa's bands and a silence rule of `silence`.
fn katulampa_silent(deadband: f64, silence: &str) -> String {
    d1_with(&format!(
        r#"[{{"name": "siaga", "sensor": "a", "direction": "above", "deadband": {deadband}, "for": "0s",
            "levels": [{{"name": "Siaga 4", "at": 60}}, {{"name": "Siaga 3", "at": 90}},
                       {{"name": "Siaga 2", "at": 160}}, {{"name": "Siaga 1", "at": 210}}]}},
          {{"name": "silent", "no_data_for": "{silence}"}}]"#
    ))
}

pub(super) fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// Every transition of D1 so far, as (rule, transition, level).
pub(super) async fn transitions(store: &dyn Store) -> Vec<(String, TransitionKind, Option<String>)> {
    let range = TimeRange { start: 0, end: now() + 3600 };
    let events = store.alarm_events(Scope::All, "D1", range).await.expect("events").expect("visible");
    events.into_iter().map(|e| (e.rule, e.transition, e.level)).collect()
}

pub(super) fn t(rule: &str, kind: TransitionKind, level: Option<&str>) -> (String, TransitionKind, Option<String>) {
    (rule.to_owned(), kind, level.map(str::to_owned))
}

#[tokio::test]
async fn a_flood_through_the_bands_is_one_episode_of_six_transitions() {
    use TransitionKind::*;
    for b in backends().await {
        let s = &*b.store;
        let report = apply(s, &katulampa(5.0)).await.expect("apply");
        assert_eq!(report.alarm_rules.updated, 1, "D1's rules were set");
        assert!(apply(s, &katulampa(5.0)).await.expect("again").is_noop(), "the same rules again change nothing");
        let start = now() - 1800;
        // In, up through every band, down one, out: one reading a minute, by ingest (one at a time).
        let levels = [10.0, 61.0, 95.0, 170.0, 215.0, 158.0, 40.0, 30.0];
        for (i, v) in levels.iter().enumerate() {
            s.ingest(reading("D1", start + i as i64 * 60, &[("a", *v)])).await.expect("ingest");
        }
        assert_eq!(
            transitions(s).await,
            [
                t("siaga", Raised, Some("Siaga 4")),
                t("siaga", LevelChanged, Some("Siaga 3")),
                t("siaga", LevelChanged, Some("Siaga 2")),
                t("siaga", LevelChanged, Some("Siaga 1")),
                t("siaga", LevelChanged, Some("Siaga 2")),
                t("siaga", Cleared, None),
            ]
        );
        let alarms = s.alarms(Scope::All, "D1").await.expect("alarms").expect("visible");
        assert_eq!(alarms.iter().map(|a| a.rule.name.as_str()).collect::<Vec<_>>(), ["siaga", "silent"], "rule order");
        assert!(!alarms[0].state.active && alarms[0].state.value == Some(30.0));
        assert!(s.active_alarms(Scope::All).await.expect("active").is_empty());

        // Inside the deadband around a level nothing moves: 60 is Siaga 4's edge, 55 its deadband's.
        for (i, v) in [62.0, 58.0, 61.0, 56.0, 59.5, 63.0].iter().enumerate() {
            s.ingest(reading("D1", start + 600 + i as i64 * 60, &[("a", *v)])).await.expect("ingest");
        }
        let after = transitions(s).await;
        assert_eq!(after.len(), 7, "one raise, then nothing while it stays within the deadband: {after:?}");
        assert_eq!(after[6], t("siaga", Raised, Some("Siaga 4")));
        let active = s.active_alarms(Scope::All).await.expect("active");
        assert_eq!((active.len(), active[0].level_name()), (1, Some("Siaga 4")));
    }
}

#[tokio::test]
async fn late_readings_and_backfills_are_stored_and_move_nothing() {
    for b in backends().await {
        let s = &*b.store;
        apply(s, &katulampa(0.0)).await.expect("apply");
        let recent = now() - 600;
        s.ingest(reading("D1", recent, &[("a", 20.0)])).await.expect("ingest");
        // Older than what the rule evaluated: stored, no raise.
        s.ingest(reading("D1", recent - 60, &[("a", 300.0)])).await.expect("late");
        // A backfill of yesterday's flood, newer than nothing the rule saw before it: no raise either.
        let yesterday = now() - 86_400;
        let history = (0..30).map(|i| Ok(reading("D1", yesterday + i * 60, &[("a", 250.0)]))).collect();
        import(s, history).await.expect("backfill");
        assert!(transitions(s).await.is_empty(), "{:?}", transitions(s).await);
        let stored = super::read_all(s, "D1", recent - 60, recent - 60).await;
        assert_eq!(stored.iter().map(|b| b.len()).sum::<usize>(), 1, "the late reading is stored");
        let alarms = s.alarms(Scope::All, "D1").await.expect("alarms").expect("visible");
        assert_eq!((alarms[0].state.value, alarms[0].state.timestamp), (Some(20.0), Some(recent)));
    }
}

#[tokio::test]
async fn sixty_four_writers_of_one_station_make_one_episode() {
    for b in backends().await {
        apply(&*b.store, &katulampa(5.0)).await.expect("apply");
        b.store.add_subscription(alarm_subscription()).await.expect("a subscription to alarms");
        let start = now() - 1200;
        let mut writers = Vec::new();
        for w in 0..64i64 {
            let store: Arc<dyn Store> = b.store.clone();
            writers.push(tokio::spawn(async move {
                // Every writer's readings are above Siaga 3 and below Siaga 2.
                store.ingest(reading("D1", start + w * 10, &[("a", 100.0 + w as f64 / 10.0)])).await
            }));
        }
        for w in writers {
            w.await.expect("join").expect("ingest");
        }
        // Whichever reading is judged first raises Siaga 3; the others
        // (older ones are late, newer ones stay in the band) move nothing.
        assert_eq!(transitions(&*b.store).await, [t("siaga", TransitionKind::Raised, Some("Siaga 3"))]);
        assert_eq!(b.store.active_alarms(Scope::All).await.expect("active").len(), 1);
        let deliveries = b.store.deliveries("sub_alarms", false).await.expect("deliveries");
        assert_eq!(deliveries.len(), 1, "one delivery of the one transition");
    }
}

#[tokio::test]
async fn acknowledging_needs_an_active_episode_and_is_recorded_once() {
    for b in backends().await {
        let s = &*b.store;
        apply(s, &katulampa(5.0)).await.expect("apply");
        let refused = s.acknowledge_alarm("D1", "siaga", now()).await;
        assert!(matches!(refused, Err(StoreError::Conflict(_))), "{refused:?}");
        assert!(matches!(s.acknowledge_alarm("D1", "nope", now()).await, Err(StoreError::NotFound(_))));
        assert!(matches!(s.acknowledge_alarm("D9", "siaga", now()).await, Err(StoreError::NotFound(_))));
        s.ingest(reading("D1", now() - 60, &[("a", 100.0)])).await.expect("ingest");
        let ack = s.acknowledge_alarm("D1", "siaga", now()).await.expect("acknowledged");
        assert_eq!((ack.transition, ack.level.as_deref()), (TransitionKind::Acknowledged, Some("Siaga 3")));
        let alarms = s.alarms(Scope::All, "D1").await.expect("alarms").expect("visible");
        assert!(alarms[0].state.acknowledged_at.is_some());
        // Sent again: the first acknowledgement, recorded once.
        let again = s.acknowledge_alarm("D1", "siaga", now() + 5).await.expect("acknowledged already");
        assert_eq!((again.id, again.at), (ack.id, ack.at), "the first acknowledgement");
        let acks = transitions(s).await.into_iter().filter(|e| e.1 == TransitionKind::Acknowledged).count();
        assert_eq!(acks, 1, "recorded once");
        // A rise to a higher level asks again.
        s.ingest(reading("D1", now() - 30, &[("a", 170.0)])).await.expect("ingest");
        let alarms = s.alarms(Scope::All, "D1").await.expect("alarms").expect("visible");
        assert_eq!((alarms[0].level_name(), alarms[0].state.acknowledged_at), (Some("Siaga 2"), None));
    }
}

/// Edits of one device's rules made at once (two commands, two stores)
/// all hold: each reads the rules in the transaction that writes them.
#[tokio::test]
async fn rule_edits_made_at_once_all_hold() {
    use sensorhub_store::alarm::{RuleEdit, RuleEdited};
    for b in backends().await {
        let s: Arc<dyn Store> = b.store.clone();
        let other: Arc<dyn Store> = sensorhub_store::open(&b.url).await.expect("a second store");
        let rule = |name: &str, at: f64| {
            let spec = format!(
                r#"{{"name":"{name}","sensor":"a","direction":"above","levels":[{{"name":"High","at":{at}}}]}}"#
            );
            serde_json::from_str::<RuleSpec>(&spec).expect("spec").check("rule").expect("rule")
        };
        let edits: Vec<_> = (0..8)
            .map(|i| {
                let store = if i % 2 == 0 { s.clone() } else { other.clone() };
                let edit = RuleEdit::Put(rule(&format!("r{i}"), 10.0 + i as f64));
                tokio::spawn(async move { store.edit_alarm_rules("D1", edit).await })
            })
            .collect();
        for e in edits {
            assert_eq!(e.await.expect("join").expect("edit"), RuleEdited::Added);
        }
        let names: Vec<_> = s.alarm_rules(Some("D1")).await.expect("rules").into_iter().map(|(_, r)| r.name).collect();
        assert_eq!(names.len(), 8, "every edit holds: {names:?}");
        assert_eq!(
            s.edit_alarm_rules("D1", RuleEdit::Put(rule("r0", 10.0))).await.expect("again"),
            RuleEdited::Unchanged
        );
        assert_eq!(
            s.edit_alarm_rules("D1", RuleEdit::Put(rule("r0", 11.0))).await.expect("change"),
            RuleEdited::Replaced
        );
        assert_eq!(s.edit_alarm_rules("D1", RuleEdit::Remove("r0".into())).await.expect("remove"), RuleEdited::Removed);
        assert_eq!(
            s.edit_alarm_rules("D1", RuleEdit::Remove("r0".into())).await.expect("again"),
            RuleEdited::NoSuchRule
        );
    }
}

#[tokio::test]
async fn removing_or_changing_a_rule_ends_its_episode() {
    use TransitionKind::*;
    for b in backends().await {
        let s = &*b.store;
        apply(s, &katulampa(5.0)).await.expect("apply");
        s.ingest(reading("D1", now() - 60, &[("a", 70.0)])).await.expect("ingest");
        // A changed deadband is a changed rule: its episode ends.
        assert_eq!(apply(s, &katulampa(2.0)).await.expect("changed").alarm_rules.updated, 1);
        assert_eq!(transitions(s).await, [t("siaga", Raised, Some("Siaga 4")), t("siaga", Cleared, None)]);
        s.ingest(reading("D1", now() - 30, &[("a", 71.0)])).await.expect("ingest");
        let rules = s.alarm_rules(Some("D1")).await.expect("rules");
        let silent: Vec<_> = rules.into_iter().filter(|(_, r)| r.name == "silent").map(|(_, r)| r).collect();
        assert!(s.set_alarm_rules("D1", silent.clone()).await.expect("removed"), "siaga removed");
        assert!(!s.set_alarm_rules("D1", silent).await.expect("again"), "nothing to change");
        let all = transitions(s).await;
        assert_eq!(all[2..], [t("siaga", Raised, Some("Siaga 4")), t("siaga", Cleared, None)]);
        assert!(s.active_alarms(Scope::All).await.expect("active").is_empty());
        // A rule of a sensor the device does not have is refused.
        let spec: RuleSpec =
            serde_json::from_str(r#"{"name": "x", "sensor": "zz", "rise": 1, "within": "1m"}"#).expect("spec");
        let refused = s.set_alarm_rules("D1", vec![spec.check("x").expect("rule")]).await;
        assert!(matches!(&refused, Err(StoreError::Invalid(e)) if e.message.contains("\"zz\"")), "{refused:?}");
    }
}

#[tokio::test]
async fn silence_is_raised_by_the_clock_and_cleared_by_data() {
    for b in backends().await {
        let s = &*b.store;
        let set = now();
        apply(s, &katulampa_silent(5.0, "2s")).await.expect("apply");
        // A server that started long before the rule was set counts from the rule.
        let started = set - 7200;
        let due = s.silence_due(started).await.expect("due");
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].rule, "silent");
        assert!((set..=now()).contains(&(due[0].at - 2)), "from when the rule was set: {due:?}");
        let early = s.check_silence(due.clone(), due[0].at - 1, started).await.expect("early");
        assert_eq!(early.len(), 1, "not yet, and still due");
        assert!(transitions(s).await.is_empty());
        // A server started after the rule was set counts from its start.
        let restarted = now() + 60;
        assert_eq!(s.silence_due(restarted).await.expect("due")[0].at, restarted + 2);
        wait_until(due[0].at).await;
        let next = s.check_silence(due.clone(), now(), started).await.expect("check");
        assert!(next.is_empty(), "active: nothing more is due");
        assert_eq!(transitions(s).await, [t("silent", TransitionKind::Raised, None)]);
        s.ingest(reading("D1", now(), &[("b", 1.0)])).await.expect("data");
        let last = transitions(s).await.pop().expect("a transition");
        assert_eq!((last.0.as_str(), last.1), ("silent", TransitionKind::Cleared), "data clears it");
        let due = s.silence_due(now()).await.expect("due");
        assert!(due[0].at > now(), "counted from the data: {due:?}");
    }
}

/// Returns once the clock reached second `at`.
async fn wait_until(at: i64) {
    while now() < at {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A running instance keeps each device's parsed rules between its
/// writes; a change made by another instance (another process) holds from
/// its next reading on, never the rule it had kept.
#[tokio::test]
async fn rules_changed_by_another_instance_hold_at_the_next_reading() {
    use TransitionKind::*;
    for b in backends().await {
        let s = &*b.store;
        apply(s, &katulampa(5.0)).await.expect("apply");
        s.ingest(reading("D1", now() - 120, &[("a", 70.0)])).await.expect("ingest");
        assert_eq!(transitions(s).await, [t("siaga", Raised, Some("Siaga 4"))]);

        let other = sensorhub_store::open(&b.url).await.expect("a second instance");
        let spec: RuleSpec = serde_json::from_str(
            r#"{"name": "siaga", "sensor": "a", "direction": "above", "levels": [{"name": "Banjir", "at": 72}]}"#,
        )
        .expect("spec");
        assert!(other.set_alarm_rules("D1", vec![spec.check("x").expect("rule")]).await.expect("changed"));
        s.ingest(reading("D1", now() - 60, &[("a", 75.0)])).await.expect("ingest");
        assert_eq!(
            transitions(s).await,
            [t("siaga", Raised, Some("Siaga 4")), t("siaga", Cleared, None), t("siaga", Raised, Some("Banjir"))],
            "the first instance judged the reading by the new rule"
        );

        assert!(other.set_alarm_rules("D1", Vec::new()).await.expect("removed"));
        s.ingest(reading("D1", now() - 30, &[("a", 500.0)])).await.expect("ingest");
        assert_eq!(transitions(s).await.len(), 4, "no rule is left to move: the removal cleared the episode only");
        assert!(s.alarms(Scope::All, "D1").await.expect("alarms").expect("visible").is_empty());
    }
}

/// A running instance keeps each device's states between its writes too;
/// states moved by another instance (another process) are the ones its
/// next reading is judged against, never the ones it had kept.
#[tokio::test]
async fn states_moved_by_another_instance_hold_at_the_next_reading() {
    use TransitionKind::*;
    for b in backends().await {
        let s = &*b.store;
        apply(s, &katulampa(5.0)).await.expect("apply");
        s.ingest(reading("D1", now() - 180, &[("a", 70.0)])).await.expect("ingest");
        assert_eq!(transitions(s).await, [t("siaga", Raised, Some("Siaga 4"))]);

        let other = sensorhub_store::open(&b.url).await.expect("a second instance");
        other.ingest(reading("D1", now() - 120, &[("a", 100.0)])).await.expect("ingest elsewhere");
        s.ingest(reading("D1", now() - 60, &[("a", 101.0)])).await.expect("ingest");
        let want = [t("siaga", Raised, Some("Siaga 4")), t("siaga", LevelChanged, Some("Siaga 3"))];
        assert_eq!(transitions(s).await, want, "the first instance knew the episode was at Siaga 3 already");

        other.acknowledge_alarm("D1", "siaga", now()).await.expect("acknowledged elsewhere");
        let again = s.acknowledge_alarm("D1", "siaga", now()).await.expect("acknowledged already");
        assert_eq!(again.transition, Acknowledged);
        s.ingest(reading("D1", now() - 30, &[("a", 60.0)])).await.expect("ingest");
        let want = [
            t("siaga", Raised, Some("Siaga 4")),
            t("siaga", LevelChanged, Some("Siaga 3")),
            t("siaga", Acknowledged, Some("Siaga 3")),
            t("siaga", LevelChanged, Some("Siaga 4")),
        ];
        assert_eq!(transitions(s).await, want, "one acknowledgement, then down a level");
        let alarms = s.alarms(Scope::All, "D1").await.expect("alarms").expect("visible");
        assert!(alarms[0].state.acknowledged_at.is_some(), "going down keeps the acknowledgement");
    }
}

/// Two instances on one PostgreSQL database, both running the silence
/// watch and both taking readings of the same station: each transition is
/// recorded once (every writing transaction holds the database's write
/// lock and reads the states after taking it).
#[tokio::test]
async fn two_instances_on_one_postgres_record_each_transition_once() {
    let b = backends().await.pop().expect("PostgreSQL is the second backend");
    let pg = b.pg.as_ref().expect("a PostgreSQL database");
    let other = sensorhub_store::open(pg.url()).await.expect("a second instance");
    let instances: [Arc<dyn Store>; 2] = [b.store.clone(), other];
    apply(&*instances[0], &katulampa_silent(5.0, "1s")).await.expect("apply");
    instances[0].add_subscription(alarm_subscription()).await.expect("a subscription to alarms");

    let started = now() - 7200;
    let due = instances[1].silence_due(started).await.expect("the second instance sees the rules");
    wait_until(due[0].at).await;
    let checks = instances.iter().map(|s| {
        let (s, due) = (s.clone(), due.clone());
        tokio::spawn(async move { s.check_silence(due, now(), started).await })
    });
    for check in checks.collect::<Vec<_>>() {
        check.await.expect("join").expect("check");
    }
    assert_eq!(transitions(&*instances[0]).await, [t("silent", TransitionKind::Raised, None)]);

    let start = now() - 1200;
    let mut writers = Vec::new();
    for w in 0..64i64 {
        let store = instances[(w % 2) as usize].clone();
        writers.push(tokio::spawn(async move {
            store.ingest(reading("D1", start + w * 10, &[("a", 100.0 + w as f64 / 10.0)])).await
        }));
    }
    for w in writers {
        w.await.expect("join").expect("ingest");
    }
    // Every value is in Siaga 3's band: whichever reading is judged first
    // raises it, and nothing else moves (the first reading also clears
    // the silence; rules are judged in their order).
    use TransitionKind::*;
    assert_eq!(
        transitions(&*instances[1]).await,
        [t("silent", Raised, None), t("siaga", Raised, Some("Siaga 3")), t("silent", Cleared, None)]
    );
    let deliveries = instances[1].deliveries("sub_alarms", false).await.expect("deliveries");
    let ids: std::collections::BTreeSet<_> = deliveries.iter().map(|d| d.message_id.as_str()).collect();
    assert_eq!((deliveries.len(), ids.len()), (3, 3), "one delivery per transition, each its own id");
}

/// Alice's subscription to alarms only.
fn alarm_subscription() -> sensorhub_store::delivery::NewSubscription {
    sensorhub_store::delivery::NewSubscription {
        id: "sub_alarms".into(),
        username: "alice".into(),
        url: "https://alarms.example/h".into(),
        devices: None,
        events: vec!["alarms".into()],
        sealed_secret: vec![1],
        sealed_headers: None,
        batch: false,
        batch_max: 100,
        allow_http: false,
    }
}

/// One import across 300 stations with rules (more than one query's worth
/// of devices): each station's reading moves its own rules, and no other's.
#[tokio::test]
async fn one_transaction_moves_the_rules_of_every_station_it_writes() {
    let devices: Vec<String> = (0..300)
        .map(|i| {
            format!(
                r#"{{"device_id": "S{i:03}", "name": "s", "type": "AWLR", "lat": 1, "long": 2, "interval_seconds": 60,
                    "sensors": [{{"sensor_id": "wl{i}", "name": "W", "type": "T", "unit": "cm"}}],
                    "alarms": [{{"name": "siaga", "sensor": "wl{i}", "levels": [{{"name": "high", "at": {i}}}]}}]}}"#
            )
        })
        .collect();
    let doc = format!(r#"{{"devices": [{}]}}"#, devices.join(","));
    let at = now() - 60;
    for b in backends().await {
        let s = &*b.store;
        apply(s, &doc).await.expect("apply");
        // Station i reads i + 1 when i is even (at or above its level) and i - 1 when odd.
        let readings = (0..300i64).map(|i| {
            let value = if i % 2 == 0 { i as f64 + 1.0 } else { i as f64 - 1.0 };
            Ok(reading(&format!("S{i:03}"), at, &[(&format!("wl{i}"), value)]))
        });
        import(s, readings.collect()).await.expect("import");
        let active = s.active_alarms(Scope::All).await.expect("active");
        let mut raised: Vec<String> = active.iter().map(|a| a.device_id.clone()).collect();
        raised.sort();
        let even: Vec<String> = (0..300).filter(|i| i % 2 == 0).map(|i| format!("S{i:03}")).collect();
        assert_eq!(raised, even);
    }
}

/// Hears of alarm transitions slowly, as an observer that publishes them
/// to another server would.
#[derive(Default)]
struct SlowListener(std::sync::Mutex<Vec<(String, TransitionKind, Option<String>)>>);

#[async_trait::async_trait]
impl sensorhub_store::observe::AfterCommit for SlowListener {
    async fn committed(&self, _readings: &[sensorhub_core::model::ReadingInput], _left_out: usize) {}

    async fn alarms(&self, events: &[sensorhub_store::alarm::AlarmEvent]) {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let mut heard = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        heard.extend(events.iter().map(|e| (e.rule.clone(), e.transition, e.level.clone())));
    }
}

#[tokio::test]
async fn a_reading_is_answered_once_its_transitions_are_told_in_order() {
    use TransitionKind::*;
    for b in backends().await {
        let s = &*b.store;
        apply(s, &katulampa(5.0)).await.expect("apply");
        let listener = Arc::new(SlowListener::default());
        s.observe(listener.clone());
        let heard = || listener.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let start = now() - 1800;
        let steps = [
            (61.0, vec![t("siaga", Raised, Some("Siaga 4"))]),
            (50.0, vec![t("siaga", Raised, Some("Siaga 4")), t("siaga", Cleared, None)]),
            (
                95.0,
                vec![
                    t("siaga", Raised, Some("Siaga 4")),
                    t("siaga", Cleared, None),
                    t("siaga", Raised, Some("Siaga 3")),
                ],
            ),
        ];
        for (i, (value, told)) in steps.into_iter().enumerate() {
            // Single readings go through the group committer.
            s.ingest(reading("D1", start + i as i64 * 60, &[("a", value)])).await.expect("ingest");
            assert_eq!(heard(), told, "the observer heard before the answer, in order");
        }
        // Readings of many writers at once: their transitions are told in the order recorded.
        let mut writers = Vec::new();
        for (w, value) in [170.0, 215.0, 158.0, 40.0].into_iter().enumerate() {
            let store: Arc<dyn Store> = b.store.clone();
            let second = start + 600 + w as i64 * 60;
            writers.push(tokio::spawn(async move { store.ingest(reading("D1", second, &[("a", value)])).await }));
        }
        for w in writers {
            w.await.expect("join").expect("ingest");
        }
        assert_eq!(heard(), transitions(s).await, "every transition recorded was told, in the order recorded");
    }
}
