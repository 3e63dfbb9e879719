//! Each device's alarm rules and states, kept between transactions so
//! that a transaction writing readings reads one row (the marks) rather
//! than every station's rules and states.
//!
//! The stored rows stay the truth: every transaction still writes each
//! state it changes, and what is kept is what was written. Two marks in
//! `alarm_generation` say whether it still is: the rules' generation (a
//! trigger moves it on any change of any rule) and the count of state
//! writes (each transaction that writes states adds one). Writes are
//! serialised (SQLite's one writer, PostgreSQL's write lock), so when the
//! count is the one this store left, nobody else has written a state
//! since. Otherwise (another process or instance wrote, or a transaction
//! of this store was rolled back after it kept its states) the kept
//! states are dropped and read again.

use crate::StoreResult;
use crate::decide::FastMap;
use crate::sql::Sql;
use crate::sql::alarms::{self, StoredStates};
use sensorhub_core::alarm::{AlarmRule, AlarmState};
use std::sync::{Arc, Mutex};

/// Devices whose rules and states are kept at most (devices without rules
/// count too): about 15 MB of rules with five each, and their states.
/// Past it, the others are read per transaction as if nothing were kept.
const KEPT_DEVICES: usize = 50_000;

/// The rules of a device, in order (empty: the device has none).
pub(crate) type Rules = Arc<[AlarmRule]>;

/// A device's rules with their states, in rule order.
pub(crate) type Loaded = (Rules, Vec<AlarmState>);

/// A store's cache of parsed alarm rules and their states by device.
#[derive(Default)]
pub(crate) struct AlarmCache {
    kept: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    /// The rules' generation the rules were read at.
    generation: i64,
    rules: FastMap<i64, Rules>,
    /// The count of state writes the states are as of (`None`: nothing kept).
    writes: Option<i64>,
    states: FastMap<i64, Vec<AlarmState>>,
}

/// Where the alarms stood when a transaction loaded them: what
/// [`AlarmCache::keep`] needs to know that it may keep its states.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Marks {
    generation: i64,
    writes: i64,
}

impl AlarmCache {
    /// The rules and states of those of devices `pks` that have rules, by
    /// device: what is kept, and the rest read (rules and states in one
    /// query for devices whose rules are not kept); with the marks read.
    pub(crate) async fn load(&self, c: &impl Sql, pks: &[i64]) -> StoreResult<(FastMap<i64, Loaded>, Marks)> {
        let (generation, writes) = alarms::marks(c).await?;
        let marks = Marks { generation, writes };
        let (mut out, mut no_states, mut missing) = (FastMap::default(), Vec::new(), Vec::new());
        {
            let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
            if kept.generation != generation {
                kept.rules.clear();
                kept.states.clear();
                kept.generation = generation;
            }
            if kept.writes != Some(writes) {
                kept.states.clear();
                kept.writes = Some(writes);
            }
            let Kept { rules: kept_rules, states: kept_states, .. } = &mut *kept;
            for pk in pks {
                match kept_rules.get(pk) {
                    Some(rules) if rules.is_empty() => {}
                    // Taken out, and put back by `keep`: a transaction that
                    // fails before it leaves the device to be read again.
                    Some(rules) => match kept_states.remove(pk) {
                        Some(states) => {
                            out.insert(*pk, (rules.clone(), states));
                        }
                        None => no_states.push((*pk, rules.clone())),
                    },
                    None => missing.push(*pk),
                }
            }
        }
        let with_kept: Vec<i64> = no_states.iter().map(|(pk, _)| *pk).collect();
        let mut stored = alarms::states_of_many(c, &with_kept).await?;
        for (pk, rules) in no_states {
            let states = in_rule_order(&rules, stored.remove(&pk).unwrap_or_default());
            out.insert(pk, (rules, states));
        }
        if missing.is_empty() {
            return Ok((out, marks));
        }
        let mut read = alarms::rules_and_states_of_many(c, &missing).await?;
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        for pk in missing {
            let (rules, states) = read.remove(&pk).unwrap_or_default();
            let rules: Rules = rules.into();
            if kept.generation == generation && kept.rules.len() < KEPT_DEVICES {
                kept.rules.insert(pk, rules.clone());
            }
            if !rules.is_empty() {
                let states = in_rule_order(&rules, states);
                out.insert(pk, (rules, states));
            }
        }
        Ok((out, marks))
    }

    /// Keeps `devices`' states (pk, states in rule order) as they are once
    /// the transaction that loaded them at `marks` has written them;
    /// `wrote` says whether it wrote any (and so counted one write). Kept
    /// before the commit: if the commit fails, the count in the database
    /// is not the one kept, and the next transaction reads them again.
    pub(crate) fn keep(&self, marks: Marks, wrote: bool, devices: impl Iterator<Item = (i64, Vec<AlarmState>)>) {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if kept.generation != marks.generation || kept.writes != Some(marks.writes) {
            // Another transaction of this store got in between: keep nothing.
            kept.states.clear();
            kept.writes = None;
            return;
        }
        let writes = marks.writes + i64::from(wrote);
        kept.writes = Some(writes);
        for (pk, states) in devices {
            if kept.states.len() < KEPT_DEVICES || kept.states.contains_key(&pk) {
                kept.states.insert(pk, states);
            }
        }
    }
}

/// `stored` states (by rule name) in the order of `rules`; a rule without
/// one starts at rest.
pub(crate) fn in_rule_order(rules: &[AlarmRule], mut stored: StoredStates) -> Vec<AlarmState> {
    rules.iter().map(|r| stored.remove(&r.name).unwrap_or_default()).collect()
}
