//! The settings of `sensorhub serve`: its flags (each also an environment
//! variable), and [`ServeSettings::resolve`], the one pure function that
//! layers flags over the config file over the defaults into one tree (the
//! server's settings and the MQTT, delivery and dashboard tables). Every
//! default of the server is written here or in its table's module, once;
//! `service.rs` does the I/O of starting what the tree says.

use super::dashboard::{DashboardFlags, DashboardSettings};
use super::delivery::{DeliveryFlags, DeliverySettings};
use super::mqtt::{MqttFlags, MqttSettings};
use super::server::WebhookMode;
use super::server::{
    ConnectionLimits, CounterStore, MetricsAccess, RateLimitFail, StreamLimits, TlsFiles, WebhookSettings, loopback,
    parse_networks,
};
use super::{DEFAULT_LISTEN, FileConfig, Secret, Url};
use crate::limiter::RateLimitSetting;
use axum::http::HeaderName;
use jiff::tz::Offset;
use sensorhub_core::retention::Retention;
use sensorhub_core::time::{RangeRules, Zone, parse_zone};
use std::net::SocketAddr;
use std::time::Duration;

/// Default longest readings range, in days.
const DEFAULT_MAX_RANGE_DAYS: u32 = 366;
/// Default seconds in-flight requests get after a shutdown signal.
const DEFAULT_SHUTDOWN_GRACE: u64 = 30;
/// Default quota per caller.
const DEFAULT_RATE_LIMIT: &str = "600/minute";
/// Default prefix of sensorhub's Redis keys.
pub(crate) const DEFAULT_REDIS_PREFIX: &str = "sensorhub";
/// Default largest webhook body.
const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;
/// Default seconds a client has to send a whole request head.
const DEFAULT_HEADER_READ_TIMEOUT: u64 = 10;
/// Default seconds an idle keep-alive connection may stay silent.
const DEFAULT_KEEP_ALIVE_TIMEOUT: u64 = 60;
/// Default seconds a handler has to begin its answer.
const DEFAULT_REQUEST_TIMEOUT: u64 = 30;
/// Default seconds a client may accept no byte of an answer.
const DEFAULT_WRITE_TIMEOUT: u64 = 30;
/// Default failed logins per username.
const DEFAULT_LOGIN_FAILURE_LIMIT: &str = "30/hour";
/// Default seconds a webhook reading may lie ahead of the server's clock.
const DEFAULT_MAX_FUTURE_SKEW: u64 = 600;
/// Default connections served at once.
const DEFAULT_MAX_CONNECTIONS: usize = 4096;

/// The flags of `serve` that are settings (each also read from the
/// environment); `None` means "not given here".
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServeFlags {
    /// Address to listen on [default: 127.0.0.1:8080]
    #[arg(long, env = "SENSORHUB_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// UTC offset of rendered times when a request has no tz (hours, or ±HH:MM) [default: 0]
    #[arg(long, env = "SENSORHUB_DEFAULT_TZ", allow_hyphen_values = true)]
    pub default_tz: Option<String>,
    /// Longest range one readings request may ask for, in days [default: 366]
    #[arg(long, env = "SENSORHUB_MAX_RANGE_DAYS")]
    pub max_range_days: Option<u32>,
    /// Seconds in-flight requests get to finish after SIGTERM or Ctrl-C [default: 30]
    #[arg(long, env = "SENSORHUB_SHUTDOWN_GRACE")]
    pub shutdown_grace: Option<u64>,
    /// Requests per caller: COUNT/UNIT (second, minute, hour) or off [default: 600/minute]
    #[arg(long, env = "SENSORHUB_RATE_LIMIT")]
    pub rate_limit: Option<RateLimitSetting>,
    /// Failed password checks per username: COUNT/UNIT or off; past it, logins for that name from addresses it never logged in from get 429 [default: 30/hour]
    #[arg(long, env = "SENSORHUB_LOGIN_FAILURE_LIMIT")]
    pub login_failure_limit: Option<RateLimitSetting>,
    /// simulate: check and remember webhook envelopes, store nothing; ingest: store them as readings [default: simulate]
    #[arg(long, env = "SENSORHUB_WEBHOOK_MODE", value_enum)]
    pub webhook_mode: Option<WebhookMode>,
    /// Largest webhook or line-protocol body accepted, in bytes (a gzip body also once inflated) [default: 1048576]
    #[arg(long, env = "SENSORHUB_MAX_BODY_BYTES")]
    pub max_body_bytes: Option<usize>,
    /// Seconds a webhook reading may lie ahead of the server's clock; later ones are refused in ingest mode [default: 600]
    #[arg(long, env = "SENSORHUB_MAX_FUTURE_SKEW")]
    pub max_future_skew: Option<u64>,
    /// Header with the client address set by a trusted reverse proxy (e.g. X-Forwarded-For; its last entry counts)
    #[arg(long, env = "SENSORHUB_CLIENT_IP_HEADER")]
    pub client_ip_header: Option<String>,
    /// Proxies whose client-IP header is believed: addresses or networks, comma-separated (e.g. 10.0.0.0/8) [default: 127.0.0.0/8,::1]
    #[arg(long, env = "SENSORHUB_TRUSTED_PROXIES")]
    pub trusted_proxies: Option<String>,
    /// Serve /metrics (and /healthz, /readyz) on this address instead of the API's
    #[arg(long, env = "SENSORHUB_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// Require `Authorization: Bearer TOKEN` on /metrics (prefer the environment variable: arguments are visible to other users)
    #[arg(long, env = "SENSORHUB_METRICS_TOKEN", hide_env_values = true)]
    pub metrics_token: Option<Secret>,
    /// Where rate-limit counters (and the webhook's received list) live: memory (this process) or a redis:// URL shared by instances [default: memory]
    #[arg(long, env = "SENSORHUB_RATE_LIMIT_STORE")]
    pub rate_limit_store: Option<Url>,
    /// Prefix of sensorhub's Redis keys, to share one Redis between installations [default: sensorhub]
    #[arg(long, env = "SENSORHUB_REDIS_PREFIX")]
    pub redis_prefix: Option<String>,
    /// While the Redis of the rate limits does not answer: open (serve unchecked) or closed (503) [default: open]
    #[arg(long, env = "SENSORHUB_RATE_LIMIT_FAIL", value_enum)]
    pub rate_limit_fail: Option<RateLimitFail>,
    /// Seconds a client has to send a whole request head, counted from when the connection waits for one [default: 10]
    #[arg(long, env = "SENSORHUB_HEADER_READ_TIMEOUT")]
    pub header_read_timeout: Option<u64>,
    /// Seconds an idle keep-alive connection may stay silent before it is closed [default: 60]
    #[arg(long, env = "SENSORHUB_KEEP_ALIVE_TIMEOUT")]
    pub keep_alive_timeout: Option<u64>,
    /// Seconds a request has until its answer begins; past it, 503 [default: 30]
    #[arg(long, env = "SENSORHUB_REQUEST_TIMEOUT")]
    pub request_timeout: Option<u64>,
    /// Seconds a client may take no byte of an answer before it is cut off [default: 30]
    #[arg(long, env = "SENSORHUB_WRITE_TIMEOUT")]
    pub write_timeout: Option<u64>,
    /// Connections served at once; more wait in the listen backlog [default: 4096]
    #[arg(long, env = "SENSORHUB_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Connections one client address (an IPv4 address or an IPv6 /64) may hold at once; past it, a new one is answered 429 and closed. Trusted proxies are exempt [default: an eighth of --max-connections]
    #[arg(long, env = "SENSORHUB_MAX_CONNECTIONS_PER_ADDRESS")]
    pub max_connections_per_address: Option<usize>,
    /// Bytes of answers one client address may have rendered and not yet sent; past it, its next request waits up to 5 s for them to drain, then gets 429. Trusted proxies are exempt [default: 67108864 (64 MiB); at least 1048576]
    #[arg(long, env = "SENSORHUB_MAX_ANSWER_BYTES_PER_ADDRESS")]
    pub max_answer_bytes_per_address: Option<usize>,
    /// Serve HTTPS with this certificate chain (PEM; with --tls-key); reloaded on SIGHUP
    #[arg(long, env = "SENSORHUB_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1)
    #[arg(long, env = "SENSORHUB_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// Live streams open at once, within --max-connections (the rest stay free for other requests) [default: half of --max-connections]
    #[arg(long, env = "SENSORHUB_MAX_STREAMS")]
    pub max_streams: Option<usize>,
    /// Live streams one caller (a username or an API key) may hold at once; past it, 429 [default: 64]
    #[arg(long, env = "SENSORHUB_MAX_STREAMS_PER_CALLER")]
    pub max_streams_per_caller: Option<usize>,
    /// Live streams one client address (an IPv4 address or an IPv6 /64) may hold at once; past it, 429 [default: 32]
    #[arg(long, env = "SENSORHUB_MAX_STREAMS_PER_ADDRESS")]
    pub max_streams_per_address: Option<usize>,
    /// How long readings are kept unless their device or its owner says otherwise: forever, or 36h, 90d, 8w, 2y [default: forever]
    #[arg(long, env = "SENSORHUB_RETENTION")]
    pub retention: Option<String>,
    /// Minutes between passes that remove readings past their retention [default: 60]
    #[arg(long, env = "SENSORHUB_RETENTION_EVERY")]
    pub retention_every: Option<u64>,
}

/// Everything `serve` reads from its command line: the server's settings,
/// the MQTT, delivery and dashboard flags, and `--demo`.
#[derive(Debug, Default, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub settings: ServeFlags,
    #[command(flatten)]
    pub mqtt: MqttFlags,
    #[command(flatten)]
    pub deliveries: DeliveryFlags,
    #[command(flatten)]
    pub dashboard: DashboardFlags,
    /// Fill the database with demo data first when it is empty
    #[arg(long)]
    pub demo: bool,
}

/// How long a login waits for an Argon2 slot before 503.
const DEFAULT_LOGIN_SLOT_WAIT: Duration = Duration::from_secs(2);

/// Every setting of `serve`, resolved: one tree.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    /// The database (a SQLite path or a URL), as every command resolves it.
    pub database: String,
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Time-range defaults and limits.
    pub rules: RangeRules,
    /// Quota per caller.
    pub rate_limit: RateLimitSetting,
    /// Failed logins per username.
    pub login_failure_limit: RateLimitSetting,
    /// Webhook behaviour.
    pub webhook: WebhookSettings,
    /// Header holding the client address, set by a trusted proxy.
    pub client_ip_header: Option<HeaderName>,
    /// The proxies whose header is believed.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// A listener of its own for /metrics.
    pub metrics_listen: Option<SocketAddr>,
    /// Who may read /metrics, and where.
    pub metrics_access: MetricsAccess,
    /// Where counters live.
    pub counters: CounterStore,
    /// What the rate limit does while Redis does not answer.
    pub rate_limit_fail: RateLimitFail,
    /// Time a handler has to begin its answer.
    pub request_timeout: Duration,
    /// Timeouts and the cap of connections (and the shutdown grace).
    pub connections: ConnectionLimits,
    /// How many live streams may be open: in all, per caller, per address.
    pub streams: StreamLimits,
    /// HTTPS: the certificate chain and key files; `None`: plain HTTP.
    pub tls: Option<TlsFiles>,
    /// How long readings are kept by default (never `inherit`).
    pub retention: Retention,
    /// Time between retention passes.
    pub retention_every: Duration,
    /// How long a login waits for an Argon2 slot before 503 (not a flag).
    pub login_slot_wait: Duration,
    /// MQTT ingestion; `None`: no broker named.
    pub mqtt: Option<MqttSettings>,
    /// Outgoing webhook deliveries.
    pub deliveries: DeliverySettings,
    /// The dashboard at `/`; `None`: not served.
    pub dashboard: Option<DashboardSettings>,
    /// Keep the demo's stations reporting (on a database that holds the demo).
    pub demo: bool,
}

impl Default for ServeSettings {
    /// The settings of `serve` given nothing, over `./sensorhub.db`.
    fn default() -> Self {
        match Self::resolve(super::DEFAULT_DATABASE, &ServeArgs::default(), &FileConfig::default()) {
            Ok(settings) => settings,
            // A test proves the defaults resolve (`defaults_when_nothing_is_given`).
            Err(e) => unreachable!("the defaults of serve do not resolve: {e}"),
        }
    }
}

impl ServeSettings {
    /// Layers `args` (command line and environment) over `file` over the
    /// defaults, and checks every value. Pure: reads nothing, opens nothing.
    pub fn resolve(database: &str, args: &ServeArgs, file: &FileConfig) -> Result<Self, String> {
        let flags = &args.settings;
        let listen = match flags.listen.or(file.listen) {
            Some(a) => a,
            None => DEFAULT_LISTEN.parse().map_err(|e| format!("{DEFAULT_LISTEN}: {e}"))?,
        };
        let default_tz = match flags.default_tz.as_ref().or(file.default_tz.as_ref()) {
            Some(tz) => parse_zone(tz).map_err(|e| format!("--default-tz: {e}"))?,
            None => Zone::Fixed(Offset::UTC),
        };
        let max_range_days = flags.max_range_days.or(file.max_range_days).unwrap_or(DEFAULT_MAX_RANGE_DAYS);
        if max_range_days == 0 {
            return Err("--max-range-days must be at least 1".into());
        }
        let rate_limit = match flags.rate_limit {
            Some(r) => r,
            None => file.rate_limit.as_deref().unwrap_or(DEFAULT_RATE_LIMIT).parse::<RateLimitSetting>()?,
        };
        let login_failure_limit = match flags.login_failure_limit {
            Some(r) => r,
            None => file
                .login_failure_limit
                .as_deref()
                .unwrap_or(DEFAULT_LOGIN_FAILURE_LIMIT)
                .parse::<RateLimitSetting>()
                .map_err(|e| format!("--login-failure-limit: {e}"))?,
        };
        let client_ip_header = match flags.client_ip_header.as_ref().or(file.client_ip_header.as_ref()) {
            Some(name) => {
                Some(HeaderName::try_from(name.as_str()).map_err(|e| format!("--client-ip-header {name:?}: {e}"))?)
            }
            None => None,
        };
        let trusted_proxies = match flags.trusted_proxies.as_ref().or(file.trusted_proxies.as_ref()) {
            Some(_) if client_ip_header.is_none() => {
                return Err("--trusted-proxies is given without --client-ip-header".into());
            }
            Some(list) => parse_networks(list).map_err(|e| format!("--trusted-proxies: {e}"))?,
            None => loopback(),
        };
        let metrics_listen = flags.metrics_listen.or(file.metrics_listen);
        let token = flags.metrics_token.as_ref().map(|t| t.0.as_str()).or(file.metrics_token.as_deref());
        if token.is_some_and(|t| t.trim().len() < 16) {
            return Err("--metrics-token must be at least 16 characters".into());
        }
        let metrics_access = MetricsAccess {
            token_digest: token.map(|t| sensorhub_core::secret::key_digest(t.trim())),
            separate_listener: metrics_listen.is_some(),
        };
        let webhook = WebhookSettings {
            mode: flags.webhook_mode.or(file.webhook_mode).unwrap_or_default(),
            max_body_bytes: flags.max_body_bytes.or(file.max_body_bytes).unwrap_or(DEFAULT_MAX_BODY_BYTES),
            max_future_skew: jiff::SignedDuration::from_secs(
                i64::try_from(flags.max_future_skew.or(file.max_future_skew).unwrap_or(DEFAULT_MAX_FUTURE_SKEW))
                    .map_err(|_| "--max-future-skew is too large")?,
            ),
        };
        let store = flags.rate_limit_store.as_ref().map(|u| u.0.clone()).or_else(|| file.rate_limit_store.clone());
        let counters = match store {
            None => CounterStore::Memory,
            Some(s) if s == "memory" => CounterStore::Memory,
            Some(url) if url.starts_with("redis://") => {
                let prefix = flags.redis_prefix.as_ref().or(file.redis_prefix.as_ref());
                CounterStore::Redis {
                    url: Url(url),
                    prefix: prefix.map_or(DEFAULT_REDIS_PREFIX, String::as_str).to_owned(),
                }
            }
            Some(other) => {
                return Err(format!(
                    "--rate-limit-store {:?}: expected memory or a redis:// URL",
                    sensorhub_store::redact_url(&other)
                ));
            }
        };
        let seconds = |name: &str, flag: Option<u64>, file: Option<u64>, default: u64| {
            super::setting_seconds(name, flag.or(file).unwrap_or(default), 1)
        };
        let max_connections = flags.max_connections.or(file.max_connections).unwrap_or(DEFAULT_MAX_CONNECTIONS);
        if max_connections == 0 {
            return Err("--max-connections must be at least 1".into());
        }
        let connections = ConnectionLimits {
            header_read_timeout: seconds(
                "header-read-timeout",
                flags.header_read_timeout,
                file.header_read_timeout,
                DEFAULT_HEADER_READ_TIMEOUT,
            )?,
            keep_alive_timeout: seconds(
                "keep-alive-timeout",
                flags.keep_alive_timeout,
                file.keep_alive_timeout,
                DEFAULT_KEEP_ALIVE_TIMEOUT,
            )?,
            write_timeout: seconds("write-timeout", flags.write_timeout, file.write_timeout, DEFAULT_WRITE_TIMEOUT)?,
            max_connections,
            per_address: match flags.max_connections_per_address.or(file.max_connections_per_address) {
                Some(0) => return Err("--max-connections-per-address must be at least 1".into()),
                Some(n) => n,
                None => (max_connections / 8).max(1),
            },
            answer_bytes_per_address: match flags.max_answer_bytes_per_address.or(file.max_answer_bytes_per_address) {
                Some(n) if n < 1 << 20 => {
                    return Err("--max-answer-bytes-per-address must be at least 1048576 (1 MiB)".into());
                }
                Some(n) => n,
                None => ConnectionLimits::DEFAULT_ANSWER_BYTES_PER_ADDRESS,
            },
            shutdown_grace: super::setting_seconds(
                "shutdown-grace",
                flags.shutdown_grace.or(file.shutdown_grace).unwrap_or(DEFAULT_SHUTDOWN_GRACE),
                0,
            )?,
        };
        let streams = resolve_streams(flags, file, max_connections)?;
        let tls =
            match (flags.tls_cert.clone().or(file.tls_cert.clone()), flags.tls_key.clone().or(file.tls_key.clone())) {
                (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
                (None, None) => None,
                _ => return Err("--tls-cert and --tls-key go together".into()),
            };
        let request_timeout =
            seconds("request-timeout", flags.request_timeout, file.request_timeout, DEFAULT_REQUEST_TIMEOUT)?;
        let retention = match flags.retention.as_ref().or(file.retention.as_ref()) {
            None => Retention::Forever,
            Some(text) => match Retention::parse(text).map_err(|e| format!("--retention: {e}"))? {
                Retention::Inherit => return Err("--retention: the server's default cannot inherit".into()),
                r => r,
            },
        };
        let retention_every = match flags.retention_every.or(file.retention_every).unwrap_or(60) {
            0 => return Err("--retention-every must be at least 1 minute".into()),
            m if m > super::MAX_SETTING_SECONDS / 60 => {
                return Err(format!(
                    "--retention-every must be at most {} minutes (a year)",
                    super::MAX_SETTING_SECONDS / 60
                ));
            }
            m => Duration::from_secs(m * 60),
        };
        let mqtt = MqttSettings::resolve(&args.mqtt, file.mqtt.as_ref(), webhook.max_future_skew)?;
        let deliveries = DeliverySettings::resolve(&args.deliveries, file.webhooks.as_ref())?;
        let dashboard = super::dashboard::resolve(&args.dashboard, file.dashboard.as_ref())?;
        Ok(Self {
            database: database.to_owned(),
            listen,
            rules: RangeRules { default_tz, max_range_days },
            rate_limit,
            login_failure_limit,
            webhook,
            client_ip_header,
            trusted_proxies,
            metrics_listen,
            metrics_access,
            counters,
            rate_limit_fail: flags.rate_limit_fail.or(file.rate_limit_fail).unwrap_or_default(),
            request_timeout,
            connections,
            streams,
            tls,
            retention,
            retention_every,
            login_slot_wait: DEFAULT_LOGIN_SLOT_WAIT,
            mqtt,
            deliveries,
            dashboard,
            demo: args.demo,
        })
    }
}

/// The stream caps: the budget defaults to half of `max_connections` and
/// must leave some connections to other requests; each cap is at least 1.
fn resolve_streams(flags: &ServeFlags, file: &FileConfig, max_connections: usize) -> Result<StreamLimits, String> {
    let defaults = StreamLimits::for_connections(max_connections);
    let at_least_one = |name: &str, value: Option<usize>, default: usize| match value.unwrap_or(default) {
        0 => Err(format!("--{name} must be at least 1")),
        n => Ok(n),
    };
    let total = at_least_one("max-streams", flags.max_streams.or(file.max_streams), defaults.total)?;
    if total >= max_connections && max_connections > 1 {
        return Err(format!(
            "--max-streams ({total}) must be below --max-connections ({max_connections}): streams may not take \
             every connection"
        ));
    }
    Ok(StreamLimits {
        total,
        per_caller: at_least_one(
            "max-streams-per-caller",
            flags.max_streams_per_caller.or(file.max_streams_per_caller),
            defaults.per_caller,
        )?,
        per_address: at_least_one(
            "max-streams-per-address",
            flags.max_streams_per_address.or(file.max_streams_per_address),
            defaults.per_address,
        )?,
    })
}

#[cfg(test)]
#[path = "serve_tests.rs"]
mod tests;
