//! The session of an earlier version, collected once per installation.
//! Versions before the installation-derived client id connected as
//! `sensorhub-HOSTNAME` with a persistent session: what stations published
//! while such a version was stopped for the upgrade waits in that session.
//! At the first start with the default client id, once the new session is
//! connected and subscribed, sensorhub connects once more under the old id
//! (keeping its session) and unsubscribes it (nothing new is queued there;
//! the new session has it), stores what the broker hands over through the
//! writer's own rules, acknowledging each message after its commit, and
//! then connects once with a clean start and a session expiry of 0, so that
//! the broker forgets the old session. A broker that names a connection by
//! its user (Mosquitto's `use_username_as_clientid`, as in
//! examples/mosquitto) gives the old id the live link's own session: the
//! live link loses its connection as the collection connects, and the
//! collection then leaves that session as it is (no unsubscribe, nothing
//! forgotten) for the live link to take back. Done (or found empty, or
//! shared), it is recorded in the database; an unreachable broker leaves it
//! for the next start.

use super::queue::Message;
use super::writer::{Memory, PUBLISHES_IN_FLIGHT, Writer};
use super::{MqttSettings, MqttStatus, options};
use crate::metrics::Metrics;
use rumqttc::Outgoing;
use rumqttc::v5::mqttbytes::v5::Packet;
use rumqttc::v5::{AsyncClient, Event, EventLoop};
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
/// How long after its connection the collection looks whether the live
/// link lost its own (the broker closes the session's other connection as
/// it accepts a new one).
const DECIDE: Duration = Duration::from_millis(300);

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
        // The live link's own expiry: a session shared with it outlives
        // this connection (an expiry of 0 would end it as this one closes).
        options.set_session_expiry_interval(Some(super::SESSION_EXPIRY_SECONDS));
        let losses = status.losses.load(std::sync::atomic::Ordering::Relaxed);
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
        // The session found is looked at before it is unsubscribed: if the
        // live link lost its connection as this one connected, the broker
        // gave this one the live session.
        let mut decide_at = None;
        let (mut answered, mut found) = (false, false);
        while tokio::time::Instant::now() < until {
            if decide_at.is_some_and(|at| tokio::time::Instant::now() >= at) {
                decide_at = None;
                if status.losses.load(std::sync::atomic::Ordering::Relaxed) != losses {
                    leave(&client, &mut eventloop).await;
                    return self.shared(collected).await;
                }
                tracing::info!(client_id = %self.client_id, "collecting what the broker kept for the earlier client id");
                if let Err(e) = client.unsubscribe(self.settings.filter()).await {
                    tracing::warn!(error = %e, "cannot unsubscribe the earlier MQTT session");
                }
            }
            let wait = match (answered, decide_at) {
                (false, _) => LEAVING,
                (true, Some(_)) => Duration::from_millis(50),
                (true, None) => QUIET,
            };
            match tokio::time::timeout(wait, eventloop.poll()).await {
                Ok(Ok(Event::Incoming(Packet::ConnAck(ack)))) => {
                    answered = true;
                    found = ack.session_present;
                    if !found {
                        break;
                    }
                    decide_at = Some(tokio::time::Instant::now() + DECIDE);
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
                Ok(Err(_))
                    if decide_at.is_some() && status.losses.load(std::sync::atomic::Ordering::Relaxed) != losses =>
                {
                    // The live link took its session back already.
                    return self.shared(collected).await;
                }
                Ok(Err(e)) => {
                    return tracing::info!(error = %e, client_id = %self.client_id, "cannot collect the earlier MQTT session now; trying at the next start");
                }
                Err(_deciding) if decide_at.is_some() => {}
                // No answer to the connection yet (a slow TLS handshake):
                // nothing is ended on a guess, and the next start tries again.
                Err(_) if !answered => {
                    return tracing::info!(client_id = %self.client_id, "no answer from the broker under the earlier client id; trying at the next start");
                }
                Err(_quiet) => break,
            }
        }
        // The acknowledgements go out before the goodbye (in order).
        leave(&client, &mut eventloop).await;
        // The session this connection kept (or made, when none was found)
        // is forgotten: a clean start ends it, and an expiry of 0 ends the new one.
        if let Err(e) = self.forget().await {
            return tracing::info!(error = %e, client_id = %self.client_id, "cannot end the earlier MQTT session now; trying at the next start");
        }
        self.record(&format!("{collected} messages")).await;
        if collected > 0 {
            tracing::info!(client_id = %self.client_id, messages = collected, found, "stored what the broker kept for the earlier client id; its session is gone");
        }
    }

    /// Connects under the old id with a clean start and a session expiry
    /// of 0, and leaves: the broker then keeps no session for it.
    async fn forget(&self) -> Result<(), String> {
        let mut options = options(&self.settings, &self.client_id)?;
        options.set_clean_start(true).set_session_expiry_interval(Some(0));
        let (client, mut eventloop) = AsyncClient::new(options, 8);
        let connected = tokio::time::timeout(LEAVING, async {
            loop {
                match eventloop.poll().await {
                    Ok(Event::Incoming(Packet::ConnAck(_))) => return Ok(()),
                    Ok(_) => {}
                    Err(e) => return Err(e.to_string()),
                }
            }
        })
        .await
        .map_err(|_| "no answer from the broker".to_owned())?;
        connected?;
        leave(&client, &mut eventloop).await;
        Ok(())
    }

    /// Records that the old id named the live link's session, which is
    /// left as it is: there was nothing to collect.
    async fn shared(&self, collected: usize) {
        tracing::info!(client_id = %self.client_id, "the broker gives the earlier client id the live session (a client id per user): nothing to collect");
        self.record(&format!("shared with the live session, {collected} messages")).await;
    }

    /// Records that the collection is done, with `what` came of it.
    async fn record(&self, what: &str) {
        let when = jiff::Timestamp::now().to_string();
        if let Err(e) = self.store.record_installation_fact(DRAINED, &format!("{when} {what}")).await {
            tracing::warn!(error = %e, "cannot record that the earlier MQTT session was collected");
        }
    }
}

/// Says goodbye: the disconnect goes out after what is queued before it (the
/// acknowledgements, in order), waited for at most [`LEAVING`].
async fn leave(client: &AsyncClient, eventloop: &mut EventLoop) {
    let _ = client.disconnect().await;
    let _ = tokio::time::timeout(LEAVING, async {
        while !matches!(eventloop.poll().await, Ok(Event::Outgoing(Outgoing::Disconnect)) | Err(_)) {}
    })
    .await;
}
