//! The writer: takes queued messages in batches (bounded in count and in
//! bytes), stores their readings in one transaction, gives their room in
//! the queue back, then acknowledges them. Refused messages are counted,
//! logged at most once a minute per device, and with `--mqtt-errors`
//! published to `{prefix}/{device_id}/errors`, but only for a device that
//! exists: a publisher learns nothing about ids that are not registered.

use super::payload::{self, Rejection};
use super::queue::{self, Message};
use super::recent::Recent;
use super::{MAX_BACKOFF, MqttSettings};
use crate::metrics::Metrics;
use rumqttc::v5::AsyncClient;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::Publish;
use sensorhub_core::ingest::Reason;
use sensorhub_core::model::{ReadingInput, SensorMeta, is_valid_identifier};
use sensorhub_store::{Scope, Store, StoreError};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Most messages committed in one transaction.
const MAX_BATCH: usize = 2048;
/// Most bytes of messages in one batch (the message that reaches it
/// included): what is parsed and held as readings at once.
const MAX_BATCH_BYTES: usize = 4 << 20;
/// How long a device's sensors are remembered before they are looked up
/// again (sooner when a message they would refuse finds the store's
/// device generation moved).
const DEVICE_TTL: Duration = Duration::from_secs(10);
/// How often a device's refusals are logged.
const LOG_EVERY: Duration = Duration::from_secs(60);
/// Device ids remembered at once (sensors, refusals logged), whatever ids
/// publishers invent.
const REMEMBERED_DEVICES: usize = 10_000;
/// Refusals published to errors topics and not yet sent by the link: past
/// this, more are dropped, so that the link's request queue always has
/// room for the acknowledgements (see [`super::spawn`]).
pub(super) const PUBLISHES_IN_FLIGHT: usize = 1024;
/// Acknowledgements handed to the client and not yet sent, at most: what
/// the broker may await ([`super::RECEIVE_MAXIMUM`]).
pub(super) const ACKS_IN_FLIGHT: usize = super::RECEIVE_MAXIMUM as usize;
/// The longest a device id is shown in a log line.
const SHOWN_ID: usize = 128;

/// A device's sensors as last looked up (`None`: no such device).
type CachedDevice = Option<Arc<Vec<SensorMeta>>>;

/// Stores received messages in batches and acknowledges them after the commit.
pub(super) struct Writer {
    pub client: AsyncClient,
    pub store: Arc<dyn Store>,
    pub metrics: Arc<Metrics>,
    pub settings: MqttSettings,
    /// Refusals handed to the client and not yet sent (the link counts them down).
    pub publishes_in_flight: Arc<AtomicUsize>,
    /// Acknowledgements handed to the client and not yet sent (the link
    /// counts them down).
    pub acks_in_flight: Arc<AtomicUsize>,
}

/// Hands acknowledgements (QoS, packet id) to `client` in order, at most
/// [`ACKS_IN_FLIGHT`] not yet sent at a time, so that the client's request
/// queue always has room for the publications counted by
/// `publishes_in_flight` (refusals, alarm transitions). The writer never
/// waits here itself: only the link drains the request queue, and the link
/// may be waiting for the room in the message queue that the writer gives
/// back. (When the writer waited here, a broker that sends more than
/// sensorhub's Receive Maximum, such as Mosquitto with
/// `max_inflight_messages 0`, stopped ingestion for good.) What waits here
/// is 4 bytes a message the broker sent and sensorhub stored.
async fn forward_acks(
    client: AsyncClient,
    in_flight: Arc<AtomicUsize>,
    mut pending: mpsc::UnboundedReceiver<(QoS, u16)>,
) {
    while let Some((qos, pkid)) = pending.recv().await {
        // QoS 0 is not acknowledged (the subscription is QoS 1 at most).
        if qos != QoS::AtLeastOnce {
            continue;
        }
        while in_flight.load(Ordering::Relaxed) >= ACKS_IN_FLIGHT {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        in_flight.fetch_add(1, Ordering::Relaxed);
        let mut ack = Publish::new("", qos, bytes::Bytes::new(), None);
        ack.pkid = pkid;
        if let Err(e) = client.ack(&ack).await {
            tracing::warn!(error = %e, "cannot acknowledge an MQTT message; the broker will send it again");
        }
    }
}

/// Which devices' refusals were logged in the last minute.
struct RefusalLog {
    devices: Recent<()>,
    /// When it was last said that more devices were refused than are logged.
    crowded: Option<Instant>,
}

/// What a writer remembers between batches, bounded: devices' sensors and
/// which devices' refusals were logged.
pub(super) struct Memory {
    devices: Recent<CachedDevice>,
    /// The store's device generation when `devices` were looked up.
    devices_at: Option<i64>,
    log: RefusalLog,
}

impl Memory {
    pub(super) fn new() -> Self {
        Self {
            devices: Recent::new(DEVICE_TTL, REMEMBERED_DEVICES),
            devices_at: None,
            log: RefusalLog { devices: Recent::new(LOG_EVERY, REMEMBERED_DEVICES), crowded: None },
        }
    }

    /// Forgets the devices looked up when the store's device generation
    /// moved since (or cannot be read); says whether it did.
    fn follow(&mut self, generation: Option<i64>) -> bool {
        let moved = generation.is_none() || generation != self.devices_at;
        if moved {
            self.devices.clear();
        }
        self.devices_at = generation;
        moved
    }
}

impl Writer {
    pub async fn run(self, mut queue: queue::Receiver) {
        let mut memory = Memory::new();
        // Acknowledgements reach the client through a queue of their own,
        // which never makes the writer wait (see [`forward_acks`]).
        let (acks, pending) = mpsc::unbounded_channel();
        tokio::spawn(forward_acks(self.client.clone(), self.acks_in_flight.clone(), pending));
        loop {
            let batch = queue.batch(MAX_BATCH, MAX_BATCH_BYTES).await;
            if batch.is_empty() {
                return;
            }
            self.store_messages(batch.iter().map(|q| &q.message), &mut memory).await;
            // The batch's room goes back first: a link waiting for room
            // polls again, and so sends the acknowledgements queued next.
            let done: Vec<(QoS, u16)> = batch.into_iter().map(|q| (q.message.qos, q.message.pkid)).collect();
            // In order of receipt, as MQTT asks; only now that it is committed.
            for ack in done {
                let _ = acks.send(ack);
            }
        }
    }

    /// Stores the readings of `messages` in one transaction (refusing the
    /// messages that break the rules) and says how many were stored;
    /// retries while the database cannot take them.
    pub(super) async fn store_messages<'a>(
        &self,
        messages: impl Iterator<Item = &'a Message>,
        memory: &mut Memory,
    ) -> usize {
        let mut readings: Vec<ReadingInput> = Vec::new();
        // Where each message's readings end in `readings`.
        let mut ends: Vec<usize> = Vec::new();
        // Whether what is remembered of the devices was checked in this batch.
        let mut checked = false;
        for message in messages {
            let mut parsed = self.readings_of(message, &mut memory.devices).await;
            // A refusal that what is remembered of a device decided is
            // decided again if a device or a sensor changed since (a device
            // registered, or given a sensor, while its station publishes):
            // refused, the message would be acknowledged and never sent
            // again. Once a batch, and never on the way to a store.
            if let Err(r) = &parsed
                && !checked
                && [Reason::UnknownDevice, Reason::UnknownSensor].iter().any(|u| u.metric_label() == r.reason)
            {
                checked = true;
                if memory.follow(self.device_generation().await) {
                    parsed = self.readings_of(message, &mut memory.devices).await;
                }
            }
            match parsed {
                Ok(r) => {
                    self.metrics.mqtt_message("stored");
                    readings.extend(r);
                    ends.push(readings.len());
                }
                Err(rejection) => self.refuse(message.device_id(), rejection, &mut memory.log),
            }
        }
        let stored = self.store_all(readings, &ends).await;
        self.metrics.mqtt_readings(stored);
        stored
    }

    /// The readings of one message, or why it is refused.
    async fn readings_of(
        &self,
        message: &Message,
        devices: &mut Recent<CachedDevice>,
    ) -> Result<Vec<ReadingInput>, Rejection> {
        let device_id = message.device_id();
        let sensors = match devices.get(device_id) {
            Some(sensors) => sensors.clone(),
            // Not an id any device can have: no lookup, nothing remembered.
            None if !is_valid_identifier(device_id) => None,
            None => {
                let found = self.find_device(device_id).await;
                devices.insert(device_id, found.clone());
                found
            }
        };
        let Some(sensors) = sensors else {
            let detail = format!("device {:?} is not registered", shown(device_id));
            return Err(payload::unknown_device(detail));
        };
        let now = jiff::Timestamp::now();
        payload::readings(device_id, &sensors, &message.payload, now, self.settings.max_future_skew)
    }

    /// The store's device generation (`None`: it cannot be read now).
    async fn device_generation(&self) -> Option<i64> {
        match self.store.generations().await {
            Ok(g) => Some(g.devices),
            Err(e) => {
                tracing::debug!(error = %e, "cannot read the device generation; devices are looked up again");
                None
            }
        }
    }

    /// The sensors of `device_id` (`None`: no such device), asked again
    /// while the database does not answer: the message waits, unacknowledged.
    async fn find_device(&self, device_id: &str) -> Option<Arc<Vec<SensorMeta>>> {
        let mut wait = Duration::from_millis(100);
        loop {
            match self.store.find_device(Scope::All, device_id).await {
                Ok(found) => return found.map(|d| Arc::new(d.sensors)),
                Err(e) => {
                    tracing::warn!(error = %e, device = %device_id, retry_in = ?wait, "cannot look the device up; retrying");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    /// Stores `readings` (the messages' readings, each message's ending
    /// at its place in `ends`) in one transaction, retrying while the
    /// database cannot take them (the messages stay unacknowledged
    /// meanwhile); says how many were stored. A message the store refuses
    /// (its device or a sensor removed since it was checked) is refused
    /// whole, as a message refused before: an array is all or nothing.
    async fn store_all(&self, readings: Vec<ReadingInput>, ends: &[usize]) -> usize {
        if readings.is_empty() {
            return 0;
        }
        match self.store_now(&readings).await {
            Ok(()) => return readings.len(),
            Err(error) => {
                tracing::warn!(%error, "a batch of MQTT readings was refused; storing its messages one by one")
            }
        }
        let mut start = 0;
        let mut stored = 0;
        for &end in ends {
            let message = &readings[start..end];
            match self.store_now(message).await {
                Ok(()) => stored += message.len(),
                Err(error) => {
                    self.metrics.mqtt_message("bad_reading");
                    let device = message.first().map_or("", |r| r.device_id.as_str());
                    tracing::warn!(%error, %device, "an MQTT message was refused whole");
                }
            }
            start = end;
        }
        stored
    }

    /// Stores `readings` in one transaction, retrying while the database
    /// cannot take them; why, when it refuses them.
    async fn store_now(&self, readings: &[ReadingInput]) -> Result<(), String> {
        let mut wait = Duration::from_millis(100);
        loop {
            // The store takes them (an owned source); a retry takes them again.
            let owned: Vec<ReadingInput> = readings.to_vec();
            let source = Box::new(owned.into_iter().map(Ok));
            match self.store.import(source, sensorhub_store::delivery::Outbox::Deliver).await {
                Ok(_) => return Ok(()),
                Err(StoreError::Invalid(e)) => return Err(e.to_string()),
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?wait, "cannot store MQTT readings; retrying");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    /// Counts, logs and (for a device that exists) publishes a refusal.
    fn refuse(&self, device_id: &str, rejection: Rejection, log: &mut RefusalLog) {
        self.metrics.mqtt_message(rejection.reason);
        // Ids that are not identifiers share one line a minute.
        let key = if is_valid_identifier(device_id) { device_id } else { " not an identifier" };
        if log.devices.get(key).is_none() {
            if log.devices.insert(key, ()) {
                tracing::warn!(device = %shown(device_id), reason = rejection.reason, detail = %rejection.detail, "MQTT message refused (logged once a minute per device)");
            } else if log.crowded.is_none_or(|at| at.elapsed() >= LOG_EVERY) {
                log.crowded = Some(Instant::now());
                tracing::warn!(
                    devices = REMEMBERED_DEVICES,
                    "MQTT messages refused for more devices in a minute than are logged; see sensorhub_mqtt_messages_total"
                );
            }
        }
        if !self.settings.publish_errors || rejection.reason == Reason::UnknownDevice.metric_label() {
            return;
        }
        if self.publishes_in_flight.load(Ordering::Relaxed) >= PUBLISHES_IN_FLIGHT {
            tracing::debug!(device = %device_id, "too many MQTT refusals waiting to be sent; this one is not published");
            return;
        }
        let topic = format!("{}/{device_id}/errors", self.settings.prefix);
        let body = serde_json::json!({"reason": rejection.reason, "detail": rejection.detail}).to_string();
        match self.client.try_publish(topic, QoS::AtMostOnce, false, body) {
            Ok(()) => {
                self.publishes_in_flight.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => tracing::debug!(error = %e, "cannot publish an MQTT refusal"),
        }
    }
}

/// `id` as shown in logs and details: at most [`SHOWN_ID`] bytes (a topic
/// level may be 64 KiB).
fn shown(id: &str) -> String {
    if id.len() <= SHOWN_ID {
        return id.to_owned();
    }
    let mut end = SHOWN_ID;
    while !id.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &id[..end])
}
