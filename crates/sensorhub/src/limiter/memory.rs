//! The in-memory limiter: one process's view, sharded maps of arrival times.
//! Memory stays bounded: a key whose quota is whole again carries no
//! information and is dropped by a sweep, and at most `MAX_KEYS` are kept
//! (a shard full of live callers is emptied rather than grown).

use super::{Decision, Limiter, Quota, gcra};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

const SHARDS: usize = 16;
/// Keys kept at most (about 64 bytes each); past it, fresh keys are swept first.
const MAX_KEYS: usize = 1 << 20;

/// GCRA state of many callers in memory.
pub struct MemoryLimiter {
    quota: Quota,
    epoch: Instant,
    shards: Vec<Mutex<HashMap<[u8; 32], u64>>>,
}

impl MemoryLimiter {
    /// A limiter granting `quota` to every key.
    pub fn new(quota: Quota) -> Self {
        Self { quota, epoch: Instant::now(), shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect() }
    }

    fn now(&self) -> u64 {
        // Offset by one period so that "now - period" never underflows.
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX) + self.quota.period_ns()
    }

    fn shard(&self, key: &[u8; 32]) -> &Mutex<HashMap<[u8; 32], u64>> {
        &self.shards[usize::from(key[0]) % SHARDS]
    }

    /// Drops keys whose quota is whole again; returns how many are left.
    pub fn sweep(&self) -> usize {
        let now = self.now();
        self.shards
            .iter()
            .map(|s| match s.lock() {
                Ok(mut map) => {
                    map.retain(|_, tat| *tat > now);
                    map.len()
                }
                Err(_) => 0,
            })
            .sum()
    }

    /// Number of keys held.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().map(|m| m.len()).unwrap_or(0)).sum()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn step(&self, key: &[u8; 32], spend: bool) -> Decision {
        let now = self.now();
        let Ok(mut map) = self.shard(key).lock() else {
            // A poisoned shard must not take the service down: let it pass.
            return gcra(self.quota, None, now, false).0;
        };
        let (decision, next) = gcra(self.quota, map.get(key).copied(), now, spend);
        if let Some(tat) = next {
            if map.len() >= MAX_KEYS / SHARDS && !map.contains_key(key) {
                map.retain(|_, t| *t > now);
                if map.len() >= MAX_KEYS / SHARDS {
                    // Still full of live callers: start the shard afresh rather than grow.
                    tracing::warn!("rate-limit shard full; forgetting its callers");
                    map.clear();
                }
            }
            map.insert(*key, tat);
        }
        decision
    }
}

#[async_trait::async_trait]
impl Limiter for MemoryLimiter {
    async fn check(&self, key: &[u8; 32]) -> Decision {
        self.step(key, true)
    }

    async fn is_over(&self, key: &[u8; 32]) -> bool {
        !self.step(key, false).allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn keys_are_independent_and_swept_when_whole() {
        let limiter = MemoryLimiter::new(Quota { count: 2, period: Duration::from_millis(50) });
        let (a, b) = ([1u8; 32], [2u8; 32]);
        assert!(limiter.check(&a).await.allowed);
        assert!(limiter.check(&a).await.allowed);
        assert!(!limiter.check(&a).await.allowed);
        assert!(limiter.is_over(&a).await);
        assert!(limiter.check(&b).await.allowed, "another key has its own quota");
        assert_eq!(limiter.len(), 2);
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(limiter.sweep(), 0, "whole quotas are forgotten");
        assert!(limiter.check(&a).await.allowed);
    }
}
