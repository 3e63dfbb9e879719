//! The live hub: one broadcast point per process for readings as they are
//! stored. The store tells [`Publisher`] what every write of readings
//! committed ([`sensorhub_store::observe`]), which hands it to
//! [`LiveHub::publish`]; with a shared Redis the hub sends it
//! through Redis pub/sub so that every instance (and the `import` command)
//! reaches every open stream, else it dispatches it in this process.
//!
//! Each event has an id that grows with publication order: microseconds
//! since the epoch at publication, bumped to stay unique (a hybrid clock,
//! kept in Redis when there is one, so ids mean the same on every
//! instance). Per device the hub keeps the last [`RETAIN_EVENTS`] events of
//! at most [`RETAIN_FOR`], for clients that resume with `Last-Event-ID`.
//! Each client has a queue of at most [`CLIENT_QUEUE`] events; a client
//! whose queue is full is cut (its queue freed), so memory stays bounded.

pub mod access;
mod event;
mod publish;
mod redis;
pub mod slots;

pub use event::{Live, LiveAlarm, LiveReading};
pub use publish::Publisher;

use crate::metrics::Metrics;
use crate::redis_client::SharedRedis;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Events kept per device for clients that resume.
pub const RETAIN_EVENTS: usize = 128;
/// How long an event is kept for clients that resume.
pub const RETAIN_FOR: Duration = Duration::from_secs(3600);
/// Events a client may have waiting before it is cut as lagging.
pub const CLIENT_QUEUE: usize = 256;

/// A reading or a transition with its event id.
#[derive(Debug)]
pub struct LiveEvent {
    /// The event id (`id:` of the stream).
    pub id: u64,
    /// What happened.
    pub item: Live,
    /// When this process received it (for the retention window).
    received: Instant,
}

/// What a subscription yields next.
#[derive(Debug)]
pub enum Next {
    /// An event for the client.
    Event(Arc<LiveEvent>),
    /// The client fell [`CLIENT_QUEUE`] events behind and was cut.
    Lagging,
    /// The hub is shutting down.
    Closed,
}

/// One client's queue.
#[derive(Default)]
struct Client {
    queue: Mutex<ClientQueue>,
    ready: Notify,
}

#[derive(Default)]
struct ClientQueue {
    events: VecDeque<Arc<LiveEvent>>,
    end: Option<fn() -> Next>,
}

impl Client {
    fn queue(&self) -> MutexGuard<'_, ClientQueue> {
        self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Ends the client with `end`, freeing its queue.
    fn end(&self, end: fn() -> Next) {
        let mut q = self.queue();
        q.events = VecDeque::new();
        q.end.get_or_insert(end);
        drop(q);
        self.ready.notify_one();
    }
}

/// A device's retained events and its clients.
#[derive(Default)]
struct DeviceLive {
    retained: VecDeque<Arc<LiveEvent>>,
    clients: Vec<Arc<Client>>,
    /// No retained event has a larger id: an event past it (every event
    /// dispatched here, as ids grow) is known new without looking through
    /// the retained; one that is not (an event Redis hands back out of
    /// order) is looked for among them.
    newest_id: u64,
}

impl DeviceLive {
    fn forget_old(&mut self, now: Instant) {
        while self
            .retained
            .front()
            .is_some_and(|e| self.retained.len() > RETAIN_EVENTS || now.duration_since(e.received) > RETAIN_FOR)
        {
            self.retained.pop_front();
        }
    }
}

/// The broadcast point of a process.
pub struct LiveHub {
    devices: Mutex<HashMap<String, DeviceLive>>,
    /// The newest id issued or seen.
    last_id: AtomicU64,
    redis: Option<Arc<SharedRedis>>,
    /// Subscribed to Redis: events come back through it.
    linked: AtomicBool,
    closed: AtomicBool,
    metrics: Arc<Metrics>,
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
}

impl std::fmt::Debug for LiveHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveHub").field("redis", &self.redis).finish_non_exhaustive()
    }
}

impl LiveHub {
    /// A hub publishing through `redis` when given; nothing listens yet
    /// (see [`LiveHub::start`]).
    pub fn new(redis: Option<Arc<SharedRedis>>, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Self {
            devices: Mutex::default(),
            last_id: AtomicU64::new(0),
            redis,
            linked: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            metrics,
            tasks: Mutex::default(),
        })
    }

    /// Starts the hub's background work on the current runtime (if any):
    /// forgetting expired events, and with Redis, listening to the other
    /// instances. It stops when the hub is dropped.
    pub fn start(self: &Arc<Self>) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        let weak = Arc::downgrade(self);
        let sweeper = rt.spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(60));
            loop {
                tick.tick().await;
                let Some(hub) = weak.upgrade() else { return };
                hub.sweep();
            }
        });
        let mut tasks = self.tasks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        tasks.push(sweeper.abort_handle());
        if let Some(redis) = &self.redis {
            tasks.push(rt.spawn(redis::listen(Arc::downgrade(self), redis.clone())).abort_handle());
        }
    }

    fn devices(&self) -> MutexGuard<'_, HashMap<String, DeviceLive>> {
        self.devices.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Publishes stored readings and transitions: through Redis to every
    /// instance, or in this process (when there is no Redis, or it does
    /// not answer).
    pub async fn publish(&self, items: Vec<Live>) {
        if items.is_empty() {
            return;
        }
        let Some(redis) = &self.redis else {
            return self.dispatch_local(items);
        };
        match redis::publish(redis, &items, now_micros()).await {
            Ok(first) => {
                self.observe(first + items.len() as u64 - 1);
                // Not subscribed (yet, or any more): our own events will not
                // come back, so they are dispatched here.
                if !self.linked.load(Ordering::Acquire) {
                    for (i, item) in items.into_iter().enumerate() {
                        self.dispatch(first + i as u64, item);
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot publish readings to Redis: streams on other instances do not see them");
                self.metrics.live_unshared(items.len());
                self.dispatch_local(items);
            }
        }
    }

    fn dispatch_local(&self, items: Vec<Live>) {
        for item in items {
            self.dispatch(self.next_id(), item);
        }
    }

    /// The next id of this process: later than every id issued or seen.
    fn next_id(&self) -> u64 {
        let now = now_micros();
        let prev = self.last_id.fetch_update(Ordering::AcqRel, Ordering::Acquire, |last| Some(now.max(last + 1)));
        let last = prev.unwrap_or_else(|last| last);
        now.max(last + 1)
    }

    /// Records an id issued elsewhere, so that ids issued here come after it.
    fn observe(&self, id: u64) {
        self.last_id.fetch_max(id, Ordering::AcqRel);
    }

    /// Hands event `id` to the device's clients and retains it; an id
    /// already retained (an event that came back twice) is dropped.
    fn dispatch(&self, id: u64, item: Live) {
        let now = Instant::now();
        let mut devices = self.devices();
        let device = devices.entry(item.device_id().to_owned()).or_default();
        if id <= device.newest_id && device.retained.iter().rev().any(|e| e.id == id) {
            return;
        }
        let event = Arc::new(LiveEvent { id, item, received: now });
        device.newest_id = device.newest_id.max(id);
        device.retained.push_back(event.clone());
        device.forget_old(now);
        let metrics = &self.metrics;
        device.clients.retain(|client| {
            let mut q = client.queue();
            if q.events.len() >= CLIENT_QUEUE {
                drop(q);
                client.end(|| Next::Lagging);
                metrics.live_stream_cut();
                return false;
            }
            q.events.push_back(event.clone());
            drop(q);
            client.ready.notify_one();
            true
        });
    }

    /// Drops expired events, and devices with neither events nor clients.
    fn sweep(&self) {
        let now = Instant::now();
        self.devices().retain(|_, d| {
            d.forget_old(now);
            !d.retained.is_empty() || !d.clients.is_empty()
        });
    }

    /// Subscribes to `device_id`'s events. With `last_id` (a resuming
    /// client's `Last-Event-ID`), the retained events after it come first
    /// (see [`Listener::replay_only`]).
    pub fn subscribe(self: &Arc<Self>, device_id: &str, last_id: Option<u64>) -> Listener {
        let client = Arc::new(Client::default());
        let mut devices = self.devices();
        let device = devices.entry(device_id.to_owned()).or_default();
        device.forget_old(Instant::now());
        let replay = match last_id {
            Some(last) => device.retained.iter().filter(|e| e.id > last).cloned().collect(),
            None => VecDeque::new(),
        };
        if self.closed.load(Ordering::Acquire) {
            client.end(|| Next::Closed);
        } else {
            device.clients.push(client.clone());
        }
        drop(devices);
        self.metrics.live_stream_opened();
        Listener { hub: self.clone(), device_id: device_id.to_owned(), client, replay }
    }

    /// Ends every subscription (the server is shutting down) and refuses new ones.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        for device in self.devices().values_mut() {
            for client in device.clients.drain(..) {
                client.end(|| Next::Closed);
            }
        }
    }

    fn unsubscribe(&self, device_id: &str, client: &Arc<Client>) {
        if let Some(device) = self.devices().get_mut(device_id) {
            device.clients.retain(|c| !Arc::ptr_eq(c, client));
        }
        self.metrics.live_stream_closed();
    }
}

impl Drop for LiveHub {
    fn drop(&mut self) {
        for task in self.tasks.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner).drain(..) {
            task.abort();
        }
    }
}

/// One stream client listening to one device; dropping it unsubscribes.
pub struct Listener {
    hub: Arc<LiveHub>,
    device_id: String,
    client: Arc<Client>,
    /// Retained events a resuming client gets before live ones.
    replay: VecDeque<Arc<LiveEvent>>,
}

impl Listener {
    /// The seconds of the retained readings this subscription resends first.
    pub fn replay_seconds(&self) -> impl Iterator<Item = i64> + '_ {
        self.replay.iter().filter_map(|e| e.item.reading()).map(|r| r.timestamp)
    }

    /// Keeps only the retained readings to resend whose second `stored`
    /// says is still stored: readings removed since they were published
    /// (`readings delete`, retention) are not resent. Transitions stay.
    pub fn replay_only(&mut self, stored: impl Fn(i64) -> bool) {
        self.replay.retain(|e| e.item.reading().is_none_or(|r| stored(r.timestamp)));
    }

    /// The next event, or why there is none.
    pub async fn next(&mut self) -> Next {
        if let Some(event) = self.replay.pop_front() {
            return Next::Event(event);
        }
        loop {
            {
                let mut q = self.client.queue();
                if let Some(event) = q.events.pop_front() {
                    return Next::Event(event);
                }
                if let Some(end) = q.end {
                    return end();
                }
            }
            // A notification sent since the check is kept as a permit.
            self.client.ready.notified().await;
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.hub.unsubscribe(&self.device_id, &self.client);
    }
}

/// Microseconds since the epoch, now.
fn now_micros() -> u64 {
    u64::try_from(jiff::Timestamp::now().as_microsecond()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(device: &str, t: i64) -> Live {
        Live::Reading(LiveReading { device_id: device.into(), timestamp: t, values: vec![("s".into(), 1.5)] })
    }

    fn second_of(e: &LiveEvent) -> i64 {
        e.item.reading().map_or(-1, |r| r.timestamp)
    }

    fn event(next: Next) -> Arc<LiveEvent> {
        match next {
            Next::Event(e) => e,
            other => panic!("expected an event, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn clients_get_their_device_in_order_and_resume_after_an_id() {
        let hub = LiveHub::new(None, Arc::new(Metrics::default()));
        let mut sub = hub.subscribe("A", None);
        hub.publish(vec![reading("A", 1), reading("B", 2), reading("A", 3)]).await;
        let (first, second) = (event(sub.next().await), event(sub.next().await));
        assert_eq!((second_of(&first), second_of(&second)), (1, 3), "only device A, in order");
        assert!(second.id > first.id);
        let mut resumed = hub.subscribe("A", Some(first.id));
        assert_eq!(event(resumed.next().await).id, second.id, "the missed event, not the seen one");
        hub.publish(vec![reading("A", 4)]).await;
        assert_eq!(second_of(&event(resumed.next().await)), 4, "then live ones, nothing twice");
        hub.dispatch(second.id, reading("A", 3));
        hub.publish(vec![reading("A", 5)]).await;
        assert_eq!(second_of(&event(sub.next().await)), 4);
        assert_eq!(second_of(&event(sub.next().await)), 5, "an id already retained is not sent again");
        hub.dispatch(first.id - 1, reading("A", 6));
        assert_eq!(second_of(&event(sub.next().await)), 6, "an id older than the newest but not retained is new");
    }

    #[tokio::test]
    async fn a_full_queue_cuts_the_client_and_frees_it() {
        let metrics = Arc::new(Metrics::default());
        let hub = LiveHub::new(None, metrics.clone());
        let mut slow = hub.subscribe("A", None);
        let readings = (0..=CLIENT_QUEUE as i64).map(|t| reading("A", t)).collect();
        hub.publish(readings).await;
        assert!(matches!(slow.next().await, Next::Lagging));
        assert!(hub.devices()["A"].clients.is_empty());
        assert_eq!(hub.devices()["A"].retained.len(), RETAIN_EVENTS, "retention is bounded too");
        let mut late = hub.subscribe("A", None);
        hub.close();
        assert!(matches!(late.next().await, Next::Closed));
        let text = metrics.render(sensorhub_store::PoolStatus { max: 1, in_use: 0, idle: 1 }, Default::default());
        assert!(text.contains("sensorhub_live_streams_cut_total 1"), "{text}");
        assert!(text.contains("sensorhub_live_streams 2"), "{text}");
        drop((slow, late));
        let text = metrics.render(sensorhub_store::PoolStatus { max: 1, in_use: 0, idle: 1 }, Default::default());
        assert!(text.contains("sensorhub_live_streams 0"), "{text}");
    }
}
