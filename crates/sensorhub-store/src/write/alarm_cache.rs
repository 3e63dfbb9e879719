//! Each device's alarm rules and states, kept between transactions so
//! that a transaction writing readings reads one row (the marks) rather
//! than every station's rules and states, and builds nothing for a
//! device it hears (the whole [`DeviceAlarms`] is kept).
//!
//! The stored rows with the readings after them stay the truth
//! ([`super::checkpoint`]): what is kept is what a load of them would
//! give. Two marks in
//! `alarm_generation` say whether it still is: the rules' generation (a
//! trigger moves it on any change of any rule) and the stamp of the last
//! state write (each transaction that writes states sets a fresh random
//! one). Writes are serialised (SQLite's one writer, PostgreSQL's write
//! lock), so when the stamp is the one this store left, nobody else has
//! moved a state since. Otherwise (another process or instance wrote, or
//! a transaction of this store was rolled back after it kept its states,
//! whose stamp no one writes again) the kept states are dropped and read
//! again.

use super::checkpoint::{self, Rules};
use super::device_alarms::DeviceAlarms;
use crate::StoreResult;
use crate::decide::FastMap;
use crate::sql::DeviceHours;
use crate::sql::alarms;
use std::sync::Mutex;

/// Devices whose rules and states are kept at most (devices without rules
/// count too): about 15 MB of rules with five each, and their states.
/// Past it, the others are read per transaction as if nothing were kept.
const KEPT_DEVICES: usize = 50_000;

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
    /// The state-write stamp the states are as of (`None`: nothing kept).
    writes: Option<i64>,
    states: FastMap<i64, DeviceAlarms>,
}

/// Where the alarms stood when a transaction loaded them: what
/// [`AlarmCache::keep`] needs to know that it may keep its states.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Marks {
    generation: i64,
    writes: i64,
}

impl AlarmCache {
    /// The alarms of those of `devices` (pk, id) that have rules: what is
    /// kept, and the rest loaded from their rows ([`checkpoint::load`]);
    /// with the marks read.
    pub(crate) async fn load(
        &self,
        c: &impl DeviceHours,
        devices: &[(i64, &str)],
    ) -> StoreResult<(Vec<DeviceAlarms>, Marks)> {
        let (generation, writes) = alarms::marks(c).await?;
        let marks = Marks { generation, writes };
        let (mut out, mut no_states, mut missing) = (Vec::new(), Vec::new(), Vec::new());
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
            for &(pk, id) in devices {
                match kept_rules.get(&pk) {
                    Some(rules) if rules.is_empty() => {}
                    // Taken out, and put back by `keep`: a transaction that
                    // fails before it leaves the device to be loaded again.
                    Some(rules) => match kept_states.remove(&pk) {
                        Some(device) => out.push(device),
                        None => no_states.push((pk, id, rules.clone())),
                    },
                    None => missing.push((pk, id)),
                }
            }
        }
        if !missing.is_empty() {
            let pks: Vec<i64> = missing.iter().map(|(pk, _)| *pk).collect();
            let mut read = alarms::rules_only_of_many(c, &pks).await?;
            let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
            for (pk, id) in missing {
                let rules: Rules = read.remove(&pk).unwrap_or_default().into();
                if kept.generation == generation && kept.rules.len() < KEPT_DEVICES {
                    kept.rules.insert(pk, rules.clone());
                }
                if !rules.is_empty() {
                    no_states.push((pk, id, rules));
                }
            }
        }
        if !no_states.is_empty() {
            let ids: FastMap<i64, &str> = no_states.iter().map(|(pk, id, _)| (*pk, *id)).collect();
            let loaded = checkpoint::load(c, no_states.into_iter().map(|(pk, _, rules)| (pk, rules)).collect()).await?;
            out.extend(loaded.into_iter().map(|(pk, (rules, states, progress))| {
                DeviceAlarms::with_states(pk, ids.get(&pk).copied().unwrap_or_default(), rules, states, progress)
            }));
        }
        Ok((out, marks))
    }

    /// Keeps `devices` as they are once the transaction that loaded them
    /// at `marks` has written what it must (and taken their transitions
    /// out); `wrote` is the stamp it set when it moved any state. Kept
    /// before the commit: if the commit fails, the stamp in the database is
    /// not the one kept (nor ever will be), and the next transaction reads
    /// them again.
    pub(crate) fn keep(&self, marks: Marks, wrote: Option<i64>, devices: Vec<DeviceAlarms>) {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if kept.generation != marks.generation || kept.writes != Some(marks.writes) {
            // Another transaction of this store got in between: keep nothing.
            kept.states.clear();
            kept.writes = None;
            return;
        }
        kept.writes = Some(wrote.unwrap_or(marks.writes));
        for mut device in devices {
            let pk = device.pk();
            if kept.states.len() < KEPT_DEVICES || kept.states.contains_key(&pk) {
                device.reset();
                kept.states.insert(pk, device);
            }
        }
    }
}
