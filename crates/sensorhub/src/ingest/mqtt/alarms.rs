//! Alarm transitions published on the broker link: each one at QoS 1 to
//! `{prefix}/{device_id}/alarms`, retained, its payload the transition and
//! the device's alarms after it (`{"event": …, "alarms": […]}`), so the
//! retained message is always the device's current state. Transitions are
//! heard after their commit ([`sensorhub_store::observe`]) and queued
//! (bounded); a task publishes them within the link's budget of messages
//! in flight, so that nothing that writes readings ever waits for it. It
//! takes what is queued together ([`BATCH`] at most) and reads and renders
//! each device's alarms once for all of that device's transitions: a flood
//! that raises every station at once costs one read a station, not one a
//! transition.
//!
//! Publishing is best effort (a transition queued when the process dies,
//! or dropped while the link is down, is not published; the events list
//! and webhook deliveries have every one): so that the retained state is
//! not left stale by one, each connection to the broker publishes every
//! device's current state again, with `"event": null`.

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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Transitions waiting to be published; past it they are dropped (and said).
const QUEUE: usize = 10_000;
/// Transitions taken from the queue together.
const BATCH: usize = 256;

/// Transitions not published, said at most once a minute (the events
/// list and webhook deliveries have them all).
#[derive(Default)]
pub(super) struct Unpublished {
    count: AtomicUsize,
    said: Mutex<Option<Instant>>,
}

impl Unpublished {
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
                self.1.one("too many waiting for the link");
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
    /// Publishes the queued transitions, and every device's state at each connection.
    pub(super) async fn run(self, mut queue: mpsc::Receiver<AlarmEvent>) {
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            tokio::select! {
                n = queue.recv_many(&mut batch, BATCH) => {
                    if n == 0 {
                        return;
                    }
                    self.publish_batch(&batch).await;
                    batch.clear();
                }
                () = self.status.connects.notified() => self.publish_all().await,
            }
        }
    }

    /// Publishes `events` in order, each with its device's alarms, read
    /// for all of their devices at once and rendered once per device
    /// (after all of them were committed, as one read per transition
    /// would have been).
    async fn publish_batch(&self, events: &[AlarmEvent]) {
        let mut clock = Clock::new(Zone::Fixed(jiff::tz::Offset::UTC));
        let mut ids: Vec<&str> = events.iter().map(|e| e.device_id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        let rendered: std::collections::HashMap<String, String> = match self.store.alarms_of_devices(&ids).await {
            Ok(devices) => {
                devices.into_iter().filter_map(|(id, alarms)| Some((id, render(&mut clock, &alarms)?))).collect()
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the devices' alarms for MQTT; the transitions are published alone");
                Default::default()
            }
        };
        for event in events {
            let id = event.device_id.as_str();
            let alarms = rendered.get(id).map_or("[]", String::as_str);
            let view = serde_json::to_value(clock.event(event)).unwrap_or_default();
            self.send(id, alarms, Some(&view)).await;
        }
    }

    /// Every device with alarm rules: its current state, retained. Read
    /// [`BATCH`] devices a call (a fleet of 10,000 stations is 40 reads,
    /// not 10,000, each time the link connects).
    async fn publish_all(&self) {
        let devices = match self.store.alarm_rules(None).await {
            Ok(rules) => rules.into_iter().map(|(device, _)| device).collect::<std::collections::BTreeSet<_>>(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the devices with alarms; their retained states are published at their next transition");
                return;
            }
        };
        let devices: Vec<String> = devices.into_iter().collect();
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
                // A state republished at connection carries nothing but
                // the alarms: without them it would retain an empty list.
                if let Some(json) = render(&mut clock, &alarms) {
                    self.send(&device_id, &json, None).await;
                }
            }
        }
    }

    /// Publishes `{"alarms": …, "event": …}` to the device's topic,
    /// retained: the bytes `serde_json::json!` gave when this was one
    /// object (its keys sorted), the alarms rendered once per device.
    async fn send(&self, device_id: &str, alarms: &str, event: Option<&serde_json::Value>) {
        let event = event.map_or_else(|| "null".to_owned(), serde_json::Value::to_string);
        let payload = format!(r#"{{"alarms":{alarms},"event":{event}}}"#);
        while self.in_flight.load(Ordering::Relaxed) >= PUBLISHES_IN_FLIGHT {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let topic = format!("{}/{device_id}/alarms", self.prefix);
        match self.client.try_publish(topic, QoS::AtLeastOnce, true, payload) {
            Ok(()) => {
                self.in_flight.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => self.unpublished.one("the link's request queue is full or closed"),
        }
    }
}

/// A device's alarms as the JSON list published.
fn render(clock: &mut Clock, alarms: &[sensorhub_store::alarm::Alarm]) -> Option<String> {
    let views: Vec<_> = alarms.iter().map(|a| clock.alarm(a)).collect();
    serde_json::to_value(views).ok().map(|v| v.to_string())
}
