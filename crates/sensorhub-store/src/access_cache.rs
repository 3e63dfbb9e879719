//! Answers about access kept between requests: which device a caller
//! names, and what it may do with it. On PostgreSQL each such question cost
//! a round trip or a larger statement of its own; on SQLite a join and an
//! allocation per sensor.
//!
//! - **Write targets** ([`WriteTargets`]): each webhook or line-protocol
//!   request asks "which device is this, and may my account write it?"
//!   ([`crate::Access::writable_device`]).
//! - **Visible devices** ([`VisibleDevices`]): each raw window asks "which
//!   device is this, as my scope sees it?" before reading its hours.
//!
//! The stored rows stay the truth. An answer is kept with the generations
//! it was read at (in the same statement or snapshot), and is used only for
//! a caller that read exactly those generations: triggers move one of them
//! on every change that could alter the answer (a device or a sensor
//! changed, a grant or an owner changed, a key's scope or an account
//! changed, an account or a device removed), whoever makes it (schemas 8,
//! 11 and 13). A caller that read other generations, newer or older, reads
//! the answer again. Only devices the caller sees are kept: a sender
//! inventing ids cannot crowd the real stations out.

use crate::decide::FastMap;
use crate::{DeviceHandle, Generations, Scope, StoreResult};
use std::hash::Hash;
use std::sync::{Arc, Mutex};

/// Bytes the kept answers of one kind may take, by [`cost`]'s estimate
/// (about 1 KB an answer with five sensors, so some 16,000 answers; 64
/// sensors with long names take ten times that). Past it, the others are
/// read per request as if nothing were kept, until a generation moves.
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

/// Answers by who asks (`O`) and device id, all read at one pair of
/// generations: those of the newest answer kept.
struct Kept<O, V> {
    answers: Mutex<Answers<O, V>>,
}

struct Answers<O, V> {
    /// The generations every kept answer was read at.
    generations: Generations,
    /// The kept answers' estimated bytes ([`cost`]).
    bytes: usize,
    by: FastMap<O, FastMap<String, V>>,
}

impl<O, V> Default for Kept<O, V> {
    fn default() -> Self {
        let answers = Answers { generations: Generations::default(), bytes: 0, by: FastMap::default() };
        Kept { answers: Mutex::new(answers) }
    }
}

impl<O: Hash + Eq, V: Clone> Kept<O, V> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Answers<O, V>> {
        self.answers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The answer for `who` and `device_id`, with the generations it was read at.
    fn get(&self, who: &O, device_id: &str) -> Option<(Generations, V)> {
        let kept = self.lock();
        kept.by.get(who)?.get(device_id).map(|v| (kept.generations, v.clone()))
    }

    /// The answer for `who` and `device_id` if it was read at `seen`.
    fn at(&self, seen: Generations, who: &O, device_id: &str) -> Option<V> {
        self.get(who, device_id).filter(|(at, _)| *at == seen).map(|(_, v)| v)
    }

    /// Keeps `answer` (about `device`), read at `read_at`, if those are
    /// the newest generations seen and the bound leaves room.
    fn keep(&self, read_at: Generations, who: O, device_id: &str, device: &DeviceHandle, answer: V) {
        let mut kept = self.lock();
        if kept.generations != read_at {
            if !read_at.at_or_after(kept.generations) {
                return;
            }
            kept.by.clear();
            kept.bytes = 0;
            kept.generations = read_at;
        }
        let cost = cost(device_id, device);
        if kept.bytes + cost > KEPT_BYTES {
            return;
        }
        if kept.by.entry(who).or_default().insert(device_id.to_owned(), answer).is_none() {
            kept.bytes += cost;
        }
    }
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

/// A store's kept write targets, by account and device id.
#[derive(Default)]
pub(crate) struct WriteTargets {
    kept: Kept<i64, (Arc<DeviceHandle>, bool)>,
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
            && let Some(hit) = self.kept.at(seen, &account_id, device_id)
        {
            return Ok(Some(hit));
        }
        let Some(target) = read.await? else { return Ok(None) };
        let answer = (Arc::clone(&target.device), target.may_write);
        self.kept.keep(target.read_at, account_id, device_id, &target.device, answer);
        Ok(Some((target.device, target.may_write)))
    }
}

/// A scope as a map key: the account and the scoped key, if any.
type ScopeKey = (Option<i64>, Option<i64>);

fn scope_key(scope: Scope) -> ScopeKey {
    scope.params()
}

/// A store's kept visible devices, by scope and device id: the device a
/// raw window names, with its sensors, as that scope sees it.
#[derive(Default)]
pub(crate) struct VisibleDevices {
    kept: Kept<ScopeKey, Arc<DeviceHandle>>,
}

impl VisibleDevices {
    /// The device `device_id` as `scope` sees it, if that was read at `seen`.
    pub(crate) fn at(&self, seen: Generations, scope: Scope, device_id: &str) -> Option<Arc<DeviceHandle>> {
        self.kept.at(seen, &scope_key(scope), device_id)
    }

    /// The device `device_id` as `scope` saw it, with the generations it
    /// was read at, whatever they are now: what a backend that reads the
    /// generations with the hours in one statement guesses from.
    pub(crate) fn guess(&self, scope: Scope, device_id: &str) -> Option<(Generations, Arc<DeviceHandle>)> {
        self.kept.get(&scope_key(scope), device_id)
    }

    /// Keeps `device`, visible to `scope` as `device_id` at `read_at`.
    pub(crate) fn keep(&self, read_at: Generations, scope: Scope, device_id: &str, device: &Arc<DeviceHandle>) {
        self.kept.keep(read_at, scope_key(scope), device_id, device, Arc::clone(device));
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

    #[test]
    fn a_visible_device_is_kept_per_scope_at_its_generations() {
        let v = VisibleDevices::default();
        let g = |access, devices| Generations { access, devices };
        let device = |pk| Arc::new(DeviceHandle { pk, sensors: Vec::new() });
        let (account, key) =
            (Scope::Account { account_id: 1, key: None }, Scope::Account { account_id: 1, key: Some(5) });
        v.keep(g(1, 1), account, "D1", &device(7));
        assert_eq!(v.at(g(1, 1), account, "D1").map(|d| d.pk), Some(7));
        assert!(v.at(g(1, 1), key, "D1").is_none(), "a scoped key of the account asks for itself");
        assert!(v.at(g(1, 1), Scope::Account { account_id: 2, key: None }, "D1").is_none());
        assert!(v.at(g(1, 1), Scope::All, "D1").is_none());
        assert!(v.at(g(2, 1), account, "D1").is_none(), "access moved");
        assert!(v.at(g(1, 2), account, "D1").is_none(), "devices moved");
        assert_eq!(v.guess(account, "D1").map(|(at, d)| (at, d.pk)), Some((g(1, 1), 7)), "a guess tells when");
        // An answer read before the kept ones does not replace them; a newer one does.
        v.keep(g(0, 9), key, "D1", &device(8));
        assert!(v.guess(key, "D1").is_none());
        v.keep(g(2, 2), key, "D1", &device(8));
        assert!(v.guess(account, "D1").is_none(), "older answers went");
        assert_eq!(v.at(g(2, 2), key, "D1").map(|d| d.pk), Some(8));
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
        let kept = t.kept.lock();
        assert!(kept.bytes <= KEPT_BYTES && kept.bytes + each > KEPT_BYTES, "{} of {KEPT_BYTES}", kept.bytes);
        assert_eq!(kept.by.values().map(FastMap::len).sum::<usize>(), fits);
    }
}
