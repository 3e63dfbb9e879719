//! Settings of outgoing webhook deliveries (`serve --webhook-…`): flags
//! and `SENSORHUB_WEBHOOK_…` variables over the config file's `[webhooks]`
//! table, resolved into [`DeliverySettings`].

use serde::Deserialize;
use std::time::Duration;

/// How deliveries are retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The wait after the first failed attempt; each next one doubles it.
    pub first_backoff: Duration,
    /// The longest wait between two attempts.
    pub max_backoff: Duration,
    /// How long after the reading was stored a delivery is still tried.
    pub retry_for: Duration,
}

impl Default for RetryPolicy {
    /// 5 s, 10 s, 20 s … at most an hour apart, for 24 hours.
    fn default() -> Self {
        Self {
            first_backoff: Duration::from_secs(5),
            max_backoff: Duration::from_secs(3600),
            retry_for: Duration::from_secs(24 * 3600),
        }
    }
}

/// The scheduling class of the threads webhook attempts run on (delivery/lane.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttemptPriority {
    /// Linux's idle class: attempts get the CPU the rest of the server leaves.
    #[default]
    Idle,
    /// The class of the server's other threads.
    Normal,
}

/// The `[webhooks]` table of the config file: the flags' values, by the
/// flags' names without `webhook-`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliveryFile {
    /// `--webhook-allow-private`.
    pub allow_private: Option<bool>,
    /// `--webhook-timeout` (seconds).
    pub timeout: Option<u64>,
    /// `--webhook-retry-for` (seconds).
    pub retry_for: Option<u64>,
    /// `--webhook-disable-after` (seconds).
    pub disable_after: Option<u64>,
    /// `--webhook-concurrency`.
    pub concurrency: Option<usize>,
    /// `--webhook-ingest-first` (percent).
    pub ingest_first: Option<u8>,
    /// `--webhook-priority`.
    pub priority: Option<AttemptPriority>,
}

/// Flags of outgoing webhook deliveries.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct DeliveryFlags {
    /// Allow deliveries to loopback, private, link-local and metadata addresses (for tests and closed networks)
    #[arg(long, env = "SENSORHUB_WEBHOOK_ALLOW_PRIVATE")]
    pub webhook_allow_private: bool,
    /// Seconds one delivery attempt may take, from resolving the host to the answer's status [default: 10]
    #[arg(long, env = "SENSORHUB_WEBHOOK_TIMEOUT")]
    pub webhook_timeout: Option<u64>,
    /// Seconds after a reading was stored that its delivery is still retried [default: 86400]
    #[arg(long, env = "SENSORHUB_WEBHOOK_RETRY_FOR")]
    pub webhook_retry_for: Option<u64>,
    /// Seconds an endpoint may fail with no success before its subscription is disabled [default: 259200]
    #[arg(long, env = "SENSORHUB_WEBHOOK_DISABLE_AFTER")]
    pub webhook_disable_after: Option<u64>,
    /// Deliveries in flight to one endpoint at once [default: 4]
    #[arg(long, env = "SENSORHUB_WEBHOOK_CONCURRENCY")]
    pub webhook_concurrency: Option<usize>,
    /// Percent of its time the delivery worker may hold back its database writes while readings wait to be written (0: never) [default: 90]
    #[arg(long, env = "SENSORHUB_WEBHOOK_INGEST_FIRST", value_parser = clap::value_parser!(u8).range(0..=99))]
    pub webhook_ingest_first: Option<u8>,
    /// Scheduling class of the threads webhook attempts run on: idle (Linux's SCHED_IDLE: they take only the CPU that ingest and reads leave, so a saturated machine delays deliveries, never readings) or normal [default: idle]
    #[arg(long, env = "SENSORHUB_WEBHOOK_PRIORITY", value_enum)]
    pub webhook_priority: Option<AttemptPriority>,
}

/// How the delivery worker runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliverySettings {
    /// Whether private targets are allowed.
    pub allow_private: bool,
    /// The time limit of one attempt.
    pub timeout: Duration,
    /// The retry rules.
    pub policy: RetryPolicy,
    /// How long an endpoint may fail before its subscription is disabled.
    pub disable_after: Duration,
    /// Deliveries in flight to one endpoint.
    pub per_endpoint: usize,
    /// Deliveries in flight in all.
    pub in_flight: usize,
    /// The longest wait between two looks at the outbox when idle.
    pub poll: Duration,
    /// Percent of its time the worker may hold back its claims and records
    /// while readings wait for the store's writer (hooks/yielding.rs).
    pub ingest_first: u8,
    /// The scheduling class of the attempts' threads.
    pub priority: AttemptPriority,
}

impl Default for DeliverySettings {
    fn default() -> Self {
        Self {
            allow_private: false,
            timeout: Duration::from_secs(10),
            policy: RetryPolicy::default(),
            disable_after: Duration::from_secs(72 * 3600),
            per_endpoint: 4,
            in_flight: 128,
            poll: Duration::from_millis(500),
            ingest_first: 90,
            priority: AttemptPriority::Idle,
        }
    }
}

impl DeliverySettings {
    /// The settings `flags` give over `file` over the defaults; refuses zeros.
    pub fn resolve(flags: &DeliveryFlags, file: Option<&DeliveryFile>) -> Result<Self, String> {
        let d = Self::default();
        let file = file.cloned().unwrap_or_default();
        let secs = |name: &str, v: Option<u64>, default: Duration| match v {
            Some(s) => super::setting_seconds(name, s, 1),
            None => Ok(default),
        };
        let per_endpoint = match flags.webhook_concurrency.or(file.concurrency) {
            Some(0) => return Err("--webhook-concurrency must be at least 1".into()),
            Some(n) => n,
            None => d.per_endpoint,
        };
        let ingest_first = match flags.webhook_ingest_first.or(file.ingest_first) {
            Some(p) if p > 99 => return Err("--webhook-ingest-first must be 0 to 99 (percent)".into()),
            Some(p) => p,
            None => d.ingest_first,
        };
        Ok(Self {
            allow_private: flags.webhook_allow_private || file.allow_private == Some(true),
            timeout: secs("webhook-timeout", flags.webhook_timeout.or(file.timeout), d.timeout)?,
            policy: RetryPolicy {
                retry_for: secs("webhook-retry-for", flags.webhook_retry_for.or(file.retry_for), d.policy.retry_for)?,
                ..d.policy
            },
            disable_after: secs(
                "webhook-disable-after",
                flags.webhook_disable_after.or(file.disable_after),
                d.disable_after,
            )?,
            per_endpoint,
            in_flight: d.in_flight.max(per_endpoint),
            poll: d.poll,
            ingest_first,
            priority: flags.webhook_priority.or(file.priority).unwrap_or(d.priority),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_defaults_and_zeros_are_refused() {
        assert_eq!(DeliverySettings::resolve(&DeliveryFlags::default(), None), Ok(DeliverySettings::default()));
        let flags = DeliveryFlags {
            webhook_timeout: Some(3),
            webhook_concurrency: Some(2),
            webhook_ingest_first: Some(0),
            ..DeliveryFlags::default()
        };
        let s = DeliverySettings::resolve(&flags, None).expect("valid");
        assert_eq!((s.timeout, s.per_endpoint, s.ingest_first), (Duration::from_secs(3), 2, 0));
        assert!(
            DeliverySettings::resolve(&DeliveryFlags { webhook_retry_for: Some(0), ..DeliveryFlags::default() }, None)
                .is_err()
        );
    }

    #[test]
    fn the_webhooks_table_is_read_under_the_flags() {
        let file: crate::config::FileConfig = toml::from_str(
            "[webhooks]\nallow_private = true\ntimeout = 5\nretry_for = 3600\nconcurrency = 8\ningest_first = 50\n\
             priority = \"normal\"",
        )
        .expect("valid config");
        let s = DeliverySettings::resolve(&DeliveryFlags::default(), file.webhooks.as_ref()).expect("valid");
        assert!(s.allow_private);
        assert_eq!((s.timeout, s.policy.retry_for), (Duration::from_secs(5), Duration::from_secs(3600)));
        assert_eq!((s.per_endpoint, s.ingest_first, s.priority), (8, 50, AttemptPriority::Normal));
        let idle = DeliveryFlags { webhook_priority: Some(AttemptPriority::Idle), ..DeliveryFlags::default() };
        let s = DeliverySettings::resolve(&idle, file.webhooks.as_ref()).expect("valid");
        assert_eq!(s.priority, AttemptPriority::Idle, "the flag over the file");
        let flags = DeliveryFlags { webhook_timeout: Some(2), ..DeliveryFlags::default() };
        let s = DeliverySettings::resolve(&flags, file.webhooks.as_ref()).expect("valid");
        assert_eq!(s.timeout, Duration::from_secs(2), "a flag wins over the file");
        let bad = DeliveryFile { ingest_first: Some(100), ..DeliveryFile::default() };
        assert!(DeliverySettings::resolve(&DeliveryFlags::default(), Some(&bad)).is_err());
        assert!(toml::from_str::<crate::config::FileConfig>("[webhooks]\nnope = 1").is_err(), "unknown keys refused");
    }
}
