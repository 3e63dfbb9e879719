//! Typed configuration, layered: built-in defaults < TOML file (`--config`)
//! < `SENSORHUB_*` environment variables < command-line flags. Flags and
//! environment are merged by clap; the file and the defaults are added by
//! one pure function per command ([`serve::ServeSettings::resolve`]), which
//! holds every default once.

pub mod dashboard;
pub mod delivery;
pub mod env;
pub mod mqtt;
pub mod reference;
pub mod serve;
pub mod server;

use serde::Deserialize;
use std::net::SocketAddr;
use std::path::Path;

/// Default listen address (also printed by `demo` in its curl lines).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
/// Default database.
pub const DEFAULT_DATABASE: &str = "./sensorhub.db";

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// A database or Redis URL given on the command line: its `Debug` hides
/// the password, so that printing the parsed arguments never leaks it.
#[derive(Clone, PartialEq, Eq)]
pub struct Url(pub String);

impl std::fmt::Debug for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", sensorhub_store::redact_url(&self.0))
    }
}

impl std::str::FromStr for Url {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Url(s.to_owned()))
    }
}

/// A secret given on the command line or in the environment: its `Debug`
/// prints `***`, so that printing the parsed arguments never leaks it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("\"***\"")
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Secret(s.to_owned()))
    }
}

/// What every command shares, resolved once from the global flags (and
/// their environment variables) over the config file over the defaults.
pub struct Common {
    /// The config file's contents (empty without `--config`).
    pub file: FileConfig,
    /// The database: a SQLite path or a URL.
    pub database: String,
    /// How log lines are written.
    pub log_format: LogFormat,
}

impl Common {
    /// Layers the global flags over `file` over the defaults. Pure.
    pub fn resolve(database: Option<Url>, log_format: Option<LogFormat>, file: FileConfig) -> Self {
        let database =
            database.map(|u| u.0).or_else(|| file.database.clone()).unwrap_or_else(|| DEFAULT_DATABASE.to_owned());
        let log_format = log_format.or(file.log_format).unwrap_or_default();
        Self { file, database, log_format }
    }

    /// Opens (creating and migrating when needed) the database.
    pub async fn open(&self) -> sensorhub_store::StoreResult<std::sync::Arc<dyn sensorhub_store::Store>> {
        sensorhub_store::open(&self.database).await
    }
}

/// The keys a config file may hold; all optional.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Database path or URL.
    pub database: Option<String>,
    /// Listen address.
    pub listen: Option<SocketAddr>,
    /// Default UTC offset of rendered times: hours (`7`) or text (`"+05:30"`).
    #[serde(default, deserialize_with = "tz_setting")]
    pub default_tz: Option<String>,
    /// Longest readings range, in days.
    pub max_range_days: Option<u32>,
    /// Seconds in-flight requests get after a shutdown signal.
    pub shutdown_grace: Option<u64>,
    /// Quota per caller (`600/minute`, `off`).
    pub rate_limit: Option<String>,
    /// Failed logins per username (`30/hour`, `off`).
    pub login_failure_limit: Option<String>,
    /// `simulate` or `ingest`.
    pub webhook_mode: Option<server::WebhookMode>,
    /// Largest webhook body, in bytes.
    pub max_body_bytes: Option<usize>,
    /// `--max-future-skew` (seconds).
    pub max_future_skew: Option<u64>,
    /// `--retention`: how long readings are kept by default.
    pub retention: Option<String>,
    /// `--retention-every` (minutes).
    pub retention_every: Option<u64>,
    /// Header with the client address set by a trusted proxy.
    pub client_ip_header: Option<String>,
    /// Proxies whose header is believed, comma-separated.
    pub trusted_proxies: Option<String>,
    /// A listener of its own for /metrics.
    pub metrics_listen: Option<SocketAddr>,
    /// The bearer token /metrics requires.
    pub metrics_token: Option<String>,
    /// `memory` or a `redis://` URL shared by instances.
    pub rate_limit_store: Option<String>,
    /// Prefix of sensorhub's Redis keys.
    pub redis_prefix: Option<String>,
    /// `text` or `json`.
    pub log_format: Option<LogFormat>,
    /// `open` or `closed`: the rate limit while Redis does not answer.
    pub rate_limit_fail: Option<server::RateLimitFail>,
    /// Seconds to send a whole request head.
    pub header_read_timeout: Option<u64>,
    /// Seconds an idle keep-alive connection may stay silent.
    pub keep_alive_timeout: Option<u64>,
    /// Seconds a request has until its answer begins.
    pub request_timeout: Option<u64>,
    /// Seconds a client may take no byte of an answer.
    pub write_timeout: Option<u64>,
    /// Connections served at once.
    pub max_connections: Option<usize>,
    /// Connections one client address may hold.
    pub max_connections_per_address: Option<usize>,
    /// HTTPS certificate chain (PEM).
    pub tls_cert: Option<std::path::PathBuf>,
    /// HTTPS private key (PEM).
    pub tls_key: Option<std::path::PathBuf>,
    /// Live streams open at once (within `max_connections`).
    pub max_streams: Option<usize>,
    /// Live streams one caller may hold.
    pub max_streams_per_caller: Option<usize>,
    /// Live streams one client address may hold.
    pub max_streams_per_address: Option<usize>,
    /// MQTT ingestion (`[mqtt]`).
    pub mqtt: Option<mqtt::MqttFile>,
    /// The dashboard (`[dashboard]`).
    pub dashboard: Option<dashboard::DashboardFile>,
    /// Outgoing webhook deliveries (`[webhooks]`).
    pub webhooks: Option<delivery::DeliveryFile>,
}

/// `default_tz` may be a number of hours or a string.
fn tz_setting<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Tz {
        Hours(i64),
        Text(String),
    }
    Ok(Option::<Tz>::deserialize(d)?.map(|tz| match tz {
        Tz::Hours(h) => h.to_string(),
        Tz::Text(t) => t,
    }))
}

impl std::fmt::Debug for FileConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let redacted = |u: &Option<String>| u.as_deref().map(sensorhub_store::redact_url);
        f.debug_struct("FileConfig")
            .field("database", &redacted(&self.database))
            .field("listen", &self.listen)
            .field("rate_limit", &self.rate_limit)
            .field("rate_limit_store", &redacted(&self.rate_limit_store))
            .finish_non_exhaustive()
    }
}

impl FileConfig {
    /// Reads `path`, or an empty config when no path is given.
    pub fn load(path: Option<&Path>) -> Result<Self, String> {
        let Some(path) = path else { return Ok(Self::default()) };
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read config {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| format!("config {}: {e}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::{Common, FileConfig, LogFormat, Url};

    #[test]
    fn the_common_settings_layer_flags_over_the_file_over_the_defaults() {
        let none = Common::resolve(None, None, FileConfig::default());
        assert_eq!((none.database.as_str(), none.log_format), ("./sensorhub.db", LogFormat::Text));
        let file = || FileConfig {
            database: Some("from-file.db".into()),
            log_format: Some(LogFormat::Json),
            ..FileConfig::default()
        };
        let from_file = Common::resolve(None, None, file());
        assert_eq!((from_file.database.as_str(), from_file.log_format), ("from-file.db", LogFormat::Json));
        let flags = Common::resolve(Some(Url("flag.db".into())), Some(LogFormat::Text), file());
        assert_eq!((flags.database.as_str(), flags.log_format), ("flag.db", LogFormat::Text));
    }

    #[test]
    fn debug_output_hides_passwords() {
        let url: Url = "postgres://u:hunter2@db/x".parse().expect("infallible");
        assert_eq!(format!("{url:?}"), "\"postgres://u:***@db/x\"");
        let file = FileConfig {
            database: Some("postgres://u:hunter2@db/x".into()),
            rate_limit_store: Some("redis://:hunter2@r:6379".into()),
            ..FileConfig::default()
        };
        assert!(!format!("{file:?}").contains("hunter2"), "{file:?}");
    }
}
