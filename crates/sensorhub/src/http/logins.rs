//! What HTTP Basic logins share: the cache of verified credentials, the
//! Argon2 slots (one per core, waited for a bounded time), the failure
//! quota per username and the addresses each username logged in from.
//!
//! Password guessing is limited per username as well as per address: each
//! failed check spends the username's quota (`--login-failure-limit`); once
//! it is spent, a login for that name that is not cached is refused with 429
//! before any check, unless it comes from an address where the same name
//! logged in within the last 30 days. An attacker rotating addresses is
//! slowed at every name; the name's owner, at a known address, is not locked
//! out. The quota refills, so nobody is locked out for good: slow down,
//! don't lock.

use super::error::ApiError;
use crate::limiter::Limiter;
use sensorhub_core::secret::KeyDigest;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, SemaphorePermit};

/// A set of digests, each kept for a while, with a bounded size.
pub struct ExpiringSet {
    entries: Mutex<HashMap<KeyDigest, Instant>>,
    ttl: Duration,
    capacity: usize,
}

impl ExpiringSet {
    /// A set keeping each digest for `ttl`, at most `capacity` of them.
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        Self { entries: Mutex::new(HashMap::new()), ttl, capacity }
    }

    /// Whether `key` was inserted less than `ttl` ago.
    pub fn contains(&self, key: &KeyDigest) -> bool {
        let Ok(entries) = self.entries.lock() else { return false };
        entries.get(key).is_some_and(|at| at.elapsed() < self.ttl)
    }

    /// Adds (or renews) `key`; when full, expired keys go first, then all.
    pub fn insert(&self, key: KeyDigest) {
        let Ok(mut entries) = self.entries.lock() else { return };
        if entries.len() >= self.capacity {
            let ttl = self.ttl;
            entries.retain(|_, at| at.elapsed() < ttl);
            if entries.len() >= self.capacity {
                entries.clear();
            }
        }
        entries.insert(key, Instant::now());
    }
}

/// How long a login waits for an Argon2 slot by default before it is
/// answered 503 with `Retry-After`.
pub const DEFAULT_SLOT_WAIT: Duration = Duration::from_secs(2);

/// The state of Basic logins.
pub struct Logins {
    /// Verified credentials (a digest of user, password and stored hash), so
    /// that Argon2 runs once per credential and not once per request.
    pub credentials: ExpiringSet,
    /// (username, address) pairs that logged in: exempt from the username's
    /// failure quota.
    pub known: ExpiringSet,
    /// Failed checks per username; `None` when off.
    pub failures: Option<Arc<dyn Limiter>>,
    /// Argon2 checks running at once at most (one per core): each takes ~19 MiB and a core.
    slots: Semaphore,
    /// How long a login waits for a slot.
    slot_wait: Duration,
}

impl Logins {
    /// Logins with `failures` limiting failed checks per username, waiting
    /// at most `slot_wait` for one of `slots` Argon2 slots.
    pub fn new(failures: Option<Arc<dyn Limiter>>, slots: usize, slot_wait: Duration) -> Self {
        Self {
            credentials: ExpiringSet::new(Duration::from_secs(600), 10_000),
            known: ExpiringSet::new(Duration::from_secs(30 * 86_400), 100_000),
            failures,
            slots: Semaphore::new(slots.max(1)),
            slot_wait,
        }
    }

    /// An Argon2 slot, within the wait; past it, 503 with `Retry-After`.
    pub async fn slot(&self) -> Result<SemaphorePermit<'_>, ApiError> {
        match tokio::time::timeout(self.slot_wait, self.slots.acquire()).await {
            Ok(permit) => permit.map_err(|e| ApiError::Internal(e.to_string())),
            Err(_) => Err(ApiError::Busy(format!(
                "no password check could start within {} ms: every Argon2 slot is busy",
                self.slot_wait.as_millis()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_expire_and_stay_bounded() {
        let set = ExpiringSet::new(Duration::from_secs(60), 2);
        set.insert([1; 32]);
        set.insert([2; 32]);
        assert!(set.contains(&[1; 32]));
        set.insert([3; 32]);
        assert!(set.contains(&[3; 32]));
        assert!(set.entries.lock().map(|e| e.len()).unwrap_or(99) <= 2);
        let expired = ExpiringSet::new(Duration::ZERO, 2);
        expired.insert([1; 32]);
        assert!(!expired.contains(&[1; 32]));
    }

    #[tokio::test]
    async fn a_slot_is_waited_for_a_bounded_time() {
        let logins = Logins::new(None, 1, Duration::from_millis(20));
        let held = logins.slot().await.expect("free");
        let err = logins.slot().await.expect_err("busy");
        assert!(matches!(err, ApiError::Busy(_)), "{err}");
        drop(held);
        assert!(logins.slot().await.is_ok());
    }
}
