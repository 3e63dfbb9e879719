//! The settings types of the server, owned here so that every part that
//! reads a setting depends on `config` and `config` on none of them: the
//! limits of connections and streams, who may read the metrics, what the
//! webhook does, where shared counters live, HTTPS's files.

use super::Url;
use ipnet::IpNet;
use std::net::IpAddr;
use std::time::Duration;

/// What the webhook does with accepted envelopes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WebhookMode {
    /// Check and remember envelopes; store nothing (a test bench for senders).
    #[default]
    Simulate,
    /// Store each envelope's values as one reading.
    Ingest,
}

/// How the webhook treats envelopes.
#[derive(Debug, Clone, Copy)]
pub struct WebhookSettings {
    /// Simulate (test bench) or ingest.
    pub mode: WebhookMode,
    /// Largest body accepted.
    pub max_body_bytes: usize,
    /// How far ahead of the server's clock a reading may be (ingest refuses later ones).
    pub max_future_skew: jiff::SignedDuration,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        Self {
            mode: WebhookMode::Simulate,
            max_body_bytes: 1 << 20,
            max_future_skew: jiff::SignedDuration::from_secs(600),
        }
    }
}

/// Who may read `/metrics`, and on which listener.
#[derive(Debug, Clone, Default)]
pub struct MetricsAccess {
    /// SHA-256 of the bearer token `/metrics` requires; `None`: no token.
    pub token_digest: Option<sensorhub_core::secret::KeyDigest>,
    /// `/metrics` is served on a listener of its own, not on the API's.
    pub separate_listener: bool,
}

/// What the rate limit does while its shared store (Redis) does not answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RateLimitFail {
    /// Serve callers unchecked (availability first).
    #[default]
    Open,
    /// Refuse callers with 503 and `Retry-After` (limits first).
    Closed,
}

/// The limits a server applies to every connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Time to send a complete request head, counted from when the
    /// connection starts waiting for it.
    pub header_read_timeout: Duration,
    /// Time an idle keep-alive connection may stay silent.
    pub keep_alive_timeout: Duration,
    /// Time a client may accept no byte of an answer.
    pub write_timeout: Duration,
    /// Connections served at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// Connections one client address (an IPv4 address or an IPv6 /64) may
    /// hold at once; past it, a connection is refused (trusted proxies exempt).
    pub per_address: usize,
    /// Bytes of answers one client address may have rendered and not yet
    /// sent before its requests wait (trusted proxies exempt).
    pub answer_bytes_per_address: usize,
    /// Time in-flight requests get after a shutdown signal.
    pub shutdown_grace: Duration,
}

impl ConnectionLimits {
    /// The default of `--max-answer-bytes-per-address`: 64 MiB.
    pub const DEFAULT_ANSWER_BYTES_PER_ADDRESS: usize = 64 << 20;
}

impl Default for ConnectionLimits {
    /// The defaults of `serve` (the limits table of docs/operations.md).
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            keep_alive_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(30),
            max_connections: 4096,
            per_address: 4096 / 8,
            answer_bytes_per_address: Self::DEFAULT_ANSWER_BYTES_PER_ADDRESS,
            shutdown_grace: Duration::from_secs(30),
        }
    }
}

/// The caps, as the operator set them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    /// Streams open at once on this instance.
    pub total: usize,
    /// Streams open at once for one caller (a username or an API key).
    pub per_caller: usize,
    /// Streams open at once from one client address (an IPv6 /64).
    pub per_address: usize,
}

impl StreamLimits {
    /// Streams one caller may hold by default.
    pub const DEFAULT_PER_CALLER: usize = 64;
    /// Streams one client address may hold by default.
    pub const DEFAULT_PER_ADDRESS: usize = 32;

    /// The defaults for a server of `max_connections`: half of them for
    /// streams, the other half always free for other requests.
    pub fn for_connections(max_connections: usize) -> Self {
        Self {
            total: (max_connections / 2).max(1),
            per_caller: Self::DEFAULT_PER_CALLER,
            per_address: Self::DEFAULT_PER_ADDRESS,
        }
    }
}

/// Loopback, the default trusted proxies: a proxy on the same host.
pub fn loopback() -> Vec<IpNet> {
    ["127.0.0.0/8", "::1/128"].iter().filter_map(|n| n.parse().ok()).collect()
}

/// Parses a comma-separated list of networks (`10.0.0.0/8`) or addresses
/// (`192.0.2.7`, taken as a network of one).
pub fn parse_networks(list: &str) -> Result<Vec<IpNet>, String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<IpNet>()
                .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| format!("{s:?} is not an address or a network like 10.0.0.0/8"))
        })
        .collect()
}

/// Where rate-limit counters and the webhook's received list live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CounterStore {
    /// This process's memory.
    Memory,
    /// A Redis shared by instances.
    Redis {
        /// `redis://…`; its `Debug` hides a password.
        url: Url,
        /// Prefix of every key.
        prefix: String,
    },
}

/// The PEM files of HTTPS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain.
    pub cert: std::path::PathBuf,
    /// Its private key.
    pub key: std::path::PathBuf,
}
