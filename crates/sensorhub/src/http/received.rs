//! The webhook's received list: the last envelopes each account's senders
//! got accepted, kept in this process's memory or, with Redis configured, in
//! one capped Redis list per account that every instance reads and writes.

use super::error::ApiError;
use crate::redis_client::SharedRedis;
use prometheus_client::metrics::counter::Counter;
use serde::Serialize;
use serde_json::value::RawValue;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

/// Envelopes kept per account.
const KEEP: usize = 100;
/// Bytes of envelopes kept per account at most; the oldest go first.
const KEEP_BYTES: usize = 4 << 20;

/// An accepted envelope as the sender can read it back.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Received {
    /// When it arrived, UTC.
    pub received_at: String,
    /// The envelope as sent, byte for byte (kept as text: a parsed tree
    /// would take many times the memory).
    #[schema(value_type = Object)]
    pub envelope: Box<RawValue>,
    /// What would be refused or surprising on a real integration.
    pub warnings: Vec<String>,
    #[serde(skip)]
    pub size: usize,
}

impl Received {
    /// Bytes this item holds in memory: its texts and their headers. The
    /// warnings count too: an envelope of many unknown sensors holds far
    /// more in warnings than in its body.
    fn footprint(&self) -> usize {
        const HEADER: usize = std::mem::size_of::<String>();
        std::mem::size_of::<Self>()
            + self.received_at.len()
            + self.envelope.get().len()
            + self.warnings.iter().map(|w| w.len() + HEADER).sum::<usize>()
    }
}

/// Keeps the newest `KEEP` items of an account's list within `KEEP_BYTES`
/// (the newest is always kept). KEYS[1]: the list; KEYS[2]: its items'
/// sizes, in step; ARGV: item, count, bytes. The cap is summed from the
/// sizes, never from the items: a full list holds 4 MiB, which Redis
/// (one thread for every instance's rate limits) would copy into Lua at
/// each push (about 6 ms; bench/received). A list without sizes in step
/// (written before they were kept) has them rebuilt once.
const PUSH_RECEIVED: &str = r"
local n = redis.call('LLEN', KEYS[1])
if redis.call('LLEN', KEYS[2]) ~= n then
  redis.call('DEL', KEYS[2])
  for _, v in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
    redis.call('RPUSH', KEYS[2], #v)
  end
end
redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('LPUSH', KEYS[2], #ARGV[1])
local keep = tonumber(ARGV[2])
local total = 0
for i, size in ipairs(redis.call('LRANGE', KEYS[2], 0, keep - 1)) do
  total = total + tonumber(size)
  if i > 1 and total > tonumber(ARGV[3]) then
    keep = i - 1
    break
  end
end
redis.call('LTRIM', KEYS[1], 0, keep - 1)
redis.call('LTRIM', KEYS[2], 0, keep - 1)
return 1
";

/// The last accepted envelopes of each account: in this process's memory
/// (newest last), or in Redis lists shared by every instance (newest first,
/// each item the JSON of a [`Received`]).
pub enum ReceivedLog {
    /// In memory.
    Memory(Mutex<HashMap<i64, VecDeque<Arc<Received>>>>),
    /// In Redis; `unavailable` counts pushes and reads Redis did not answer.
    Redis { redis: Arc<SharedRedis>, script: redis::Script, unavailable: Counter },
}

impl Default for ReceivedLog {
    fn default() -> Self {
        ReceivedLog::Memory(Mutex::default())
    }
}

/// One item of a received list, as kept.
#[derive(Serialize)]
#[serde(untagged)]
pub enum ReceivedItem {
    /// Kept in memory.
    Kept(Arc<Received>),
    /// Read back from Redis as JSON.
    Raw(Box<RawValue>),
}

impl ReceivedLog {
    /// A log in Redis.
    pub fn redis(redis: Arc<SharedRedis>, unavailable: Counter) -> Self {
        ReceivedLog::Redis { redis, script: redis::Script::new(PUSH_RECEIVED), unavailable }
    }

    /// Keeps `item` at the head of the account's list.
    pub async fn push(&self, account: i64, item: Received) -> Result<(), ApiError> {
        match self {
            ReceivedLog::Memory(accounts) => {
                let mut item = item;
                item.size = item.footprint();
                let Ok(mut accounts) = accounts.lock() else { return Ok(()) };
                let list = accounts.entry(account).or_default();
                list.push_back(Arc::new(item));
                let mut bytes: usize = list.iter().map(|r| r.size).sum();
                while list.len() > KEEP || (bytes > KEEP_BYTES && list.len() > 1) {
                    if let Some(old) = list.pop_front() {
                        bytes -= old.size;
                    }
                }
                Ok(())
            }
            ReceivedLog::Redis { redis, script, unavailable } => {
                let json = serde_json::to_string(&item).map_err(|e| ApiError::Internal(e.to_string()))?;
                let account = account.to_string();
                let (key, sizes) =
                    (redis.key("received", account.as_bytes()), redis.key("received-sizes", account.as_bytes()));
                let pushed = async {
                    let mut conn = redis.connection().await?;
                    script.key(key).key(sizes).arg(json).arg(KEEP).arg(KEEP_BYTES).invoke_async::<()>(&mut conn).await
                };
                pushed.await.map_err(|e| {
                    unavailable.inc();
                    ApiError::Unavailable(format!("Redis does not answer: {e}"))
                })
            }
        }
    }

    /// The account's envelopes, newest first.
    pub async fn newest_first(&self, account: i64) -> Result<Vec<ReceivedItem>, ApiError> {
        match self {
            ReceivedLog::Memory(accounts) => {
                let Ok(accounts) = accounts.lock() else { return Ok(Vec::new()) };
                Ok(accounts
                    .get(&account)
                    .map(|l| l.iter().rev().map(|r| ReceivedItem::Kept(r.clone())).collect())
                    .unwrap_or_default())
            }
            ReceivedLog::Redis { redis, unavailable, .. } => {
                let key = redis.key("received", account.to_string().as_bytes());
                let read = async {
                    let mut conn = redis.connection().await?;
                    redis::cmd("LRANGE").arg(key).arg(0).arg(-1).query_async::<Vec<String>>(&mut conn).await
                };
                let items = read.await.map_err(|e| {
                    unavailable.inc();
                    ApiError::Unavailable(format!("Redis does not answer: {e}"))
                })?;
                // Items were written by this code as JSON; one that is not is skipped, not fatal.
                Ok(items
                    .into_iter()
                    .filter_map(|text| RawValue::from_string(text).ok().map(ReceivedItem::Raw))
                    .collect())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_log_keeps_the_newest_hundred() {
        let log = ReceivedLog::default();
        for i in 0..150 {
            let envelope = RawValue::from_string("{}".into()).expect("valid");
            let item = Received { received_at: i.to_string(), envelope, warnings: vec![], size: 10 };
            log.push(1, item).await.expect("kept");
        }
        let list = log.newest_first(1).await.expect("read");
        assert_eq!(list.len(), 100);
        assert!(matches!(&list[0], ReceivedItem::Kept(r) if r.received_at == "149"));
        assert!(log.newest_first(2).await.expect("read").is_empty());
    }

    #[tokio::test]
    async fn warnings_count_against_the_memory_cap() {
        let log = ReceivedLog::default();
        for i in 0..10 {
            // A small body whose warnings hold 1 MiB.
            let envelope = RawValue::from_string("{}".into()).expect("valid");
            let warnings = vec!["w".repeat(1023); 1024];
            log.push(1, Received { received_at: i.to_string(), envelope, warnings, size: 2 }).await.expect("kept");
        }
        let list = log.newest_first(1).await.expect("read");
        assert!(list.len() <= 4, "4 MiB hold at most four such items, not {}", list.len());
        assert!(matches!(&list[0], ReceivedItem::Kept(r) if r.received_at == "9"), "the newest is kept");
    }
}
