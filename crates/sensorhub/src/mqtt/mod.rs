//! MQTT ingestion: sensorhub connects to the operator's broker as an MQTT 5
//! client, subscribes to `{prefix}/+/readings` (through a shared
//! subscription when several instances share the load) at QoS 1 with a
//! persistent session, and stores what stations publish. A message is
//! acknowledged only after its readings are committed, so a message the
//! broker accepted survives a kill of sensorhub (the broker delivers it
//! again), and a redelivered message stores nothing twice (readings are
//! kept per device and second). Refused messages are acknowledged and
//! dropped, counted by reason, logged at most once per device a minute,
//! and optionally published to `{prefix}/{device_id}/errors`.

pub mod payload;

use crate::metrics::Metrics;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, Publish};
use rumqttc::v5::{AsyncClient, Event, MqttOptions};
use sensorhub_core::model::{ReadingInput, SensorMeta};
use sensorhub_store::{Scope, Store, StoreError};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Messages the broker may send before sensorhub acknowledges them (MQTT
/// 5's Receive Maximum): enough to fill a batch while the last one commits.
const RECEIVE_MAXIMUM: u16 = 4096;
/// Most messages committed in one transaction.
const MAX_BATCH: usize = 2048;
/// How long the broker keeps the session (and messages for it) while
/// sensorhub is away: a week.
const SESSION_EXPIRY_SECONDS: u32 = 7 * 24 * 3600;
/// How long a device's sensors are remembered before they are looked up again.
const DEVICE_TTL: Duration = Duration::from_secs(10);
/// The longest wait between two connection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Where and how to connect.
#[derive(Debug, Clone)]
pub struct MqttSettings {
    /// Broker host.
    pub host: String,
    /// Broker port.
    pub port: u16,
    /// TLS (`mqtts://`), with this CA's PEM file when given (else the
    /// system's roots are not consulted: a CA file is required).
    pub tls_ca: Option<Vec<u8>>,
    /// Username and password, when the broker asks for them.
    pub credentials: Option<(String, String)>,
    /// The first topic level (`sensorhub`).
    pub prefix: String,
    /// A shared subscription group (`$share/<group>/…`), for several instances.
    pub group: Option<String>,
    /// The client id: stable across restarts, so that the broker keeps the session.
    pub client_id: String,
    /// Publish refusals to `{prefix}/{device_id}/errors`.
    pub publish_errors: bool,
    /// How far ahead of the server's clock a reading may be.
    pub max_future_skew: jiff::SignedDuration,
}

impl MqttSettings {
    /// The topic filter subscribed to.
    pub fn filter(&self) -> String {
        let topic = format!("{}/+/readings", self.prefix);
        match &self.group {
            Some(group) => format!("$share/{group}/{topic}"),
            None => topic,
        }
    }
}

/// Whether the link to the broker is up (for `/readyz`).
#[derive(Debug, Default)]
pub struct MqttStatus {
    connected: AtomicBool,
}

impl MqttStatus {
    /// Whether sensorhub is connected to the broker now.
    pub fn connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }
}

/// Starts the link and the writer; they run as long as the process.
pub fn spawn(settings: MqttSettings, store: Arc<dyn Store>, metrics: Arc<Metrics>) -> Arc<MqttStatus> {
    let status = Arc::new(MqttStatus::default());
    let mut options = MqttOptions::new(settings.client_id.clone(), settings.host.clone(), settings.port);
    options
        .set_keep_alive(Duration::from_secs(30))
        .set_clean_start(false)
        .set_session_expiry_interval(Some(SESSION_EXPIRY_SECONDS))
        .set_receive_maximum(Some(RECEIVE_MAXIMUM))
        .set_manual_acks(true)
        .set_max_packet_size(Some(1 << 20));
    if let Some((user, password)) = &settings.credentials {
        options.set_credentials(user.clone(), password.clone());
    }
    if let Some(ca) = &settings.tls_ca {
        // One process-wide provider; a second install is refused harmlessly.
        let _ = rustls::crypto::ring::default_provider().install_default();
        options.set_transport(rumqttc::Transport::tls_with_config(rumqttc::TlsConfiguration::Simple {
            ca: ca.clone(),
            alpn: None,
            client_auth: None,
        }));
    }
    // The link never waits on the writer: it must keep polling to send the
    // writer's acknowledgements, or each would wait for the other. The
    // broker's in-flight window (Receive Maximum) bounds what queues here;
    // the request queue holds more acknowledgements than that window.
    let (client, mut eventloop) = AsyncClient::new(options, 4 * usize::from(RECEIVE_MAXIMUM));
    let (tx, rx) = mpsc::unbounded_channel::<Publish>();
    let writer = Writer { client: client.clone(), store, metrics: metrics.clone(), settings: settings.clone() };
    tokio::spawn(writer.run(rx));
    let link = status.clone();
    tokio::spawn(async move {
        let filter = settings.filter();
        let mut backoff = Duration::from_millis(100);
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::ConnAck(ack))) => {
                    link.connected.store(true, Ordering::Relaxed);
                    metrics.mqtt_connected(true);
                    backoff = Duration::from_millis(100);
                    tracing::info!(broker = %format!("{}:{}", settings.host, settings.port), session_present = ack.session_present, filter = %filter, "MQTT connected");
                    // A kept session keeps its subscription; subscribing again is harmless.
                    if let Err(e) = client.try_subscribe(filter.clone(), QoS::AtLeastOnce) {
                        tracing::error!(error = %e, "cannot subscribe to {filter}");
                    }
                }
                Ok(Event::Incoming(Packet::Publish(publish))) => {
                    if tx.send(publish).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    if link.connected.swap(false, Ordering::Relaxed) {
                        metrics.mqtt_connected(false);
                        tracing::warn!(error = %e, "MQTT link lost; reconnecting");
                    } else {
                        tracing::debug!(error = %e, retry_in = ?backoff, "MQTT broker unreachable");
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    });
    status
}

/// Stores received messages in batches and acknowledges them after the commit.
struct Writer {
    client: AsyncClient,
    store: Arc<dyn Store>,
    metrics: Arc<Metrics>,
    settings: MqttSettings,
}

/// A device's sensors as last looked up (`None`: no such device).
type CachedDevice = (Instant, Option<Arc<Vec<SensorMeta>>>);

impl Writer {
    async fn run(self, mut rx: mpsc::UnboundedReceiver<Publish>) {
        let mut devices: HashMap<String, CachedDevice> = HashMap::new();
        let mut logged: HashMap<String, Instant> = HashMap::new();
        let mut batch = Vec::with_capacity(MAX_BATCH);
        while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
            let mut readings: Vec<ReadingInput> = Vec::new();
            for publish in &batch {
                match self.readings_of(publish, &mut devices).await {
                    Ok(r) => {
                        self.metrics.mqtt_message("stored");
                        readings.extend(r);
                    }
                    Err((device, rejection)) => self.refuse(&device, rejection, &mut logged),
                }
            }
            let stored = readings.len();
            self.store_all(readings).await;
            // In order of receipt, as MQTT asks; only now that it is committed.
            for publish in batch.drain(..) {
                if let Err(e) = self.client.ack(&publish).await {
                    tracing::warn!(error = %e, "cannot acknowledge an MQTT message; the broker will send it again");
                }
            }
            self.metrics.mqtt_readings(stored);
        }
    }

    /// The readings of one message, or why it is refused (with its device id).
    async fn readings_of(
        &self,
        publish: &Publish,
        devices: &mut HashMap<String, CachedDevice>,
    ) -> Result<Vec<ReadingInput>, (String, payload::Rejection)> {
        let topic = String::from_utf8_lossy(&publish.topic);
        let device_id = topic.split('/').rev().nth(1).unwrap_or_default().to_owned();
        let refuse = |reason: &'static str, detail: String| (device_id.clone(), payload::Rejection { reason, detail });
        let sensors = match devices.get(&device_id) {
            Some((at, sensors)) if at.elapsed() < DEVICE_TTL => sensors.clone(),
            _ => {
                let found = self.find_device(&device_id).await;
                devices.insert(device_id.clone(), (Instant::now(), found.clone()));
                found
            }
        };
        let Some(sensors) = sensors else {
            return Err(refuse("unknown_device", format!("device {device_id:?} is not registered")));
        };
        let now = jiff::Timestamp::now();
        payload::readings(&device_id, &sensors, &publish.payload, now, self.settings.max_future_skew)
            .map_err(|r| (device_id.clone(), r))
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

    /// Stores `readings` in one transaction, retrying while the database
    /// cannot take them (the messages stay unacknowledged meanwhile); a
    /// reading the store refuses (its device or sensor removed since it was
    /// checked) is refused alone.
    async fn store_all(&self, readings: Vec<ReadingInput>) {
        if readings.is_empty() {
            return;
        }
        let mut wait = Duration::from_millis(100);
        loop {
            let source = Box::new(readings.clone().into_iter().map(Ok));
            match self.store.import(source, sensorhub_store::hooks::Outbox::Deliver).await {
                Ok(_) => return,
                Err(StoreError::Invalid(e)) => {
                    tracing::warn!(error = %e, "a batch was refused; storing its readings one by one");
                    for reading in readings {
                        self.store_one(reading).await;
                    }
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?wait, "cannot store MQTT readings; retrying");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    /// Stores one reading, retrying while the database cannot take it; a
    /// refused one is counted and dropped.
    async fn store_one(&self, reading: ReadingInput) {
        let mut wait = Duration::from_millis(100);
        loop {
            match self.store.ingest(reading.clone()).await {
                Ok(()) => return,
                Err(StoreError::Invalid(e)) => {
                    self.metrics.mqtt_message("bad_reading");
                    tracing::warn!(error = %e, device = %reading.device_id, "an MQTT reading was refused");
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?wait, "cannot store an MQTT reading; retrying");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    fn refuse(&self, device_id: &str, rejection: payload::Rejection, logged: &mut HashMap<String, Instant>) {
        self.metrics.mqtt_message(rejection.reason);
        let due = logged.get(device_id).is_none_or(|at| at.elapsed() >= Duration::from_secs(60));
        if due {
            logged.insert(device_id.to_owned(), Instant::now());
            tracing::warn!(device = %device_id, reason = rejection.reason, detail = %rejection.detail, "MQTT message refused (logged once a minute per device)");
        }
        if self.settings.publish_errors {
            let topic = format!("{}/{device_id}/errors", self.settings.prefix);
            let body = serde_json::json!({"reason": rejection.reason, "detail": rejection.detail}).to_string();
            if let Err(e) = self.client.try_publish(topic, QoS::AtMostOnce, false, body) {
                tracing::debug!(error = %e, "cannot publish an MQTT refusal");
            }
        }
    }
}
