//! The MQTT settings of `sensorhub serve`: flags (each also an environment
//! variable) over the config file's `[mqtt]` table, resolved once into
//! [`MqttSettings`]; no `--mqtt-url` (and no `url` in the file) means no
//! MQTT.

use super::Secret;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::path::PathBuf;

/// The largest message sensorhub takes (MQTT 5's Maximum Packet Size): the
/// broker drops larger ones for it.
pub const MAX_PACKET_BYTES: usize = 1 << 20;

/// Where and how to connect.
#[derive(Debug, Clone)]
pub struct MqttSettings {
    /// Broker host.
    pub host: String,
    /// Broker port.
    pub port: u16,
    /// TLS (`mqtts://`) with the CA in this PEM file (the system's roots
    /// are not consulted: a CA file is required); read when connecting.
    pub tls_ca: Option<PathBuf>,
    /// Username and password, when the broker asks for them (the
    /// password's `Debug` prints `***`).
    pub credentials: Option<(String, Secret)>,
    /// The first topic level (`sensorhub`).
    pub prefix: String,
    /// A shared subscription group (`$share/<group>/…`), for several instances.
    pub group: Option<String>,
    /// The client id: stable across restarts, so that the broker keeps the session.
    pub client_id: ClientId,
    /// Publish refusals to `{prefix}/{device_id}/errors`.
    pub publish_errors: bool,
    /// How far ahead of the server's clock a reading may be.
    pub max_future_skew: jiff::SignedDuration,
    /// The most bytes of received messages held at once (queued or being written).
    pub queue_bytes: usize,
    /// How often the retained alarm states are compared with the stored
    /// ones, to publish what another process changed.
    pub alarm_resync: std::time::Duration,
}

/// The client id sensorhub connects with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientId {
    /// `--mqtt-client-id`.
    Given(String),
    /// None given: `sensorhub-HOSTNAME-` and 16 hex digits derived from the
    /// installation's random id, stable for this database and host but not
    /// guessable (the hostname keeps instances on one database apart).
    Installation,
}

impl ClientId {
    /// The id for the installation whose random id is `installation_id`,
    /// on the machine called `hostname`.
    pub fn for_installation(&self, installation_id: &str, hostname: &str) -> String {
        match self {
            Self::Given(id) => id.clone(),
            Self::Installation => {
                // Derived rather than copied: the broker (and its logs) learn
                // nothing of the installation id itself.
                let digest =
                    Sha256::new().chain_update(b"sensorhub mqtt client id\0").chain_update(installation_id).finalize();
                let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
                format!("sensorhub-{hostname}-{hex}")
            }
        }
    }
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

/// Default first topic level.
const DEFAULT_PREFIX: &str = "sensorhub";
/// Default bound on the bytes of received messages held at once: 32 MiB.
const DEFAULT_QUEUE_BYTES: usize = 32 << 20;
const DEFAULT_ALARM_RESYNC_SECONDS: u64 = 15;

/// The MQTT flags of `serve`; `None` means "not given here".
#[derive(Debug, Default, clap::Args)]
pub struct MqttFlags {
    /// Ingest readings from this MQTT broker: mqtt://host[:1883] or mqtts://host[:8883] (TLS, with --mqtt-ca-file)
    // The text is `--help`'s, not rustdoc's: its brackets are not links.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(long, env = "SENSORHUB_MQTT_URL")]
    pub mqtt_url: Option<String>,
    /// First topic level: stations publish to PREFIX/DEVICE_ID/readings [default: sensorhub]
    #[arg(long, env = "SENSORHUB_MQTT_PREFIX")]
    pub mqtt_prefix: Option<String>,
    /// Share the ingest load with other instances: subscribe as $share/GROUP/… (each message goes to one instance)
    #[arg(long, env = "SENSORHUB_MQTT_GROUP")]
    pub mqtt_group: Option<String>,
    /// Client id, stable across restarts so the broker keeps the session; each instance needs its own [default: sensorhub-HOSTNAME-<16 hex digits derived from this database's installation id>]
    #[arg(long, env = "SENSORHUB_MQTT_CLIENT_ID")]
    pub mqtt_client_id: Option<String>,
    /// Username at the broker
    #[arg(long, env = "SENSORHUB_MQTT_USERNAME")]
    pub mqtt_username: Option<String>,
    /// Password at the broker (prefer the environment variable: arguments are visible to other users)
    #[arg(long, env = "SENSORHUB_MQTT_PASSWORD", hide_env_values = true)]
    pub mqtt_password: Option<Secret>,
    /// PEM file of the CA that signed the broker's certificate (mqtts://)
    #[arg(long, env = "SENSORHUB_MQTT_CA_FILE")]
    pub mqtt_ca_file: Option<PathBuf>,
    /// Publish each refused message's reason and detail to PREFIX/DEVICE_ID/errors
    #[arg(long, env = "SENSORHUB_MQTT_ERRORS")]
    pub mqtt_errors: bool,
    /// Most bytes of received messages held at once, queued or being written, a quarter of them at most for one station; past it QoS 0 messages are dropped and QoS 1 ones wait at the broker [default: 33554432 (32 MiB); at least 1048576]
    #[arg(long, env = "SENSORHUB_MQTT_QUEUE_BYTES")]
    pub mqtt_queue_bytes: Option<usize>,
    /// Seconds between looks for alarm states changed by another process (a command, another instance), whose retained states are then published again [default: 15]
    #[arg(long, env = "SENSORHUB_MQTT_ALARM_RESYNC")]
    pub mqtt_alarm_resync: Option<u64>,
}

/// The `[mqtt]` table of the config file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MqttFile {
    /// `--mqtt-url`.
    pub url: Option<String>,
    /// `--mqtt-prefix`.
    pub prefix: Option<String>,
    /// `--mqtt-group`.
    pub group: Option<String>,
    /// `--mqtt-client-id`.
    pub client_id: Option<String>,
    /// `--mqtt-username`.
    pub username: Option<String>,
    /// `--mqtt-password`.
    pub password: Option<String>,
    /// `--mqtt-ca-file`.
    pub ca_file: Option<PathBuf>,
    /// `--mqtt-errors`.
    pub errors: Option<bool>,
    /// `--mqtt-queue-bytes`.
    pub queue_bytes: Option<usize>,
    /// `--mqtt-alarm-resync`.
    pub alarm_resync: Option<u64>,
}

/// A topic level given as a setting: no wildcard, separator or `$` start.
fn topic_level(name: &str, value: &str) -> Result<(), String> {
    if value.is_empty() || value.contains(['+', '#', '/', '\0']) || value.starts_with('$') {
        return Err(format!("{name} {value:?} must be one topic level without +, #, / or a leading $"));
    }
    Ok(())
}

/// The host, port and TLS of an `mqtt://` or `mqtts://` URL.
fn parse_url(url: &str) -> Result<(String, u16, bool), String> {
    // The URL is shown without a password it may hold (credentials go in
    // --mqtt-username and --mqtt-password, never in the URL).
    let bad = || {
        let shown = sensorhub_store::redact_url(url);
        format!("--mqtt-url {shown:?} is not mqtt://host[:port] or mqtts://host[:port]")
    };
    let (rest, tls, default_port) = match url.split_once("://") {
        Some(("mqtt", rest)) => (rest, false, 1883),
        Some(("mqtts", rest)) => (rest, true, 8883),
        _ => return Err(bad()),
    };
    let authority = rest.trim_end_matches('/');
    if authority.is_empty() || authority.contains(['/', '@', '?']) {
        return Err(bad());
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || authority.starts_with('[') => {
            (host, port.parse::<u16>().map_err(|_| bad())?)
        }
        _ => (authority, default_port),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(bad());
    }
    Ok((host.to_owned(), port, tls))
}

impl MqttSettings {
    /// Layers `flags` over `file`; `None` when no broker is named. Pure:
    /// the CA file is read when connecting.
    pub fn resolve(
        flags: &MqttFlags,
        file: Option<&MqttFile>,
        max_future_skew: jiff::SignedDuration,
    ) -> Result<Option<MqttSettings>, String> {
        let empty = MqttFile::default();
        let file = file.unwrap_or(&empty);
        let Some(url) = flags.mqtt_url.as_ref().or(file.url.as_ref()) else { return Ok(None) };
        let (host, port, tls) = parse_url(url)?;
        let prefix = flags.mqtt_prefix.clone().or_else(|| file.prefix.clone()).unwrap_or_else(|| DEFAULT_PREFIX.into());
        topic_level("--mqtt-prefix", &prefix)?;
        let group = flags.mqtt_group.clone().or_else(|| file.group.clone());
        if let Some(g) = &group {
            topic_level("--mqtt-group", g)?;
        }
        let client_id = match flags.mqtt_client_id.clone().or_else(|| file.client_id.clone()) {
            Some(id) if id.is_empty() || id.len() > 128 => {
                return Err("--mqtt-client-id must be 1 to 128 bytes".into());
            }
            Some(id) => ClientId::Given(id),
            None => ClientId::Installation,
        };
        let queue_bytes = flags.mqtt_queue_bytes.or(file.queue_bytes).unwrap_or(DEFAULT_QUEUE_BYTES);
        if queue_bytes < MAX_PACKET_BYTES {
            return Err(format!("--mqtt-queue-bytes must be at least {MAX_PACKET_BYTES}, the largest message"));
        }
        let alarm_resync = super::setting_seconds(
            "mqtt-alarm-resync",
            flags.mqtt_alarm_resync.or(file.alarm_resync).unwrap_or(DEFAULT_ALARM_RESYNC_SECONDS),
            1,
        )?;
        let username = flags.mqtt_username.clone().or_else(|| file.username.clone());
        let password = flags.mqtt_password.as_ref().map(|s| s.0.clone()).or_else(|| file.password.clone());
        let credentials = match (username, password) {
            (Some(u), p) => Some((u, Secret(p.unwrap_or_default()))),
            (None, Some(_)) => return Err("--mqtt-password needs --mqtt-username".into()),
            (None, None) => None,
        };
        let ca_file = flags.mqtt_ca_file.clone().or_else(|| file.ca_file.clone());
        let tls_ca = match (tls, ca_file) {
            (true, Some(path)) => Some(path),
            (true, None) => {
                return Err("mqtts:// needs --mqtt-ca-file, the CA that signed the broker's certificate".into());
            }
            (false, Some(_)) => return Err("--mqtt-ca-file is for mqtts:// URLs".into()),
            (false, None) => None,
        };
        Ok(Some(MqttSettings {
            host,
            port,
            tls_ca,
            credentials,
            prefix,
            group,
            client_id,
            publish_errors: flags.mqtt_errors || file.errors.unwrap_or(false),
            max_future_skew,
            queue_bytes,
            alarm_resync,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(flags: MqttFlags) -> Result<Option<MqttSettings>, String> {
        MqttSettings::resolve(&flags, None, jiff::SignedDuration::from_secs(600))
    }

    #[test]
    fn urls_name_host_port_and_tls() {
        assert_eq!(parse_url("mqtt://127.0.0.1"), Ok(("127.0.0.1".into(), 1883, false)));
        assert_eq!(parse_url("mqtt://broker:1884/"), Ok(("broker".into(), 1884, false)));
        assert_eq!(parse_url("mqtts://broker"), Ok(("broker".into(), 8883, true)));
        assert_eq!(parse_url("mqtt://[::1]:1883"), Ok(("::1".into(), 1883, false)));
        for bad in ["http://x", "mqtt://", "mqtt://u:p@x", "mqtt://x:99999", "x:1883", "mqtt://x/topic"] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn settings_layer_and_check() {
        assert!(matches!(resolve(MqttFlags::default()), Ok(None)), "no URL, no MQTT");
        let s = resolve(MqttFlags { mqtt_url: Some("mqtt://127.0.0.1:1883".into()), ..MqttFlags::default() })
            .ok()
            .flatten()
            .expect("settings");
        assert_eq!((s.prefix.as_str(), s.filter().as_str()), ("sensorhub", "sensorhub/+/readings"));
        assert_eq!(s.client_id, ClientId::Installation);
        let id = s.client_id.for_installation("0123456789abcdef0123456789abcdef", "station-host");
        let hex = id.strip_prefix("sensorhub-station-host-").expect("sensorhub-HOSTNAME-…");
        assert!(hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        assert!(!id.contains("0123456789abcdef"), "derived, not copied: {id}");
        assert_eq!(id, s.client_id.for_installation("0123456789abcdef0123456789abcdef", "station-host"), "stable");
        assert_ne!(
            id,
            s.client_id.for_installation("fedcba9876543210fedcba9876543210", "station-host"),
            "per installation"
        );
        assert_eq!(s.queue_bytes, 32 << 20);
        assert_eq!(s.alarm_resync, std::time::Duration::from_secs(15));
        let file = MqttFile { url: Some("mqtt://h".into()), alarm_resync: Some(2), ..MqttFile::default() };
        let s = MqttSettings::resolve(&MqttFlags::default(), Some(&file), jiff::SignedDuration::ZERO);
        assert_eq!(s.ok().flatten().map(|s| s.alarm_resync), Some(std::time::Duration::from_secs(2)));
        let zero = MqttFlags { mqtt_url: Some("mqtt://h".into()), mqtt_alarm_resync: Some(0), ..MqttFlags::default() };
        assert!(resolve(zero).is_err_and(|e| e.contains("--mqtt-alarm-resync must be at least 1 second")));
        let file = MqttFile { url: Some("mqtt://h".into()), group: Some("ingest".into()), ..MqttFile::default() };
        let s = MqttSettings::resolve(&MqttFlags::default(), Some(&file), jiff::SignedDuration::ZERO)
            .ok()
            .flatten()
            .expect("from the file");
        assert_eq!(s.filter(), "$share/ingest/sensorhub/+/readings");
        let file = MqttFile {
            url: Some("mqtt://h".into()),
            client_id: Some("from-file".into()),
            queue_bytes: Some(2 << 20),
            ..MqttFile::default()
        };
        let flags = MqttFlags { mqtt_queue_bytes: Some(4 << 20), ..MqttFlags::default() };
        let s = MqttSettings::resolve(&flags, Some(&file), jiff::SignedDuration::ZERO).ok().flatten().expect("file");
        assert_eq!((s.client_id, s.queue_bytes), (ClientId::Given("from-file".into()), 4 << 20), "flag over file");
        let e = |flags: MqttFlags| resolve(flags).expect_err("refused");
        let url = || Some("mqtt://h".to_owned());
        assert!(
            e(MqttFlags { mqtt_url: url(), mqtt_prefix: Some("a/b".into()), ..MqttFlags::default() })
                .contains("--mqtt-prefix")
        );
        assert!(
            e(MqttFlags { mqtt_url: url(), mqtt_group: Some("#".into()), ..MqttFlags::default() })
                .contains("--mqtt-group")
        );
        assert!(e(MqttFlags { mqtt_url: Some("mqtts://h".into()), ..MqttFlags::default() }).contains("--mqtt-ca-file"));
        assert!(
            e(MqttFlags { mqtt_url: url(), mqtt_queue_bytes: Some(1000), ..MqttFlags::default() })
                .contains("--mqtt-queue-bytes must be at least 1048576")
        );
        let no_user = MqttFlags { mqtt_url: url(), mqtt_password: Some(Secret("x".into())), ..MqttFlags::default() };
        assert!(e(no_user).contains("--mqtt-username"));
    }

    #[test]
    fn a_password_never_shows_in_a_refusal_or_the_settings() {
        let refused = parse_url("mqtt://sensor:hunter2@broker").expect_err("credentials in the URL are refused");
        assert!(refused.contains("mqtt://sensor:***@broker") && !refused.contains("hunter2"), "{refused}");
        let flags = MqttFlags {
            mqtt_url: Some("mqtt://h".into()),
            mqtt_username: Some("sensor".into()),
            mqtt_password: Some(Secret("hunter2".into())),
            ..MqttFlags::default()
        };
        let s = resolve(flags).ok().flatten().expect("settings");
        assert_eq!(s.credentials.as_ref().map(|(u, p)| (u.as_str(), p.0.as_str())), Some(("sensor", "hunter2")));
        assert!(!format!("{s:?}").contains("hunter2"), "settings print no password: {s:?}");
    }
}
