//! Rate limits and the webhook's received list kept in Redis: one limit and
//! one list across servers, and service going on when Redis is down.

use crate::harness::{RedisPrefix, TestApp, assert_error, basic, stopped_redis};
use reqwest::Method;
use sensorhub::config::serve::ServeSettings;
use sensorhub::config::server::CounterStore;
use sensorhub::limiter::{Quota, RateLimitSetting};
use std::time::Duration;

fn options(per_minute: u32, counters: CounterStore) -> ServeSettings {
    ServeSettings {
        rate_limit: RateLimitSetting::On(Quota { count: per_minute, period: Duration::from_secs(60) }),
        counters,
        ..TestApp::settings()
    }
}

#[tokio::test]
async fn one_limit_across_two_servers_with_the_same_headers() {
    let prefix = RedisPrefix::new();
    let a = TestApp::with(options(5, prefix.counters())).await;
    let b = TestApp::with(options(5, prefix.counters())).await;
    let mut remaining = Vec::new();
    for app in [&a, &a, &a, &b, &b] {
        let r = app.get("/pk-alice-all/devices").await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.headers["ratelimit-limit"], "5");
        remaining.push(r.headers["ratelimit-remaining"].to_str().expect("ascii").to_owned());
    }
    assert_eq!(remaining, ["4", "3", "2", "1", "0"]);
    let sixth = b.get("/pk-alice-all/devices").await;
    assert_error(&sixth, 429, "To Many Request");
    assert_eq!(sixth.headers["retry-after"], "12", "one request comes back every 60/5 s");
    assert_eq!(sixth.headers["ratelimit-remaining"], "0");
    // Another caller has a quota of its own.
    assert_eq!(a.get("/pk-alice-awlr/devices").await.status, 200);
}

#[tokio::test]
async fn the_received_list_is_shared_and_capped() {
    let prefix = RedisPrefix::new();
    let a = TestApp::with(options(600, prefix.counters())).await;
    let b = TestApp::with(options(600, prefix.counters())).await;
    let envelope = |i: usize| {
        format!(
            r#"{{"event":"sensor-data","device_id":"AWLR-001","timestamp":"2026-05-05T07:00:00+07:00","data":{{"AWLR1-wl":{i}}}}}"#
        )
    };
    for i in 0..105 {
        let app = if i % 2 == 0 { &a } else { &b };
        let r = app.webhook(Some("wh-alice-secret"), &envelope(i)).await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    let url = format!("{}/webhook/sensor-data/received", b.base);
    let list = b.request(Method::GET, &url, &[("X-API-KEY", "wh-alice-secret")], None).await;
    assert_eq!(list.status, 200, "{}", list.text);
    let items = list.data().as_array().expect("array");
    assert_eq!(items.len(), 100, "capped at 100");
    assert_eq!(items[0]["envelope"]["data"]["AWLR1-wl"], 104, "newest first");
    assert!(items[0]["received_at"].is_string() && items[0]["warnings"].is_array());
    let url = format!("{}/webhook/sensor-data/received", a.base);
    let same = a.request(Method::GET, &url, &[("X-API-KEY", "wh-alice-secret")], None).await;
    assert_eq!(same.text, list.text, "every instance shows the same list");
}

#[tokio::test]
async fn a_received_list_in_redis_is_capped_by_the_sizes_kept_beside_it() {
    let prefix = RedisPrefix::new();
    let app = TestApp::with(options(600, prefix.counters())).await;
    let envelope = |i: usize| {
        format!(
            r#"{{"event":"sensor-data","device_id":"AWLR-001","timestamp":"2026-05-05T07:00:00+07:00","data":{{"AWLR1-wl":{i}}}}}"#
        )
    };
    assert_eq!(app.webhook(Some("wh-alice-secret"), &envelope(0)).await.status, 200);
    let client = redis::Client::open(crate::harness::redis_url()).expect("redis url");
    let mut conn = client.get_multiplexed_async_connection().await.expect("redis");
    let list: Vec<String> =
        redis::cmd("KEYS").arg(format!("{}:received:*", prefix.prefix)).query_async(&mut conn).await.expect("keys");
    let [list] = <[String; 1]>::try_from(list).expect("one account's list");
    let sizes = list.replacen(":received:", ":received-sizes:", 1);
    // A list as an older version left it: 70 items of 60 KB (4.2 MB, past
    // the cap), and no sizes beside it.
    let old = format!(r#"{{"received_at":"old","envelope":{{"pad":"{}"}},"warnings":[]}}"#, "x".repeat(60_000));
    let () = redis::cmd("DEL").arg(&sizes).query_async(&mut conn).await.expect("del");
    let () = redis::cmd("RPUSH").arg(&list).arg(vec![old.clone(); 70]).query_async(&mut conn).await.expect("rpush");
    for i in 1..=3 {
        assert_eq!(app.webhook(Some("wh-alice-secret"), &envelope(i)).await.status, 200);
    }
    let items: Vec<String> =
        redis::cmd("LRANGE").arg(&list).arg(0).arg(-1).query_async(&mut conn).await.expect("lrange");
    let kept: Vec<usize> = redis::cmd("LRANGE").arg(&sizes).arg(0).arg(-1).query_async(&mut conn).await.expect("sizes");
    assert_eq!(kept, items.iter().map(String::len).collect::<Vec<_>>(), "the sizes are in step with the items");
    let total: usize = kept.iter().sum();
    assert!(total <= 4 << 20, "within 4 MiB: {total}");
    assert!(total + old.len() > 4 << 20, "and no more was dropped than needed: {total}");
    assert_eq!(items.iter().filter(|i| !i.contains(r#""old""#)).count(), 4, "the newest four are kept");
    assert!(items[0].contains(r#""AWLR1-wl":3"#), "newest first: {}", &items[0][..100]);
    let url = format!("{}/webhook/sensor-data/received", app.base);
    let read = app.request(Method::GET, &url, &[("X-API-KEY", "wh-alice-secret")], None).await;
    assert_eq!(read.data().as_array().map(Vec::len), Some(items.len()), "the endpoint reads the same list");
}

#[tokio::test]
async fn without_redis_requests_are_served_and_logins_limited_in_memory() {
    let app = TestApp::with(options(3, stopped_redis())).await;
    for _ in 0..6 {
        let r = app.get("/pk-alice-all/devices").await;
        assert_eq!(r.status, 200, "served unchecked: {}", r.text);
    }
    // Failed logins still meet a limit: this instance's own.
    let wrong = basic("alice", "wrong");
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(app.send(Method::GET, "/devices", Some(&wrong)).await.status.as_u16());
    }
    assert_eq!(statuses, [401, 401, 401, 429, 429]);
    let metrics = app.request(Method::GET, &format!("{}/metrics", app.root()), &[], None).await.text;
    let count = |outcome: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!("sensorhub_redis_unavailable_total{{outcome=\"{outcome}\"}}")))
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    assert!(count("served") >= 6, "{metrics}");
    assert!(count("memory") >= 5, "{metrics}");
}

/// Whether `sensorhub_redis_unavailable_total{outcome}` is above zero.
async fn counted(app: &TestApp, outcome: &str) -> bool {
    let metrics = app.request(Method::GET, &format!("{}/metrics", app.root()), &[], None).await.text;
    let series = format!("sensorhub_redis_unavailable_total{{outcome=\"{outcome}\"}}");
    metrics.lines().any(|l| l.starts_with(&series) && !l.ends_with(" 0"))
}

#[tokio::test]
async fn with_redis_down_fail_open_serves_and_fail_closed_refuses_with_503() {
    let open = TestApp::with(options(5, stopped_redis())).await;
    for _ in 0..7 {
        let r = open.get("/pk-alice-all/devices").await;
        assert_eq!(r.status, 200, "fail open: served unchecked, past the quota too: {}", r.text);
    }
    let closed = TestApp::with(ServeSettings {
        rate_limit_fail: sensorhub::config::server::RateLimitFail::Closed,
        ..options(5, stopped_redis())
    })
    .await;
    let r = closed.get("/pk-alice-all/devices").await;
    assert_error(&r, 503, "Service Unavailable");
    assert_eq!(r.headers["retry-after"], "1");
    let r = closed.get_as("alice", crate::harness::ALICE_PASSWORD, "/devices").await;
    assert_error(&r, 503, "Service Unavailable");
    // Operations endpoints are not rate-limited and still answer.
    let health = closed.request(Method::GET, &format!("{}/healthz", closed.root()), &[], None).await;
    assert_eq!(health.status, 200);
    assert!(counted(&closed, "refused").await, "refusals are counted");
}

#[tokio::test]
async fn ingest_answers_200_once_committed_even_when_redis_is_down() {
    let mut opts = options(100, stopped_redis());
    opts.webhook.mode = sensorhub::config::server::WebhookMode::Ingest;
    let app = TestApp::with(opts).await;
    let body = r#"{"event": "sensor-data", "device_id": "AWLR-001", "timestamp": "2026-06-01T00:00:00Z", "data": {"AWLR1-wl": 131.25}}"#;
    let a = app.webhook(Some("wh-alice-secret"), body).await;
    assert_eq!(a.status, 200, "the write is committed: {}", a.text);
    let read = app.alice("/devices/AWLR-001/data?start=2026-06-01T00:00:00Z&end=2026-06-01T00:00:00Z").await;
    assert_eq!(read.data()[0]["sensors"][0]["value"], 131.25, "and stored: {}", read.text);
    assert!(counted(&app, "received").await, "the missed list update is counted");
}
