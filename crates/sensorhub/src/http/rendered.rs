//! Rendered hours: the answer bytes of whole stored hours, kept so that a
//! raw window over hours already asked for is copied out rather than decoded
//! and formatted again. An entry is keyed by device, hour and [`Shape`] (the
//! format, zone and sensor fragments it was rendered with) and holds the
//! stored bytes it was rendered from: it is used only while the hour read
//! from the store is byte for byte the one rendered, so a write, delete or
//! retention by any process (an import beside the server, another instance
//! on PostgreSQL) shows at once, with nothing to invalidate. Bounded in
//! bytes; the least recently used entry goes first.

use super::encode::Shape;
use bytes::Bytes;
use hashlink::LruCache;
use sensorhub_store::StoredHour;
use std::sync::Mutex;

/// Bytes the cache holds by default (stored and rendered, with a little per
/// entry): a month of one-minute readings of a five-sensor station renders
/// to about 12 MiB.
pub const DEFAULT_BUDGET: usize = 24 << 20;

/// Bookkeeping counted per entry besides its bytes.
const ENTRY_OVERHEAD: usize = 96;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    device_pk: i64,
    chunk: i64,
    shape: u64,
}

struct Entry {
    shape: Shape,
    stored: Vec<u8>,
    rendered: Bytes,
    readings: usize,
}

impl Entry {
    fn cost(&self) -> usize {
        self.stored.len() + self.rendered.len() + ENTRY_OVERHEAD
    }
}

struct Lru {
    map: LruCache<Key, Entry>,
    bytes: usize,
}

/// The cache; shared by every request of a server.
pub struct RenderedHours {
    lru: Mutex<Lru>,
    budget: usize,
}

impl std::fmt::Debug for RenderedHours {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RenderedHours").field("budget", &self.budget).field("held", &self.held()).finish()
    }
}

impl RenderedHours {
    /// A cache of at most `budget` bytes (0: nothing is kept).
    pub fn new(budget: usize) -> RenderedHours {
        RenderedHours { lru: Mutex::new(Lru { map: LruCache::new_unbounded(), bytes: 0 }), budget }
    }

    /// Bytes held now.
    pub fn held(&self) -> usize {
        self.lru.lock().map_or(0, |l| l.bytes)
    }

    /// The rendering of `hour` of device `device_pk` with `shape`, and its
    /// reading count, if it was rendered from these very stored bytes.
    pub fn get(&self, device_pk: i64, shape: &Shape, hour: &StoredHour) -> Option<(Bytes, usize)> {
        let key = Key { device_pk, chunk: hour.chunk, shape: shape.id };
        let mut lru = self.lru.lock().ok()?;
        let e = lru.map.get(&key)?;
        (e.shape == *shape && e.stored == hour.data).then(|| (e.rendered.clone(), e.readings))
    }

    /// Keeps `rendered` (`readings` readings) as `hour`'s rendering with
    /// `shape`, evicting the least recently used entries beyond the budget.
    pub fn put(&self, device_pk: i64, shape: &Shape, hour: StoredHour, rendered: Bytes, readings: usize) {
        let key = Key { device_pk, chunk: hour.chunk, shape: shape.id };
        let entry = Entry { shape: shape.clone(), stored: hour.data, rendered, readings };
        let cost = entry.cost();
        // An entry larger than an eighth of the budget would push out too much.
        if cost > self.budget / 8 {
            return;
        }
        let Ok(mut lru) = self.lru.lock() else { return };
        if let Some(old) = lru.map.insert(key, entry) {
            lru.bytes -= old.cost();
        }
        lru.bytes += cost;
        while lru.bytes > self.budget {
            let Some((_, old)) = lru.map.remove_lru() else { break };
            lru.bytes -= old.cost();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::encode::ReadingEncoder;
    use sensorhub_core::model::SensorMeta;

    fn shape(unit: &str) -> Shape {
        let sensors = [SensorMeta { sensor_id: "s".into(), name: "n".into(), kind: "K".into(), unit: unit.into() }];
        ReadingEncoder::new(&sensors, jiff::tz::Offset::UTC, None).shape().expect("a fixed offset has a shape")
    }

    fn hour(chunk: i64, data: &[u8]) -> StoredHour {
        StoredHour { chunk, data: data.to_vec() }
    }

    #[test]
    fn an_entry_serves_only_the_stored_bytes_and_shape_it_was_rendered_from() {
        let cache = RenderedHours::new(1 << 20);
        let (m, cm) = (shape("m"), shape("cm"));
        cache.put(1, &m, hour(10, b"stored"), Bytes::from_static(b"rendered"), 3);
        assert_eq!(cache.get(1, &m, &hour(10, b"stored")), Some((Bytes::from_static(b"rendered"), 3)));
        assert_eq!(cache.get(1, &m, &hour(10, b"stored, then written to")), None);
        assert_eq!(cache.get(1, &cm, &hour(10, b"stored")), None, "another unit renders otherwise");
        assert_eq!(cache.get(2, &m, &hour(10, b"stored")), None);
        assert_eq!(cache.get(1, &m, &hour(11, b"stored")), None);
    }

    #[test]
    fn the_budget_holds_and_the_least_recently_used_goes_first() {
        let cache = RenderedHours::new(8 * 1024);
        let s = shape("m");
        let body = Bytes::from(vec![b'x'; 600]);
        for chunk in 0..40 {
            cache.put(1, &s, hour(chunk, b"d"), body.clone(), 1);
            assert!(cache.held() <= 8 * 1024, "{}", cache.held());
            // Hour 0 is read after each put, so it stays.
            assert!(cache.get(1, &s, &hour(0, b"d")).is_some(), "hour 0 after {chunk}");
        }
        assert!(cache.get(1, &s, &hour(1, b"d")).is_none(), "an old, unread hour went");
        assert!(cache.get(1, &s, &hour(39, b"d")).is_some());
        // Larger than an eighth of the budget: not kept.
        cache.put(1, &s, hour(99, b"d"), Bytes::from(vec![b'x'; 2000]), 1);
        assert!(cache.get(1, &s, &hour(99, b"d")).is_none());
        assert!(RenderedHours::new(0).get(1, &s, &hour(0, b"d")).is_none());
    }
}
