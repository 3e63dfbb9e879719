//! Each device's webhook subscriptions, kept between the transactions
//! that write readings, so that a group of eight stations' readings asks
//! no statement a device for them: on PostgreSQL those were 0.25 ms of
//! the server's time on a group's serial path (bench/RESULTS.md, the
//! fortieth step).
//!
//! The stored rows stay the truth: triggers move `subscription_generation`
//! on any change that may change a device's list, whoever makes it
//! (schema 23 on PostgreSQL, 22 on SQLite), and what is kept is trusted
//! only at the generation it was read at, read again in each transaction.

use super::tx::{Owed, Tx};
use crate::StoreResult;
use crate::decide::FastMap;
use crate::sql::Sql;
use std::sync::Mutex;

/// The most devices whose lists are kept (a list is a few subscription
/// ids: some 200 bytes a device, so about 10 MiB at most); past it the
/// others are asked in each transaction, as if nothing were kept.
const KEPT_DEVICES: usize = 50_000;

/// A store's cache of subscriptions by device.
#[derive(Default)]
pub(crate) struct SubscriptionCache {
    kept: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    /// The generation the lists were read at.
    generation: i64,
    lists: FastMap<i64, Vec<Owed>>,
}

/// The generation of subscriptions as it stands (in a writing
/// transaction: as it will be when it commits).
pub(crate) async fn generation(c: &impl Sql) -> StoreResult<i64> {
    c.query_one("SELECT generation FROM subscription_generation", &[]).await?.get(0)
}

impl SubscriptionCache {
    /// Whether device `pk`'s list is kept (at whatever generation): a
    /// guess, for a transaction to ask only the others ahead of knowing
    /// the generation.
    pub(crate) fn holds(&self, pk: i64) -> bool {
        self.kept.lock().unwrap_or_else(|e| e.into_inner()).lists.contains_key(&pk)
    }

    /// The lists kept of devices `pks` at `generation`, `None` for one
    /// not kept; forgets every list when the generation moved on (a
    /// transaction that read an older one is told of none).
    pub(crate) fn lists(&self, generation: i64, pks: &[i64]) -> Vec<Option<Vec<Owed>>> {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if kept.generation < generation {
            kept.lists.clear();
            kept.generation = generation;
        }
        if kept.generation != generation {
            return vec![None; pks.len()];
        }
        pks.iter().map(|pk| kept.lists.get(pk).cloned()).collect()
    }

    /// Keeps `lists` (device, list) read at `generation`, unless the
    /// generation has moved since or the cache is full.
    pub(crate) fn keep<'a>(&self, generation: i64, lists: impl IntoIterator<Item = (i64, &'a Vec<Owed>)>) {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if kept.generation != generation {
            return;
        }
        for (pk, list) in lists {
            if kept.lists.len() >= KEPT_DEVICES {
                return;
            }
            kept.lists.insert(pk, list.clone());
        }
    }

    /// The lists of devices `pks` in transaction `tx`, which read
    /// `generation`: `asked` (those asked already, by device), the kept
    /// ones, and the rest asked now, in one go; what was asked is kept.
    pub(crate) async fn resolve(
        &self,
        tx: &impl Tx,
        generation: i64,
        mut asked: FastMap<i64, Vec<Owed>>,
        pks: impl IntoIterator<Item = i64>,
    ) -> StoreResult<FastMap<i64, Vec<Owed>>> {
        let pks: Vec<i64> = pks.into_iter().filter(|pk| !asked.contains_key(pk)).collect();
        let mut lists = FastMap::default();
        let mut late = Vec::new();
        for (pk, list) in pks.iter().zip(self.lists(generation, &pks)) {
            match list {
                Some(list) => {
                    tx.knows(&list);
                    lists.insert(*pk, list);
                }
                None => late.push(*pk),
            }
        }
        if !late.is_empty() {
            asked.extend(late.iter().copied().zip(tx.subscriptions_of(&late).await?));
        }
        self.keep(generation, asked.iter().map(|(pk, list)| (*pk, list)));
        lists.extend(asked);
        Ok(lists)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_kept_at_their_generation_and_forgotten_when_it_moves() {
        let cache = SubscriptionCache::default();
        let list = vec![("sub_a".into(), 4)];
        assert_eq!(cache.lists(3, &[7]), [None]);
        cache.keep(3, [(7, &list)]);
        assert!(cache.holds(7));
        assert_eq!(cache.lists(3, &[7, 8]), [Some(list.clone()), None]);
        cache.keep(2, [(8, &list)]);
        assert_eq!(cache.lists(3, &[8]), [None], "read at another generation: not kept");
        assert_eq!(cache.lists(4, &[7]), [None], "the generation moved: forgotten");
        assert!(!cache.holds(7));
        cache.keep(4, [(7, &list)]);
        assert_eq!(cache.lists(3, &[7]), [None], "a transaction that read an older one is told of none");
        assert_eq!(cache.lists(4, &[7]), [Some(list)], "and the lists stay");
    }
}
