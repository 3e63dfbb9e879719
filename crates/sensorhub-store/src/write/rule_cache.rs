//! Each device's alarm rules, parsed once and kept between transactions
//! for as long as the rules' generation holds: a transaction that writes
//! readings asks the generation (one row), then reads its devices' states
//! (which change with each reading), and the rules only of devices it has
//! not kept, in the same query as their states. Any change of any rule, by whichever
//! process, bumps the generation (a trigger) and empties the cache.

use crate::StoreResult;
use crate::decide::FastMap;
use crate::sql::Sql;
use crate::sql::alarms::{self, StoredStates};
use sensorhub_core::alarm::AlarmRule;
use std::sync::{Arc, Mutex};

/// Devices whose rules are kept at most (devices without rules count
/// too): about 15 MB with five rules each. Past it, rules are read per
/// transaction as if nothing were kept.
const KEPT_DEVICES: usize = 50_000;

/// The rules of a device, in order (empty: the device has none).
pub(crate) type Rules = Arc<[AlarmRule]>;

/// A store's cache of parsed alarm rules by device.
#[derive(Default)]
pub(crate) struct RuleCache {
    kept: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    /// The generation the rules were read at.
    generation: i64,
    rules: FastMap<i64, Rules>,
}

impl RuleCache {
    /// The rules and the stored states of those of devices `pks` that
    /// have rules, by device: the rules kept, the states read (with the
    /// rules of devices not kept, in the same query).
    pub(crate) async fn load(&self, c: &impl Sql, pks: &[i64]) -> StoreResult<FastMap<i64, (Rules, StoredStates)>> {
        let generation = alarms::generation(c).await?;
        let (mut kept_rules, mut missing) = (FastMap::default(), Vec::new());
        {
            let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
            if kept.generation != generation {
                kept.rules.clear();
                kept.generation = generation;
            }
            for pk in pks {
                match kept.rules.get(pk) {
                    Some(rules) if rules.is_empty() => {}
                    Some(rules) => {
                        kept_rules.insert(*pk, rules.clone());
                    }
                    None => missing.push(*pk),
                }
            }
        }
        let with_kept: Vec<i64> = kept_rules.keys().copied().collect();
        let mut states = alarms::states_of_many(c, &with_kept).await?;
        let mut out: FastMap<i64, (Rules, StoredStates)> =
            kept_rules.into_iter().map(|(pk, rules)| (pk, (rules, states.remove(&pk).unwrap_or_default()))).collect();
        if missing.is_empty() {
            return Ok(out);
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
                out.insert(pk, (rules, states));
            }
        }
        Ok(out)
    }
}
