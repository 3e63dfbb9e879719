//! Rate limits: 429 bodies and headers per caller kind, limits per caller,
//! and failed logins throttled by address.

use crate::harness::{ALICE_PASSWORD, Answer, TestApp, assert_error, basic};
use reqwest::Method;
use sensorhub::config::serve::ServeSettings;
use sensorhub::config::server::{WebhookMode, WebhookSettings};
use sensorhub::limiter::RateLimitSetting;
use serde_json::json;

async fn limited(quota: &str) -> TestApp {
    let rate_limit: RateLimitSetting = quota.parse().expect("quota");
    TestApp::with(ServeSettings { rate_limit, ..TestApp::settings() }).await
}

fn header(a: &Answer, name: &str) -> Option<u64> {
    a.headers.get(name).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok())
}

fn assert_limited(a: &Answer, limit: u64) {
    assert_eq!(a.status, 429, "{}", a.text);
    assert!(header(a, "retry-after").is_some_and(|s| s >= 1), "Retry-After in whole seconds: {:?}", a.headers);
    assert_eq!(header(a, "ratelimit-limit"), Some(limit));
    assert_eq!(header(a, "ratelimit-remaining"), Some(0));
    assert!(header(a, "ratelimit-reset").is_some());
}

on_each_backend! {
    async fn basic_callers_get_headers_then_429_with_the_specs_text() {
        let app = limited("3/minute").await;
        for remaining in [2, 1, 0] {
            let a = app.alice("/devices").await;
            assert_eq!(a.status, 200);
            assert_eq!(header(&a, "ratelimit-limit"), Some(3));
            assert_eq!(header(&a, "ratelimit-remaining"), Some(remaining));
            assert!(header(&a, "ratelimit-reset").is_some_and(|r| r <= 60));
        }
        let a = app.alice("/devices/AWLR-001/data").await;
        assert_limited(&a, 3);
        assert_eq!(a.text, r#"{"message":"To Many Request","data":null}"#);
        // Limits are per caller: carol and alice's public key have their own.
        assert_eq!(app.get_as("carol", "carol-pass", "/devices").await.status, 200);
        assert_eq!(app.get("/pk-alice-all/devices").await.status, 200);
    }
}

on_each_backend! {
    async fn public_keys_are_limited_per_key() {
        let app = limited("2/minute").await;
        for _ in 0..2 {
            assert_eq!(app.get("/pk-alice-all/devices").await.status, 200);
        }
        let a = app.get("/pk-alice-all/devices/AWLR-001/data").await;
        assert_limited(&a, 2);
        assert_error(&a, 429, "To Many Request");
        assert_eq!(app.get("/pk-alice-awlr/devices").await.status, 200, "another key has its own quota");
    }
}

on_each_backend! {
    async fn webhook_keys_are_limited_with_their_own_text() {
        let app = limited("2/minute").await;
        let body =
            json!({"event": "e", "device_id": "AWLR-001", "timestamp": "2026-05-05T00:00:00Z", "data": {}}).to_string();
        for _ in 0..2 {
            let a = app.webhook(Some("wh-alice-secret"), &body).await;
            assert_eq!(a.status, 200);
            assert!(header(&a, "ratelimit-remaining").is_some());
        }
        let a = app.webhook(Some("wh-alice-secret"), &body).await;
        assert_limited(&a, 2);
        assert_eq!(a.text, r#"{"message":"Too Many Requests"}"#);
        assert_eq!(app.webhook(Some("wh-carol-secret"), &body).await.status, 200);
    }
}

// In ingest mode a key's answer is kept between readings: its quota and
// headers are the same.
on_each_backend! {
    async fn a_kept_webhook_key_is_limited_as_a_looked_up_one() {
        let rate_limit: RateLimitSetting = "3/minute".parse().expect("quota");
        let webhook = WebhookSettings { mode: WebhookMode::Ingest, ..WebhookSettings::default() };
        let app = TestApp::with(ServeSettings { rate_limit, webhook, ..TestApp::settings() }).await;
        let body = |minute: u32| {
            json!({"event": "e", "device_id": "AWLR-001", "timestamp": format!("2026-05-05T00:{minute:02}:00Z"),
                   "data": {"AWLR1-wl": 100}})
            .to_string()
        };
        let apply = async |text: &str| {
            let mut doc: sensorhub_core::provision::Provision =
                sensorhub_core::provision::parse_json(text).expect("document parses");
            let readings = doc.check().expect("document is valid");
            app.store.apply(doc, readings).await.expect("document applies");
        };
        for (minute, remaining) in [(1, 2), (2, 1)] {
            let a = app.webhook(Some("wh-alice-secret"), &body(minute)).await;
            assert_eq!(a.status, 200, "{}", a.text);
            assert_eq!(header(&a, "ratelimit-remaining"), Some(remaining), "minute {minute}");
        }
        // A grant to another account moves the generations: the kept answer
        // is found stale and the key looked up again, within one request's quota.
        apply(r#"{"accounts":[{"username":"carol","devices":["AWLR-001"]}]}"#).await;
        let a = app.webhook(Some("wh-alice-secret"), &body(3)).await;
        assert_eq!(a.status, 200, "{}", a.text);
        assert_eq!(header(&a, "ratelimit-remaining"), Some(0), "decided again, charged once");
        let a = app.webhook(Some("wh-alice-secret"), &body(4)).await;
        assert_limited(&a, 3);
        assert_eq!(a.text, r#"{"message":"Too Many Requests"}"#);
        // Over its quota on a kept answer, a key revoked since is a 401, as on a lookup.
        apply(r#"{"accounts":[{"username":"alice","webhook_keys":[{"key":"wh-alice-secret","revoked":true}]}]}"#).await;
        let a = app.webhook(Some("wh-alice-secret"), &body(5)).await;
        assert_eq!(a.status, 401, "{}", a.text);
    }
}

on_each_backend! {
    async fn failed_logins_are_throttled_by_address_but_verified_credentials_pass() {
        let app = limited("4/minute").await;
        // Every Argon2 check spends a unit of the address's quota, the first
        // (successful) login of alice included.
        assert_eq!(app.alice("/devices").await.status, 200, "alice is verified and cached");
        for _ in 0..3 {
            assert_error(&app.get_as("alice", "guess", "/devices").await, 401, "Unauthorized");
        }
        let a = app.get_as("alice", "guess", "/devices").await;
        assert_limited(&a, 4);
        assert_eq!(a.text, r#"{"message":"To Many Request","data":null}"#);
        // Credentials not verified before are not even checked now...
        assert_error(&app.get_as("carol", "carol-pass", "/devices").await, 429, "To Many Request");
        assert_error(&app.send(Method::GET, "/devices", None).await, 429, "To Many Request");
        // ...and unknown API keys from this address are throttled too...
        assert_error(&app.get("/pk-guess/devices").await, 429, "To Many Request");
        // ...while verified credentials and valid keys still pass.
        assert_eq!(app.get_as("alice", ALICE_PASSWORD, "/devices").await.status, 200);
        assert_eq!(app.get("/pk-alice-all/devices").await.status, 200);
    }
}

on_each_backend! {
    async fn guesses_sent_at_once_get_no_more_checks_than_the_quota() {
        let app = std::sync::Arc::new(limited("3/minute").await);
        let guesses = (0..24).map(|i| {
            let app = app.clone();
            tokio::spawn(async move { app.get_as("alice", &format!("guess-{i}"), "/devices").await.status.as_u16() })
        });
        let mut statuses = Vec::new();
        for g in guesses {
            statuses.push(g.await.expect("task"));
        }
        let checked = statuses.iter().filter(|s| **s == 401).count();
        assert_eq!(checked, 3, "only the quota's worth of guesses reach Argon2: {statuses:?}");
        assert_eq!(statuses.iter().filter(|s| **s == 429).count(), 21);
    }
}

/// A server with 2 requests a minute that trusts `X-Forwarded-For`.
async fn behind_proxy() -> TestApp {
    TestApp::with(ServeSettings {
        rate_limit: "2/minute".parse().expect("quota"),
        client_ip_header: Some(reqwest::header::HeaderName::from_static("x-forwarded-for")),
        ..TestApp::settings()
    })
    .await
}

on_each_backend! {
    async fn failed_auth_from_a_proxy_counts_against_the_forwarded_address() {
        let app = behind_proxy().await;
        let url = format!("{}/devices", app.base);
        let guess = basic("alice", "guess");
        let from = |ip: &'static str| [("Authorization", guess.clone()), ("X-Forwarded-For", ip.to_owned())];
        for _ in 0..2 {
            let h = from("10.0.0.1, 203.0.113.1");
            let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
            assert_eq!(app.request(Method::GET, &url, &h, None).await.status, 401);
        }
        let h = from("203.0.113.1");
        let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert_eq!(app.request(Method::GET, &url, &h, None).await.status, 429);
        let h = from("203.0.113.2");
        let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert_eq!(app.request(Method::GET, &url, &h, None).await.status, 401, "another address has its own quota");
    }
}

on_each_backend! {
    async fn off_means_no_limit_and_no_headers() {
        let app = limited("off").await;
        for _ in 0..20 {
            let a = app.get("/pk-alice-all/devices").await;
            assert_eq!(a.status, 200);
            assert!(a.headers.get("ratelimit-limit").is_none());
        }
    }
}

#[tokio::test]
async fn ipv4_mapped_addresses_are_limited_as_their_ipv4_address() {
    let app = behind_proxy().await;
    let url = format!("{}/devices", app.base);
    let guess = basic("alice", "guess");
    let status = |ip: &'static str| {
        let headers = [("Authorization", guess.as_str()), ("X-Forwarded-For", ip)];
        let url = url.clone();
        let app = &app;
        async move { app.request(Method::GET, &url, &headers, None).await.status }
    };
    // On a dual-stack listener IPv4 clients arrive as ::ffff:a.b.c.d.
    assert_eq!(status("::ffff:198.51.100.1").await, 401);
    assert_eq!(status("198.51.100.1").await, 401, "the same client, written as IPv4");
    assert_eq!(status("::ffff:198.51.100.1").await, 429, "its quota is spent");
    assert_eq!(status("::ffff:198.51.100.2").await, 401, "another IPv4 client has its own quota");
    assert_eq!(status("198.51.100.3").await, 401);
}

/// A server with 3 failed logins an hour per username, trusting `X-Forwarded-For`.
async fn username_limited() -> TestApp {
    TestApp::with(ServeSettings {
        login_failure_limit: "3/hour".parse().expect("quota"),
        client_ip_header: Some(reqwest::header::HeaderName::from_static("x-forwarded-for")),
        ..TestApp::settings()
    })
    .await
}

on_each_backend! {
    async fn guesses_at_one_name_are_slowed_whatever_the_address_but_its_owner_gets_in() {
        let app = username_limited().await;
        let devices = format!("{}/devices", app.base);
        let login = |user: &str, password: &str, ip: &str| {
            let auth = basic(user, password);
            let ip = ip.to_owned();
            let app = &app;
            let url = devices.clone();
            async move { app.request(Method::GET, &url, &[("Authorization", &auth), ("X-Forwarded-For", &ip)], None).await }
        };
        // alice logs in from her office once: that address is known for alice.
        assert_eq!(login("alice", ALICE_PASSWORD, "203.0.113.5").await.status, 200);
        // Her password changes (so nothing is cached any more).
        let mut doc: sensorhub_core::provision::Provision =
            sensorhub_core::provision::parse_json(r#"{"accounts":[{"username":"alice","password":"new-pass"}]}"#)
                .expect("doc");
        let readings = doc.check().expect("valid");
        app.store.apply(doc, readings).await.expect("apply");
        // Guesses from ever new addresses (as from one IPv6 /48): three get checked, then 429.
        for i in 0..3 {
            assert_error(&login("alice", "guess", &format!("2001:db8:0:{i}::1")).await, 401, "Unauthorized");
        }
        let a = login("alice", "guess", "2001:db8:0:99::1").await;
        assert_eq!(a.status, 429, "{}", a.text);
        assert!(header(&a, "retry-after").is_some_and(|s| s >= 1), "{:?}", a.headers);
        // Even the right password from an address alice never used waits…
        assert_eq!(login("alice", "new-pass", "198.51.100.7").await.status, 429);
        // …but from her known address alice gets in: slowed, never locked out.
        assert_eq!(login("alice", "new-pass", "203.0.113.5").await.status, 200);
        // Another name has its own quota; unknown names have one too.
        assert_eq!(login("carol", "carol-pass", "198.51.100.7").await.status, 200);
        for _ in 0..3 {
            assert_eq!(login("nobody", "x", "198.51.100.8").await.status, 401);
        }
        assert_eq!(login("nobody", "x", "198.51.100.9").await.status, 429);
        let metrics = app.request(Method::GET, &format!("{}/metrics", app.root()), &[], None).await;
        assert!(metrics.text.contains(r#"sensorhub_rate_limited_requests_total{kind="user"}"#), "{}", metrics.text);
    }
}

on_each_backend! {
    async fn a_flood_of_logins_waits_for_argon2_a_bounded_time() {
        let app = TestApp::with(ServeSettings {
            login_slot_wait: std::time::Duration::from_millis(1),
            login_failure_limit: RateLimitSetting::Off,
            ..TestApp::settings()
        })
        .await;
        // Far more uncached checks at once than there are cores: those that
        // cannot start within the wait are answered 503, none waits on.
        let logins: Vec<_> = (0..24)
            .map(|i| {
                let auth = basic(&format!("user{i}"), "guess");
                let url = format!("{}/devices", app.base);
                async move { reqwest::Client::new().get(url).header("Authorization", auth).send().await }
            })
            .collect();
        let answers = futures_util::future::join_all(logins).await;
        let mut busy = 0;
        for a in answers {
            let a = a.expect("answer");
            match a.status().as_u16() {
                401 => {}
                503 => {
                    assert_eq!(a.headers()["retry-after"], "1");
                    busy += 1;
                }
                other => panic!("{other}"),
            }
        }
        assert!(busy > 0, "some logins found every Argon2 slot busy");
    }
}

on_each_backend! {
    async fn a_forwarded_address_counts_only_from_a_trusted_proxy() {
        // The header is configured, but this client (loopback) is not one of the proxies.
        let app = TestApp::with(ServeSettings {
            rate_limit: "2/minute".parse().expect("quota"),
            client_ip_header: Some(reqwest::header::HeaderName::from_static("x-forwarded-for")),
            trusted_proxies: vec!["10.0.0.0/8".parse().expect("network")],
            ..TestApp::settings()
        })
        .await;
        let guess = basic("nobody", "x");
        let url = format!("{}/devices", app.base);
        // Each request claims another address; all are counted as the peer's.
        for (i, expected) in [401, 401, 429].into_iter().enumerate() {
            let ip = format!("198.51.100.{i}");
            let a = app.request(Method::GET, &url, &[("Authorization", &guess), ("X-Forwarded-For", &ip)], None).await;
            assert_eq!(a.status, expected, "{ip}: {}", a.text);
        }
    }
}
