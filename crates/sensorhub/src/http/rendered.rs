//! Rendered hours: the answer bytes of runs of whole stored hours, kept so
//! that a raw window over hours already asked for is copied out rather than
//! decoded and formatted again, and goes to the socket as one piece rather
//! than one an hour. An entry is keyed by device, first hour and [`Shape`]
//! (the format, zone and sensor fragments it was rendered with); it holds
//! one or more consecutive hours rendered together, with the stored bytes
//! each was rendered from and where each ends in the rendering. A window
//! uses the longest run of its hours, from the first, that are byte for
//! byte the ones rendered (a slice of the rendering, without a copy): a
//! write, delete or retention by any process (an import beside the server,
//! another instance on PostgreSQL) shows at once, with nothing to
//! invalidate. Bounded in bytes; the least recently used entry goes first.

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

/// Bookkeeping counted per hour of an entry.
const HOUR_OVERHEAD: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    device_pk: i64,
    first: i64,
    shape: u64,
}

/// Where one hour of a run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mark {
    chunk: i64,
    /// End of its stored bytes in [`Run::stored`].
    stored_end: usize,
    /// End of its rendering in [`Run::rendered`].
    rendered_end: usize,
    /// Readings rendered up to and including it.
    readings: usize,
}

/// Consecutive whole hours rendered together, with the stored bytes each
/// was rendered from: what the cache keeps. Built by [`RunBuilder`].
#[derive(Debug)]
pub struct Run {
    marks: Vec<Mark>,
    stored: Vec<u8>,
    rendered: Bytes,
}

/// What a window sends of a run: its first hours' rendering, one piece.
#[derive(Debug, Clone)]
pub struct Sent {
    /// The rendering, a slice of the run's.
    pub rendered: Bytes,
    /// How many hours it holds.
    pub hours: usize,
    /// How many readings it holds.
    pub readings: usize,
}

/// A run being rendered: append each hour's rendering to [`RunBuilder::out`]
/// and then [`RunBuilder::hour`] it.
#[derive(Debug, Default)]
pub struct RunBuilder {
    marks: Vec<Mark>,
    stored: Vec<u8>,
    /// The rendering so far: the hours' readings, as one piece.
    pub out: Vec<u8>,
}

impl RunBuilder {
    /// Counts `hour`, whose `readings` readings were just appended to `out`.
    pub fn hour(&mut self, hour: &StoredHour, readings: usize) {
        self.stored.extend_from_slice(&hour.data);
        let before = self.marks.last().map_or(0, |m| m.readings);
        self.marks.push(Mark {
            chunk: hour.chunk,
            stored_end: self.stored.len(),
            rendered_end: self.out.len(),
            readings: before + readings,
        });
    }

    /// The run.
    pub fn finish(mut self) -> Run {
        // The cache counts lengths: hold no more than that.
        self.out.shrink_to_fit();
        self.stored.shrink_to_fit();
        self.marks.shrink_to_fit();
        Run { marks: self.marks, stored: self.stored, rendered: Bytes::from(self.out) }
    }
}

impl Run {
    /// All of it, as a window sends it.
    pub fn sent(&self) -> Sent {
        self.prefix(self.marks.len())
    }

    /// Its first `n` hours (at least one), as a window sends them.
    fn prefix(&self, n: usize) -> Sent {
        let (rendered_end, readings) = match n.checked_sub(1).and_then(|i| self.marks.get(i)) {
            Some(m) => (m.rendered_end, m.readings),
            None => (0, 0),
        };
        Sent { rendered: self.rendered.slice(..rendered_end), hours: n.min(self.marks.len()), readings }
    }

    /// How many of `hours`, from the first, are the stored bytes its hours
    /// were rendered from.
    fn matching(&self, hours: &[StoredHour]) -> usize {
        let mut start = 0;
        self.marks
            .iter()
            .zip(hours)
            .take_while(|(m, h)| {
                let same = m.chunk == h.chunk && self.stored.get(start..m.stored_end) == Some(&h.data[..]);
                start = m.stored_end;
                same
            })
            .count()
    }

    fn cost(&self) -> usize {
        self.stored.len() + self.rendered.len() + self.marks.len() * HOUR_OVERHEAD + ENTRY_OVERHEAD
    }
}

struct Entry {
    shape: Shape,
    run: Run,
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

    /// The rendering with `shape` of the longest run of `hours` (whole hours
    /// of device `device_pk`, consecutive in the store), from the first,
    /// that was rendered from these very stored bytes; `None` when not even
    /// the first was.
    pub fn get(&self, device_pk: i64, shape: &Shape, hours: &[StoredHour]) -> Option<Sent> {
        let key = Key { device_pk, first: hours.first()?.chunk, shape: shape.id };
        let mut lru = self.lru.lock().ok()?;
        let e = lru.map.get(&key).filter(|e| e.shape == *shape)?;
        let n = e.run.matching(hours);
        if n > 0 {
            return Some(e.run.prefix(n));
        }
        // Its first hour was written since: nothing of it will serve again
        // (and the run rendered in its place may be too large to keep).
        if let Some(gone) = lru.map.remove(&key) {
            lru.bytes -= gone.run.cost();
        }
        None
    }

    /// Keeps `run`, rendered with `shape` from hours of device `device_pk`,
    /// evicting the least recently used entries beyond the budget.
    pub fn put(&self, device_pk: i64, shape: &Shape, run: Run) {
        let Some(first) = run.marks.first() else { return };
        let key = Key { device_pk, first: first.chunk, shape: shape.id };
        let entry = Entry { shape: shape.clone(), run };
        let cost = entry.run.cost();
        // An entry larger than an eighth of the budget would push out too much.
        if cost > self.budget / 8 {
            return;
        }
        let Ok(mut lru) = self.lru.lock() else { return };
        if let Some(old) = lru.map.insert(key, entry) {
            lru.bytes -= old.run.cost();
        }
        lru.bytes += cost;
        while lru.bytes > self.budget {
            let Some((_, old)) = lru.map.remove_lru() else { break };
            lru.bytes -= old.run.cost();
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

    /// A run of `hours`, each rendered as its data upper-cased, with one reading each.
    fn run(hours: &[StoredHour]) -> Run {
        let mut b = RunBuilder::default();
        for h in hours {
            b.out.extend(h.data.to_ascii_uppercase());
            b.hour(h, 1);
        }
        b.finish()
    }

    fn got(cache: &RenderedHours, s: &Shape, hours: &[StoredHour]) -> Option<(Vec<u8>, usize, usize)> {
        cache.get(1, s, hours).map(|r| (r.rendered.to_vec(), r.hours, r.readings))
    }

    #[test]
    fn an_entry_serves_only_the_stored_bytes_and_shape_it_was_rendered_from() {
        let cache = RenderedHours::new(1 << 20);
        let (m, cm) = (shape("m"), shape("cm"));
        cache.put(1, &m, run(&[hour(10, b"stored")]));
        assert_eq!(got(&cache, &m, &[hour(10, b"stored")]), Some((b"STORED".to_vec(), 1, 1)));
        assert_eq!(got(&cache, &m, &[hour(10, b"stored, then written to")]), None);
        assert_eq!(got(&cache, &cm, &[hour(10, b"stored")]), None, "another unit renders otherwise");
        assert!(cache.get(2, &m, &[hour(10, b"stored")]).is_none());
        assert_eq!(got(&cache, &m, &[hour(11, b"stored")]), None);
        assert_eq!(got(&cache, &m, &[]), None);
    }

    #[test]
    fn a_run_serves_the_longest_prefix_still_stored_as_rendered() {
        let cache = RenderedHours::new(1 << 20);
        let s = shape("m");
        let hours = [hour(10, b"a"), hour(11, b"bb"), hour(13, b"c")];
        cache.put(1, &s, run(&hours));
        assert_eq!(got(&cache, &s, &hours), Some((b"ABBC".to_vec(), 3, 3)));
        // The window ends earlier, or asks for more: the hours it shares.
        assert_eq!(got(&cache, &s, &hours[..2]), Some((b"ABB".to_vec(), 2, 2)));
        let more = [hour(10, b"a"), hour(11, b"bb"), hour(13, b"c"), hour(14, b"d")];
        assert_eq!(got(&cache, &s, &more), Some((b"ABBC".to_vec(), 3, 3)));
        // An hour written since: the hours before it.
        assert_eq!(got(&cache, &s, &[hour(10, b"a"), hour(11, b"bx"), hour(13, b"c")]), Some((b"A".to_vec(), 1, 1)));
        // An hour that appeared between two rendered ones (12 was empty then).
        assert_eq!(got(&cache, &s, &[hour(10, b"a"), hour(11, b"bb"), hour(12, b"n")]), Some((b"ABB".to_vec(), 2, 2)));
        // A window that starts inside the run is another key.
        assert_eq!(got(&cache, &s, &hours[1..]), None);
        // The same bytes split otherwise between hours are other hours: the
        // first is not the one rendered, so the entry goes, bytes and all.
        assert!(cache.held() > 0);
        assert_eq!(got(&cache, &s, &[hour(10, b"ab"), hour(11, b"b")]), None);
        assert_eq!((cache.held(), got(&cache, &s, &hours)), (0, None));
    }

    /// One hour stored as `data`, rendered as `len` bytes.
    fn rendered_as(chunk: i64, data: &[u8], len: usize) -> Run {
        let mut b = RunBuilder::default();
        b.out.resize(len, b'x');
        b.hour(&hour(chunk, data), 1);
        b.finish()
    }

    #[test]
    fn the_budget_holds_and_the_least_recently_used_goes_first() {
        let cache = RenderedHours::new(8 * 1024);
        let s = shape("m");
        for chunk in 0..40 {
            cache.put(1, &s, rendered_as(chunk, b"d", 600));
            assert!(cache.held() <= 8 * 1024, "{}", cache.held());
            // Hour 0 is read after each put, so it stays.
            assert!(cache.get(1, &s, &[hour(0, b"d")]).is_some(), "hour 0 after {chunk}");
        }
        assert!(cache.get(1, &s, &[hour(1, b"d")]).is_none(), "an old, unread hour went");
        assert!(cache.get(1, &s, &[hour(39, b"d")]).is_some());
        // Larger than an eighth of the budget: not kept.
        cache.put(1, &s, rendered_as(99, b"d", 2000));
        assert!(cache.get(1, &s, &[hour(99, b"d")]).is_none());
        assert!(RenderedHours::new(0).get(1, &s, &[hour(0, b"d")]).is_none());
    }
}
