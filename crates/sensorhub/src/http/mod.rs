//! The HTTP API: the router of the read endpoints under
//! `/external/v1`, its state, and a server with graceful shutdown.

pub mod alarms;
pub mod answer_bytes;
pub mod auth;
pub mod client_ip;
pub mod dashboard;
mod deadline;
pub mod devices;
pub mod encode;
pub mod error;
mod guard;
mod hours;
pub mod influx;
pub mod kept_keys;
pub mod latest;
mod log;
pub mod logins;
pub mod openapi;
mod ops;
mod peers;
pub mod ratelimit;
pub mod readings;
pub mod received;
mod refusal;
pub mod rendered;
pub mod schema;
mod server;
mod stall;
pub mod stream;
pub mod tls;
pub mod webhook;
pub mod webhook_auth;

pub use server::serve;

use crate::config::serve::ServeSettings;
use crate::config::server::{MetricsAccess, RateLimitFail, WebhookSettings};
use crate::limiter::memory::MemoryLimiter;
use crate::limiter::redis::{RedisLimiter, WhenDown};
use crate::limiter::{Limiter, Quota, RateLimitSetting};
use crate::metrics::Metrics;
use crate::redis_client::SharedRedis;
use axum::Router;
use axum::routing::{MethodRouter, get, post};
use error::{ApiError, WebhookError};
use influx::InfluxError;
use sensorhub_core::time::RangeRules;
use sensorhub_store::Store;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// A limiter the state holds; `None` when limits are off.
type SharedLimiter = Option<Arc<dyn Limiter>>;

/// What every handler can reach ([`Shared`]), behind one `Arc`: each
/// request's extractors clone the state, and a clone is then one count
/// rather than some twenty fields (with the proxies' list and the
/// settings' strings allocated again), which was 3-4 % of the server's CPU
/// a webhook reading (perf, issue 27).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What the state holds.
#[derive(Clone)]
pub struct Shared {
    /// The database; every reading it stores is published to `live`.
    pub store: Arc<dyn Store>,
    /// Readings as they are stored, for live streams.
    pub live: Arc<crate::live::LiveHub>,
    /// Time-range defaults and limits.
    pub rules: RangeRules,
    /// Verified credentials, Argon2 slots, failures per username.
    pub logins: Arc<logins::Logins>,
    /// Per-caller rate limits; `None` when off.
    pub limiter: Option<Arc<dyn Limiter>>,
    /// Operations requests (`/metrics`, `/readyz`, `/openapi.json`) per
    /// client address, in this process's memory so that they answer while
    /// Redis does not; `None` when limits are off.
    pub ops_limiter: Option<Arc<dyn Limiter>>,
    /// Failed-login limits per client address; `None` when off. The same
    /// limiter as `limiter`, except that with Redis it falls back to memory.
    pub login_limiter: Option<Arc<dyn Limiter>>,
    /// The header trusted reverse proxies put the client address in.
    pub forwarded_for: Option<client_ip::ForwardedFor>,
    /// Webhook behaviour.
    pub webhook: WebhookSettings,
    /// Who may read `/metrics`, and where.
    pub metrics_access: MetricsAccess,
    /// Envelopes accepted by the webhook, per account.
    pub received: Arc<received::ReceivedLog>,
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// Time a handler has to begin its answer.
    pub request_timeout: Duration,
    /// The MQTT link, when ingesting from a broker.
    pub mqtt: Option<Arc<crate::ingest::mqtt::MqttStatus>>,
    /// The dashboard at `/`; `None` when it is off.
    pub dashboard: Option<Arc<dashboard::Dashboard>>,
    /// The store's access generation as last read: it moves when access
    /// may have been taken away, and open streams then check their caller.
    pub access: tokio::sync::watch::Receiver<i64>,
    /// Open streams, counted against their caps.
    pub streams: Arc<crate::live::slots::StreamSlots>,
    /// Whole hours of raw windows as last rendered.
    pub rendered: Arc<rendered::RenderedHours>,
    /// API keys last found valid, for public raw windows.
    pub kept_keys: Arc<kept_keys::KeptKeys>,
    /// Webhook keys last found valid ([`kept_keys`]), for ingest mode.
    pub kept_hooks: Arc<kept_keys::KeptKeys<kept_keys::KeptHook>>,
}

impl AppState {
    /// State over `store` with `settings`: rate limits and the webhook
    /// list in `redis` when it is given, else in this process's memory.
    pub fn new(store: Arc<dyn Store>, settings: &ServeSettings, redis: Option<Arc<SharedRedis>>) -> Self {
        let options = settings;
        let metrics = Arc::new(Metrics::default());
        let memory = memory_limiter;
        let (limiter, login_limiter): (SharedLimiter, SharedLimiter) = match (options.rate_limit, &redis) {
            (RateLimitSetting::Off, _) => (None, None),
            (RateLimitSetting::On(quota), None) => {
                let limiter = memory(quota);
                (Some(limiter.clone()), Some(limiter))
            }
            (RateLimitSetting::On(quota), Some(redis)) => {
                let served = metrics.redis_unavailable("served");
                let in_memory = metrics.redis_unavailable("memory");
                let (when_down, counter) = match options.rate_limit_fail {
                    RateLimitFail::Open => (WhenDown::Serve, served),
                    RateLimitFail::Closed => (WhenDown::Refuse, metrics.redis_unavailable("refused")),
                };
                let callers = RedisLimiter::new(redis.clone(), quota, when_down, counter);
                let logins = RedisLimiter::new(redis.clone(), quota, WhenDown::Memory(memory(quota)), in_memory);
                (Some(Arc::new(callers)), Some(Arc::new(logins)))
            }
        };
        let failures: SharedLimiter = match (options.login_failure_limit, &redis) {
            (RateLimitSetting::Off, _) => None,
            (RateLimitSetting::On(quota), None) => Some(memory(quota)),
            (RateLimitSetting::On(quota), Some(redis)) => {
                let in_memory = metrics.redis_unavailable("memory");
                Some(Arc::new(RedisLimiter::new(redis.clone(), quota, WhenDown::Memory(memory(quota)), in_memory)))
            }
        };
        let ops_limiter: SharedLimiter = match options.rate_limit {
            RateLimitSetting::Off => None,
            RateLimitSetting::On(quota) => Some(memory(quota)),
        };
        let slots = std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get);
        let received = match &redis {
            Some(redis) => received::ReceivedLog::redis(redis.clone(), metrics.redis_unavailable("received")),
            None => received::ReceivedLog::default(),
        };
        let live = crate::live::LiveHub::new(redis.clone(), metrics.clone());
        live.start();
        store.observe(Arc::new(crate::live::Publisher(live.clone())));
        let access = crate::live::access::watch(store.clone());
        Self(Arc::new(Shared {
            store,
            live,
            rules: options.rules.clone(),
            logins: Arc::new(logins::Logins::new(failures, slots, options.login_slot_wait)),
            limiter,
            ops_limiter,
            login_limiter,
            forwarded_for: options
                .client_ip_header
                .clone()
                .map(|header| client_ip::ForwardedFor { header, trusted: options.trusted_proxies.clone() }),
            metrics_access: options.metrics_access.clone(),
            webhook: options.webhook,
            received: Arc::new(received),
            metrics,
            request_timeout: options.request_timeout,
            mqtt: None,
            dashboard: options.dashboard.as_ref().map(|d| Arc::new(dashboard::Dashboard::new(d))),
            access,
            streams: crate::live::slots::StreamSlots::new(options.streams),
            rendered: Arc::new(rendered::RenderedHours::new(rendered::DEFAULT_BUDGET)),
            kept_keys: Arc::new(kept_keys::KeptKeys::new(kept_keys::DEFAULT_KEYS)),
            kept_hooks: Arc::new(kept_keys::KeptKeys::new(kept_keys::DEFAULT_KEYS)),
        }))
    }

    /// The state with the MQTT link's status (clones made before keep none).
    pub fn with_mqtt(self, status: Arc<crate::ingest::mqtt::MqttStatus>) -> Self {
        let mut shared = Arc::unwrap_or_clone(self.0);
        shared.mqtt = Some(status);
        Self(Arc::new(shared))
    }
}

/// A limiter of `quota` in this process's memory, swept once a minute.
fn memory_limiter(quota: Quota) -> Arc<MemoryLimiter> {
    let limiter = Arc::new(MemoryLimiter::new(quota));
    spawn_sweeper(&limiter);
    limiter
}

/// Forgets callers whose quota is whole again, once a minute, for as long
/// as the limiter lives.
fn spawn_sweeper(limiter: &Arc<MemoryLimiter>) {
    let weak = Arc::downgrade(limiter);
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(60));
            loop {
                tick.tick().await;
                match weak.upgrade() {
                    Some(l) => {
                        l.sweep();
                    }
                    None => return,
                }
            }
        });
    }
}

/// A read route: GET (and HEAD); any other method gets 405 before authentication.
fn read_route<H, T>(handler: H) -> MethodRouter<AppState>
where
    H: axum::handler::Handler<T, AppState>,
    T: 'static,
{
    get(handler).fallback(|| async { ApiError::MethodNotAllowed })
}

/// The routes of the application, built through [`Routes`] so that the
/// list of paths can be checked against the OpenAPI document.
pub fn routes() -> Routes {
    Routes::default()
        .route("/external/v1/devices", read_route(devices::list_basic))
        .route("/external/v1/devices/{device_id}/data", read_route(readings::read_basic))
        .route("/external/v1/{api_key_id}/devices", read_route(devices::list_public))
        .route("/external/v1/{api_key_id}/devices/{device_id}/data", read_route(readings::read_public))
        .route("/external/v1/devices/{device_id}/latest", read_route(latest::latest_basic))
        .route("/external/v1/{api_key_id}/devices/{device_id}/latest", read_route(latest::latest_public))
        .route("/external/v1/devices/{device_id}/alarms", read_route(alarms::alarms_basic))
        .route("/external/v1/{api_key_id}/devices/{device_id}/alarms", read_route(alarms::alarms_public))
        .route("/external/v1/alarms", read_route(alarms::active_basic))
        .route("/external/v1/{api_key_id}/alarms", read_route(alarms::active_public))
        .route("/external/v1/devices/{device_id}/alarms/events", read_route(alarms::events_basic))
        .route("/external/v1/{api_key_id}/devices/{device_id}/alarms/events", read_route(alarms::events_public))
        .route(
            "/external/v1/devices/{device_id}/alarms/{rule}/acknowledge",
            post(alarms::acknowledge).fallback(|| async { ApiError::WebhookMethodNotAllowed }),
        )
        .route("/external/v1/devices/{device_id}/stream", read_route(stream::stream_basic))
        .route("/external/v1/{api_key_id}/devices/{device_id}/stream", read_route(stream::stream_public))
        .route(
            "/external/v1/webhook/sensor-data",
            post(webhook::receive).fallback(|| async { WebhookError(ApiError::WebhookMethodNotAllowed) }),
        )
        .route(
            "/external/v1/webhook/sensor-data/received",
            get(webhook::received).fallback(|| async { WebhookError(ApiError::MethodNotAllowed) }),
        )
        .route(
            "/api/v2/write",
            post(influx::write_v2).fallback(|| async { InfluxError(ApiError::WebhookMethodNotAllowed) }),
        )
        .route("/ping", read_route(influx::ping))
        .route("/write", post(influx::write_v1).fallback(|| async { InfluxError(ApiError::WebhookMethodNotAllowed) }))
        .route("/healthz", read_route(ops::healthz))
        .route("/readyz", read_route(ops::readyz))
        .route("/metrics", read_route(ops::metrics))
        .route("/openapi.json", read_route(openapi::document))
}

/// A router that remembers its paths.
#[derive(Default)]
pub struct Routes {
    router: Router<AppState>,
    paths: Vec<&'static str>,
}

impl Routes {
    fn route(mut self, path: &'static str, method_router: MethodRouter<AppState>) -> Self {
        self.router = self.router.route(path, method_router);
        self.paths.push(path);
        self
    }

    /// The paths served.
    pub fn paths(&self) -> &[&'static str] {
        &self.paths
    }
}

/// The router of the operations listener (`--metrics-listen`): metrics and health.
pub fn ops_app(state: AppState) -> Router {
    Router::new()
        .route("/metrics", read_route(ops::metrics_here))
        .route("/healthz", read_route(ops::healthz))
        .route("/readyz", read_route(ops::readyz))
        .fallback(|| async { ApiError::NotFound })
        .layer(axum::middleware::from_fn(ratelimit::headers))
        .layer(axum::middleware::from_fn_with_state(state.clone(), log::access_log))
        .with_state(state)
}

/// Answers smaller than this go uncompressed: the encoding's framing would
/// outweigh what it saves.
pub const COMPRESS_ABOVE_BYTES: u16 = 1024;

/// gzip, br or zstd as the client's `Accept-Encoding` asks (identity
/// otherwise), for answers above [`COMPRESS_ABOVE_BYTES`] and streamed ones,
/// at level 4 of each: fast enough that a year-long stream is not a CPU
/// sink, and a readings answer still shrinks tenfold.
fn compression() -> tower_http::compression::CompressionLayer<impl tower_http::compression::Predicate> {
    use tower_http::compression::predicate::{NotForContentType, Predicate, SizeAbove};
    tower_http::compression::CompressionLayer::new()
        .quality(tower_http::CompressionLevel::Precise(4))
        .compress_when(SizeAbove::new(COMPRESS_ABOVE_BYTES).and(NotForContentType::SSE))
}

/// The application router.
pub fn app(state: AppState) -> Router {
    let mut router = routes().router;
    if let Some(d) = &state.dashboard {
        router = router.merge(dashboard::router(d.clone()));
    }
    router
        .fallback(|| async { ApiError::NotFound })
        .layer(axum::middleware::from_fn_with_state(state.clone(), answer_bytes::count))
        .layer(compression())
        .layer(axum::middleware::from_fn(ratelimit::headers))
        .layer(axum::middleware::from_fn_with_state(state.clone(), deadline::limit))
        .layer(axum::middleware::from_fn_with_state(state.clone(), log::access_log))
        .with_state(state)
}

/// Resolves on SIGTERM or Ctrl-C. The handlers are installed when this is
/// called, not when it is first polled, so that a signal arriving as soon as
/// the server says it is up is not lost (or fatal).
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let signals = {
        use tokio::signal::unix::{SignalKind, signal};
        (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    };
    async move {
        #[cfg(unix)]
        match signals {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {},
                    _ = int.recv() => {},
                }
            }
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM/SIGINT; stop with SIGKILL");
                std::future::pending::<()>().await;
            }
        }
        #[cfg(not(unix))]
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
        tracing::info!("shutting down: finishing in-flight requests");
    }
}
