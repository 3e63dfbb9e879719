//! The alarm rules' semantics: Katulampa's bands through a flood, the
//! deadband, the hold time, late data, rises, silence and acknowledgement.

use super::*;
use proptest::prelude::*;

fn rule(json: &str) -> AlarmRule {
    serde_json::from_str::<RuleSpec>(json).expect("spec").check("test").expect("valid")
}

fn katulampa(deadband: f64, hold: &str) -> AlarmRule {
    rule(&format!(
        r#"{{"name": "siaga", "sensor": "wl", "levels": [{{"name": "Siaga 4", "at": 60}}, {{"name": "Siaga 3", "at": 90}},
            {{"name": "Siaga 2", "at": 160}}, {{"name": "Siaga 1", "at": 210}}], "deadband": {deadband}, "for": "{hold}"}}"#
    ))
}

/// Feeds `values` one a minute after the last one evaluated; the
/// transitions, as (kind, level name).
fn run(rule: &AlarmRule, state: &mut AlarmState, values: &[f64]) -> Vec<(TransitionKind, Option<String>)> {
    let mut out = Vec::new();
    let first = state.timestamp.map_or(0, |t| t + 60);
    for (i, v) in values.iter().enumerate() {
        let ts = first + i as i64 * 60;
        if let Some(t) = rule.on_reading(state, ts, Some(*v), ts) {
            out.push((t.kind, t.level.and_then(|l| rule.level_name(l)).map(str::to_owned)));
        }
    }
    out
}

fn t(kind: TransitionKind, level: Option<&str>) -> (TransitionKind, Option<String>) {
    (kind, level.map(str::to_owned))
}

#[test]
fn a_flood_through_the_bands_is_one_episode_of_six_transitions() {
    use TransitionKind::{Cleared, LevelChanged, Raised};
    let rule = katulampa(5.0, "0s");
    let mut state = AlarmState::default();
    let got = run(&rule, &mut state, &[40.0, 65.0, 95.0, 165.0, 215.0, 180.0, 40.0]);
    assert_eq!(
        got,
        [
            t(Raised, Some("Siaga 4")),
            t(LevelChanged, Some("Siaga 3")),
            t(LevelChanged, Some("Siaga 2")),
            t(LevelChanged, Some("Siaga 1")),
            t(LevelChanged, Some("Siaga 2")),
            t(Cleared, None),
        ]
    );
    assert!(!state.active && state.level.is_none() && state.raised_at.is_none());
    assert_eq!(
        run(&rule, &mut state, &[70.0]),
        [t(Raised, Some("Siaga 4"))],
        "a crossing after a clear is a new episode"
    );
}

#[test]
fn a_value_oscillating_inside_the_deadband_moves_nothing() {
    let rule = katulampa(5.0, "0s");
    let mut state = AlarmState::default();
    let got = run(&rule, &mut state, &[61.0, 58.0, 62.0, 55.5, 59.9, 60.0, 56.0, 89.0, 86.0]);
    assert_eq!(got, [t(TransitionKind::Raised, Some("Siaga 4"))]);
    let got = run(&rule, &mut state, &[90.0, 86.0, 91.0, 85.0]);
    assert_eq!(got, [t(TransitionKind::LevelChanged, Some("Siaga 3"))], "85 is inside Siaga 3's deadband (90 - 5)");
    let mut state = AlarmState::default();
    let jump = run(&rule, &mut state, &[250.0, 100.0]);
    assert_eq!(
        jump,
        [t(TransitionKind::Raised, Some("Siaga 1")), t(TransitionKind::LevelChanged, Some("Siaga 3"))],
        "a jump enters the highest band reached; a fall drops to the highest band not left"
    );
}

#[test]
fn a_level_is_entered_only_after_its_hold_time_and_a_dip_starts_it_again() {
    let rule = katulampa(0.0, "10m");
    let mut state = AlarmState::default();
    // One a minute: 65 from minute 0; a dip at minute 5 restarts the count.
    let values = [65.0, 66.0, 67.0, 68.0, 69.0, 59.0, 65.0, 65.0, 65.0, 65.0, 65.0, 65.0, 65.0, 65.0, 65.0, 65.0, 65.0];
    let mut raised_at = None;
    for (i, v) in values.iter().enumerate() {
        if rule.on_reading(&mut state, i as i64 * 60, Some(*v), 0).is_some() {
            raised_at = Some(i);
        }
    }
    assert_eq!(raised_at, Some(16), "entered ten minutes after minute 6");
    assert_eq!(state.raised_at, Some(16 * 60));
}

#[test]
fn late_readings_change_nothing() {
    let rule = katulampa(5.0, "0s");
    let mut state = AlarmState::default();
    assert!(rule.on_reading(&mut state, 600, Some(40.0), 600).is_none());
    assert!(rule.on_reading(&mut state, 300, Some(250.0), 700).is_none(), "older than the newest evaluated");
    assert!(rule.on_reading(&mut state, 600, Some(250.0), 700).is_none(), "the same second again");
    assert!(!state.active && state.value == Some(40.0));
    assert!(rule.on_reading(&mut state, 660, Some(250.0), 700).is_some());
    assert!(rule.on_reading(&mut state, 900, None, 700).is_none(), "a reading without the sensor");
}

#[test]
fn a_below_rule_reads_the_other_way() {
    let rule = rule(
        r#"{"name": "low", "sensor": "tank", "direction": "below", "levels": [{"name": "Low", "at": 30},
            {"name": "Empty", "at": 5}], "deadband": 2}"#,
    );
    let mut state = AlarmState::default();
    let got = run(&rule, &mut state, &[50.0, 29.0, 31.0, 33.0, 4.0, 6.0, 8.0]);
    assert_eq!(
        got,
        [
            t(TransitionKind::Raised, Some("Low")),
            t(TransitionKind::Cleared, None),
            t(TransitionKind::Raised, Some("Empty")),
            t(TransitionKind::LevelChanged, Some("Low")),
        ]
    );
}

#[test]
fn a_rise_within_the_window_is_active_while_it_lasts() {
    let rule = rule(r#"{"name": "rising", "sensor": "wl", "rise": 20, "within": "30m"}"#);
    let mut state = AlarmState::default();
    let mut transitions = Vec::new();
    // Every 10 minutes; the window holds the last four readings: 100, 105, 112, 121 (21 above
    // 100), 125 (20 above 105), 130 (18 above 112: no longer), 150 (29 above 121), 140 (15 above 125).
    for (i, v) in [100.0, 105.0, 112.0, 121.0, 125.0, 130.0, 150.0, 140.0].iter().enumerate() {
        let ts = i as i64 * 600;
        transitions.extend(rule.on_reading(&mut state, ts, Some(*v), ts).map(|t| (i, t.kind)));
    }
    let expected = [
        (3, TransitionKind::Raised),
        (5, TransitionKind::Cleared),
        (6, TransitionKind::Raised),
        (7, TransitionKind::Cleared),
    ];
    assert_eq!(transitions, expected);
}

#[test]
fn a_long_rise_reported_every_second_keeps_a_bounded_window() {
    use crate::alarm::eval::RATE_STEPS;
    use crate::alarm::state::Memo;
    let rule = rule(r#"{"name": "rising", "sensor": "wl", "rise": 1000000, "within": "6h"}"#);
    let mut state = AlarmState::default();
    // Six hours of a river rising a millimetre a second, then one more
    // reading: the window's minimum is the first reading still in it.
    for ts in 0..6 * 3600 {
        assert!(rule.on_reading(&mut state, ts, Some(ts as f64 / 10.0), ts).is_none());
        let Memo::Rate { window } = &state.memo else { panic!("a rate memo") };
        assert!(window.len() as i64 <= RATE_STEPS + 2, "{} readings kept at {ts}", window.len());
    }
    let Memo::Rate { window } = &state.memo else { panic!("a rate memo") };
    assert_eq!(window.front().map(|w| w.1), Some(0.0), "the first second is still in the window");
    // Half an hour on, the minimum is from at most one step (337 s) more than six hours ago.
    let ts = 6 * 3600 + 1800;
    rule.on_reading(&mut state, ts, Some(5000.0), ts);
    let Memo::Rate { window } = &state.memo else { panic!("a rate memo") };
    let oldest = window.front().map(|w| w.1 * 10.0).expect("a minimum");
    assert!((1800.0 - 337.0..=1800.0).contains(&oldest), "the minimum is from second {oldest}");
}

#[test]
fn silence_raises_from_the_later_of_the_last_data_and_the_start_and_data_clears_it() {
    let rule = rule(r#"{"name": "silent", "no_data_for": "30m"}"#);
    let mut state = AlarmState::default();
    let started = 1000;
    assert!(rule.on_clock(&mut state, started + 1799, started).is_none());
    assert_eq!(rule.due_at(&state, started), Some(started + 1800));
    let raised = rule.on_clock(&mut state, started + 1805, started).expect("raised");
    assert_eq!((raised.kind, state.raised_at), (TransitionKind::Raised, Some(started + 1800)));
    assert!(rule.on_clock(&mut state, started + 9999, started).is_none(), "raised once");
    let cleared = rule.on_reading(&mut state, 5000, Some(1.0), 5002).expect("cleared by data");
    assert_eq!((cleared.kind, cleared.timestamp), (TransitionKind::Cleared, Some(5000)));
    assert!(rule.on_clock(&mut state, 5002 + 1799, started).is_none());
    // A server that starts again an hour later does not raise at once for data before it went down.
    let restarted = 5002 + 3600;
    assert!(rule.on_clock(&mut state, restarted, restarted).is_none());
    assert!(rule.on_clock(&mut state, restarted + 1800, restarted).is_some());
    // A sensor's rule hears only that sensor.
    let one = self::rule(r#"{"name": "quiet-wl", "sensor": "wl", "no_data_for": "5m"}"#);
    let mut state = AlarmState::default();
    assert!(one.on_clock(&mut state, 400, 0).is_some());
    assert!(one.on_reading(&mut state, 500, None, 500).is_none(), "other sensors do not clear it");
    assert!(one.on_reading(&mut state, 510, Some(3.0), 510).is_some());
}

#[test]
fn acknowledging_needs_an_active_alarm_counts_once_and_a_higher_level_asks_again() {
    let rule = katulampa(5.0, "0s");
    let mut state = AlarmState::default();
    assert_eq!(state.acknowledge(10), Err(NotActive));
    run(&rule, &mut state, &[65.0]);
    let ack = state.acknowledge(70).expect("active").expect("a transition");
    assert_eq!((ack.kind, state.acknowledged_at), (TransitionKind::Acknowledged, Some(70)));
    assert_eq!(state.acknowledge(75), Ok(None), "acknowledged already: nothing moves");
    assert_eq!(state.acknowledged_at, Some(70), "the first acknowledgement stands");
    rule.on_reading(&mut state, 120, Some(95.0), 120);
    assert_eq!(state.acknowledged_at, None, "Siaga 3 needs a new acknowledgement");
    assert!(state.acknowledge(130).expect("active").is_some(), "a higher level is acknowledged anew");
    rule.on_reading(&mut state, 180, Some(70.0), 180);
    assert_eq!(state.acknowledged_at, Some(130), "going down keeps it");
}

proptest! {
    /// Whatever the values: transitions alternate raised … cleared, a level
    /// change happens only within an episode and changes the level, and with
    /// no deadband and no hold time the level is exactly the highest band the
    /// value reaches.
    #[test]
    fn transitions_are_well_formed(values in proptest::collection::vec(0.0f64..260.0, 1..80), deadband in 0.0f64..20.0) {
        for (rule, exact) in [(katulampa(deadband, "0s"), false), (katulampa(0.0, "0s"), true)] {
            let mut state = AlarmState::default();
            let mut active = false;
            let mut level = None;
            for (i, v) in values.iter().enumerate() {
                let ts = i as i64 * 60;
                if let Some(t) = rule.on_reading(&mut state, ts, Some(*v), ts) {
                    match t.kind {
                        TransitionKind::Raised => prop_assert!(!active),
                        TransitionKind::Cleared => prop_assert!(active && t.level.is_none()),
                        TransitionKind::LevelChanged => prop_assert!(active && t.level != level),
                        TransitionKind::Acknowledged => prop_assert!(false),
                    }
                    active = t.kind != TransitionKind::Cleared;
                    level = t.level;
                }
                prop_assert_eq!(state.active, active);
                if exact {
                    let reached = [60.0, 90.0, 160.0, 210.0].iter().rposition(|at| v >= at);
                    prop_assert_eq!(state.level, reached);
                }
            }
        }
    }
}
