//! The retry rules: what an attempt's outcome means for its delivery.
//! 2xx delivers; network errors, timeouts, 5xx, 408 and 429 are tried
//! again after an exponential backoff with jitter (or the answer's
//! `Retry-After` when it asks for longer) until the delivery is older than the retry period;
//! anything else (other 4xx, 3xx: redirects are not followed, a refused
//! target) fails at once. Pure: the caller passes the time and the jitter.

use super::send::Sent;
use crate::config::delivery::RetryPolicy;
use sensorhub_store::delivery::Attempt;
use std::time::Duration;

impl RetryPolicy {
    /// The wait before attempt `attempts + 1` after `attempts` failed ones
    /// (at least 1), scaled by `jitter` in [0.5, 1] ("equal jitter": never
    /// less than half the backoff, so retries spread without collapsing).
    pub fn backoff(&self, attempts: u32, jitter: f64) -> Duration {
        let doubled = self.first_backoff.saturating_mul(1u32 << attempts.saturating_sub(1).min(20));
        doubled.min(self.max_backoff).mul_f64(jitter.clamp(0.5, 1.0))
    }

    /// What `sent` means for a delivery stored at `created_at` whose
    /// `attempts` earlier attempts failed, judged at `now` (ms since the
    /// epoch); `jitter` in [0.5, 1].
    pub fn judge(&self, sent: &Sent, attempts: u32, created_at: i64, now: i64, jitter: f64) -> Attempt {
        let (status, error, retry_after) = match sent {
            Sent::Answer { status: 200..=299, .. } => return Attempt::Delivered,
            Sent::Answer { status: status @ (408 | 429 | 500..=599), retry_after } => (
                Some(*status),
                format!("answered {status}"),
                retry_after.as_deref().and_then(|v| parse_retry_after(v, now)),
            ),
            Sent::Answer { status, .. } => {
                return Attempt::Failed { status: Some(*status), error: format!("answered {status}: not retried") };
            }
            Sent::Network(e) => (None, e.clone(), None),
            Sent::Refused(e) => return Attempt::Failed { status: None, error: e.clone() },
        };
        // Retry-After may ask for later than the schedule, never sooner.
        let floor = self.backoff(attempts + 1, jitter);
        let wait = retry_after.map_or(floor, |asked| asked.max(floor));
        let at = now.saturating_add(i64::try_from(wait.as_millis()).unwrap_or(i64::MAX));
        let deadline = created_at.saturating_add(i64::try_from(self.retry_for.as_millis()).unwrap_or(i64::MAX));
        if at > deadline {
            let hours = self.retry_for.as_secs_f64() / 3600.0;
            return Attempt::Failed {
                status,
                error: format!("{error}; given up after {} attempts over {hours} h", attempts + 1),
            };
        }
        Attempt::Retry { at, status, error }
    }
}

/// A `Retry-After` value (seconds, or an HTTP date) as a wait from `now` (ms).
pub fn parse_retry_after(value: &str, now: i64) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let date = jiff::fmt::rfc2822::parse(value).ok()?.timestamp().as_millisecond();
    Some(Duration::from_millis(u64::try_from(date.saturating_sub(now)).unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_777_964_400_000;

    fn answer(status: u16, retry_after: Option<&str>) -> Sent {
        Sent::Answer { status, retry_after: retry_after.map(str::to_owned) }
    }

    #[test]
    fn backoff_doubles_up_to_its_cap_with_jitter_at_most_halving_it() {
        let p = RetryPolicy::default();
        let waits: Vec<u64> = (1..=12).map(|n| p.backoff(n, 1.0).as_secs()).collect();
        assert_eq!(waits, [5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560, 3600, 3600]);
        assert_eq!(p.backoff(3, 0.5), Duration::from_secs(10));
        assert_eq!(p.backoff(3, 0.1), Duration::from_secs(10), "jitter never below half");
    }

    #[test]
    fn success_delivers_retryable_failures_retry_others_fail() {
        let p = RetryPolicy::default();
        assert_eq!(p.judge(&answer(204, None), 0, NOW, NOW, 1.0), Attempt::Delivered);
        for status in [500, 503, 408, 429] {
            let got = p.judge(&answer(status, None), 0, NOW, NOW, 1.0);
            assert_eq!(
                got,
                Attempt::Retry { at: NOW + 5000, status: Some(status), error: format!("answered {status}") }
            );
        }
        let timeout = p.judge(&Sent::Network("no answer".into()), 2, NOW, NOW, 1.0);
        assert!(matches!(timeout, Attempt::Retry { at, status: None, .. } if at == NOW + 20_000), "{timeout:?}");
        for status in [400, 401, 404, 410, 301, 302] {
            assert!(matches!(p.judge(&answer(status, None), 0, NOW, NOW, 1.0), Attempt::Failed { .. }), "{status}");
        }
        assert!(matches!(p.judge(&Sent::Refused("private".into()), 0, NOW, NOW, 1.0), Attempt::Failed { .. }));
    }

    #[test]
    fn retry_after_is_honoured_in_seconds_or_as_a_date() {
        let p = RetryPolicy::default();
        let secs = p.judge(&answer(429, Some("120")), 0, NOW, NOW, 1.0);
        assert!(matches!(secs, Attempt::Retry { at, .. } if at == NOW + 120_000), "{secs:?}");
        let date = p.judge(&answer(503, Some("Tue, 05 May 2026 07:01:00 GMT")), 0, NOW, NOW, 1.0);
        assert!(matches!(date, Attempt::Retry { at, .. } if at == NOW + 60_000), "{date:?}");
    }

    #[test]
    fn retry_after_never_brings_a_retry_sooner_than_the_schedule() {
        let p = RetryPolicy::default();
        for asked in ["0", "1", "Tue, 05 May 2026 06:00:00 GMT", "Tue, 05 May 2026 07:00:00 GMT"] {
            let got = p.judge(&answer(503, Some(asked)), 2, NOW, NOW, 1.0);
            assert!(matches!(got, Attempt::Retry { at, .. } if at == NOW + 20_000), "{asked}: {got:?}");
            let jittered = p.judge(&answer(503, Some(asked)), 0, NOW, NOW, 0.5);
            assert!(matches!(jittered, Attempt::Retry { at, .. } if at == NOW + 2_500), "{asked}: {jittered:?}");
        }
    }

    #[test]
    fn deliveries_give_up_after_the_retry_period() {
        let p = RetryPolicy { retry_for: Duration::from_secs(60), ..RetryPolicy::default() };
        let late = p.judge(&answer(503, None), 3, NOW, NOW + 50_000, 1.0);
        assert!(
            matches!(late, Attempt::Failed { status: Some(503), ref error } if error.contains("given up")),
            "{late:?}"
        );
        let beyond = p.judge(&answer(429, Some("3600")), 0, NOW, NOW, 1.0);
        assert!(matches!(beyond, Attempt::Failed { .. }), "a Retry-After past the period ends it");
    }
}
