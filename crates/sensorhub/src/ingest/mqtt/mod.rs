//! MQTT ingestion: sensorhub connects to the operator's broker as an MQTT 5
//! client, subscribes to `{prefix}/+/readings` (through a shared
//! subscription when several instances share the load) at QoS 1 with a
//! persistent session, and stores what stations publish. A message is
//! acknowledged only after its readings are committed, so a message the
//! broker accepted survives a kill of sensorhub (the broker delivers it
//! again), and a redelivered message stores nothing twice (readings are
//! kept per device and second). Refused messages are acknowledged and
//! dropped, counted by reason, logged at most once a minute per device,
//! and optionally published to `{prefix}/{device_id}/errors` (for devices
//! that exist). What is held of received messages is bounded in bytes
//! (`--mqtt-queue-bytes`): the link (`link.rs`) admits them into a queue
//! (`queue.rs`) that the writer (`writer.rs`) drains. At the first start of
//! an installation, what the broker kept for an earlier version's client
//! id is collected first (`legacy.rs`). Alarm transitions are published on
//! the same link, retained, to `{prefix}/{device_id}/alarms` (`alarms.rs`).

mod alarm_payload;
mod alarms;
mod legacy;
mod link;
pub mod payload;
mod queue;
mod recent;
mod writer;

use crate::config::mqtt::{ClientId, MAX_PACKET_BYTES, MqttSettings};
use crate::metrics::Metrics;
use rumqttc::v5::{AsyncClient, MqttOptions};
use sensorhub_store::Store;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// Messages the broker may send before sensorhub acknowledges them (MQTT
/// 5's Receive Maximum): enough to fill a batch while the last one commits.
pub(super) const RECEIVE_MAXIMUM: u16 = 4096;
/// How long the broker keeps the session (and messages for it) while
/// sensorhub is away: a week.
const SESSION_EXPIRY_SECONDS: u32 = 7 * 24 * 3600;
/// The longest wait between two connection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Whether the link to the broker is up (for `/readyz`).
#[derive(Debug, Default)]
pub struct MqttStatus {
    connected: AtomicBool,
    /// Connections lost so far (the earlier session's collection tells by
    /// it that its own connection took the live link's session).
    losses: std::sync::atomic::AtomicU64,
    /// Told at each connection: the alarm publisher then publishes every
    /// device's current state again (what the broker kept may be stale).
    connects: tokio::sync::Notify,
}

impl MqttStatus {
    /// Whether sensorhub is connected to the broker now.
    pub fn connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }
}

/// Starts the link and the writer; they run as long as the process.
/// `installation_id` is the store's (for the default client id). Fails
/// only when the CA file of `mqtts://` cannot be read.
pub fn spawn(
    settings: MqttSettings,
    installation_id: &str,
    store: Arc<dyn Store>,
    metrics: Arc<Metrics>,
) -> Result<Arc<MqttStatus>, String> {
    let status = Arc::new(MqttStatus::default());
    let hostname = hostname();
    let client_id = settings.client_id.for_installation(installation_id, &hostname);
    let mut options = options(&settings, &client_id)?;
    options.set_session_expiry_interval(Some(SESSION_EXPIRY_SECONDS));
    // No deadlock between the two tasks: the link waits for the writer
    // only for room in the queue, which the writer gives back before it
    // queues a batch's acknowledgements; and queueing those never waits:
    // they go through a queue of their own to a task that hands them to
    // the client ([`writer`]'s `forward_acks`), whatever a broker sends
    // beyond the Receive Maximum. The client's request queue holds the
    // acknowledgements that task may have unsent (Receive Maximum), the
    // publications (refusals, alarms) in flight, and a subscription. (Two
    // earlier versions stalled when the link waited to hand a message over
    // while the writer waited for room to queue acknowledgements that only
    // the link sends.)
    let requests = writer::ACKS_IN_FLIGHT + writer::PUBLISHES_IN_FLIGHT + 64;
    let (client, eventloop) = AsyncClient::new(options, requests);
    let (tx, rx) = queue::bounded(settings.queue_bytes, metrics.clone());
    let publishes_in_flight = Arc::new(AtomicUsize::new(0));
    let acks_in_flight = Arc::new(AtomicUsize::new(0));
    let link = link::Link {
        client: client.clone(),
        queue: tx,
        status: status.clone(),
        metrics: metrics.clone(),
        publishes_in_flight: publishes_in_flight.clone(),
        acks_in_flight: acks_in_flight.clone(),
        filter: settings.filter(),
        broker: format!("{}:{}", settings.host, settings.port),
        client_id,
    };
    // The session an earlier version kept is collected (once), so that
    // what stations sent while it was being upgraded is stored too.
    let legacy = match &settings.client_id {
        ClientId::Installation => Some(legacy::Drain {
            client_id: format!("sensorhub-{hostname}"),
            settings: settings.clone(),
            store: store.clone(),
            metrics: metrics.clone(),
        }),
        ClientId::Given(_) => None,
    };
    // Alarm transitions go out on the same link.
    let (transitions, queued, unpublished) = alarms::channel();
    store.observe(Arc::new(transitions));
    let prefix = settings.prefix.clone();
    let publish = alarms::Publisher {
        client: client.clone(),
        store: store.clone(),
        prefix,
        in_flight: publishes_in_flight.clone(),
        unpublished,
        status: status.clone(),
    };
    let publish = publish.run(queued, settings.alarm_resync);
    tokio::spawn(publish);
    let writer = writer::Writer { client, store, metrics, settings, publishes_in_flight, acks_in_flight };
    tokio::spawn(writer.run(rx));
    tokio::spawn(link.run(eventloop));
    if let Some(legacy) = legacy {
        tokio::spawn(legacy.run(status.clone()));
    }
    Ok(status)
}

/// This machine's name, for the default client id.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// The options every connection of sensorhub's has: broker, credentials,
/// TLS, keep-alive, a persistent session (its expiry set by the caller),
/// acknowledgements after the commit, and the largest message taken.
fn options(settings: &MqttSettings, client_id: &str) -> Result<MqttOptions, String> {
    let mut options = MqttOptions::new(client_id, settings.host.clone(), settings.port);
    options
        .set_keep_alive(Duration::from_secs(30))
        .set_clean_start(false)
        .set_receive_maximum(Some(RECEIVE_MAXIMUM))
        .set_manual_acks(true)
        .set_max_packet_size(Some(MAX_PACKET_BYTES as u32));
    if let Some((user, password)) = &settings.credentials {
        options.set_credentials(user.clone(), password.0.clone());
    }
    if let Some(path) = &settings.tls_ca {
        let ca = std::fs::read(path).map_err(|e| format!("--mqtt-ca-file {}: {e}", path.display()))?;
        // One process-wide provider; a second install is refused harmlessly.
        let _ = rustls::crypto::ring::default_provider().install_default();
        options.set_transport(rumqttc::Transport::tls_with_config(rumqttc::TlsConfiguration::Simple {
            ca,
            alpn: None,
            client_auth: None,
        }));
    }
    Ok(options)
}
