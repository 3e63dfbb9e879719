//! The time limit of handlers (`--request-timeout`): a request whose
//! answer has not begun within it gets 503 `Service Unavailable` with
//! `Retry-After`, and its work is dropped. A streamed answer that has begun
//! is not limited here: the server's write-stall guard watches it instead.

use super::AppState;
use super::error::{ApiError, WebhookError};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Middleware: runs the rest of the stack under the request timeout.
pub async fn limit(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let webhook = req.uri().path().starts_with("/external/v1/webhook/");
    match tokio::time::timeout(state.request_timeout, next.run(req)).await {
        Ok(response) => response,
        Err(_) => {
            let error = ApiError::Busy(format!("no answer within the request timeout ({:?})", state.request_timeout));
            if webhook { WebhookError(error).into_response() } else { error.into_response() }
        }
    }
}
