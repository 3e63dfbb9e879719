//! What operators and tools call outside `/external/v1`: liveness,
//! readiness and Prometheus metrics (the OpenAPI document is served by
//! [`super::openapi`]). Each but liveness is throttled per client address
//! ([`OpsCaller`]); `/metrics` may require a bearer token and may live on a
//! listener of its own (`--metrics-token`, `--metrics-listen`).

use super::AppState;
use super::auth::constant_time_eq;
use super::error::{ApiError, JSON};
use super::ratelimit::Guard;
use super::schema::ErrorBody;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use sensorhub_core::secret::key_digest;
use serde_json::json;

/// GET /healthz: the process is up.
#[utoipa::path(get, path = "/healthz", tag = "operations", responses((status = 200, description = "The process is up", content_type = "application/json", example = json!({"status": "ok"}))))]
pub async fn healthz() -> Response {
    ([(header::CONTENT_TYPE, JSON)], json!({"status": "ok"}).to_string()).into_response()
}

/// An operations request, throttled by its client address with the
/// per-caller quota, so that nobody can hammer the cheap-looking endpoints.
pub struct OpsCaller;

impl FromRequestParts<AppState> for OpsCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        Guard::new(parts, state, "ops").address().await?;
        Ok(OpsCaller)
    }
}

/// GET /readyz: the database answers.
#[utoipa::path(get, path = "/readyz", tag = "operations", responses(
    (status = 200, description = "The database answers; with MQTT ingestion, `mqtt` says whether the broker is connected", content_type = "application/json", example = json!({"status": "ready"})),
    (status = 503, description = "The database does not answer", body = ErrorBody),
))]
pub async fn readyz(State(state): State<AppState>, _: OpsCaller) -> Result<Response, ApiError> {
    state.store.ping().await.map_err(|e| ApiError::Unavailable(e.to_string()))?;
    // The MQTT link is reported, not required: reads and the webhook work
    // while the broker is away, and the link comes back by itself.
    let body = match &state.mqtt {
        None => json!({"status": "ready"}),
        Some(link) => json!({"status": "ready", "mqtt": if link.connected() { "connected" } else { "disconnected" }}),
    };
    Ok(([(header::CONTENT_TYPE, JSON)], body.to_string()).into_response())
}

/// GET /metrics: OpenMetrics text; on the API's listener only when there
/// is no listener of its own (`--metrics-listen`).
#[utoipa::path(get, path = "/metrics", tag = "operations", responses(
    (status = 200, description = "Prometheus metrics (OpenMetrics text)", content_type = "application/openmetrics-text"),
    (status = 401, description = "Unauthorized: --metrics-token is set and the request has no `Authorization: Bearer` with it", body = ErrorBody),
    (status = 404, description = "Not Found: metrics are served on --metrics-listen", body = ErrorBody),
))]
pub async fn metrics(
    State(state): State<AppState>,
    caller: OpsCaller,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    if state.metrics_access.separate_listener {
        return Err(ApiError::NotFound);
    }
    metrics_here(State(state), caller, headers).await
}

/// GET /metrics on the operations listener.
pub async fn metrics_here(
    State(state): State<AppState>,
    _: OpsCaller,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    if let Some(expected) = &state.metrics_access.token_digest {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
            .map(|t| key_digest(t.trim()));
        if !given.is_some_and(|g| constant_time_eq(&g, expected)) {
            return Err(ApiError::TokenRequired);
        }
    }
    let caches =
        crate::metrics::CacheBytes { rendered_hours: state.rendered.held(), kept_hours: state.store.kept_bytes() };
    let text = state.metrics.render(state.store.pool_status(), caches);
    Ok(([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text).into_response())
}
