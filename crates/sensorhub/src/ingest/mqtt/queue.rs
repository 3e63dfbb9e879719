//! The queue between the MQTT link and the writer, bounded in bytes: a
//! message holds its share of the bound from the moment the link admits it
//! until the writer has committed it (or refused it), so that what the
//! process keeps of received messages never exceeds `--mqtt-queue-bytes`.
//! A QoS 0 message that does not fit is dropped; a QoS 1 message waits for
//! room, and while it waits the link reads nothing more from the broker.
//!
//! One station (a topic's device id) holds at most a quarter of the bound
//! ([`Stations`]): a station flooding the broker with large arrays at QoS 0
//! has its own messages dropped past its share, not the other stations'.
//! Its QoS 1 messages past its share wait (and the link with them, as for
//! a full queue: the others' wait at the broker, in order, not dropped).
//! A station's first message is not held to its share, however large
//! (only to the queue's bound).

use crate::metrics::Metrics;
use bytes::Bytes;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::Publish;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, TryAcquireError, mpsc};

/// What a queued message costs beyond its topic and payload (its record,
/// the channel's slot): a flood of empty messages is bounded too.
const OVERHEAD_BYTES: usize = 128;

/// A received message, copied out of the link's read buffer (a payload
/// left as a slice of that buffer would keep the whole buffer alive).
#[derive(Debug)]
pub struct Message {
    /// The topic, `{prefix}/{device_id}/readings`.
    pub topic: String,
    /// What the station sent.
    pub payload: Bytes,
    /// 0 or 1 (the subscription's maximum).
    pub qos: QoS,
    /// The packet id the acknowledgement names (QoS 1).
    pub pkid: u16,
}

impl Message {
    /// A copy of `publish` that owns exactly its own bytes.
    pub fn copied(publish: &Publish) -> Self {
        Self {
            topic: String::from_utf8_lossy(&publish.topic).into_owned(),
            payload: Bytes::copy_from_slice(&publish.payload),
            qos: publish.qos,
            pkid: publish.pkid,
        }
    }

    /// The device id: the topic's middle level.
    pub fn device_id(&self) -> &str {
        self.topic.split('/').rev().nth(1).unwrap_or_default()
    }

    /// What the message counts against the bound.
    fn cost(&self) -> usize {
        self.topic.len() + self.payload.len() + OVERHEAD_BYTES
    }
}

/// A message in the queue (or in the writer's hands), holding its room.
pub struct Queued {
    /// The message.
    pub message: Message,
    room: Held,
}

impl Queued {
    /// What it counts against the bound.
    pub fn cost(&self) -> usize {
        self.room.bytes
    }
}

/// Room taken in the queue; given back (and the gauge lowered) on drop.
struct Held {
    bytes: usize,
    _permit: OwnedSemaphorePermit,
    _station: Taken,
    metrics: Arc<Metrics>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.metrics.mqtt_queue_bytes(-(self.bytes as i64));
    }
}

/// The bytes each station holds in the queue, against its share.
struct Stations {
    share: usize,
    held: Mutex<HashMap<String, usize>>,
    /// Told whenever a station's bytes are given back.
    freed: Notify,
}

impl Stations {
    fn held(&self) -> MutexGuard<'_, HashMap<String, usize>> {
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes `bytes` of `station`'s share, if it has them (or holds nothing).
    fn take(self: &Arc<Self>, station: &str, bytes: usize) -> Option<Taken> {
        let mut held = self.held();
        match held.get_mut(station) {
            Some(n) if *n + bytes > self.share => return None,
            Some(n) => *n += bytes,
            None => {
                held.insert(station.to_owned(), bytes);
            }
        }
        Some(Taken { stations: self.clone(), station: station.to_owned(), bytes })
    }

    /// Takes `bytes` of `station`'s share, waiting for the station's own
    /// messages to be written when it holds its share.
    async fn wait(self: &Arc<Self>, station: &str, bytes: usize) -> Taken {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(taken) = self.take(station, bytes) {
                return taken;
            }
            freed.await;
        }
    }
}

/// Bytes of a station's share; given back on drop.
struct Taken {
    stations: Arc<Stations>,
    station: String,
    bytes: usize,
}

impl Drop for Taken {
    fn drop(&mut self) {
        let mut held = self.stations.held();
        if let Some(n) = held.get_mut(&self.station) {
            *n = n.saturating_sub(self.bytes);
            if *n == 0 {
                held.remove(&self.station);
            }
        }
        drop(held);
        self.stations.freed.notify_waiters();
    }
}

/// Why a message was not queued.
#[derive(Debug, PartialEq, Eq)]
pub enum NotQueued {
    /// No room now (QoS 0 only: it is dropped).
    Full,
    /// The writer is gone.
    Closed,
}

/// The link's end.
pub struct Sender {
    tx: mpsc::UnboundedSender<Queued>,
    room: Arc<Semaphore>,
    capacity: usize,
    stations: Arc<Stations>,
    metrics: Arc<Metrics>,
}

/// The writer's end.
pub struct Receiver {
    rx: mpsc::UnboundedReceiver<Queued>,
}

/// A queue that holds at most `capacity` bytes of messages (a message
/// larger than that is charged `capacity`, so it still passes alone), a
/// quarter of them at most of one station.
pub fn bounded(capacity: usize, metrics: Arc<Metrics>) -> (Sender, Receiver) {
    let capacity = capacity.clamp(1, Semaphore::MAX_PERMITS);
    // The channel itself is unbounded: the semaphore's permits bound it.
    let (tx, rx) = mpsc::unbounded_channel();
    let stations = Arc::new(Stations { share: capacity / 4, held: Mutex::default(), freed: Notify::new() });
    (Sender { tx, room: Arc::new(Semaphore::new(capacity)), capacity, stations, metrics }, Receiver { rx })
}

impl Sender {
    /// Queues `message` if there is room for it now, in the queue and in
    /// its station's share.
    pub fn try_send(&self, message: Message) -> Result<(), NotQueued> {
        let bytes = self.charge(&message);
        let permits = u32::try_from(bytes).map_err(|_| NotQueued::Full)?;
        let station = self.stations.take(message.device_id(), bytes).ok_or(NotQueued::Full)?;
        match self.room.clone().try_acquire_many_owned(permits) {
            Ok(permit) => self.push(message, bytes, permit, station),
            Err(TryAcquireError::NoPermits) => Err(NotQueued::Full),
            Err(TryAcquireError::Closed) => Err(NotQueued::Closed),
        }
    }

    /// Queues `message`, waiting for room in its station's share, then in
    /// the queue.
    pub async fn send(&self, message: Message) -> Result<(), NotQueued> {
        let bytes = self.charge(&message);
        let permits = u32::try_from(bytes).unwrap_or(u32::MAX);
        let station = self.stations.wait(message.device_id(), bytes).await;
        let permit = self.room.clone().acquire_many_owned(permits).await.map_err(|_| NotQueued::Closed)?;
        self.push(message, bytes, permit, station)
    }

    fn charge(&self, message: &Message) -> usize {
        message.cost().min(self.capacity).min(u32::MAX as usize)
    }

    fn push(
        &self,
        message: Message,
        bytes: usize,
        permit: OwnedSemaphorePermit,
        station: Taken,
    ) -> Result<(), NotQueued> {
        self.metrics.mqtt_queue_bytes(bytes as i64);
        let room = Held { bytes, _permit: permit, _station: station, metrics: self.metrics.clone() };
        self.tx.send(Queued { message, room }).map_err(|_| NotQueued::Closed)
    }
}

impl Receiver {
    /// The next batch, in order of receipt: waits for one message, then
    /// takes what is already queued up to `max_count` messages, or until
    /// the batch holds `max_bytes` (the message that reaches it included).
    /// Empty when the link is gone.
    pub async fn batch(&mut self, max_count: usize, max_bytes: usize) -> Vec<Queued> {
        let mut batch = Vec::new();
        let Some(first) = self.rx.recv().await else { return batch };
        let mut bytes = first.cost();
        batch.push(first);
        while batch.len() < max_count && bytes < max_bytes {
            match self.rx.try_recv() {
                Ok(next) => {
                    bytes += next.cost();
                    batch.push(next);
                }
                Err(_) => break,
            }
        }
        batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message of station `station` (four characters).
    fn of(station: &str, qos: QoS, payload: usize) -> Message {
        let topic = format!("s/{station}/readings");
        Message { topic, payload: Bytes::from(vec![b'x'; payload]), qos, pkid: 1 }
    }

    /// A message of a station of its own, so that only the queue's bound counts.
    fn message(qos: QoS, payload: usize) -> Message {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        of(&format!("{:04}", NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 10_000), qos, payload)
    }

    /// What a message of `payload` bytes costs.
    fn cost(payload: usize) -> usize {
        "s/ABCD/readings".len() + payload + OVERHEAD_BYTES
    }

    #[tokio::test]
    async fn qos0_is_dropped_when_full_and_room_comes_back_after_the_writer() {
        let metrics = Arc::new(Metrics::default());
        let (tx, mut rx) = bounded(3 * cost(1000), metrics.clone());
        for _ in 0..3 {
            assert_eq!(tx.try_send(message(QoS::AtMostOnce, 1000)), Ok(()));
        }
        assert_eq!(tx.try_send(message(QoS::AtMostOnce, 1000)), Err(NotQueued::Full));
        assert_eq!(tx.try_send(message(QoS::AtMostOnce, 0)), Err(NotQueued::Full), "not even an empty one");
        let batch = rx.batch(2, usize::MAX).await;
        assert_eq!(batch.len(), 2, "at most the count asked for");
        assert_eq!(tx.try_send(message(QoS::AtMostOnce, 1000)), Err(NotQueued::Full), "held while being written");
        drop(batch);
        assert_eq!(tx.try_send(message(QoS::AtMostOnce, 1000)), Ok(()));
        assert!(
            metrics
                .render(Default::default(), Default::default())
                .contains(&format!("sensorhub_mqtt_queue_bytes {}", 2 * cost(1000)))
        );
    }

    #[tokio::test]
    async fn qos1_waits_for_room_and_batches_stop_at_their_bytes() {
        let (tx, mut rx) = bounded(4 * cost(1000), Arc::new(Metrics::default()));
        for _ in 0..4 {
            tx.send(message(QoS::AtLeastOnce, 1000)).await.expect("room");
        }
        let waiting = tokio::spawn(async move {
            tx.send(message(QoS::AtLeastOnce, 1000)).await.expect("room, in the end");
            tx
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "no room yet");
        let batch = rx.batch(100, 2 * cost(1000)).await;
        assert_eq!(batch.len(), 2, "the batch stops at its bytes");
        drop(batch);
        let tx = waiting.await.expect("sent");
        assert_eq!(rx.batch(100, usize::MAX).await.len(), 3);
        // A message larger than the whole bound still passes, alone.
        tx.send(message(QoS::AtLeastOnce, 10 * cost(1000))).await.expect("room");
        assert_eq!(tx.try_send(message(QoS::AtMostOnce, 0)), Err(NotQueued::Full));
        drop(rx);
        assert_eq!(tx.try_send(message(QoS::AtMostOnce, 0)), Err(NotQueued::Closed), "the writer is gone");
    }

    #[tokio::test]
    async fn a_station_holds_a_quarter_and_past_it_its_own_qos0_is_dropped() {
        use QoS::{AtLeastOnce, AtMostOnce};
        let (tx, mut rx) = bounded(8 * cost(1000), Arc::new(Metrics::default()));
        for _ in 0..2 {
            assert_eq!(tx.try_send(of("FLOD", AtMostOnce, 1000)), Ok(()));
        }
        assert_eq!(tx.try_send(of("FLOD", AtMostOnce, 1000)), Err(NotQueued::Full), "past its quarter");
        for i in 0..4 {
            assert_eq!(tx.try_send(of(&format!("S{i:03}"), AtMostOnce, 1000)), Ok(()), "the others' room is whole");
        }
        // With room left in the queue, the flooder's QoS 1 message waits
        // for one of its own to be written.
        let waiting = tokio::spawn(async move {
            tx.send(of("FLOD", AtLeastOnce, 1000)).await.expect("room, in the end");
            tx
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "its share is full, the queue is not");
        let first = rx.batch(1, usize::MAX).await;
        assert_eq!(first[0].message.device_id(), "FLOD");
        drop(first);
        let tx = waiting.await.expect("sent once one of the flooder's was written");
        let rest = rx.batch(100, usize::MAX).await;
        let stations: Vec<&str> = rest.iter().map(|q| q.message.device_id()).collect();
        assert_eq!(stations, ["FLOD", "S000", "S001", "S002", "S003", "FLOD"]);
        drop(rest);
        // A station holding nothing passes with more than its quarter, alone.
        assert_eq!(tx.try_send(of("BIGG", AtMostOnce, 3 * cost(1000))), Ok(()));
        assert_eq!(tx.try_send(of("BIGG", AtMostOnce, 0)), Err(NotQueued::Full));
        let batch = rx.batch(100, usize::MAX).await;
        assert_eq!(batch.len(), 1);
        drop(batch);
        assert_eq!(tx.try_send(of("BIGG", AtMostOnce, 0)), Ok(()), "its share given back");
    }
}
