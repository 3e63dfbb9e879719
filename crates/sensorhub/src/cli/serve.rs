//! `sensorhub serve`: run the HTTP API. The settings are resolved by
//! [`ServeSettings::resolve`]; this file does the I/O: open the database,
//! write the demo, connect Redis, bind, serve.

use super::{CliResult, Context};
use crate::config::dashboard::DashboardFlags;
use crate::config::hooks::{DeliveryFlags, DeliverySettings};
use crate::config::mqtt::MqttFlags;
use crate::config::serve::{CounterStore, ServeFlags, ServeSettings};
use crate::hooks::seal::SealError;
use crate::http::{AppState, ServerOptions, app, serve, shutdown_signal};
use crate::mqtt::MqttSettings;
use crate::redis_client::SharedRedis;
use std::sync::Arc;

/// Arguments of `serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    settings: ServeFlags,
    #[command(flatten)]
    mqtt: MqttFlags,
    #[command(flatten)]
    deliveries: DeliveryFlags,
    #[command(flatten)]
    dashboard: DashboardFlags,
    /// Fill the database with demo data first when it is empty
    #[arg(long)]
    demo: bool,
}

/// Runs the server until SIGTERM or Ctrl-C.
pub async fn run(ctx: &Context, args: Args) -> CliResult {
    let settings = ServeSettings::resolve(&args.settings, &ctx.file)?;
    let mqtt = MqttSettings::resolve(&args.mqtt, ctx.file.mqtt.as_ref(), settings.webhook.max_future_skew)?;
    let deliveries = DeliverySettings::resolve(&args.deliveries, ctx.file.webhooks.as_ref())?;
    let dashboard = crate::config::dashboard::resolve(&args.dashboard, ctx.file.dashboard.as_ref())?;
    let key = match crate::hooks::key_file::sealing_key(&ctx.database, false) {
        Ok(key) => Some(key),
        Err(SealError::NoKey | SealError::NoKeyPostgres) => None,
        Err(e) => return Err(e.into()),
    };
    // A certificate that does not load stops the start, before anything else.
    let tls = match &settings.tls {
        Some(files) => {
            let certs = crate::http::tls::Certificates::load(&files.cert, &files.key)?;
            certs.reload_on_sighup()?;
            Some(certs.acceptor()?)
        }
        None => None,
    };
    let listen = settings.listen;
    let store = ctx.open().await?;
    if args.demo {
        super::demo::fill(&store, &listen.to_string(), dashboard.is_some()).await?;
    }
    // Signal handlers first: a SIGTERM right after the start is then a clean stop.
    let shutdown = shutdown_signal();
    let listener =
        tokio::net::TcpListener::bind(listen).await.map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let redis = match &settings.counters {
        CounterStore::Memory => None,
        CounterStore::Redis { url, prefix } => {
            let redis = SharedRedis::new(&url.0, prefix)?;
            // Serving goes on without Redis (docs/operations.md, Scaling out); say so at once.
            if let Err(e) = redis.ping().await {
                tracing::warn!(redis = %redis.display(), error = %e, "Redis does not answer yet; serving without it meanwhile");
            }
            Some(Arc::new(redis))
        }
    };
    let store_name = redis.as_ref().map_or_else(|| "memory".to_owned(), |r| r.display().to_owned());
    let options = ServerOptions {
        rules: settings.rules,
        rate_limit: settings.rate_limit,
        client_ip_header: settings.client_ip_header,
        trusted_proxies: settings.trusted_proxies,
        metrics_access: settings.metrics_access,
        webhook: settings.webhook,
        redis,
        request_timeout: settings.request_timeout,
        rate_limit_fail: settings.rate_limit_fail,
        login_failure_limit: settings.login_failure_limit,
        dashboard,
        streams: settings.streams,
        ..ServerOptions::default()
    };
    tracing::info!(rate_limit = %options.rate_limit, rate_limit_store = %store_name, webhook_mode = ?options.webhook.mode, retention = %settings.retention, "settings");
    let mut state = AppState::new(store.clone(), options);
    let metrics = state.metrics.clone();
    if let Some(mqtt) = mqtt {
        let installation = store.installation_id().await?;
        // The state's store: it publishes what it stores to live streams.
        state.mqtt = Some(crate::mqtt::spawn(mqtt, &installation, state.store.clone(), metrics.clone()));
    }
    match key {
        Some(key) => {
            let clock = Arc::new(crate::hooks::worker::SystemClock);
            crate::hooks::worker::spawn(store.clone(), key, deliveries, metrics.clone(), clock)?;
        }
        // Only worth a warning where there is something to deliver.
        None if store.subscriptions().await.is_ok_and(|subs| !subs.is_empty()) => tracing::warn!(
            "no key seals the webhook secrets (SENSORHUB_SECRET_KEY is not set, and there is no key file beside a \
             SQLite database): outgoing webhook deliveries are not sent (they wait in the outbox until an instance \
             with the key runs)"
        ),
        None => tracing::debug!("no secret key and no subscription: no delivery worker"),
    }
    if args.demo && super::demo::is_demo(&store).await {
        super::demo::keep_reporting(state.store.clone());
    }
    crate::retention::spawn(store, settings.retention, settings.retention_every, metrics.clone());
    if let Some(addr) = settings.metrics_listen {
        let ops = tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        tracing::info!(address = %ops.local_addr()?, "metrics, /healthz and /readyz served on their own listener");
        let router = crate::http::ops_app(state.clone());
        // Stopped with the process: it holds no request that needs draining.
        tokio::spawn(async move {
            let service = router.into_make_service_with_connect_info::<std::net::SocketAddr>();
            if let Err(e) = axum::serve(ops, service).await {
                tracing::error!(error = %e, "the metrics listener failed");
            }
        });
    }
    // Open live streams end at shutdown rather than hold it for the grace period.
    let live = state.live.clone();
    let shutdown = async move {
        shutdown.await;
        live.close()
    };
    tracing::info!(
        listen = %listener.local_addr()?,
        database = %sensorhub_store::redact_url(&ctx.database),
        dashboard = state.dashboard.is_some(),
        tls = settings.tls.is_some(),
        "sensorhub serving /external/v1"
    );
    serve(listener, app(state), shutdown, settings.connections, metrics, tls).await?;
    tracing::info!("stopped");
    Ok(())
}
