//! `sensorhub serve`: run the HTTP API.

use super::{CliResult, Context};
use crate::config::{DEFAULT_LISTEN, DEFAULT_MAX_RANGE_DAYS, DEFAULT_SHUTDOWN_GRACE};
use crate::http::{AppState, app, serve, shutdown_signal};
use jiff::tz::Offset;
use sensorhub_core::time::{RangeRules, parse_tz};
use std::net::SocketAddr;
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
    let listener =
        tokio::net::TcpListener::bind(listen).await.map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let state = AppState::new(store, RangeRules { default_tz, max_range_days });
    tracing::info!(
        listen = %listener.local_addr()?,
        database = %sensorhub_store::redact_url(&ctx.database),
        "sensorhub serving /external/v1"
    );
    let grace = Duration::from_secs(args.shutdown_grace.or(ctx.file.shutdown_grace).unwrap_or(DEFAULT_SHUTDOWN_GRACE));
    serve(listener, app(state), shutdown_signal(), grace).await?;
    tracing::info!("stopped");
    Ok(())
}
