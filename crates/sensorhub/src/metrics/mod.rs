//! Prometheus metrics (OpenMetrics text at `GET /metrics`): requests and
//! latency by route template and status, rate-limited requests, webhook
//! envelopes, readings served and ingested, the database pool, work done
//! without Redis while it did not answer, and live streams.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use sensorhub_store::PoolStatus;

mod families;

pub use families::DeliveryMetrics;
use families::{LiveMetrics, OutcomeLabels, ReasonLabels};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: String,
    route: String,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LatencyLabels {
    route: String,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TableLabels {
    table: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CacheLabels {
    cache: &'static str,
}

/// What the bounded in-memory caches hold now, in bytes (docs/storage.md).
#[derive(Debug, Clone, Copy, Default)]
pub struct CacheBytes {
    /// Whole hours of raw windows as last rendered (at most 24 MiB).
    pub rendered_hours: usize,
    /// The hours the store wrote last, decoded, by estimate (at most 16 MiB).
    pub kept_hours: usize,
}

fn latency_histogram() -> Histogram {
    // 0.25 ms to ~8 s.
    Histogram::new(exponential_buckets(0.000_25, 2.0, 16))
}

/// Every metric the service exports.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Family<LatencyLabels, Histogram, fn() -> Histogram>,
    rate_limited: Family<KindLabels, Counter>,
    webhook: Family<OutcomeLabels, Counter>,
    readings_served: Counter,
    readings_ingested: Counter,
    pool: Family<StateLabels, Gauge>,
    caches: Family<CacheLabels, Gauge>,
    redis_unavailable: Family<OutcomeLabels, Counter>,
    connections: Gauge,
    connections_closed: Family<ReasonLabels, Counter>,
    connections_refused: Counter,
    answer_bytes_refused: Counter,
    retention_readings: Counter,
    retention_bytes: Counter,
    retention_returned: Counter,
    vacuums: Family<TableLabels, Counter>,
    mqtt_messages: Family<OutcomeLabels, Counter>,
    mqtt_readings: Counter,
    mqtt_qos0_dropped: Counter,
    mqtt_queue_bytes: Gauge,
    dashboard_csp_reports: Counter,
    mqtt_connected: Gauge,
    live: LiveMetrics,
    /// Outgoing webhook deliveries.
    pub deliveries: DeliveryMetrics,
}

/// What became of an MQTT message (the `outcome` label).
pub const MQTT_OUTCOMES: [&str; 6] =
    ["stored", "bad_json", "bad_time", "bad_reading", "unknown_device", "unknown_sensor"];

/// Why the server closed a connection (the `reason` label).
pub const CLOSE_REASONS: [&str; 6] = ["client", "header_timeout", "idle", "write_stall", "tls", "error"];

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("sensorhub");
        let requests = Family::<RequestLabels, Counter>::default();
        let latency = Family::<LatencyLabels, Histogram, fn() -> Histogram>::new_with_constructor(latency_histogram);
        let rate_limited = Family::<KindLabels, Counter>::default();
        let webhook = Family::<OutcomeLabels, Counter>::default();
        let readings_served = Counter::default();
        let readings_ingested = Counter::default();
        let pool = Family::<StateLabels, Gauge>::default();
        let redis_unavailable = Family::<OutcomeLabels, Counter>::default();
        let connections = Gauge::default();
        let connections_closed = Family::<ReasonLabels, Counter>::default();
        registry.register("http_connections", "HTTP connections open now", connections.clone());
        registry.register(
            "http_connections_closed",
            "HTTP connections ended, by reason: client (closed by the client or after its last answer), \
             header_timeout (no whole request head in time), idle (silent keep-alive), write_stall \
             (the client took no byte of an answer in time), error",
            connections_closed.clone(),
        );
        for reason in CLOSE_REASONS {
            let _ = connections_closed.get_or_create(&ReasonLabels { reason });
        }
        let connections_refused = Counter::default();
        registry.register(
            "http_connections_refused",
            "HTTP connections refused because their client address held its share (--max-connections-per-address)",
            connections_refused.clone(),
        );
        let answer_bytes_refused = Counter::default();
        registry.register(
            "http_answer_bytes_refused",
            "Requests answered 429 because their client address had --max-answer-bytes-per-address of answers unsent for 5 s",
            answer_bytes_refused.clone(),
        );
        registry.register("http_requests", "HTTP requests by method, route template and status", requests.clone());
        registry.register(
            "http_request_duration_seconds",
            "Time to the end of the response body, by route template and status",
            latency.clone(),
        );
        registry.register("rate_limited_requests", "Requests answered 429, by caller kind", rate_limited.clone());
        registry.register("webhook_envelopes", "Webhook envelopes by outcome (accepted, rejected)", webhook.clone());
        registry.register("readings_served", "Readings sent in readings responses", readings_served.clone());
        registry.register("readings_ingested", "Readings stored through the webhook", readings_ingested.clone());
        registry.register("db_pool_connections", "Database pool connections by state", pool.clone());
        let caches = Family::<CacheLabels, Gauge>::default();
        registry.register(
            "memory_cache_bytes",
            "Bytes held by the bounded in-memory caches (rendered_hours: at most 24 MiB; kept_hours: at most 16 MiB, by estimate)",
            caches.clone(),
        );
        registry.register(
            "redis_unavailable",
            "Operations done without Redis because it did not answer: served (request not rate-limited), \
             memory (failed login limited by this instance alone), received (webhook list not kept or read)",
            redis_unavailable.clone(),
        );
        let retention_readings = Counter::default();
        let retention_bytes = Counter::default();
        let retention_returned = Counter::default();
        registry.register(
            "retention_removed_readings",
            "Readings removed because they were past their retention",
            retention_readings.clone(),
        );
        registry.register(
            "retention_removed_bytes",
            "Stored bytes of readings removed by retention (encoded hours; the database's overhead comes on top)",
            retention_bytes.clone(),
        );
        registry.register(
            "retention_returned_bytes",
            "Bytes the database file shrank by after retention (SQLite with incremental auto-vacuum)",
            retention_returned.clone(),
        );
        let vacuums = Family::<TableLabels, Counter>::default();
        registry.register(
            "tables_vacuumed",
            "Vacuums sensorhub ran itself on its tables, by table (PostgreSQL whose autovacuum is off)",
            vacuums.clone(),
        );
        let mqtt_messages = Family::<OutcomeLabels, Counter>::default();
        let mqtt_readings = Counter::default();
        let mqtt_connected = Gauge::default();
        registry.register(
            "mqtt_messages",
            "MQTT messages by outcome: stored, or refused (acknowledged and dropped) for bad_json, bad_time, \
             bad_reading, unknown_device or unknown_sensor",
            mqtt_messages.clone(),
        );
        registry.register("mqtt_readings_stored", "Readings stored from MQTT messages", mqtt_readings.clone());
        registry.register("mqtt_connected", "1 while connected to the MQTT broker", mqtt_connected.clone());
        let mqtt_qos0_dropped = Counter::default();
        let mqtt_queue_bytes = Gauge::default();
        registry.register(
            "mqtt_qos0_dropped",
            "QoS 0 MQTT messages dropped unprocessed because the queue to the writer was full (--mqtt-queue-bytes)",
            mqtt_qos0_dropped.clone(),
        );
        registry.register(
            "mqtt_queue_bytes",
            "Bytes of received MQTT messages held now, queued or being written (at most --mqtt-queue-bytes)",
            mqtt_queue_bytes.clone(),
        );
        for outcome in MQTT_OUTCOMES {
            let _ = mqtt_messages.get_or_create(&OutcomeLabels { outcome });
        }
        let dashboard_csp_reports = Counter::default();
        registry.register(
            "dashboard_csp_reports",
            "Content-Security-Policy violations reported by browsers showing the dashboard",
            dashboard_csp_reports.clone(),
        );
        let live = LiveMetrics::default();
        live.register(&mut registry);
        let deliveries = DeliveryMetrics::default();
        deliveries.register(&mut registry);
        // Series that exist from the start, so that rates over them are defined.
        for kind in ["basic", "public", "webhook", "ip"] {
            let _ = rate_limited.get_or_create(&KindLabels { kind });
        }
        for outcome in ["accepted", "rejected"] {
            let _ = webhook.get_or_create(&OutcomeLabels { outcome });
        }
        Self {
            registry,
            requests,
            latency,
            rate_limited,
            webhook,
            readings_served,
            readings_ingested,
            pool,
            caches,
            redis_unavailable,
            connections,
            connections_closed,
            connections_refused,
            answer_bytes_refused,
            retention_readings,
            retention_bytes,
            retention_returned,
            vacuums,
            mqtt_messages,
            mqtt_readings,
            mqtt_qos0_dropped,
            mqtt_queue_bytes,
            dashboard_csp_reports,
            mqtt_connected,
            live,
            deliveries,
        }
    }
}

impl Metrics {
    /// Counts a finished request.
    pub fn request(&self, method: &str, route: &str, status: u16, seconds: f64) {
        self.requests
            .get_or_create(&RequestLabels { method: method.to_owned(), route: route.to_owned(), status })
            .inc();
        self.latency.get_or_create(&LatencyLabels { route: route.to_owned(), status }).observe(seconds);
    }

    /// Counts a 429 for a caller kind (`basic`, `public`, `webhook`, `ip`).
    pub fn rate_limited(&self, kind: &'static str) {
        self.rate_limited.get_or_create(&KindLabels { kind }).inc();
    }

    /// Counts a webhook envelope.
    pub fn webhook(&self, accepted: bool) {
        let outcome = if accepted { "accepted" } else { "rejected" };
        self.webhook.get_or_create(&OutcomeLabels { outcome }).inc();
    }

    /// Counts a connection opened.
    pub fn connection_opened(&self) {
        self.connections.inc();
    }

    /// Counts a connection closed, for `reason` (one of [`CLOSE_REASONS`]).
    pub fn connection_closed(&self, reason: &'static str) {
        self.connections.dec();
        self.connections_closed.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// Counts a connection refused for its address's share.
    pub fn connection_refused(&self) {
        self.connections_refused.inc();
    }

    /// Counts a request refused by its address's answer bytes.
    pub fn answer_bytes_refused(&self) {
        self.answer_bytes_refused.inc();
    }

    /// Counts readings sent to a client.
    pub fn readings_served(&self, n: usize) {
        self.readings_served.inc_by(n as u64);
    }

    /// The counter of operations done without Redis, by `outcome`
    /// (`served`, `memory`, `received`).
    pub fn redis_unavailable(&self, outcome: &'static str) -> Counter {
        self.redis_unavailable.get_or_create(&OutcomeLabels { outcome }).clone()
    }

    /// Counts a vacuum sensorhub ran itself on `table`.
    pub fn vacuumed(&self, table: &str) {
        self.vacuums.get_or_create(&TableLabels { table: table.to_owned() }).inc();
    }

    /// Counts what a retention pass removed.
    pub fn retention(&self, report: &sensorhub_store::RetentionReport) {
        self.retention_readings.inc_by(report.readings);
        self.retention_bytes.inc_by(report.bytes);
        self.retention_returned.inc_by(report.returned);
    }

    /// Counts an MQTT message by outcome (one of [`MQTT_OUTCOMES`]).
    pub fn mqtt_message(&self, outcome: &'static str) {
        self.mqtt_messages.get_or_create(&OutcomeLabels { outcome }).inc();
    }

    /// Counts readings stored from MQTT.
    pub fn mqtt_readings(&self, n: usize) {
        self.mqtt_readings.inc_by(n as u64);
    }

    /// Counts a QoS 0 MQTT message dropped because the queue was full.
    pub fn mqtt_qos0_dropped(&self) {
        self.mqtt_qos0_dropped.inc();
    }

    /// Moves the bytes of MQTT messages held by `delta`.
    pub fn mqtt_queue_bytes(&self, delta: i64) {
        self.mqtt_queue_bytes.inc_by(delta);
    }

    /// Whether the MQTT link is up.
    pub fn mqtt_connected(&self, up: bool) {
        self.mqtt_connected.set(i64::from(up));
    }

    /// Counts readings stored through the webhook.
    pub fn readings_ingested(&self, n: usize) {
        self.readings_ingested.inc_by(n as u64);
    }

    /// Counts a live stream opened.
    pub fn live_stream_opened(&self) {
        self.live.streams.inc();
    }

    /// Counts a live stream closed.
    pub fn live_stream_closed(&self) {
        self.live.streams.dec();
    }

    /// Counts a stream refused by the cap named by `reason`.
    pub fn live_stream_refused(&self, reason: &'static str) {
        self.live.refused.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// Counts an open stream ended because its caller lost access.
    pub fn live_stream_revoked(&self) {
        self.live.revoked.inc();
    }

    /// Counts a live stream cut for lagging.
    pub fn live_stream_cut(&self) {
        self.live.cut.inc();
    }

    /// Counts a Content-Security-Policy violation a browser reported.
    pub fn dashboard_csp_report(&self) {
        self.dashboard_csp_reports.inc();
    }

    /// Counts an event written to a live stream.
    pub fn live_event_sent(&self) {
        self.live.events_sent.inc();
    }

    /// Counts readings published without Redis.
    pub fn live_unshared(&self, n: usize) {
        self.live.unshared.inc_by(n as u64);
    }

    /// Counts readings stored but not published (past a write's cap).
    pub fn live_unpublished(&self, n: usize) {
        self.live.unpublished.inc_by(n as u64);
    }

    /// Whether this instance is subscribed to the other instances' readings.
    pub fn live_linked(&self, linked: bool) {
        self.live.linked.set(i64::from(linked));
    }

    /// The OpenMetrics text, with the pool's state and the caches' sizes as of now.
    pub fn render(&self, pool: PoolStatus, caches: CacheBytes) -> String {
        let gauge = |state| self.pool.get_or_create(&StateLabels { state }).clone();
        gauge("max").set(pool.max as i64);
        gauge("in_use").set(pool.in_use as i64);
        gauge("idle").set(pool.idle as i64);
        let cache = |cache, bytes: usize| {
            self.caches.get_or_create(&CacheLabels { cache }).set(i64::try_from(bytes).unwrap_or(i64::MAX));
        };
        cache("rendered_hours", caches.rendered_hours);
        cache("kept_hours", caches.kept_hours);
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(error = %e, "cannot encode metrics");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_family() {
        let m = Metrics::default();
        m.request("GET", "/external/v1/devices", 200, 0.002);
        m.rate_limited("basic");
        m.webhook(true);
        m.readings_served(3);
        m.vacuumed("outbox");
        let text = m.render(PoolStatus { max: 8, in_use: 1, idle: 2 }, CacheBytes { rendered_hours: 5, kept_hours: 7 });
        for needle in [
            "sensorhub_http_requests_total{method=\"GET\",route=\"/external/v1/devices\",status=\"200\"} 1",
            "sensorhub_http_request_duration_seconds_bucket",
            "sensorhub_rate_limited_requests_total{kind=\"basic\"} 1",
            "sensorhub_webhook_envelopes_total{outcome=\"accepted\"} 1",
            "sensorhub_readings_served_total 3",
            "sensorhub_tables_vacuumed_total{table=\"outbox\"} 1",
            "sensorhub_db_pool_connections{state=\"max\"} 8",
            "sensorhub_memory_cache_bytes{cache=\"rendered_hours\"} 5",
            "sensorhub_memory_cache_bytes{cache=\"kept_hours\"} 7",
        ] {
            assert!(text.contains(needle), "{needle} missing from {text}");
        }
    }
}
