//! How a rule moves its alarm: level and rate rules on each reading of
//! their sensor (in the reading's own transaction), silence rules when data
//! arrives and on a timer. Pure: the caller passes the clock.
//!
//! A reading older than (or at) the newest second a rule has evaluated is
//! stored but changes nothing: late data and backfills never raise.

use super::rule::{AlarmRule, Direction, LevelRule, RateRule, RuleKind, SilenceRule};
use super::state::{AlarmState, Memo, Transition};

impl AlarmRule {
    /// Evaluates a reading stored at server time `now` whose second is `ts`
    /// and whose value of the rule's sensor is `value` (`None`: the reading
    /// has other sensors only). The transition it causes, if any.
    pub fn on_reading(&self, state: &mut AlarmState, ts: i64, value: Option<f64>, now: i64) -> Option<Transition> {
        match &self.kind {
            RuleKind::Silence(rule) => silence_data(rule, state, ts, value, now),
            RuleKind::Level(rule) => {
                let v = fresh(state, ts, value)?;
                level(rule, state, ts, v)
            }
            RuleKind::Rate(rule) => {
                let v = fresh(state, ts, value)?;
                rate(rule, state, ts, v)
            }
        }
    }

    /// Whether a reading may move this rule's state (so that the state
    /// must be written again): one with the rule's sensor (`has_value`),
    /// or any reading for a silence rule of the whole device. A late
    /// reading answers yes too, and then changes nothing.
    pub fn hears(&self, has_value: bool) -> bool {
        has_value || matches!(&self.kind, RuleKind::Silence(rule) if rule.sensor.is_none())
    }

    /// A silence rule's look at the clock: raised when nothing has been
    /// stored for its `no_data_for`, counted from the later of the last data
    /// and `started` (when this server started: a server that was down does
    /// not raise for stations that reported shortly before).
    pub fn on_clock(&self, state: &mut AlarmState, now: i64, started: i64) -> Option<Transition> {
        let RuleKind::Silence(rule) = &self.kind else { return None };
        if state.active {
            return None;
        }
        let since = silence_since(state, started);
        let due = since.saturating_add(rule.no_data_for_seconds);
        (now >= due).then(|| state.move_to(None, true, due)).flatten()
    }

    /// When a silence rule would next raise, for a timer (`None`: active, or not a silence rule).
    pub fn due_at(&self, state: &AlarmState, started: i64) -> Option<i64> {
        let RuleKind::Silence(rule) = &self.kind else { return None };
        (!state.active).then(|| silence_since(state, started).saturating_add(rule.no_data_for_seconds))
    }
}

/// The value to evaluate: the reading must carry the sensor and be newer
/// than what was evaluated.
fn fresh(state: &mut AlarmState, ts: i64, value: Option<f64>) -> Option<f64> {
    let v = value?;
    if state.timestamp.is_some_and(|last| ts <= last) {
        return None;
    }
    state.timestamp = Some(ts);
    state.value = Some(v);
    Some(v)
}

fn silence_since(state: &AlarmState, started: i64) -> i64 {
    match state.memo {
        Memo::Silence { last_data_at: Some(at) } => at.max(started),
        _ => started,
    }
}

/// Data arrived: remembered by the server's clock; an active silence clears.
fn silence_data(
    rule: &SilenceRule,
    state: &mut AlarmState,
    ts: i64,
    value: Option<f64>,
    now: i64,
) -> Option<Transition> {
    // A rule of one sensor hears only that sensor (`value` is its value).
    if rule.sensor.is_some() && value.is_none() {
        return None;
    }
    state.memo = Memo::Silence { last_data_at: Some(now) };
    if state.timestamp.is_none_or(|last| ts > last) {
        state.timestamp = Some(ts);
        state.value = value;
    }
    state.active.then(|| state.move_to(None, false, ts)).flatten()
}

/// Whether `v` reaches level `at` in `direction`.
fn reaches(direction: Direction, at: f64, v: f64) -> bool {
    match direction {
        Direction::Above => v >= at,
        Direction::Below => v <= at,
    }
}

/// Whether `v` has left level `at` by more than `deadband`.
fn leaves(direction: Direction, at: f64, deadband: f64, v: f64) -> bool {
    match direction {
        Direction::Above => v < at - deadband,
        Direction::Below => v > at + deadband,
    }
}

fn level(rule: &LevelRule, state: &mut AlarmState, ts: i64, v: f64) -> Option<Transition> {
    let n = rule.levels.len();
    let mut since = match std::mem::take(&mut state.memo) {
        Memo::Level { since } if since.len() == n => since,
        _ => vec![None; n],
    };
    for (i, l) in rule.levels.iter().enumerate() {
        since[i] = reaches(rule.direction, l.at, v).then(|| since[i].unwrap_or(ts));
    }
    // Down: the current level holds until the value leaves it by the
    // deadband; then the next lower one it has not left.
    let mut now_level = state.level.filter(|_| state.active);
    while let Some(c) = now_level {
        if !leaves(rule.direction, rule.levels[c].at, rule.deadband, v) {
            break;
        }
        now_level = c.checked_sub(1);
    }
    // Up: the most severe level reached for at least the hold time.
    let held = (0..n).rev().find(|&i| since[i].is_some_and(|s| ts.saturating_sub(s) >= rule.hold_seconds));
    if held > now_level {
        now_level = held;
    }
    state.memo = Memo::Level { since };
    state.move_to(now_level, now_level.is_some(), ts)
}

/// How many steps a rate rule's window is counted in: its memory holds at
/// most this many readings (and two), however often a station reports
/// during a long rise.
pub const RATE_STEPS: i64 = 64;

/// The sliding minimum over the window, its readings' seconds rounded up
/// to a step of `within / RATE_STEPS`: a reading stays in the window up to
/// one step longer (28 s of a 30-minute window), and of the readings of
/// one step only the lowest is kept (the others would never be the
/// minimum while it is there, and leave with it).
fn rate(rule: &RateRule, state: &mut AlarmState, ts: i64, v: f64) -> Option<Transition> {
    let mut window = match std::mem::take(&mut state.memo) {
        Memo::Rate { window } => window,
        _ => Default::default(),
    };
    let step = (rule.within_seconds / RATE_STEPS).max(1);
    let leaves = ts.div_euclid(step).saturating_add(i64::from(ts.rem_euclid(step) != 0)).saturating_mul(step);
    while window.back().is_some_and(|&(_, w)| w >= v) {
        window.pop_back();
    }
    if window.back().is_none_or(|&(t, _)| t != leaves) {
        window.push_back((leaves, v));
    }
    while window.front().is_some_and(|&(t, _)| t < ts.saturating_sub(rule.within_seconds)) {
        window.pop_front();
    }
    let min = window.front().map_or(v, |&(_, m)| m);
    state.memo = Memo::Rate { window };
    let active = v >= min + rule.rise;
    state.move_to(None, active, ts)
}
