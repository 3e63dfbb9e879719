//! Write permissions kept between requests: each webhook or line-protocol
//! request asks "which device is this, and may my account write it?"
//! ([`crate::Access::writable_device`]), and on PostgreSQL that question
//! cost a round trip of its own after the key's.
//!
//! The stored rows stay the truth. An answer is kept with the generations
//! it was read at (in the same statement), and is used only for a caller
//! whose key was looked up at exactly those generations: triggers move one
//! of them on every change that could alter the answer (a device or a
//! sensor changed, a grant or an owner changed, an account or a device
//! removed), whoever makes it (schemas 8, 11 and 13). A caller that read
//! other generations, newer or older, reads the answer again. Only
//! devices the account sees are kept: a sender inventing ids cannot crowd
//! the real stations out.

use crate::decide::FastMap;
use crate::{DeviceHandle, Generations, StoreResult};
use std::sync::{Arc, Mutex};

/// Answers kept at most: by estimate about 700 bytes each with five
/// sensors, so 14 MB. Past it, the others are read per request as if
/// nothing were kept.
const KEPT_TARGETS: usize = 20_000;

/// A device an account sees, whether it may write it, and when that was
/// read.
#[derive(Debug, Clone)]
pub(crate) struct WriteTarget {
    /// The device with its sensors.
    pub device: Arc<DeviceHandle>,
    /// Whether the account owns it or holds a write grant.
    pub may_write: bool,
    /// The generations the answer was read at.
    pub read_at: Generations,
}

/// A store's kept answers, by account and device id.
#[derive(Default)]
pub(crate) struct WriteTargets {
    kept: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    /// The generations every kept answer was read at.
    generations: Generations,
    /// How many answers are kept.
    len: usize,
    by_account: FastMap<i64, FastMap<String, (Arc<DeviceHandle>, bool)>>,
}

impl WriteTargets {
    /// The answer for `account_id` and `device_id`: kept when it was read
    /// at `seen` (the caller's key was looked up at those generations),
    /// else `read` (which also tells when it read it), kept for later
    /// callers at its generations if they are the newest seen.
    pub(crate) async fn through(
        &self,
        account_id: i64,
        device_id: &str,
        seen: Option<Generations>,
        read: impl Future<Output = StoreResult<Option<WriteTarget>>>,
    ) -> StoreResult<Option<(Arc<DeviceHandle>, bool)>> {
        if let Some(seen) = seen
            && let Some(hit) = self.kept_at(seen, account_id, device_id)
        {
            return Ok(Some(hit));
        }
        let Some(target) = read.await? else { return Ok(None) };
        self.keep(account_id, device_id, &target);
        Ok(Some((target.device, target.may_write)))
    }

    fn kept_at(&self, seen: Generations, account_id: i64, device_id: &str) -> Option<(Arc<DeviceHandle>, bool)> {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if kept.generations != seen {
            return None;
        }
        kept.by_account.get(&account_id)?.get(device_id).cloned()
    }

    fn keep(&self, account_id: i64, device_id: &str, target: &WriteTarget) {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if kept.generations != target.read_at {
            if !target.read_at.at_or_after(kept.generations) {
                return;
            }
            kept.by_account.clear();
            kept.len = 0;
            kept.generations = target.read_at;
        }
        if kept.len >= KEPT_TARGETS {
            return;
        }
        let answer = (Arc::clone(&target.device), target.may_write);
        if kept.by_account.entry(account_id).or_default().insert(device_id.to_owned(), answer).is_none() {
            kept.len += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(pk: i64, may_write: bool, access: i64, devices: i64) -> WriteTarget {
        WriteTarget {
            device: Arc::new(DeviceHandle { pk, sensors: Vec::new() }),
            may_write,
            read_at: Generations { access, devices },
        }
    }

    async fn ask(t: &WriteTargets, seen: Generations, answer: Option<WriteTarget>) -> Option<(i64, bool)> {
        let got = t.through(1, "D1", Some(seen), async { Ok(answer) }).await.expect("through");
        got.map(|(d, may)| (d.pk, may))
    }

    #[tokio::test]
    async fn an_answer_is_used_only_at_the_generations_it_was_read_at() {
        let t = WriteTargets::default();
        let g = |access, devices| Generations { access, devices };
        assert_eq!(ask(&t, g(1, 1), Some(target(7, true, 1, 1))).await, Some((7, true)), "read");
        assert_eq!(ask(&t, g(1, 1), None).await, Some((7, true)), "kept: not read again");
        // Access moved (a grant narrowed): read again, and the new answer kept.
        assert_eq!(ask(&t, g(2, 1), Some(target(7, false, 2, 1))).await, Some((7, false)));
        assert_eq!(ask(&t, g(2, 1), None).await, Some((7, false)));
        // Devices moved: the device is gone.
        assert_eq!(ask(&t, g(2, 2), None).await, None);
        // A caller that looked its key up before a change is not answered
        // from what was kept after it, nor does its older answer replace it.
        assert_eq!(ask(&t, g(3, 3), Some(target(8, true, 3, 3))).await, Some((8, true)));
        assert_eq!(ask(&t, g(1, 1), Some(target(7, true, 1, 1))).await, Some((7, true)), "an older caller reads");
        assert_eq!(ask(&t, g(3, 3), None).await, Some((8, true)), "the newer answer stays");
        // A caller without generations (Basic auth) always reads.
        let read = t.through(1, "D1", None, async { Ok(Some(target(9, true, 3, 3))) }).await.expect("through");
        assert_eq!(read.map(|(d, _)| d.pk), Some(9));
    }

    #[tokio::test]
    async fn no_more_than_the_bound_is_kept() {
        let t = WriteTargets::default();
        let seen = Generations { access: 1, devices: 1 };
        for i in 0..KEPT_TARGETS + 10 {
            let id = format!("D{i}");
            t.through(1, &id, Some(seen), async { Ok(Some(target(1, true, 1, 1))) }).await.expect("through");
        }
        let kept = t.kept.lock().expect("lock");
        assert_eq!(kept.len, KEPT_TARGETS);
        assert_eq!(kept.by_account.values().map(FastMap::len).sum::<usize>(), KEPT_TARGETS);
    }
}
