//! The HTTP API: the router of the four read endpoints under
//! `/external/v1`, its state, and a server with graceful shutdown.

pub mod auth;
pub mod devices;
pub mod error;
mod log;
pub mod readings;

use auth::{BasicCaller, PublicCaller};
use axum::Router;
use axum::routing::{MethodRouter, get};
use error::ApiError;
use sensorhub_core::time::RangeRules;
use sensorhub_store::Store;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    /// The database.
    pub store: Arc<dyn Store>,
    /// Time-range defaults and limits.
    pub rules: RangeRules,
    /// Verified Basic credentials.
    pub credentials: Arc<auth::CredentialCache>,
}

impl AppState {
    /// State over `store` with the given range rules.
    pub fn new(store: Arc<dyn Store>, rules: RangeRules) -> Self {
        Self { store, rules, credentials: Arc::new(auth::CredentialCache::new(Duration::from_secs(600), 10_000)) }
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

/// The application router.
pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/external/v1/devices", read_route(devices::list::<BasicCaller>))
        .route("/external/v1/devices/{device_id}/data", read_route(readings::read::<BasicCaller>))
        .route("/external/v1/{api_key_id}/devices", read_route(devices::list::<PublicCaller>))
        .route("/external/v1/{api_key_id}/devices/{device_id}/data", read_route(readings::read::<PublicCaller>))
        .fallback(|| async { ApiError::NotFound })
        .layer(axum::middleware::from_fn(log::access_log))
        .with_state(state)
}

/// Serves `app` on `listener` until `shutdown` resolves, then stops
/// accepting and lets in-flight requests finish, for at most `grace`: a
/// client that reads a long response slowly cannot hold the process up.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()> {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut graceful = stopped.clone();
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        let _ = graceful.wait_for(|s| *s).await;
    });
    let deadline = async move {
        shutdown.await;
        let _ = stop.send(true);
        tokio::time::sleep(grace).await;
    };
    tokio::select! {
        result = server => result,
        () = deadline => {
            tracing::warn!(grace_seconds = grace.as_secs(), "in-flight requests still running after the grace period; closing them");
            Ok(())
        }
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down: finishing in-flight requests");
}
