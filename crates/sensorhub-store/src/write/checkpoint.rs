//! Alarm states written at checkpoints, exact under a kill at any moment.
//!
//! A device's row of states is written when a rule is raised, cleared or
//! acknowledged or a silence rule moves by the clock, every
//! [`CHECKPOINT_EVERY`] readings the rules heard (or [`CHECKPOINT_SPAN`]
//! of reading time), and when a reading is late (not newer than every one
//! evaluated since the row) or a backfill; between these the writer keeps
//! the states in memory ([`super::alarm_cache`]). The row says through which reading second it
//! is exact (`through`), and the stored readings after that second are
//! replayed into it, oldest first, whenever it is loaded ([`load`]): the
//! readings a transaction stores are the log of what moved its states.
//! Level and rate rules depend on readings alone, so the replay gives what
//! was evaluated live (the conditions above are where it would not). A
//! silence rule's last data is the later of its row and the newest
//! `latest.stored_at` of what it watches, written with every reading.

use super::tx::FIRST_HOUR;
use crate::StoreResult;
use crate::chunk;
use crate::decide::{FastMap, malformed};
use crate::sql::DeviceHours;
use crate::sql::alarms::{self, LatestOf, StoredRow, StoredStates};
use sensorhub_core::alarm::{AlarmRule, AlarmState, Memo, RuleKind};

/// Reading seconds a row may fall behind the newest reading its rules
/// heard: a replay decodes the hours in between, so a station whose
/// watched sensor reports rarely is not replayed over days of readings.
pub(crate) const CHECKPOINT_SPAN: i64 = 6 * 3600;

/// The rules of a device, in order (empty: the device has none).
pub(crate) type Rules = std::sync::Arc<[AlarmRule]>;

/// Readings a device's rules may hear between two writes of its row:
/// what a load replays at most (besides readings no rule hears).
pub(crate) const CHECKPOINT_EVERY: u32 = 64;

/// Where a device's states stand against its stored row.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Progress {
    /// Whether the device has a row.
    pub stored: bool,
    /// The row's `through`: the newest reading second it is exact as of.
    pub through: Option<i64>,
    /// The newest reading second evaluated (the row's, or newer).
    pub seen: Option<i64>,
    /// Readings the rules heard since the row was written.
    pub unwritten: u32,
}

impl Progress {
    /// A reading at `ts` was evaluated; whether it was newer than every
    /// one before (a replay in time order evaluates it where it was).
    pub(crate) fn saw(&mut self, ts: i64) -> bool {
        let in_order = self.seen.is_none_or(|seen| ts > seen);
        if in_order {
            self.seen = Some(ts);
        }
        in_order
    }

    /// Whether the states must be written now: the row is missing or
    /// holds no reading second, or enough readings were heard since, or
    /// they span more than [`CHECKPOINT_SPAN`].
    pub(crate) fn due(&self) -> bool {
        let far = self.seen.zip(self.through).is_some_and(|(seen, through)| seen - through >= CHECKPOINT_SPAN);
        !self.stored || self.through.is_none() || self.unwritten >= CHECKPOINT_EVERY || far
    }

    /// The row was written with the states as evaluated.
    pub(crate) fn written(&mut self) {
        *self = Self { stored: true, through: self.seen, seen: self.seen, unwritten: 0 };
    }
}

/// A device's rules, with their states and progress.
pub(crate) type Loaded = (Rules, Vec<AlarmState>, Progress);

/// Loads the states of `devices` (number, rules) from their rows: the
/// readings stored after each row's `through` replayed into it, and each
/// silence rule's last data taken from the `latest` index.
pub(crate) async fn load(c: &impl DeviceHours, devices: Vec<(i64, Rules)>) -> StoreResult<FastMap<i64, Loaded>> {
    let pks: Vec<i64> = devices.iter().map(|(pk, _)| *pk).collect();
    let mut rows = alarms::states_of_many(c, &pks).await?;
    let mut latest = alarms::latest_of_many(c, &pks).await?;
    let mut out = FastMap::default();
    for (pk, rules) in devices {
        let row = rows.remove(&pk);
        let stored = row.is_some();
        let StoredRow { states, through } = row.unwrap_or_default();
        let mut states = in_rule_order(&rules, states);
        let mut progress = Progress { stored, through, seen: through, unwritten: 0 };
        let latest = latest.remove(&pk).unwrap_or_default();
        // Only readings some rule hears can move a state: a device whose
        // newer readings are all of sensors no rule watches replays nothing.
        let heard = |l: &&LatestOf| rules.iter().any(|r| r.sensor().is_none_or(|s| s == l.sensor_id));
        let newer = latest.iter().filter(heard).any(|l| through.is_none_or(|t| l.second > t));
        // Without a row, what is stored came before the rules: history.
        if stored && newer {
            replay(c, pk, &rules, &mut states, &mut progress, &latest).await?;
        }
        last_data(&rules, &mut states, &latest);
        out.insert(pk, (rules, states, progress));
    }
    Ok(out)
}

/// Replays device `pk`'s stored readings after `progress.through` into
/// `states`, oldest first (the sensors' idx from their `latest` entries:
/// a sensor without one has no reading stored). A replay records
/// nothing: a reading that moved a state to a transition was written
/// with it.
async fn replay(
    c: &impl DeviceHours,
    pk: i64,
    rules: &[AlarmRule],
    states: &mut [AlarmState],
    progress: &mut Progress,
    latest: &[LatestOf],
) -> StoreResult<()> {
    let first = progress.through.map_or(FIRST_HOUR, |t| chunk::chunk_of(t.saturating_add(1)));
    let hours = c.hours_from(pk, first).await?;
    let idx: Vec<Option<u8>> = rules
        .iter()
        .map(|r| r.sensor().and_then(|s| latest.iter().find(|l| l.sensor_id == s)))
        .map(|l| l.and_then(|l| u8::try_from(l.idx).ok()))
        .collect();
    // Replayed data moves a silence rule's timestamp and value; when it
    // arrived is the `latest` index's to say ([`last_data`]).
    let memos: Vec<Memo> = states.iter().map(|s| s.memo.clone()).collect();
    for hour in hours {
        let readings = chunk::rows(&hour.data).ok_or_else(|| malformed(pk, hour.chunk))?;
        let start = hour.chunk.saturating_mul(chunk::CHUNK_SECONDS);
        for (offset, pairs) in readings {
            let ts = start + i64::from(offset);
            if progress.through.is_some_and(|t| ts <= t) {
                continue;
            }
            let mut heard = false;
            for ((rule, state), idx) in rules.iter().zip(states.iter_mut()).zip(&idx) {
                let value = idx.and_then(|i| pairs.iter().find(|(k, _)| *k == i)).map(|p| p.1);
                heard |= rule.hears(value.is_some());
                // Stored at its own second: a replayed reading was no backfill.
                let _ = rule.on_reading(state, ts, value, ts);
            }
            progress.saw(ts);
            progress.unwritten += u32::from(heard);
        }
    }
    for ((rule, state), memo) in rules.iter().zip(states.iter_mut()).zip(memos) {
        if matches!(rule.kind, RuleKind::Silence(_)) {
            state.memo = memo;
        }
    }
    Ok(())
}

/// Each silence rule's last data: the later of its state's and the
/// newest server second at which what it watches (the device, or its
/// sensor) was written to the `latest` index.
fn last_data(rules: &[AlarmRule], states: &mut [AlarmState], latest: &[LatestOf]) {
    for (rule, state) in rules.iter().zip(states.iter_mut()) {
        let RuleKind::Silence(silence) = &rule.kind else { continue };
        let written = latest
            .iter()
            .filter(|l| silence.sensor.as_deref().is_none_or(|s| s == l.sensor_id))
            .map(|l| l.stored_at)
            .filter(|at| *at > 0)
            .max();
        let Some(written) = written else { continue };
        let at = match state.memo {
            Memo::Silence { last_data_at: Some(at) } => at.max(written),
            _ => written,
        };
        state.memo = Memo::Silence { last_data_at: Some(at) };
    }
}

/// `stored` states (by rule name) in the order of `rules`; a rule without
/// one starts at rest.
pub(crate) fn in_rule_order(rules: &[AlarmRule], mut stored: StoredStates) -> Vec<AlarmState> {
    rules.iter().map(|r| stored.remove(&r.name).unwrap_or_default()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_asks_for_a_row_when_missing_empty_or_far_behind() {
        let mut p = Progress::default();
        assert!(p.due(), "no row");
        assert!(p.saw(10) && !p.saw(10) && !p.saw(5) && p.saw(11));
        p.written();
        assert_eq!((p.through, p.seen, p.unwritten, p.due()), (Some(11), Some(11), 0, false));
        p.unwritten = CHECKPOINT_EVERY;
        assert!(p.due());
        p.written();
        assert!(p.saw(11 + CHECKPOINT_SPAN - 1) && !p.due(), "within the span");
        assert!(p.saw(11 + CHECKPOINT_SPAN) && p.due(), "a span of readings since the row");
    }
}
