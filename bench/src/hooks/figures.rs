//! What the `hooks` scenario measured: each round's rates, the run's
//! figures as they are written to JSON, and what the server spent a
//! request of each phase.

use serde::Serialize;

/// One round of the three ingest phases, requests/s.
#[derive(Debug, Serialize)]
pub struct Round {
    /// Whether the round ran on `--server-b` (its phases; ingest alone
    /// before it ran on the round before's server).
    pub on_b: bool,
    /// Ingest with no subscription just before the round.
    pub none_before_rps: f64,
    /// With 3 subscriptions writing their outbox only.
    pub outbox_rps: f64,
    /// With 3 subscriptions delivering.
    pub delivering_rps: f64,
    /// Deliveries per second made meanwhile.
    pub deliveries_per_s: f64,
    /// Ingest with no subscription just after (their removal).
    pub none_after_rps: f64,
    /// `delivering_rps` over the mean of `none_before_rps` and `none_after_rps`.
    pub ratio_bracketed: f64,
    /// `outbox_rps` over the same mean.
    pub outbox_ratio_bracketed: f64,
}

/// What the scenario measured.
#[derive(Debug, Serialize)]
pub struct Hooks {
    /// Webhook ingest with no subscription, requests/s (with rounds, the
    /// median of each round's figure before it; so are the figures of the
    /// other two phases and their ratios).
    pub ingest_none_rps: f64,
    /// Webhook ingest with 3 subscriptions whose deliveries only go to the
    /// outbox (a server without the key does not deliver), requests/s.
    pub ingest_three_outbox_rps: f64,
    /// `ingest_three_outbox_rps / ingest_none_rps`: the write path's own cost.
    pub outbox_ratio: f64,
    /// Webhook ingest with 3 subscriptions delivering, requests/s.
    pub ingest_three_rps: f64,
    /// `ingest_three_rps / ingest_none_rps` (target ≥ 0.9, issue 27).
    pub ratio: f64,
    /// Deliveries per second made meanwhile (from the backlog the outbox
    /// phase left and the new readings).
    pub deliveries_while_ingesting_per_s: f64,
    /// Webhook ingest with no subscription again, after the other phases
    /// (their three subscriptions removed), requests/s.
    pub ingest_none_after_rps: f64,
    /// `ingest_three_rps / ingest_none_after_rps`.
    pub ratio_after: f64,
    /// The median of the rounds' ratios while delivering against the mean
    /// of ingest alone before and after each (the run's drift cancelled).
    pub ratio_bracketed: f64,
    /// The same of the outbox-only phase.
    pub outbox_ratio_bracketed: f64,
    /// An interval that holds the median of `ratio_bracketed`'s rounds
    /// with 95 % confidence (their 4th smallest and largest of 15 rounds,
    /// [`crate::stats::median_interval`]); none for fewer than 6 rounds.
    pub ratio_interval: Option<(f64, f64)>,
    /// The same of `outbox_ratio_bracketed`.
    pub outbox_ratio_interval: Option<(f64, f64)>,
    /// Each round's figures (`--rounds`).
    pub rounds: Vec<Round>,
    /// With `--server-b`: each server's rounds and the pairs' differences.
    pub paired: Option<super::paired::Paired>,
    /// The server's CPU time a request without subscriptions, us
    /// (`/proc/PID/stat`; less noisy than a rate on a shared machine; with
    /// rounds, this and the other costs are their means over the rounds).
    pub cpu_us_none: f64,
    /// The same with three subscriptions, writing their outbox only.
    pub cpu_us_outbox: f64,
    /// The same while delivering: the deliveries' work counts too.
    pub cpu_us_delivering: f64,
    /// Of the server's CPU time a request, the store's group-commit
    /// thread's (SQLite's one writer, or PostgreSQL's group committer):
    /// without subscriptions, writing the outbox only, while delivering.
    pub writer_us_none: f64,
    pub writer_us_outbox: f64,
    pub writer_us_delivering: f64,
    /// The server's CPU time a delivery made while ingesting, us: what the
    /// requests of that phase cost above those of the outbox-only phase,
    /// over the deliveries made meanwhile.
    pub cpu_us_a_delivery: f64,
    /// The same of what the server wrote (`disk_bytes_*`), bytes a delivery.
    pub disk_bytes_a_delivery: f64,
    /// The cores the server used (CPU seconds a second) without
    /// subscriptions and while delivering.
    pub server_cores_none: f64,
    pub server_cores_delivering: f64,
    /// The cores the bench itself used meanwhile (its load clients, and
    /// the receiver of the deliveries), from `/proc/self/stat`.
    pub bench_cores_none: f64,
    pub bench_cores_delivering: f64,
    /// Bytes of file pages the server dirtied a request without
    /// subscriptions (`write_bytes` of `/proc/PID/io`: the WAL's and the
    /// database's pages, counted when dirtied); on PostgreSQL, bytes of WAL
    /// the cluster wrote (the bench's own statements are few).
    pub disk_bytes_none: f64,
    /// The same with three subscriptions, writing their outbox only.
    pub disk_bytes_outbox: f64,
    /// The same while delivering.
    pub disk_bytes_delivering: f64,
    /// Webhook ingest paced at `--paced-share` of ingest alone (a load the
    /// machine is not short of), with 3 subscriptions delivering from
    /// none owed: readings/s sent.
    pub paced_rps: f64,
    /// The share of the deliveries those readings owed that were made
    /// while they came (the rest within `paced_catch_up_s` after).
    pub paced_delivered_share: f64,
    /// Seconds from the paced load's end until every delivery it owed was made.
    pub paced_catch_up_s: f64,
    /// Deliveries the drained backlog held.
    pub backlog: u64,
    /// Time to drain it, s.
    pub drain_s: f64,
    /// Deliveries per second while draining.
    pub deliveries_per_s: f64,
    /// What the server wrote while draining (`disk_bytes_*`), bytes a
    /// delivery: the worker's own writes, with no ingest beside them.
    pub drain_bytes_a_delivery: f64,
    /// Deliveries owed to an endpoint that takes connections and never
    /// answers, written before the healthy endpoint's backlog.
    pub hole: u64,
    /// The healthy endpoint's backlog (`--backlog`, owed to the hole too)
    /// drained behind them, deliveries/s: what a dead endpoint's backlog
    /// costs every other subscription.
    pub deliveries_behind_hole_per_s: f64,
    /// The healthy endpoint's subscriptions in that phase.
    pub hole_subscriptions: u64,
    /// Deliveries in flight per endpoint.
    pub concurrency: usize,
    /// Readings per batched POST at most (0: one per POST).
    pub batch: u32,
    /// Clients of the ingest load.
    pub clients: usize,
    /// `"keep-alive"` (each client on its connection) or `"per-request"`.
    pub connection: &'static str,
    /// Whether each reading carried all the station's sensors (`--full-readings`).
    pub full_readings: bool,
    /// `"sqlite"` or `"postgres"`.
    pub backend: &'static str,
}

/// What the server spent on one request of a phase.
#[derive(Clone, Copy, Default)]
pub(super) struct Cost {
    /// CPU time (user and system), us.
    pub(super) cpu_us: f64,
    /// Of which the store's group-commit thread's.
    pub(super) writer_us: f64,
    /// Bytes of file pages dirtied (`write_bytes`), or of WAL on PostgreSQL.
    pub(super) disk_bytes: f64,
    /// CPU seconds a second: the server's, and the bench's own.
    pub(super) server_cores: f64,
    pub(super) bench_cores: f64,
}

impl Cost {
    /// The mean of `costs`, field by field.
    pub(super) fn mean<'a>(costs: impl Iterator<Item = &'a Cost>) -> Cost {
        let (mut sum, mut n) = (Cost::default(), 0.0);
        for c in costs {
            sum.cpu_us += c.cpu_us;
            sum.writer_us += c.writer_us;
            sum.disk_bytes += c.disk_bytes;
            sum.server_cores += c.server_cores;
            sum.bench_cores += c.bench_cores;
            n += 1.0;
        }
        let n: f64 = if n > 0.0 { n } else { 1.0 };
        Cost {
            cpu_us: sum.cpu_us / n,
            writer_us: sum.writer_us / n,
            disk_bytes: sum.disk_bytes / n,
            server_cores: sum.server_cores / n,
            bench_cores: sum.bench_cores / n,
        }
    }
}
