//! The live hub across instances: readings published on the Redis channel
//! `{prefix}:live` with their event ids, issued by one script so that ids
//! grow in the order every subscriber receives them, and the listener that
//! feeds them to this process's hub.

use super::{Live, LiveHub};
use crate::redis_client::SharedRedis;
use futures_util::StreamExt;
use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Readings sent per script call.
const CHUNK: usize = 256;
/// Time to connect and subscribe before trying again.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause between two attempts to subscribe while Redis is down.
const RETRY: Duration = Duration::from_secs(1);

/// Issues ids `max(last + 1, now)…` to the readings of `ARGV[2…]` and
/// publishes each as `"{id} {reading}"`; returns the first id. Numbers
/// stay below 2^53, so Lua's doubles hold them exactly.
const PUBLISH: &str = r"
local last = tonumber(redis.call('GET', KEYS[1]) or '0')
local id = math.max(last + 1, tonumber(ARGV[1]))
local first = id
for i = 2, #ARGV do
  redis.call('PUBLISH', KEYS[2], string.format('%.0f', id) .. ' ' .. ARGV[i])
  id = id + 1
end
redis.call('SET', KEYS[1], string.format('%.0f', id - 1))
return string.format('%.0f', first)
";

fn channel(redis: &SharedRedis) -> Vec<u8> {
    redis.key("live", b"readings")
}

/// Publishes `items` in order, ids no earlier than `now` (microseconds);
/// returns the first id (the others follow it one by one).
pub(super) async fn publish(redis: &SharedRedis, items: &[Live], now: u64) -> redis::RedisResult<u64> {
    static SCRIPT: std::sync::OnceLock<redis::Script> = std::sync::OnceLock::new();
    let script = SCRIPT.get_or_init(|| redis::Script::new(PUBLISH));
    let mut conn = redis.connection().await?;
    let mut first = None;
    for chunk in items.chunks(CHUNK) {
        let mut call = script.key(redis.key("live", b"last-id"));
        call.key(channel(redis)).arg(now);
        for reading in chunk {
            call.arg(serde_json::to_string(reading).unwrap_or_default());
        }
        let id: String = call.invoke_async(&mut conn).await?;
        let id = id.parse::<u64>().map_err(|_| (redis::ErrorKind::TypeError, "the publish script's id"))?;
        first.get_or_insert(id);
    }
    Ok(first.unwrap_or(now))
}

/// A message of the channel: its id and reading (or transition).
fn parse(payload: &[u8]) -> Option<(u64, Live)> {
    let text = std::str::from_utf8(payload).ok()?;
    let (id, reading) = text.split_once(' ')?;
    Some((id.parse().ok()?, serde_json::from_str(reading).ok()?))
}

/// Feeds the channel's readings to `hub` until the hub is dropped,
/// subscribing again after Redis goes away.
pub(super) async fn listen(hub: Weak<LiveHub>, redis: std::sync::Arc<SharedRedis>) {
    loop {
        let subscribed = tokio::time::timeout(CONNECT_TIMEOUT, async {
            let mut pubsub = redis.pubsub().await?;
            pubsub.subscribe(channel(&redis)).await?;
            redis::RedisResult::Ok(pubsub)
        })
        .await;
        match subscribed {
            Ok(Ok(pubsub)) => {
                let Some(live) = hub.upgrade() else { return };
                live.linked.store(true, Ordering::Release);
                live.metrics.live_linked(true);
                drop(live);
                let mut messages = pubsub.into_on_message();
                while let Some(message) = messages.next().await {
                    let Some(live) = hub.upgrade() else { return };
                    match parse(message.get_payload_bytes()) {
                        Some((id, reading)) => {
                            live.observe(id);
                            live.dispatch(id, reading);
                        }
                        None => tracing::warn!("a malformed message on the live channel was ignored"),
                    }
                }
                let Some(live) = hub.upgrade() else { return };
                live.linked.store(false, Ordering::Release);
                live.metrics.live_linked(false);
                tracing::warn!(redis = %redis.display(), "lost the live channel; streams see this instance's readings only until it is back");
            }
            Ok(Err(e)) => tracing::debug!(error = %e, "cannot subscribe to the live channel"),
            Err(_) => tracing::debug!("subscribing to the live channel timed out"),
        }
        if hub.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(RETRY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_an_id_and_a_reading_or_a_transition() {
        let reading = Live::Reading(super::super::LiveReading {
            device_id: "A 1".into(),
            timestamp: 7,
            values: vec![("s".into(), 0.1)],
        });
        let text = format!("1764000000000123 {}", serde_json::to_string(&reading).expect("json"));
        assert_eq!(text, r#"1764000000000123 {"d":"A 1","t":7,"v":[["s",0.1]]}"#, "a reading reads as before");
        assert_eq!(parse(text.as_bytes()), Some((1_764_000_000_000_123, reading)));
        let alarm = Live::Alarm(super::super::LiveAlarm {
            device_id: "A 1".into(),
            rule: "siaga".into(),
            transition: "raised".into(),
            level: Some("Siaga 4".into()),
            value: Some(61.0),
            timestamp: Some(7),
            at: 9,
        });
        let text = format!("5 {}", serde_json::to_string(&alarm).expect("json"));
        assert_eq!(parse(text.as_bytes()), Some((5, alarm)));
        assert_eq!(parse(b"x {}"), None);
    }
}
