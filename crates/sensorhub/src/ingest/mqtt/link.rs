//! The link to the broker: connects (again and again, with backoff),
//! subscribes, and admits what the broker sends into the writer's queue.
//! A QoS 0 message that finds no room is dropped and counted; a QoS 1
//! message waits for room, and meanwhile nothing more is read from the
//! broker (which holds QoS 1 messages for sensorhub's session).

use super::queue::{self, Message, NotQueued};
use super::{MAX_BACKOFF, MqttStatus};
use crate::metrics::Metrics;
use rumqttc::Outgoing;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::Packet;
use rumqttc::v5::{AsyncClient, Event, EventLoop};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// What the link needs besides its event loop.
pub(super) struct Link {
    pub client: AsyncClient,
    pub queue: queue::Sender,
    pub status: Arc<MqttStatus>,
    pub metrics: Arc<Metrics>,
    /// Refusals the writer handed to the client; counted down as they are sent.
    pub publishes_in_flight: Arc<AtomicUsize>,
    /// Acknowledgements handed to the client; counted down as they are sent.
    pub acks_in_flight: Arc<AtomicUsize>,
    /// The topic filter subscribed to.
    pub filter: String,
    /// `host:port`, for the log.
    pub broker: String,
    /// For the log: what to tell the broker's operator.
    pub client_id: String,
}

impl Link {
    /// Polls `eventloop` as long as the writer runs.
    pub async fn run(self, mut eventloop: EventLoop) {
        let mut backoff = Duration::from_millis(100);
        // The first failed attempt of a streak is worth a warning (a wrong
        // CA or password is otherwise silent); the retries are not.
        let mut warned = false;
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::ConnAck(ack))) => {
                    self.status.connected.store(true, Ordering::Relaxed);
                    self.status.connects.notify_one();
                    // What a lost connection left unsent is not counted again.
                    self.acks_in_flight.store(0, Ordering::Relaxed);
                    self.metrics.mqtt_connected(true);
                    backoff = Duration::from_millis(100);
                    warned = false;
                    tracing::info!(broker = %self.broker, client_id = %self.client_id, session_present = ack.session_present, filter = %self.filter, "MQTT connected");
                    // A kept session keeps its subscription; subscribing again is harmless.
                    if let Err(e) = self.client.try_subscribe(self.filter.clone(), QoS::AtLeastOnce) {
                        tracing::error!(error = %e, "cannot subscribe to {}", self.filter);
                    }
                }
                Ok(Event::Incoming(Packet::Publish(publish))) => {
                    // Copied out of the read buffer, which it would keep alive.
                    let message = Message::copied(&publish);
                    drop(publish);
                    let queued = match message.qos {
                        QoS::AtMostOnce => self.queue.try_send(message),
                        // Waits for room: the broker holds the rest meanwhile.
                        _ => self.queue.send(message).await,
                    };
                    match queued {
                        Ok(()) => {}
                        Err(NotQueued::Full) => self.metrics.mqtt_qos0_dropped(),
                        Err(NotQueued::Closed) => return,
                    }
                }
                Ok(Event::Outgoing(Outgoing::PubAck(_))) => {
                    let _ = self
                        .acks_in_flight
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(n.saturating_sub(1)));
                }
                Ok(Event::Outgoing(Outgoing::Publish(_))) => {
                    let _ = self
                        .publishes_in_flight
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(n.saturating_sub(1)));
                }
                Ok(_) => {}
                Err(e) => {
                    if self.status.connected.swap(false, Ordering::Relaxed) {
                        self.status.losses.fetch_add(1, Ordering::Relaxed);
                        self.metrics.mqtt_connected(false);
                        tracing::warn!(error = %e, "MQTT link lost; reconnecting");
                        warned = true;
                    } else if !warned {
                        tracing::warn!(broker = %self.broker, error = %e, "MQTT broker unreachable; retrying");
                        warned = true;
                    } else {
                        tracing::debug!(error = %e, retry_in = ?backoff, "MQTT broker unreachable");
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }
}
