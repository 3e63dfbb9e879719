//! The metric families of outgoing webhook deliveries and of live
//! streams, each registered as a group (`super::Metrics` holds them).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct OutcomeLabels {
    pub(super) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ReasonLabels {
    pub(super) reason: &'static str,
}

/// The metrics of outgoing webhook deliveries.
#[derive(Default)]
pub struct DeliveryMetrics {
    attempts: Family<OutcomeLabels, Counter>,
    dropped: Counter,
    backlog: Gauge,
}

impl DeliveryMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "webhook_deliveries",
            "Outgoing webhook delivery attempts by outcome: delivered, retried (to be tried again) or failed (given up)",
            self.attempts.clone(),
        );
        registry.register(
            "webhook_deliveries_dropped",
            "Outgoing webhook deliveries dropped unsent because their account was disabled or no longer sees the device",
            self.dropped.clone(),
        );
        registry.register("webhook_outbox_backlog", "Outgoing webhook deliveries pending", self.backlog.clone());
        for outcome in ["delivered", "retried", "failed"] {
            let _ = self.attempts.get_or_create(&OutcomeLabels { outcome });
        }
    }

    /// Counts an attempt's outcome: `delivered`, `retried` or `failed`.
    pub fn attempt(&self, outcome: &'static str) {
        self.attempts.get_or_create(&OutcomeLabels { outcome }).inc();
    }

    /// Counts deliveries dropped for lost access.
    pub fn dropped(&self, n: usize) {
        self.dropped.inc_by(n as u64);
    }

    /// Sets the deliveries pending.
    pub fn backlog(&self, n: u64) {
        self.backlog.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// The deliveries pending, as last counted.
    pub fn backlog_now(&self) -> i64 {
        self.backlog.get()
    }
}

/// The metrics of live streams.
#[derive(Default)]
pub(super) struct LiveMetrics {
    pub(super) streams: Gauge,
    pub(super) refused: Family<ReasonLabels, Counter>,
    pub(super) revoked: Counter,
    pub(super) events_sent: Counter,
    pub(super) cut: Counter,
    pub(super) unshared: Counter,
    pub(super) unpublished: Counter,
    pub(super) linked: Gauge,
}

impl LiveMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register("live_streams", "Live streams (Server-Sent Events) open now", self.streams.clone());
        registry.register("live_events_sent", "Reading events written to live streams", self.events_sent.clone());
        registry.register(
            "live_streams_refused",
            "Streams refused with 429 by a cap: the instance's stream budget (total), the caller's share or the client address's",
            self.refused.clone(),
        );
        for reason in ["total", "caller", "address"] {
            let _ = self.refused.get_or_create(&ReasonLabels { reason });
        }
        registry.register(
            "live_streams_revoked",
            "Open streams ended because their caller lost access (key revoked or narrowed, account disabled, password changed, device taken away)",
            self.revoked.clone(),
        );
        registry.register(
            "live_streams_cut",
            "Live streams cut because their client fell too far behind (its queue was full)",
            self.cut.clone(),
        );
        registry.register(
            "live_events_unshared",
            "Readings published to this instance's streams only, because Redis did not answer",
            self.unshared.clone(),
        );
        registry.register(
            "live_readings_unpublished",
            "Readings stored by a large import or apply beyond the ones it publishes to live streams",
            self.unpublished.clone(),
        );
        registry.register(
            "live_redis_linked",
            "1 while this instance receives other instances' readings through Redis",
            self.linked.clone(),
        );
    }
}
