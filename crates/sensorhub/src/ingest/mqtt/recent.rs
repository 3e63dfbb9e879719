//! What the writer remembers per device id (its sensors, when a refusal
//! was last logged), bounded whatever ids publishers invent: entries
//! expire, and a full map notes no new id until old ones have expired.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A map from device id to a value noted at some instant, forgotten after
/// `ttl`. Ids are noted in generations of `ttl`: the current one holds at
/// most `capacity` ids, and the previous one is dropped whole when the next
/// begins, so that forgetting costs nothing per id and at most twice
/// `capacity` ids are ever held (each at most an identifier long: the
/// caller checks ids first).
pub struct Recent<V> {
    current: HashMap<String, (Instant, V)>,
    previous: HashMap<String, (Instant, V)>,
    began: Instant,
    ttl: Duration,
    capacity: usize,
}

impl<V> Recent<V> {
    /// An empty map.
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        Self { current: HashMap::new(), previous: HashMap::new(), began: Instant::now(), ttl, capacity }
    }

    /// The value noted for `id` within the last `ttl`.
    pub fn get(&self, id: &str) -> Option<&V> {
        self.current
            .get(id)
            .or_else(|| self.previous.get(id))
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, value)| value)
    }

    /// Notes `value` for `id` now; `false` (and nothing noted) when this
    /// generation already holds `capacity` other ids.
    pub fn insert(&mut self, id: &str, value: V) -> bool {
        if self.began.elapsed() >= self.ttl {
            // Everything in `previous` is older than `ttl` by now.
            self.previous = std::mem::take(&mut self.current);
            self.began = Instant::now();
        }
        if let Some(entry) = self.current.get_mut(id) {
            *entry = (Instant::now(), value);
            return true;
        }
        if self.current.len() >= self.capacity {
            return false;
        }
        self.current.insert(id.to_owned(), (Instant::now(), value));
        true
    }

    /// Forgets every id.
    pub fn clear(&mut self) {
        self.current.clear();
        self.previous.clear();
    }

    /// How many ids are held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expires_and_stays_within_its_capacity() {
        let mut recent = Recent::new(Duration::from_secs(60), 8);
        for i in 0..8 {
            assert!(recent.insert(&format!("D-{i}"), i));
        }
        assert_eq!(recent.get("D-3"), Some(&3));
        assert!(!recent.insert("D-new", 99), "full of fresh entries: nothing new is noted");
        assert!(recent.insert("D-3", 33), "a known id is updated");
        assert_eq!((recent.get("D-3"), recent.get("D-new"), recent.len()), (Some(&33), None, 8));
        let mut short = Recent::new(Duration::ZERO, 4);
        for i in 0..1000 {
            assert!(short.insert(&format!("D-{i}"), ()), "expired entries make room");
            assert!(short.len() <= 8);
        }
        assert_eq!(short.get("D-999"), None, "expired at once");
        recent.clear();
        assert_eq!((recent.get("D-3"), recent.len()), (None, 0));
        assert!(recent.insert("D-new", 99), "room again");
    }
}
