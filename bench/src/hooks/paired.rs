//! Two servers in one run (`hooks --server-b`): the rounds alternate
//! between them, A B B A and over again, so that each adjacent pair of
//! rounds holds one of each, measured within a minute of each other. The
//! hour's drift moves whole runs by more than most changes do (two runs
//! of the same code minutes apart differed by 0.058: bench/RESULTS.md, the
//! forty-ninth step); within a pair it mostly cancels, and the median of
//! B's ratio less A's, with its 95 % interval, says whether B differs.

use super::Round;
use crate::stats::{median, median_interval};
use serde::Serialize;

/// Whether round `i` runs on server B: A B B A, repeated (each server
/// first in a pair as often as the other).
pub(super) fn on_b(i: usize) -> bool {
    matches!(i % 4, 1 | 2)
}

/// One server's rounds: the median ratios and their 95 % intervals.
#[derive(Debug, Serialize)]
pub struct Medians {
    pub rounds: usize,
    pub delivering: f64,
    pub delivering_interval: Option<(f64, f64)>,
    pub outbox: f64,
    pub outbox_interval: Option<(f64, f64)>,
}

/// What the paired rounds say.
#[derive(Debug, Serialize)]
pub struct Paired {
    /// Server B's binary.
    pub server_b: String,
    pub a: Medians,
    pub b: Medians,
    /// Adjacent pairs of rounds, one on each server.
    pub pairs: usize,
    /// B's ratio while delivering less A's, over the pairs: the median and
    /// its 95 % interval (from six pairs on).
    pub delivering_difference: f64,
    pub delivering_difference_interval: Option<(f64, f64)>,
    /// The same of the outbox-only ratios.
    pub outbox_difference: f64,
    pub outbox_difference_interval: Option<(f64, f64)>,
}

/// The medians of each server's rounds and of the pairs' differences.
pub(super) fn paired(rounds: &[Round], server_b: &str) -> Paired {
    let medians = |b: bool| {
        let of = |f: fn(&Round) -> f64| -> Vec<f64> { rounds.iter().filter(|r| r.on_b == b).map(f).collect() };
        let (delivering, outbox) = (of(|r| r.ratio_bracketed), of(|r| r.outbox_ratio_bracketed));
        Medians {
            rounds: delivering.len(),
            delivering: median(delivering.clone()),
            delivering_interval: median_interval(delivering),
            outbox: median(outbox.clone()),
            outbox_interval: median_interval(outbox),
        }
    };
    // Each pair (0 1, 2 3, ...) holds one round of each server.
    let pairs: Vec<(&Round, &Round)> = rounds
        .chunks_exact(2)
        .map(|p| if p[0].on_b { (&p[1], &p[0]) } else { (&p[0], &p[1]) })
        .filter(|(a, b)| !a.on_b && b.on_b)
        .collect();
    let difference = |f: fn(&Round) -> f64| -> Vec<f64> { pairs.iter().map(|(a, b)| f(b) - f(a)).collect() };
    let (delivering, outbox) = (difference(|r| r.ratio_bracketed), difference(|r| r.outbox_ratio_bracketed));
    Paired {
        server_b: server_b.to_owned(),
        a: medians(false),
        b: medians(true),
        pairs: pairs.len(),
        delivering_difference: median(delivering.clone()),
        delivering_difference_interval: median_interval(delivering),
        outbox_difference: median(outbox.clone()),
        outbox_difference_interval: median_interval(outbox),
    }
}

/// The paired figures as a line of text.
pub(super) fn text(p: &Paired) -> String {
    let interval = |i: Option<(f64, f64)>| match i {
        Some((low, high)) => format!(" ({low:.3} to {high:.3})"),
        None => String::new(),
    };
    let server = |m: &Medians| {
        format!(
            "over {} round(s): {:.3}{} while delivering, {:.3}{} outbox only",
            m.rounds,
            m.delivering,
            interval(m.delivering_interval),
            m.outbox,
            interval(m.outbox_interval)
        )
    };
    let verdict = match p.delivering_difference_interval {
        Some((low, _)) if low > 0.0 => "B is faster while delivering",
        Some((_, high)) if high < 0.0 => "B is slower while delivering",
        Some(_) => "the pairs cannot tell A from B while delivering",
        None => "too few pairs for an interval: six or more",
    };
    format!(
        "A (this bench's sensorhub) {}; B ({}) {}; B less A over {} adjacent pair(s): {:+.3}{} while delivering, \
         {:+.3}{} outbox only ({verdict})",
        server(&p.a),
        p.server_b,
        server(&p.b),
        p.pairs,
        p.delivering_difference,
        interval(p.delivering_difference_interval),
        p.outbox_difference,
        interval(p.outbox_difference_interval),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(on_b: bool, ratio: f64) -> Round {
        Round {
            on_b,
            none_before_rps: 1000.0,
            outbox_rps: 950.0,
            delivering_rps: ratio * 1000.0,
            deliveries_per_s: 100.0,
            none_after_rps: 1000.0,
            ratio_bracketed: ratio,
            outbox_ratio_bracketed: 0.95,
        }
    }

    #[test]
    fn the_rounds_alternate_a_b_b_a() {
        let order: Vec<bool> = (0..8).map(on_b).collect();
        assert_eq!(order, [false, true, true, false, false, true, true, false]);
    }

    #[test]
    fn the_difference_is_taken_within_each_pair() {
        // The hour drifts by 0.1 a pair; B is 0.02 above A in every pair.
        let rounds: Vec<Round> = (0..12)
            .map(|i| {
                let drift = 0.8 + 0.1 * (i / 2) as f64;
                round(on_b(i), if on_b(i) { drift + 0.02 } else { drift })
            })
            .collect();
        let p = paired(&rounds, "b/sensorhub");
        assert_eq!((p.pairs, p.a.rounds, p.b.rounds), (6, 6, 6));
        assert!((p.delivering_difference - 0.02).abs() < 1e-9, "{p:?}");
        let (low, high) = p.delivering_difference_interval.expect("six pairs give an interval");
        assert!((low - 0.02).abs() < 1e-9 && (high - 0.02).abs() < 1e-9, "{p:?}");
        assert!(text(&p).contains("B is faster while delivering"), "{}", text(&p));
        // Each server's own medians carry the drift: their intervals overlap.
        let (a, b) = (p.a.delivering_interval.expect("a"), p.b.delivering_interval.expect("b"));
        assert!(a.1 > b.0, "{p:?}");
    }
}
