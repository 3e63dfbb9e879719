//! The `hooks` scenario's figures as lines of text.

use super::{Hooks, Round};

/// The figures as lines of text.
pub fn report(h: &Hooks) -> String {
    format!(
        "webhook ingest ({}, {} clients, {}): {:.0} req/s without subscriptions; with 3: {:.0} req/s writing their outbox only \
         (ratio {:.2}), {:.0} req/s while delivering on the same cores (ratio {:.2}; target >= 0.9; \
         {:.0} deliveries/s meanwhile); {:.0} req/s without subscriptions again after them (ratio while \
         delivering against it {:.2}); against the mean of the two: {:.2} while delivering, {:.2} outbox only \
         (median of {} round(s){}){}\n\
         server a request (none / outbox only / delivering, the deliveries' work included): CPU {:.0} / {:.0} / \
         {:.0} us (the store's group-commit thread {:.1} / {:.1} / {:.1} us), {} {:.0} / {:.0} / {:.0} bytes; a delivery made while ingesting: CPU {:.0} us, {:.0} bytes\n\
         cores used without subscriptions / while delivering: server {:.2} / {:.2}, the bench's clients and \
         receiver {:.2} / {:.2}\n\
         paced at {:.0} readings/s with 3 subscriptions: {:.2} of their deliveries made meanwhile, all {:.2} s \
         after the load\n\
         backlog of {} deliveries drained in {:.1} s: {:.0} deliveries/s ({} per endpoint at once{}), {:.0} bytes written a delivery; \
         the same behind {} owed to an endpoint that never answers ({} subscription(s) of the healthy one): \
         {:.0} deliveries/s{}",
        h.backend,
        h.clients,
        h.connection,
        h.ingest_none_rps,
        h.ingest_three_outbox_rps,
        h.outbox_ratio,
        h.ingest_three_rps,
        h.ratio,
        h.deliveries_while_ingesting_per_s,
        h.ingest_none_after_rps,
        h.ratio_after,
        h.ratio_bracketed,
        h.outbox_ratio_bracketed,
        h.rounds.len(),
        rounds_text(&h.rounds),
        interval_text(h),
        h.cpu_us_none,
        h.cpu_us_outbox,
        h.cpu_us_delivering,
        h.writer_us_none,
        h.writer_us_outbox,
        h.writer_us_delivering,
        if h.backend == "sqlite" { "file pages dirtied" } else { "WAL written" },
        h.disk_bytes_none,
        h.disk_bytes_outbox,
        h.disk_bytes_delivering,
        h.cpu_us_a_delivery,
        h.disk_bytes_a_delivery,
        h.server_cores_none,
        h.server_cores_delivering,
        h.bench_cores_none,
        h.bench_cores_delivering,
        h.paced_rps,
        h.paced_delivered_share,
        h.paced_catch_up_s,
        h.backlog,
        h.drain_s,
        h.deliveries_per_s,
        h.concurrency,
        if h.batch > 0 { format!(", batches of up to {}", h.batch) } else { String::new() },
        h.drain_bytes_a_delivery,
        h.hole,
        h.hole_subscriptions,
        h.deliveries_behind_hole_per_s,
        h.paired.as_ref().map(|p| format!("\npaired rounds: {}", super::paired::text(p))).unwrap_or_default()
    )
}

/// Each round's ratios (against the mean of ingest alone around it), when
/// there are several.
fn rounds_text(rounds: &[Round]) -> String {
    if rounds.len() < 2 {
        return String::new();
    }
    let each: Vec<String> =
        rounds.iter().map(|r| format!("{:.2}/{:.2}", r.ratio_bracketed, r.outbox_ratio_bracketed)).collect();
    format!(": delivering/outbox only {}", each.join(", "))
}

/// The 95 % intervals of the rounds' medians, and whether they show the
/// target met (ingest while delivering at least 0.9 of ingest alone), when
/// there are enough rounds to tell.
fn interval_text(h: &Hooks) -> String {
    let (Some((low, high)), Some((outbox_low, outbox_high))) = (h.ratio_interval, h.outbox_ratio_interval) else {
        return String::new();
    };
    let verdict = match (low >= 0.9, high < 0.9) {
        (true, _) => "target met",
        (_, true) => "target missed",
        _ => "the rounds cannot tell whether the target is met",
    };
    format!(
        "; the median's 95 % interval {low:.3}-{high:.3} while delivering ({verdict}), \
         {outbox_low:.3}-{outbox_high:.3} outbox only"
    )
}
