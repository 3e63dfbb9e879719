//! Alarm transitions published on the broker link: each one at QoS 1 to
//! `{prefix}/{device_id}/alarms`, retained, its payload the transition and
//! the device's alarms after it (`{"event": …, "alarms": […]}`), so the
//! retained message is always the device's current state. Transitions are
//! heard after their commit ([`sensorhub_store::observe`]) and queued
//! (bounded); a task publishes them within the link's budget of messages
//! in flight, so that nothing that writes readings ever waits for it.

use super::writer::PUBLISHES_IN_FLIGHT;
use crate::alarm_view::Clock;
use async_trait::async_trait;
use rumqttc::v5::AsyncClient;
use rumqttc::v5::mqttbytes::QoS;
use sensorhub_core::model::ReadingInput;
use sensorhub_core::time::Zone;
use sensorhub_store::alarm::AlarmEvent;
use sensorhub_store::observe::AfterCommit;
use sensorhub_store::{Scope, Store};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Transitions waiting to be published; past it they are dropped (and said).
const QUEUE: usize = 10_000;

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
pub(super) async fn run(
    mut queue: mpsc::Receiver<AlarmEvent>,
    client: AsyncClient,
    store: Arc<dyn Store>,
    prefix: String,
    in_flight: Arc<AtomicUsize>,
    unpublished: Arc<Unpublished>,
) {
    while let Some(event) = queue.recv().await {
        let mut clock = Clock::new(Zone::Fixed(jiff::tz::Offset::UTC));
        let alarms = match store.alarms(Scope::All, &event.device_id).await {
            Ok(alarms) => alarms.unwrap_or_default(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read a device's alarms for MQTT; the transition is published alone");
                Vec::new()
            }
        };
        let payload = serde_json::json!({
            "event": clock.event(&event),
            "alarms": alarms.iter().map(|a| clock.alarm(a)).collect::<Vec<_>>(),
        });
        while in_flight.load(Ordering::Relaxed) >= PUBLISHES_IN_FLIGHT {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let topic = format!("{prefix}/{}/alarms", event.device_id);
        match client.try_publish(topic, QoS::AtLeastOnce, true, payload.to_string()) {
            Ok(()) => {
                in_flight.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => unpublished.one("the link's request queue is full or closed"),
        }
    }
}
