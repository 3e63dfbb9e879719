//! Tests of [`super::ServeSettings::resolve`].
use super::*;
use crate::config::server::WebhookMode;

/// Resolves `flags` (and no other table's) over `file`.
fn resolve_flags(flags: &ServeFlags, file: &FileConfig) -> Result<ServeSettings, String> {
    ServeSettings::resolve("test.db", &ServeArgs { settings: flags.clone(), ..ServeArgs::default() }, file)
}

fn file(toml: &str) -> FileConfig {
    toml::from_str(toml).expect("valid config")
}

#[test]
fn defaults_when_nothing_is_given() {
    let s = resolve_flags(&ServeFlags::default(), &FileConfig::default()).expect("defaults");
    assert_eq!(s.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(s.rules.default_tz, Zone::Fixed(Offset::UTC));
    assert_eq!(s.rules.max_range_days, 366);
    assert_eq!(s.connections, ConnectionLimits::default(), "the server's defaults are docs/operations.md's");
    assert_eq!(s.request_timeout, Duration::from_secs(30));
    assert_eq!(s.rate_limit_fail, RateLimitFail::Open);
    assert_eq!(s.rate_limit.to_string(), "600/minute");
    assert_eq!(s.login_failure_limit.to_string(), "30/hour");
    assert_eq!(s.webhook.mode, WebhookMode::Simulate);
    assert_eq!(s.webhook.max_body_bytes, 1 << 20);
    assert_eq!(s.webhook.max_future_skew, jiff::SignedDuration::from_secs(600));
    assert_eq!(s.client_ip_header, None);
    assert_eq!(s.trusted_proxies, loopback());
    assert_eq!((s.metrics_listen, s.metrics_access.token_digest), (None, None));
    assert_eq!(s.counters, CounterStore::Memory);
    assert_eq!(s.streams, StreamLimits { total: 2048, per_caller: 64, per_address: 32 });
    assert_eq!((s.database.as_str(), s.demo), ("test.db", false));
    assert!(s.mqtt.is_none(), "no broker unless one is named");
    assert!(s.dashboard.is_some(), "the dashboard is on by default");
    let d = ServeSettings::default();
    assert_eq!((d.database.as_str(), d.listen), (crate::config::DEFAULT_DATABASE, s.listen));
}

#[test]
fn the_stream_budget_follows_the_connections_and_stays_below_them() {
    let resolve = |flags: ServeFlags| resolve_flags(&flags, &FileConfig::default());
    let s = resolve(ServeFlags { max_connections: Some(600), ..ServeFlags::default() }).expect("half");
    assert_eq!(s.streams.total, 300);
    let s = resolve(ServeFlags { max_connections: Some(600), max_streams: Some(100), ..ServeFlags::default() })
        .expect("given");
    assert_eq!(s.streams.total, 100);
    let e = resolve(ServeFlags { max_connections: Some(600), max_streams: Some(600), ..ServeFlags::default() })
        .expect_err("every connection");
    assert!(e.contains("--max-streams (600) must be below --max-connections (600)"), "{e}");
    let e = resolve(ServeFlags { max_streams_per_caller: Some(0), ..ServeFlags::default() }).expect_err("zero");
    assert!(e.contains("--max-streams-per-caller"), "{e}");
    let f = file("max_streams_per_address = 4");
    assert_eq!(resolve_flags(&ServeFlags::default(), &f).expect("file").streams.per_address, 4);
}

#[test]
fn an_address_share_follows_the_connections_unless_given() {
    let resolve = |flags: ServeFlags| resolve_flags(&flags, &FileConfig::default());
    assert_eq!(resolve(ServeFlags::default()).expect("default").connections.per_address, 512);
    let s = resolve(ServeFlags { max_connections: Some(600), ..ServeFlags::default() }).expect("an eighth");
    assert_eq!(s.connections.per_address, 75);
    let s = resolve(ServeFlags { max_connections: Some(5), ..ServeFlags::default() }).expect("at least one");
    assert_eq!(s.connections.per_address, 1);
    let f = file("max_connections_per_address = 9");
    assert_eq!(resolve_flags(&ServeFlags::default(), &f).expect("file").connections.per_address, 9);
    let e = resolve(ServeFlags { max_connections_per_address: Some(0), ..ServeFlags::default() }).expect_err("zero");
    assert!(e.contains("--max-connections-per-address must be at least 1"), "{e}");
    assert_eq!(ServeSettings::default().connections.per_address, 512, "serve's default is ConnectionLimits'");
}

#[test]
fn an_addresss_answer_bytes_are_64_mib_unless_given_and_at_least_1_mib() {
    let resolve = |flags: ServeFlags| resolve_flags(&flags, &FileConfig::default());
    assert_eq!(resolve(ServeFlags::default()).expect("default").connections.answer_bytes_per_address, 64 << 20);
    let f = file("max_answer_bytes_per_address = 2097152");
    assert_eq!(resolve_flags(&ServeFlags::default(), &f).expect("file").connections.answer_bytes_per_address, 2 << 20);
    let flags = ServeFlags { max_answer_bytes_per_address: Some(1000), ..ServeFlags::default() };
    let e = resolve(flags).expect_err("too small");
    assert!(e.contains("--max-answer-bytes-per-address must be at least 1048576"), "{e}");
    assert_eq!(ServeSettings::default().connections.answer_bytes_per_address, 64 << 20);
}

#[test]
fn the_file_overrides_defaults_and_flags_override_the_file() {
    let f = file(
        r#"listen = "0.0.0.0:9000"
           default_tz = 7
           max_range_days = 31
           rate_limit = "10/second"
           rate_limit_store = "redis://:hunter2@r:6379"
           redis_prefix = "site-a"
           header_read_timeout = 3
           keep_alive_timeout = 4
           request_timeout = 5
           write_timeout = 6
           max_connections = 7
           rate_limit_fail = "closed""#,
    );
    let s = resolve_flags(&ServeFlags::default(), &f).expect("file");
    assert_eq!(s.listen.to_string(), "0.0.0.0:9000");
    assert_eq!(s.rules.default_tz, Zone::Fixed(Offset::constant(7)));
    assert_eq!(s.rules.max_range_days, 31);
    assert_eq!(s.rate_limit.to_string(), "10/second");
    assert_eq!(s.counters, CounterStore::Redis { url: Url("redis://:hunter2@r:6379".into()), prefix: "site-a".into() });
    assert!(!format!("{s:?}").contains("hunter2"), "settings print no password");
    let c = s.connections;
    assert_eq!(
        [c.header_read_timeout, c.keep_alive_timeout, s.request_timeout, c.write_timeout],
        [3, 4, 5, 6].map(Duration::from_secs)
    );
    assert_eq!((c.max_connections, s.rate_limit_fail), (7, RateLimitFail::Closed));
    let flags = ServeFlags {
        listen: Some("127.0.0.1:1".parse().expect("addr")),
        max_range_days: Some(2),
        rate_limit_store: Some(Url("memory".into())),
        ..ServeFlags::default()
    };
    let s = resolve_flags(&flags, &f).expect("flags");
    assert_eq!(s.listen.to_string(), "127.0.0.1:1");
    assert_eq!(s.rules.max_range_days, 2);
    assert_eq!(s.rules.default_tz, Zone::Fixed(Offset::constant(7)), "what flags do not give comes from the file");
    assert_eq!(s.counters, CounterStore::Memory);
}

#[test]
fn bad_values_are_refused_with_the_setting_named() {
    let bad = |flags: ServeFlags| resolve_flags(&flags, &FileConfig::default()).expect_err("refused");
    assert!(bad(ServeFlags { max_range_days: Some(0), ..ServeFlags::default() }).contains("--max-range-days"));
    assert!(bad(ServeFlags { default_tz: Some("+25:00".into()), ..ServeFlags::default() }).contains("--default-tz"));
    assert!(
        bad(ServeFlags { default_tz: Some("Mars/Olympus_Mons".into()), ..ServeFlags::default() })
            .contains("--default-tz: tz \"Mars/Olympus_Mons\" is not a time zone")
    );
    let named = ServeFlags { default_tz: Some("Asia/Jakarta".into()), ..ServeFlags::default() };
    let s = resolve_flags(&named, &FileConfig::default()).expect("a zone name is a valid default");
    assert!(matches!(s.rules.default_tz, Zone::Named(_)));
    let e = bad(ServeFlags { rate_limit_store: Some(Url("mysql://x".into())), ..ServeFlags::default() });
    assert!(e.contains("--rate-limit-store"), "{e}");
    let e = bad(ServeFlags { write_timeout: Some(0), ..ServeFlags::default() });
    assert!(e.contains("--write-timeout"), "{e}");
    let e = bad(ServeFlags { max_connections: Some(0), ..ServeFlags::default() });
    assert!(e.contains("--max-connections"), "{e}");
    let e = bad(ServeFlags { client_ip_header: Some("bad header".into()), ..ServeFlags::default() });
    assert!(e.contains("--client-ip-header"), "{e}");
    let e = bad(ServeFlags { trusted_proxies: Some("10.0.0.0/8".into()), ..ServeFlags::default() });
    assert!(e.contains("without --client-ip-header"), "{e}");
    let e = bad(ServeFlags {
        client_ip_header: Some("X-Forwarded-For".into()),
        trusted_proxies: Some("10.0.0.0/99".into()),
        ..ServeFlags::default()
    });
    assert!(e.contains("--trusted-proxies"), "{e}");
    let e = bad(ServeFlags { metrics_token: Some(Secret("short".into())), ..ServeFlags::default() });
    assert!(e.contains("--metrics-token"), "{e}");
    let flags = ServeFlags { metrics_token: Some(Secret("a-long-metrics-token".into())), ..ServeFlags::default() };
    let s = resolve_flags(&flags, &FileConfig::default()).expect("token");
    assert!(!format!("{flags:?}{s:?}").contains("a-long-metrics-token"), "the token never prints");
}
