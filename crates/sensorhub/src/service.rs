//! [`launch`]: everything `serve` runs, started from its resolved settings
//! over an open store and a bound listener: the HTTP server (with TLS when
//! configured), the live hub, the MQTT link, the delivery worker, the
//! retention task, the silence watch, the vacuum of a cluster without
//! autovacuum, the metrics listener and the demo's stations. `serve` and
//! the integration tests start the service the same way.

use crate::config::serve::ServeSettings;
use crate::config::server::CounterStore;
use crate::delivery::seal::SealError;
use crate::http::{AppState, app};
use crate::redis_client::SharedRedis;
use sensorhub_store::Store;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Why the service did not start.
pub type LaunchError = Box<dyn std::error::Error + Send + Sync>;

/// A started service.
pub struct Service {
    /// What every handler reaches (the store, the live hub, the metrics).
    pub state: AppState,
    /// Where the API listens.
    pub address: SocketAddr,
    /// The server: it ends once `shutdown` resolved and in-flight
    /// requests finished (within the shutdown grace).
    pub serving: JoinHandle<std::io::Result<()>>,
}

/// Starts everything `settings` asks for over `store`, serving on
/// `listener` until `shutdown` resolves. A certificate that does not load
/// stops the start before anything runs.
pub async fn launch(
    settings: ServeSettings,
    store: Arc<dyn Store>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Service, LaunchError> {
    let tls = match &settings.tls {
        Some(files) => {
            let certs = crate::http::tls::Certificates::load(&files.cert, &files.key)?;
            certs.reload_on_sighup()?;
            Some(certs.acceptor()?)
        }
        None => None,
    };
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
    let counters = redis.as_ref().map_or_else(|| "memory".to_owned(), |r| r.display().to_owned());
    tracing::info!(rate_limit = %settings.rate_limit, rate_limit_store = %counters, webhook_mode = ?settings.webhook.mode, retention = %settings.retention, "settings");
    let mut state = AppState::new(store.clone(), &settings, redis);
    let metrics = state.metrics.clone();
    if let Some(mqtt) = settings.mqtt.clone() {
        let installation = store.installation_id().await?;
        state = state.with_mqtt(crate::ingest::mqtt::spawn(mqtt, &installation, store.clone(), metrics.clone())?);
    }
    start_deliveries(&settings, &store, &state).await?;
    if settings.demo && crate::demo::is_demo(&store).await {
        crate::demo::keep_reporting(store.clone());
    }
    crate::retention::spawn(store.clone(), settings.retention, settings.retention_every, metrics.clone());
    crate::silence::spawn(store.clone(), crate::silence::started_now());
    crate::vacuum::spawn(store.clone(), metrics.clone());
    if let Some(addr) = settings.metrics_listen {
        let ops = TcpListener::bind(addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        tracing::info!(address = %ops.local_addr()?, "metrics, /healthz and /readyz served on their own listener");
        let router = crate::http::ops_app(state.clone());
        // Stopped with the process: it holds no request that needs draining.
        tokio::spawn(async move {
            let service = router.into_make_service_with_connect_info::<SocketAddr>();
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
    let address = listener.local_addr()?;
    tracing::info!(
        listen = %address,
        database = %sensorhub_store::redact_url(&settings.database),
        dashboard = state.dashboard.is_some(),
        tls = settings.tls.is_some(),
        "sensorhub serving /external/v1"
    );
    let router = app(state.clone());
    let serving = tokio::spawn(crate::http::serve(
        listener,
        router,
        shutdown,
        settings.connections,
        settings.trusted_proxies.clone(),
        metrics.clone(),
        tls,
    ));
    Ok(Service { state, address, serving })
}

/// Starts the delivery worker when a key seals the webhook secrets (the
/// variable's, or the key file beside a SQLite database).
async fn start_deliveries(
    settings: &ServeSettings,
    store: &Arc<dyn Store>,
    state: &AppState,
) -> Result<(), LaunchError> {
    match crate::delivery::key_file::sealing_key(&settings.database, false) {
        Ok(key) => {
            let clock = Arc::new(crate::delivery::worker::SystemClock);
            let worker =
                crate::delivery::worker::spawn(store.clone(), key, settings.deliveries, state.metrics.clone(), clock)?;
            store.observe(Arc::new(crate::delivery::alarm_wake::AlarmWake(worker)));
        }
        // Only worth a warning where there is something to deliver.
        Err(SealError::NoKey | SealError::NoKeyPostgres)
            if store.subscriptions().await.is_ok_and(|subs| !subs.is_empty()) =>
        {
            tracing::warn!(
                "no key seals the webhook secrets (SENSORHUB_SECRET_KEY is not set, and there is no key file beside \
                 a SQLite database): outgoing webhook deliveries are not sent (they wait in the outbox until an \
                 instance with the key runs)"
            )
        }
        Err(SealError::NoKey | SealError::NoKeyPostgres) => {
            tracing::debug!("no secret key and no subscription: no delivery worker")
        }
        Err(e) => return Err(e.into()),
    }
    Ok(())
}
