//! Rate limits per caller with GCRA (the generic cell rate algorithm): one
//! "theoretical arrival time" per key, no timers, exact bursts. Backends sit
//! behind [`Limiter`]; the in-memory one is in [`memory`], and the arithmetic
//! lives here, once, so that another backend (Redis) uses the same rule.
//!
//! GCRA via `governor` was considered: it cannot tell whether a key is over
//! its quota without spending a cell, which the failed-login guard needs,
//! and it does not give the remaining count without its middleware stack.

pub mod memory;
pub mod redis;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// How many requests per period a caller may make; the whole quota may be
/// spent at once (the burst is the count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// Requests per period.
    pub count: u32,
    /// The period.
    pub period: Duration,
}

/// The resolution of a limiter's clock, in ticks per second: nanoseconds
/// in memory, microseconds in Redis (whose Lua numbers are doubles, exact
/// for whole microseconds since 1970 but not for nanoseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticks(pub u64);

/// Nanosecond ticks.
pub const NANOS: Ticks = Ticks(1_000_000_000);
/// Microsecond ticks.
pub const MICROS: Ticks = Ticks(1_000_000);

impl Quota {
    /// Time between two requests at the steady rate, in ticks.
    pub fn emission(&self, t: Ticks) -> u64 {
        (self.period(t) / u64::from(self.count.max(1))).max(1)
    }

    /// The period, in ticks.
    pub fn period(&self, t: Ticks) -> u64 {
        u64::try_from(self.period.as_nanos() * u128::from(t.0) / 1_000_000_000).unwrap_or(u64::MAX)
    }

    fn period_ns(&self) -> u64 {
        self.period(NANOS)
    }
}

impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.period.as_secs() {
            1 => "second",
            60 => "minute",
            _ => "hour",
        };
        write!(f, "{}/{unit}", self.count)
    }
}

/// `--rate-limit`: `COUNT/UNIT` (second, minute, hour) or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateLimitSetting {
    /// No limit.
    Off,
    /// This quota per caller.
    On(Quota),
}

impl fmt::Display for RateLimitSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RateLimitSetting::Off => f.write_str("off"),
            RateLimitSetting::On(q) => q.fmt(f),
        }
    }
}

impl FromStr for RateLimitSetting {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.trim().eq_ignore_ascii_case("off") {
            return Ok(RateLimitSetting::Off);
        }
        let bad = || format!("rate limit {s:?}: expected COUNT/UNIT (UNIT: second, minute or hour) or off");
        let (count, unit) = s.trim().split_once('/').ok_or_else(bad)?;
        let count: u32 = count.trim().parse().map_err(|_| bad())?;
        if count == 0 {
            return Err(format!("rate limit {s:?}: the count must be at least 1 (or use off)"));
        }
        let secs = match unit.trim().to_ascii_lowercase().as_str() {
            "s" | "sec" | "second" => 1,
            "m" | "min" | "minute" => 60,
            "h" | "hour" => 3600,
            _ => return Err(bad()),
        };
        Ok(RateLimitSetting::On(Quota { count, period: Duration::from_secs(secs) }))
    }
}

/// The answer for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request may go on.
    pub allowed: bool,
    /// The quota's count (`RateLimit-Limit`).
    pub limit: u32,
    /// Requests left right now (`RateLimit-Remaining`).
    pub remaining: u32,
    /// Seconds until the quota is whole again (`RateLimit-Reset`).
    pub reset_secs: u64,
    /// Seconds to wait before a retry can succeed (`Retry-After`); 0 when allowed.
    pub retry_after_secs: u64,
    /// Refused because the limiter's store does not answer
    /// (`--rate-limit-fail closed`), not because the caller is over.
    pub unavailable: bool,
}

/// One GCRA step in nanoseconds. `tat` is the key's theoretical arrival
/// time (same clock as `now`), `None` for a fresh key. Returns the decision
/// and the new arrival time to store when the request is allowed and
/// `spend` is set.
pub fn gcra(quota: Quota, tat: Option<u64>, now: u64, spend: bool) -> (Decision, Option<u64>) {
    gcra_in(NANOS, quota, tat, now, spend)
}

/// [`gcra`] on a clock of `ticks` per second.
pub fn gcra_in(ticks: Ticks, quota: Quota, tat: Option<u64>, now: u64, spend: bool) -> (Decision, Option<u64>) {
    let t = quota.emission(ticks);
    let period = quota.period(ticks);
    let tat = tat.unwrap_or(now).max(now);
    let next = tat.saturating_add(t);
    let ceil_secs = |d: u64| d.div_ceil(ticks.0);
    if next - now > period {
        let wait = next - now - period;
        let decision = Decision {
            allowed: false,
            limit: quota.count,
            remaining: 0,
            reset_secs: ceil_secs(tat - now),
            retry_after_secs: ceil_secs(wait).max(1),
            unavailable: false,
        };
        return (decision, None);
    }
    let after = if spend { next } else { tat };
    let remaining = ((period - (after - now)) / t) as u32;
    let decision = Decision {
        allowed: true,
        limit: quota.count,
        remaining: remaining.min(quota.count),
        reset_secs: ceil_secs(after - now),
        retry_after_secs: 0,
        unavailable: false,
    };
    (decision, spend.then_some(next))
}

/// Keeps the rate-limit state of callers. Keys are digests, never secrets.
#[async_trait::async_trait]
pub trait Limiter: Send + Sync {
    /// Spends one request of `key`'s quota, if there is one left.
    async fn check(&self, key: &[u8; 32]) -> Decision;
    /// Whether `key` is over its quota, without spending.
    async fn is_over(&self, key: &[u8; 32]) -> bool;
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    fn per_minute(n: u32) -> Quota {
        Quota { count: n, period: Duration::from_secs(60) }
    }

    #[test]
    fn settings_parse() {
        assert_eq!("off".parse(), Ok(RateLimitSetting::Off));
        assert_eq!("600/minute".parse(), Ok(RateLimitSetting::On(per_minute(600))));
        assert_eq!("5/second".parse(), Ok(RateLimitSetting::On(Quota { count: 5, period: Duration::from_secs(1) })));
        assert!("0/minute".parse::<RateLimitSetting>().is_err());
        assert!("10/day".parse::<RateLimitSetting>().is_err());
        assert!("ten/minute".parse::<RateLimitSetting>().is_err());
    }

    #[test]
    fn a_full_burst_then_one_per_emission_interval() {
        let q = per_minute(3);
        let mut tat = None;
        let now = 1000 * SEC;
        for expected_remaining in [2, 1, 0] {
            let (d, next) = gcra(q, tat, now, true);
            assert!(d.allowed);
            assert_eq!(d.remaining, expected_remaining);
            tat = next;
        }
        let (d, next) = gcra(q, tat, now, true);
        assert!(!d.allowed && next.is_none());
        assert_eq!(d.retry_after_secs, 20, "one request comes back every 20 s");
        assert_eq!(d.reset_secs, 60);
        let (d, _) = gcra(q, tat, now + 20 * SEC, true);
        assert!(d.allowed, "after the emission interval one more is allowed");
    }

    #[test]
    fn peeking_does_not_spend() {
        let q = per_minute(1);
        let (d, tat) = gcra(q, None, 5 * SEC, true);
        assert!(d.allowed);
        let (d, none) = gcra(q, tat, 5 * SEC, false);
        assert!(!d.allowed && none.is_none());
        let (d, _) = gcra(q, None, 5 * SEC, false);
        assert!(d.allowed && d.remaining == 1);
    }
}
