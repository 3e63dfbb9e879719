//! Keys last found valid, each with what it gave and the store's
//! generations it was found at: API keys with their scope, webhook keys
//! with their account. A kept answer is used without looking the key up
//! again only where the store confirms the generations in the statement
//! that answers the request. A public raw window: the store reads the
//! access generation with the window's device (`Reads::window_hours`) and
//! the answer is served only when it is still the kept one. A webhook
//! reading (ingest mode): the store writes it only if the access and
//! device generations in its own transaction are still the kept ones
//! (`ReadingWrites::ingest_at`), else the key is looked up again. So a
//! revoked key, a disabled account or a narrowed key (each moves the
//! access generation, by the store's triggers, from any process) is
//! refused at the next request, as when every request looked its key up.
//! Anything else (another generation, an error, an aggregate) looks the
//! key up again. Bounded in entries (about 100 bytes each); the least
//! recently used goes first.

use hashlink::LruCache;
use sensorhub_core::secret::KeyDigest;
use sensorhub_store::Scope;
use std::sync::Mutex;

/// Keys kept by default: about 100 bytes each.
pub const DEFAULT_KEYS: usize = 4096;

/// What a key was found to give, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeptKey {
    /// The devices the key sees.
    pub scope: Scope,
    /// The access generation read in the key's lookup.
    pub access: i64,
}

/// What a webhook key was found to give, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeptHook {
    /// The key's account.
    pub account_id: i64,
    /// The generations read in the key's lookup.
    pub generations: sensorhub_store::Generations,
}

/// The cache of one kind of key; shared by every request of a server.
pub struct KeptKeys<V = KeptKey> {
    map: Mutex<LruCache<KeyDigest, V>>,
}

impl<V> std::fmt::Debug for KeptKeys<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = self.map.lock().map(|m| m.len()).unwrap_or_default();
        f.debug_struct("KeptKeys").field("held", &held).finish()
    }
}

impl<V: Copy> KeptKeys<V> {
    /// A cache of at most `capacity` keys.
    pub fn new(capacity: usize) -> Self {
        Self { map: Mutex::new(LruCache::new(capacity.max(1))) }
    }

    /// The answer kept for `digest`.
    pub fn get(&self, digest: &KeyDigest) -> Option<V> {
        self.map.lock().ok()?.get(digest).copied()
    }

    /// Keeps what a lookup of `digest` found (a valid key only).
    pub fn keep(&self, digest: KeyDigest, kept: V) {
        if let Ok(mut map) = self.map.lock() {
            map.insert(digest, kept);
        }
    }

    /// Drops the answer for `digest` (its lookup found it unknown or refused).
    pub fn forget(&self, digest: &KeyDigest) {
        if let Ok(mut map) = self.map.lock() {
            map.remove(digest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_answer_forgets_on_demand_and_holds_at_most_its_capacity() {
        let keys = KeptKeys::new(2);
        let scope = Scope::Account { account_id: 1, key: None };
        keys.keep([1; 32], KeptKey { scope, access: 3 });
        keys.keep([1; 32], KeptKey { scope, access: 4 });
        assert_eq!(keys.get(&[1; 32]), Some(KeptKey { scope, access: 4 }));
        keys.keep([2; 32], KeptKey { scope, access: 4 });
        keys.get(&[1; 32]);
        keys.keep([3; 32], KeptKey { scope, access: 4 });
        assert_eq!(keys.get(&[2; 32]), None, "the least recently used went first");
        assert!(keys.get(&[1; 32]).is_some() && keys.get(&[3; 32]).is_some());
        keys.forget(&[1; 32]);
        assert_eq!(keys.get(&[1; 32]), None);
    }
}
