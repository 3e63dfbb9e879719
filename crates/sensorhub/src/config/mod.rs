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
    /// Bytes of answers one client address may have unsent.
    pub max_answer_bytes_per_address: Option<usize>,
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
    /// Reads `path`, or an empty config when no path is given. An error
    /// names the line and column but does not show the line: it may hold
    /// a password or a token.
    pub fn load(path: Option<&Path>) -> Result<Self, String> {
        let Some(path) = path else { return Ok(Self::default()) };
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read config {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| {
            let at = e.span().and_then(|span| text.get(..span.start)).map_or_else(String::new, |before| {
                let line = before.matches('\n').count() + 1;
                let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
                format!(", line {line}, column {column}")
            });
            format!("config {}{at}: {}", path.display(), without_values(e.message().trim_end()))
        })
    }
}

/// A toml error's message with the values it quotes masked: serde's
/// "invalid type: integer `20240601`, expected a string" names the value
/// of the setting, which may be a password or a token. Names of settings
/// (as in "unknown field `pasword`") stay.
fn without_values(message: &str) -> String {
    if !message.starts_with("invalid ") {
        return message.to_owned();
    }
    let mut out = String::with_capacity(message.len());
    let mut quote = None;
    for c in message.chars() {
        match quote {
            Some(q) if c == q => {
                out.push('…');
                out.push(c);
                quote = None;
            }
            Some(_) => {}
            None if c == '`' || c == '"' => {
                out.push(c);
                quote = Some(c);
            }
            None => out.push(c),
        }
    }
    out
}

/// The longest a duration setting may be: a year. Longer ones overflow
/// the clocks they are added to, and none of them means "never".
pub(crate) const MAX_SETTING_SECONDS: u64 = 366 * 24 * 3600;

/// Setting `--name` of `seconds` as a duration: refused below `min`
/// seconds or above [`MAX_SETTING_SECONDS`].
pub(crate) fn setting_seconds(name: &str, seconds: u64, min: u64) -> Result<std::time::Duration, String> {
    if seconds < min {
        let unit = if min == 1 { "second" } else { "seconds" };
        return Err(format!("--{name} must be at least {min} {unit}"));
    }
    if seconds > MAX_SETTING_SECONDS {
        return Err(format!("--{name} must be at most {MAX_SETTING_SECONDS} seconds (a year)"));
    }
    Ok(std::time::Duration::from_secs(seconds))
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

    #[test]
    fn a_config_error_names_its_place_but_never_shows_the_line() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("sensorhub.toml");
        for (text, place) in [
            ("log_format = \"text\"\n[mqtt]\npasword = \"hunter2\"\n", "line 3, column 1"),
            ("database = \"postgres://u:hunter2@db/x\n", "line 1, column"),
            ("[webhooks]\nmetrics_token = hunter2\n", "line 2, column"),
            ("[mqtt]\nurl = \"mqtt://h\"\npassword = 2024060112345\n", "line 3, column"),
            ("metrics_token = [\"hunter2\"]\n", "line 1, column"),
        ] {
            std::fs::write(&path, text).expect("write");
            let e = FileConfig::load(Some(&path)).expect_err("refused");
            assert!(e.contains(place) && !e.contains("hunter2") && !e.contains("2024060112345"), "{e}");
        }
    }

    #[test]
    fn durations_are_held_between_their_least_and_a_year() {
        assert_eq!(super::setting_seconds("write-timeout", 30, 1), Ok(std::time::Duration::from_secs(30)));
        let zero = super::setting_seconds("write-timeout", 0, 1).expect_err("zero");
        assert_eq!(zero, "--write-timeout must be at least 1 second");
        let forever = super::setting_seconds("keep-alive-timeout", u64::MAX, 1).expect_err("forever");
        assert!(forever.starts_with("--keep-alive-timeout must be at most 31622400 seconds"), "{forever}");
        assert!(super::setting_seconds("shutdown-grace", 0, 0).is_ok());
    }
}
