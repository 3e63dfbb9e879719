//! What operators and tools call outside `/external/v1`: liveness,
//! readiness and Prometheus metrics (the OpenAPI document is served by
//! [`super::openapi`]).

use super::AppState;
use super::error::{ApiError, JSON};
use super::schema::ErrorBody;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// GET /healthz: the process is up.
#[utoipa::path(get, path = "/healthz", tag = "operations", responses((status = 200, description = "The process is up", content_type = "application/json", example = json!({"status": "ok"}))))]
pub async fn healthz() -> Response {
    ([(header::CONTENT_TYPE, JSON)], json!({"status": "ok"}).to_string()).into_response()
}

/// GET /readyz: the database answers.
#[utoipa::path(get, path = "/readyz", tag = "operations", responses(
    (status = 200, description = "The database answers", content_type = "application/json", example = json!({"status": "ready"})),
    (status = 503, description = "The database does not answer", body = ErrorBody),
))]
pub async fn readyz(State(state): State<AppState>) -> Result<Response, ApiError> {
    state.store.ping().await.map_err(|e| ApiError::Unavailable(e.to_string()))?;
    Ok(([(header::CONTENT_TYPE, JSON)], json!({"status": "ready"}).to_string()).into_response())
}

/// GET /metrics: OpenMetrics text.
#[utoipa::path(get, path = "/metrics", tag = "operations", responses(
    (status = 200, description = "Prometheus metrics (OpenMetrics text)", content_type = "application/openmetrics-text"),
))]
pub async fn metrics(State(state): State<AppState>) -> Response {
    let text = state.metrics.render(state.store.pool_status());
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text).into_response()
}
