//! `sensorhub serve`: run the HTTP API.

use super::{CliResult, Context};
use crate::config::{
    DEFAULT_LISTEN, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_RANGE_DAYS, DEFAULT_RATE_LIMIT, DEFAULT_REDIS_PREFIX,
    DEFAULT_SHUTDOWN_GRACE,
};
use crate::http::webhook::WebhookMode;
use crate::http::{AppState, app, serve, shutdown_signal};
use crate::http::{ServerOptions, WebhookSettings};
use crate::ratelimit::RateLimitSetting;
use crate::shared::SharedRedis;
use axum::http::HeaderName;
use jiff::tz::Offset;
use sensorhub_core::time::{RangeRules, parse_tz};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Arguments of `serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on [default: 127.0.0.1:8080]
    #[arg(long, env = "SENSORHUB_LISTEN")]
    listen: Option<SocketAddr>,
    /// UTC offset of rendered times when a request has no tz (hours, or ±HH:MM) [default: 0]
    #[arg(long, env = "SENSORHUB_DEFAULT_TZ", allow_hyphen_values = true)]
    default_tz: Option<String>,
    /// Longest range one readings request may ask for, in days [default: 366]
    #[arg(long, env = "SENSORHUB_MAX_RANGE_DAYS")]
    max_range_days: Option<u32>,
    /// Seconds in-flight requests get to finish after SIGTERM or Ctrl-C [default: 30]
    #[arg(long, env = "SENSORHUB_SHUTDOWN_GRACE")]
    shutdown_grace: Option<u64>,
    /// Requests per caller: COUNT/UNIT (second, minute, hour) or off [default: 600/minute]
    #[arg(long, env = "SENSORHUB_RATE_LIMIT")]
    rate_limit: Option<RateLimitSetting>,
    /// simulate: check and remember webhook envelopes, store nothing; ingest: store them as readings [default: simulate]
    #[arg(long, env = "SENSORHUB_WEBHOOK_MODE", value_enum)]
    webhook_mode: Option<WebhookMode>,
    /// Largest webhook body accepted, in bytes [default: 1048576]
    #[arg(long, env = "SENSORHUB_MAX_BODY_BYTES")]
    max_body_bytes: Option<usize>,
    /// Header with the client address set by a trusted reverse proxy (e.g. X-Forwarded-For; its last entry counts)
    #[arg(long, env = "SENSORHUB_CLIENT_IP_HEADER")]
    client_ip_header: Option<String>,
    /// Where rate-limit counters (and the webhook's received list) live: memory (this process) or a redis:// URL shared by instances [default: memory]
    #[arg(long, env = "SENSORHUB_RATE_LIMIT_STORE")]
    rate_limit_store: Option<crate::config::Url>,
    /// Prefix of sensorhub's Redis keys, to share one Redis between installations [default: sensorhub]
    #[arg(long, env = "SENSORHUB_REDIS_PREFIX")]
    redis_prefix: Option<String>,
    /// Fill the database with demo data first when it is empty
    #[arg(long)]
    demo: bool,
}

/// Runs the server until SIGTERM or Ctrl-C.
pub async fn run(ctx: &Context, args: Args) -> CliResult {
    let listen = match args.listen.or(ctx.file.listen) {
        Some(a) => a,
        None => DEFAULT_LISTEN.parse()?,
    };
    let default_tz = match args.default_tz.or_else(|| ctx.file.default_tz.clone()) {
        Some(tz) => parse_tz(&tz).map_err(|e| format!("--default-tz: {e}"))?,
        None => Offset::UTC,
    };
    let max_range_days = args.max_range_days.or(ctx.file.max_range_days).unwrap_or(DEFAULT_MAX_RANGE_DAYS);
    if max_range_days == 0 {
        return Err("--max-range-days must be at least 1".into());
    }
    let store = ctx.open().await?;
    if args.demo {
        super::demo::fill(&store, &listen.to_string()).await?;
    }
    // Signal handlers first: a SIGTERM right after the start is then a clean stop.
    let shutdown = shutdown_signal();
    let listener =
        tokio::net::TcpListener::bind(listen).await.map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let rate_limit = match args.rate_limit {
        Some(r) => r,
        None => ctx.file.rate_limit.as_deref().unwrap_or(DEFAULT_RATE_LIMIT).parse::<RateLimitSetting>()?,
    };
    let client_ip_header = match args.client_ip_header.or_else(|| ctx.file.client_ip_header.clone()) {
        Some(name) => {
            Some(HeaderName::try_from(name.as_str()).map_err(|e| format!("--client-ip-header {name:?}: {e}"))?)
        }
        None => None,
    };
    let webhook = WebhookSettings {
        mode: args.webhook_mode.or(ctx.file.webhook_mode).unwrap_or_default(),
        max_body_bytes: args.max_body_bytes.or(ctx.file.max_body_bytes).unwrap_or(DEFAULT_MAX_BODY_BYTES),
    };
    let redis = match args.rate_limit_store.map(|u| u.0).or_else(|| ctx.file.rate_limit_store.clone()) {
        None => None,
        Some(s) if s == "memory" => None,
        Some(url) if url.starts_with("redis://") => {
            let prefix = args.redis_prefix.or_else(|| ctx.file.redis_prefix.clone());
            let redis = SharedRedis::new(&url, prefix.as_deref().unwrap_or(DEFAULT_REDIS_PREFIX))?;
            // Serving goes on without Redis (see the README); say so at once.
            if let Err(e) = redis.ping().await {
                tracing::warn!(redis = %redis.display(), error = %e, "Redis does not answer yet; serving without it meanwhile");
            }
            Some(Arc::new(redis))
        }
        Some(other) => {
            return Err(format!(
                "--rate-limit-store {:?}: expected memory or a redis:// URL",
                sensorhub_store::redact_url(&other)
            )
            .into());
        }
    };
    let store_name = redis.as_ref().map_or_else(|| "memory".to_owned(), |r| r.display().to_owned());
    let options = ServerOptions {
        rules: RangeRules { default_tz, max_range_days },
        rate_limit,
        client_ip_header,
        webhook,
        redis,
    };
    tracing::info!(rate_limit = %options.rate_limit, rate_limit_store = %store_name, webhook_mode = ?options.webhook.mode, "settings");
    let state = AppState::new(store, options);
    tracing::info!(
        listen = %listener.local_addr()?,
        database = %sensorhub_store::redact_url(&ctx.database),
        "sensorhub serving /external/v1"
    );
    let grace = Duration::from_secs(args.shutdown_grace.or(ctx.file.shutdown_grace).unwrap_or(DEFAULT_SHUTDOWN_GRACE));
    serve(listener, app(state), shutdown, grace).await?;
    tracing::info!("stopped");
    Ok(())
}
