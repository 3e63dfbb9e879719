//! The Redis limiter: one limit across every instance. Each check is one
//! Lua script, atomic on the server, that reads the key's arrival time on
//! Redis's own clock (instances' clocks need not agree), stores the new one
//! when the request is allowed, and returns both times; the decision and its
//! headers are then computed here by the same [`gcra_in`] as in memory, from
//! the same integers, so the script and this side cannot disagree.
//!
//! When Redis does not answer, callers are served unchecked and the failed-
//! login guard falls back to this instance's memory; both are counted in
//! `sensorhub_redis_unavailable_total`.

use super::memory::MemoryLimiter;
use super::{Decision, Limiter, MICROS, Quota, gcra_in};
use crate::redis_client::SharedRedis;
use prometheus_client::metrics::counter::Counter;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// GCRA on Redis's clock, in microseconds. KEYS[1]: the caller;
/// ARGV: emission interval, period, 1 to spend. Returns {tat, now}.
const GCRA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local nxt = tat + tonumber(ARGV[1])
if ARGV[3] == '1' and nxt - now <= tonumber(ARGV[2]) then
  redis.call('SET', KEYS[1], string.format('%.0f', nxt), 'PX', math.ceil((nxt - now) / 1000))
end
return {tat, now}
";

/// What to do when Redis does not answer.
pub enum WhenDown {
    /// Serve the request unchecked (fail open).
    Serve,
    /// Refuse the request with 503 (fail closed).
    Refuse,
    /// Check it against this instance's own memory.
    Memory(Arc<MemoryLimiter>),
}

/// GCRA state of all callers, shared by every instance through Redis.
pub struct RedisLimiter {
    redis: Arc<SharedRedis>,
    quota: Quota,
    script: redis::Script,
    when_down: WhenDown,
    unavailable: Counter,
    last_warning: std::sync::Mutex<Option<Instant>>,
}

impl RedisLimiter {
    /// A limiter granting `quota` per key, counting checks Redis could not make in `unavailable`.
    pub fn new(redis: Arc<SharedRedis>, quota: Quota, when_down: WhenDown, unavailable: Counter) -> Self {
        Self {
            redis,
            quota,
            script: redis::Script::new(GCRA),
            when_down,
            unavailable,
            last_warning: std::sync::Mutex::new(None),
        }
    }

    /// Runs the script: the key's arrival time before this request and Redis's now.
    async fn times(&self, key: &[u8; 32], spend: bool) -> redis::RedisResult<(u64, u64)> {
        let mut conn = self.redis.connection().await?;
        let (tat, now): (u64, u64) = self
            .script
            .key(self.redis.key("rl", key))
            .arg(self.quota.emission(MICROS))
            .arg(self.quota.period(MICROS))
            .arg(u8::from(spend))
            .invoke_async(&mut conn)
            .await?;
        Ok((tat, now))
    }

    /// Counts a check Redis could not make, and warns at most every 10 seconds.
    fn down(&self, e: &redis::RedisError) {
        self.unavailable.inc();
        let Ok(mut last) = self.last_warning.lock() else { return };
        if last.is_none_or(|at| at.elapsed() > Duration::from_secs(10)) {
            *last = Some(Instant::now());
            let fallback = match self.when_down {
                WhenDown::Serve => "serving requests without a rate-limit check",
                WhenDown::Refuse => "refusing requests with 503 (--rate-limit-fail closed)",
                WhenDown::Memory(_) => "limiting failed logins in this instance's memory",
            };
            tracing::warn!(redis = %self.redis.display(), error = %e, "Redis does not answer: {fallback}");
        }
    }

    /// The decision while Redis is down: served unchecked, or refused.
    fn unchecked(&self, allowed: bool) -> Decision {
        Decision {
            allowed,
            limit: self.quota.count,
            remaining: self.quota.count,
            reset_secs: 0,
            retry_after_secs: if allowed { 0 } else { 1 },
            unavailable: !allowed,
        }
    }
}

#[async_trait::async_trait]
impl Limiter for RedisLimiter {
    async fn check(&self, key: &[u8; 32]) -> Decision {
        match self.times(key, true).await {
            Ok((tat, now)) => gcra_in(MICROS, self.quota, Some(tat), now, true).0,
            Err(e) => {
                self.down(&e);
                match &self.when_down {
                    WhenDown::Serve => self.unchecked(true),
                    WhenDown::Refuse => self.unchecked(false),
                    WhenDown::Memory(memory) => memory.check(key).await,
                }
            }
        }
    }

    async fn is_over(&self, key: &[u8; 32]) -> bool {
        match self.times(key, false).await {
            Ok((tat, now)) => !gcra_in(MICROS, self.quota, Some(tat), now, false).0.allowed,
            Err(e) => {
                self.down(&e);
                match &self.when_down {
                    WhenDown::Serve => false,
                    WhenDown::Refuse => true,
                    WhenDown::Memory(memory) => memory.is_over(key).await,
                }
            }
        }
    }
}
