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

/// Bytes the kept answers may take, by [`cost`]'s estimate (about 1 KB
/// an answer with five sensors, so some 16,000 answers; 64 sensors with
/// long names take ten times that). Past it, the others are read per
/// request as if nothing were kept, until a generation moves.
const KEPT_BYTES: usize = 16 << 20;

/// An answer's estimated bytes: the map's entry and the device's
/// allocations (each with its bookkeeping), and its strings.
fn cost(device_id: &str, device: &DeviceHandle) -> usize {
    const ENTRY: usize = 160;
    const SENSOR: usize = 160;
    let strings =
        |s: &sensorhub_core::model::SensorMeta| s.sensor_id.len() + s.name.len() + s.kind.len() + s.unit.len();
    ENTRY + device_id.len() + device.sensors.iter().map(|s| SENSOR + strings(s)).sum::<usize>()
}

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
    /// The kept answers' estimated bytes ([`cost`]).
    bytes: usize,
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
            kept.bytes = 0;
            kept.generations = target.read_at;
        }
        let cost = cost(device_id, &target.device);
        if kept.bytes + cost > KEPT_BYTES {
            return;
        }
        let answer = (Arc::clone(&target.device), target.may_write);
        if kept.by_account.entry(account_id).or_default().insert(device_id.to_owned(), answer).is_none() {
            kept.bytes += cost;
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
        let each = cost("D100000", &target(1, true, 1, 1).device);
        let fits = KEPT_BYTES / each;
        for i in 100_000..100_000 + fits + 10 {
            let id = format!("D{i}");
            t.through(1, &id, Some(seen), async { Ok(Some(target(1, true, 1, 1))) }).await.expect("through");
        }
        let kept = t.kept.lock().expect("lock");
        assert!(kept.bytes <= KEPT_BYTES && kept.bytes + each > KEPT_BYTES, "{} of {KEPT_BYTES}", kept.bytes);
        assert_eq!(kept.by_account.values().map(FastMap::len).sum::<usize>(), fits);
    }
}
