//! Alarm transitions published on the broker link: each one at QoS 1 to
//! `{prefix}/{device_id}/alarms`, retained, its payload the transition and
//! the device's alarms after it (`{"event": …, "alarms": […]}`), so the
//! retained message is always the device's current state. Transitions are
//! heard after their commit ([`sensorhub_store::observe`]) and queued
//! (bounded); a task publishes them within the link's budget of messages
//! in flight, so that nothing that writes readings ever waits for it. It
//! takes what is queued together ([`BATCH`] at most) and renders each
//! device's alarms once for all of that device's transitions, from what
//! the writer recorded with the last of them ([`AlarmEvent::after`]): a
//! flood that raises every station at once reads nothing back.
//!
//! Publishing is best effort (a transition queued when the process dies,
//! dropped while the link is down, or dropped because the queue was full,
//! is not published; the events list and webhook deliveries have every
//! one). So that the retained state is not left stale by one, each
//! connection to the broker publishes every device's current state again,
//! with `"event": null`; a device whose transition found the queue full
//! has its current state published again, so, once the queue has drained;
//! and every `--mqtt-alarm-resync` the stored states are compared with
//! what was published ([`Retained`]), so that what another process
//! recorded (a command, another instance) or a device's last rule removed
//! is published too, with `"event": null`.

use super::alarm_payload::{self, Alarms};
use super::writer::PUBLISHES_IN_FLIGHT;
use crate::alarm_view::Clock;
use async_trait::async_trait;
use rumqttc::v5::AsyncClient;
use rumqttc::v5::mqttbytes::QoS;
use sensorhub_core::model::ReadingInput;
use sensorhub_core::time::Zone;
use sensorhub_store::Store;
use sensorhub_store::alarm::AlarmEvent;
use sensorhub_store::observe::AfterCommit;
use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Transitions waiting to be published; past it they are dropped (and said).
const QUEUE: usize = 10_000;
/// Transitions taken from the queue together.
const BATCH: usize = 256;

/// Transitions not published, said at most once a minute (the events
/// list and webhook deliveries have them all), and the devices whose
/// transitions found the queue full (their states to publish again).
#[derive(Default)]
pub(super) struct Unpublished {
    count: AtomicUsize,
    said: Mutex<Option<Instant>>,
    dropped: Mutex<BTreeSet<String>>,
    /// Told when a device joins `dropped`.
    wake: tokio::sync::Notify,
}

impl Unpublished {
    /// A transition of `device_id` that found the queue full.
    fn dropped(&self, device_id: &str) {
        self.one("too many waiting for the link");
        if let Ok(mut dropped) = self.dropped.lock()
            && !dropped.contains(device_id)
        {
            dropped.insert(device_id.to_owned());
        }
        self.wake.notify_one();
    }

    /// The devices dropped since the last call.
    fn take_dropped(&self) -> Vec<String> {
        self.dropped.lock().map(|mut d| std::mem::take(&mut *d).into_iter().collect()).unwrap_or_default()
    }

    fn one(&self, why: &str) {
        self.count.fetch_add(1, Ordering::Relaxed);
        let Ok(mut said) = self.said.lock() else { return };
        if said.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
            *said = Some(Instant::now());
            let n = self.count.swap(0, Ordering::Relaxed);
            tracing::warn!(
                transitions = n,
                reason = why,
                "alarm transitions not published to MQTT (the events list and webhook deliveries have them); said at most once a minute"
            );
        }
    }
}

/// The store's observer: hands each committed transition to [`run`].
pub(super) struct Transitions(mpsc::Sender<AlarmEvent>, Arc<Unpublished>);

#[async_trait]
impl AfterCommit for Transitions {
    async fn committed(&self, _: &[ReadingInput], _: usize) {}

    async fn alarms(&self, events: &[AlarmEvent]) {
        for event in events {
            if self.0.try_send(event.clone()).is_err() {
                self.1.dropped(&event.device_id);
            }
        }
    }
}

/// The observer and the queue [`run`] publishes from.
pub(super) fn channel() -> (Transitions, mpsc::Receiver<AlarmEvent>, Arc<Unpublished>) {
    let (tx, rx) = mpsc::channel(QUEUE);
    let unpublished = Arc::new(Unpublished::default());
    (Transitions(tx, unpublished.clone()), rx, unpublished)
}

/// Publishes each queued transition, retained, with the device's alarms.
pub(super) struct Publisher {
    pub client: AsyncClient,
    pub store: Arc<dyn Store>,
    pub prefix: String,
    /// The link's messages in flight.
    pub in_flight: Arc<AtomicUsize>,
    pub unpublished: Arc<Unpublished>,
    /// Tells of each connection.
    pub status: Arc<super::MqttStatus>,
}

impl Publisher {
    /// Publishes the queued transitions, every device's state at each
    /// connection, whenever the queue is empty the state of each device
    /// whose transition found it full, and every `resync` the states that
    /// differ from what was published (changed by another process).
    pub(super) async fn run(self, mut queue: mpsc::Receiver<AlarmEvent>, resync: Duration) {
        let mut batch = Vec::with_capacity(BATCH);
        let mut retained = Retained::default();
        // The first look one period on: the link's connection publishes every state first.
        let mut resyncs = tokio::time::interval_at(tokio::time::Instant::now() + resync, resync);
        resyncs.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Kept until the look is made: transitions arriving all along must not skip it.
        let mut due = false;
        loop {
            tokio::select! {
                n = queue.recv_many(&mut batch, BATCH) => {
                    if n == 0 {
                        return;
                    }
                    self.publish_batch(&batch, &mut retained).await;
                    batch.clear();
                }
                () = self.unpublished.wake.notified() => {}
                () = self.status.connects.notified() => self.publish_all(&mut retained).await,
                _ = resyncs.tick() => due = true,
            }
            // After what was queued (a state read now is newer than any
            // transition dropped), and never ahead of a later transition.
            if queue.is_empty() {
                let again = self.unpublished.take_dropped();
                if !again.is_empty() {
                    self.publish_states(&again, &mut retained, false).await;
                }
                if due {
                    due = false;
                    self.resync(&mut retained).await;
                }
            }
        }
    }

    /// Publishes `events` in order, each with its device's alarms after
    /// the last of them (rendered once per device): those the writer
    /// recorded with them, or for a device without (its rules were
    /// changed), read once its transitions were committed.
    async fn publish_batch(&self, events: &[AlarmEvent], retained: &mut Retained) {
        let mut clock = Clock::new(Zone::Fixed(jiff::tz::Offset::UTC));
        let mut rendered: HashMap<&str, Option<(String, u64)>> = HashMap::new();
        for event in events.iter().rev() {
            if let Entry::Vacant(slot) = rendered.entry(event.device_id.as_str()) {
                slot.insert(event.after.as_deref().and_then(|after| {
                    let mut alarms = Alarms::of(&mut clock, &event.device_id, after.rules.iter().zip(&after.states));
                    Some((alarms.json()?, alarms.episodes()))
                }));
            }
        }
        let unknown: Vec<&str> = rendered.iter().filter(|(_, json)| json.is_none()).map(|(id, _)| *id).collect();
        if !unknown.is_empty() {
            match self.store.alarms_of_devices(&unknown).await {
                Ok(devices) => {
                    for (id, alarms) in devices {
                        if let Some(slot) = rendered.get_mut(id.as_str()) {
                            let mut alarms = Alarms::of(&mut clock, &id, alarms.iter().map(|a| (&a.rule, &a.state)));
                            *slot = alarms.json().map(|json| (json, alarms.episodes()));
                        }
                    }
                    // Not found: the device is gone, and so are its alarms.
                    for id in unknown {
                        if let Some(slot @ None) = rendered.get_mut(id) {
                            *slot = Some(("[]".to_owned(), Alarms::of(&mut clock, id, []).episodes()));
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the devices' alarms for MQTT; the transitions are published alone");
                }
            }
        }
        for event in events {
            let id = event.device_id.as_str();
            let alarms = rendered.get(id).and_then(Option::as_ref).map_or("[]", |(json, _)| json.as_str());
            let sent = self.send(id, alarms, &alarm_payload::event(&mut clock, event)).await;
            match rendered.get(id) {
                Some(Some((_, episodes))) if sent => retained.published(id, *episodes),
                _ => retained.unknown(id),
            }
        }
    }

    /// Every device with alarm rules: its current state, retained.
    async fn publish_all(&self, retained: &mut Retained) {
        if let Some(devices) = self.ruled().await {
            self.publish_states(&devices, retained, false).await;
        }
    }

    /// The devices with alarm rules, or `None` (said) when they cannot be read.
    async fn ruled(&self) -> Option<Vec<String>> {
        match self.store.alarm_rules(None).await {
            Ok(rules) => {
                Some(rules.into_iter().map(|(device, _)| device).collect::<BTreeSet<_>>().into_iter().collect())
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the devices with alarms; their retained states are published at their next transition");
                None
            }
        }
    }

    /// Publishes again the states that differ from what this process
    /// last published: transitions recorded by another process (a command,
    /// another instance), rules changed there, and, as an empty list, the
    /// devices whose last rule was removed.
    async fn resync(&self, retained: &mut Retained) {
        let Some(devices) = self.ruled().await else { return };
        let ruled: BTreeSet<&str> = devices.iter().map(String::as_str).collect();
        let gone: Vec<String> = retained.devices().filter(|id| !ruled.contains(id.as_str())).cloned().collect();
        let none = Alarms::of(&mut Clock::new(Zone::Fixed(jiff::tz::Offset::UTC)), "", []).episodes();
        for id in gone {
            // Published as an empty list already (its rules went in this process).
            if retained.is(&id, none) || self.send(&id, "[]", "null").await {
                retained.forget(&id);
            }
        }
        self.publish_states(&devices, retained, true).await;
    }

    /// `devices`' current states, retained, with `"event": null` (with
    /// `changed_only`, only those whose episodes differ from what was last
    /// published). Read [`BATCH`] devices a call (a fleet of 10,000
    /// stations is 40 reads, not 10,000).
    async fn publish_states(&self, devices: &[String], retained: &mut Retained, changed_only: bool) {
        let mut clock = Clock::new(Zone::Fixed(jiff::tz::Offset::UTC));
        for chunk in devices.chunks(BATCH) {
            let ids: Vec<&str> = chunk.iter().map(String::as_str).collect();
            let found = match self.store.alarms_of_devices(&ids).await {
                Ok(found) => found,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the devices' alarms for MQTT; their retained states are left as they were");
                    continue;
                }
            };
            for (device_id, alarms) in found {
                let mut published = Alarms::of(&mut clock, &device_id, alarms.iter().map(|a| (&a.rule, &a.state)));
                let episodes = published.episodes();
                if changed_only && retained.is(&device_id, episodes) {
                    continue;
                }
                // A state published again carries nothing but
                // the alarms: without them it would retain an empty list.
                if let Some(json) = published.json() {
                    if changed_only {
                        tracing::debug!(device_id, "alarm state changed by another process: published again");
                    }
                    if self.send(&device_id, &json, "null").await {
                        retained.published(&device_id, episodes);
                    } else {
                        retained.unknown(&device_id);
                    }
                }
            }
        }
    }

    /// Publishes `{"alarms": …, "event": …}` to the device's topic,
    /// retained: the bytes `serde_json::json!` gave when this was one
    /// object (its keys sorted), the alarms rendered once per device.
    /// False when it could not be handed to the link (a later look
    /// publishes the state again).
    async fn send(&self, device_id: &str, alarms: &str, event: &str) -> bool {
        let payload = format!(r#"{{"alarms":{alarms},"event":{event}}}"#);
        while self.in_flight.load(Ordering::Relaxed) >= PUBLISHES_IN_FLIGHT {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let topic = format!("{}/{device_id}/alarms", self.prefix);
        match self.client.try_publish(topic, QoS::AtLeastOnce, true, payload) {
            Ok(()) => {
                self.in_flight.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(_) => {
                self.unpublished.one("the link's request queue is full or closed");
                false
            }
        }
    }
}

/// What this process last published for each device, as a digest of its
/// episodes ([`Alarms::episodes`]): what a resync compares the
/// stored states with. One entry a device with rules.
#[derive(Default)]
struct Retained(HashMap<String, Option<u64>>);

impl Retained {
    fn published(&mut self, device_id: &str, episodes: u64) {
        self.0.insert(device_id.to_owned(), Some(episodes));
    }

    /// Published without its state (it could not be read): the next resync publishes it again.
    fn unknown(&mut self, device_id: &str) {
        self.0.insert(device_id.to_owned(), None);
    }

    fn is(&self, device_id: &str, episodes: u64) -> bool {
        self.0.get(device_id) == Some(&Some(episodes))
    }

    fn devices(&self) -> impl Iterator<Item = &String> {
        self.0.keys()
    }

    fn forget(&mut self, device_id: &str) {
        self.0.remove(device_id);
    }
}
