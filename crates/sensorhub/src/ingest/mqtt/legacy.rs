//! The session of an earlier version, collected once per installation.
//! Versions before the installation-derived client id connected as
//! `sensorhub-HOSTNAME` with a persistent session: what stations published
//! while such a version was stopped for the upgrade waits in that session.
//! At the first start with the default client id, once the new session is
//! connected and subscribed, sensorhub connects once more under the old id
//! (keeping its session) and unsubscribes it (nothing new is queued there;
//! the new session has it), stores what the broker hands over through the
//! writer's own rules, acknowledging each message after its commit, and
//! leaves with a session expiry of 0, so that the broker forgets the old
//! session. Done (or found empty), it is recorded in the database; an
//! unreachable broker leaves it for the next start.

use super::queue::Message;
use super::writer::{Memory, PUBLISHES_IN_FLIGHT, Writer};
use super::{MqttSettings, MqttStatus, options};
use crate::metrics::Metrics;
use rumqttc::Outgoing;
use rumqttc::v5::mqttbytes::v5::Packet;
use rumqttc::v5::{AsyncClient, Event};
use sensorhub_store::Store;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

/// The installation fact that records the collection.
pub(super) const DRAINED: &str = "mqtt_legacy_session_drained";
/// The broker has handed over everything once it is quiet this long.
const QUIET: Duration = Duration::from_secs(2);
/// The longest wait for the acknowledgements and the goodbye to go out.
const LEAVING: Duration = Duration::from_secs(5);
/// The longest collection (if an old subscription under another filter
/// keeps it busy).
const AT_MOST: Duration = Duration::from_secs(600);

/// What collecting the old session needs.
pub(super) struct Drain {
    /// The old client id, `sensorhub-HOSTNAME`.
    pub client_id: String,
    pub settings: MqttSettings,
    pub store: Arc<dyn Store>,
    pub metrics: Arc<Metrics>,
}

impl Drain {
    /// Collects the old session unless that was done, once the new link
    /// is up (`status`); never fails the start.
    pub(super) async fn run(self, status: Arc<MqttStatus>) {
        match self.store.installation_fact(DRAINED).await {
            Ok(None) => {}
            Ok(Some(_)) => return,
            Err(e) => return tracing::warn!(error = %e, "cannot tell whether the earlier MQTT session was collected"),
        }
        // The new session subscribes as it connects: give it that moment.
        while !status.connected() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut options = match options(&self.settings, &self.client_id) {
            Ok(options) => options,
            Err(e) => return tracing::warn!(error = %e, "cannot collect the earlier MQTT session"),
        };
        // Ends with this connection: the broker forgets the old session.
        options.set_session_expiry_interval(Some(0));
        let (client, mut eventloop) = AsyncClient::new(options, PUBLISHES_IN_FLIGHT + 64);
        let writer = Writer {
            client: client.clone(),
            store: self.store.clone(),
            metrics: self.metrics.clone(),
            settings: self.settings.clone(),
            publishes_in_flight: Arc::new(AtomicUsize::new(0)),
            acks_in_flight: Arc::new(AtomicUsize::new(0)),
        };
        let mut memory = Memory::new();
        let mut collected = 0usize;
        let until = tokio::time::Instant::now() + AT_MOST;
        while tokio::time::Instant::now() < until {
            match tokio::time::timeout(QUIET, eventloop.poll()).await {
                Ok(Ok(Event::Incoming(Packet::ConnAck(ack)))) => {
                    if !ack.session_present {
                        break;
                    }
                    tracing::info!(client_id = %self.client_id, "collecting what the broker kept for the earlier client id");
                    if let Err(e) = client.unsubscribe(self.settings.filter()).await {
                        tracing::warn!(error = %e, "cannot unsubscribe the earlier MQTT session");
                    }
                }
                Ok(Ok(Event::Incoming(Packet::Publish(publish)))) => {
                    let message = Message::copied(&publish);
                    writer.store_messages(std::iter::once(&message), &mut memory).await;
                    if let Err(e) = client.ack(&publish).await {
                        tracing::warn!(error = %e, "cannot acknowledge an MQTT message of the earlier session");
                    }
                    collected += 1;
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    return tracing::info!(error = %e, client_id = %self.client_id, "cannot collect the earlier MQTT session now; trying at the next start");
                }
                Err(_quiet) => break,
            }
        }
        // The acknowledgements go out before the goodbye (in order).
        let _ = client.disconnect().await;
        let _ = tokio::time::timeout(LEAVING, async {
            while !matches!(eventloop.poll().await, Ok(Event::Outgoing(Outgoing::Disconnect)) | Err(_)) {}
        })
        .await;
        let when = jiff::Timestamp::now().to_string();
        if let Err(e) = self.store.record_installation_fact(DRAINED, &format!("{when} {collected} messages")).await {
            tracing::warn!(error = %e, "cannot record that the earlier MQTT session was collected");
        }
        if collected > 0 {
            tracing::info!(client_id = %self.client_id, messages = collected, "stored what the broker kept for the earlier client id; its session is gone");
        }
    }
}
