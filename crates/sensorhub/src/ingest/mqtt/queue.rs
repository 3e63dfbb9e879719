//! The queue between the MQTT link and the writer, bounded in bytes: a
//! message holds its share of the bound from the moment the link admits it
//! until the writer has committed it (or refused it), so that what the
//! process keeps of received messages never exceeds `--mqtt-queue-bytes`.
//! A QoS 0 message that does not fit is dropped; a QoS 1 message waits for
//! room, and while it waits the link reads nothing more from the broker.

use crate::metrics::Metrics;
use bytes::Bytes;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::Publish;
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError, mpsc};

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
    metrics: Arc<Metrics>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.metrics.mqtt_queue_bytes(-(self.bytes as i64));
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
    metrics: Arc<Metrics>,
}

/// The writer's end.
pub struct Receiver {
    rx: mpsc::UnboundedReceiver<Queued>,
}

/// A queue that holds at most `capacity` bytes of messages (a message
/// larger than that is charged `capacity`, so it still passes alone).
pub fn bounded(capacity: usize, metrics: Arc<Metrics>) -> (Sender, Receiver) {
    let capacity = capacity.clamp(1, Semaphore::MAX_PERMITS);
    // The channel itself is unbounded: the semaphore's permits bound it.
    let (tx, rx) = mpsc::unbounded_channel();
    (Sender { tx, room: Arc::new(Semaphore::new(capacity)), capacity, metrics }, Receiver { rx })
}

impl Sender {
    /// Queues `message` if there is room for it now.
    pub fn try_send(&self, message: Message) -> Result<(), NotQueued> {
        let bytes = self.charge(&message);
        let permits = u32::try_from(bytes).map_err(|_| NotQueued::Full)?;
        match self.room.clone().try_acquire_many_owned(permits) {
            Ok(permit) => self.push(message, bytes, permit),
            Err(TryAcquireError::NoPermits) => Err(NotQueued::Full),
            Err(TryAcquireError::Closed) => Err(NotQueued::Closed),
        }
    }

    /// Queues `message`, waiting for room.
    pub async fn send(&self, message: Message) -> Result<(), NotQueued> {
        let bytes = self.charge(&message);
        let permits = u32::try_from(bytes).unwrap_or(u32::MAX);
        let permit = self.room.clone().acquire_many_owned(permits).await.map_err(|_| NotQueued::Closed)?;
        self.push(message, bytes, permit)
    }

    fn charge(&self, message: &Message) -> usize {
        message.cost().min(self.capacity).min(u32::MAX as usize)
    }

    fn push(&self, message: Message, bytes: usize, permit: OwnedSemaphorePermit) -> Result<(), NotQueued> {
        self.metrics.mqtt_queue_bytes(bytes as i64);
        let room = Held { bytes, _permit: permit, metrics: self.metrics.clone() };
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

    fn message(qos: QoS, payload: usize) -> Message {
        Message { topic: "s/D/readings".into(), payload: Bytes::from(vec![b'x'; payload]), qos, pkid: 1 }
    }

    /// What a message of `payload` bytes costs.
    fn cost(payload: usize) -> usize {
        "s/D/readings".len() + payload + OVERHEAD_BYTES
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
}
