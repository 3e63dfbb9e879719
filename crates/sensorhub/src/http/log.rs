//! One access-log line per request: method, route template, status and
//! latency. The raw path is never logged: a public path holds an API key id.

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use std::time::Instant;

/// Middleware writing the access log.
pub async fn access_log(req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    let route =
        req.extensions().get::<MatchedPath>().map_or_else(|| "<unmatched>".to_owned(), |p| p.as_str().to_owned());
    let res = next.run(req).await;
    tracing::info!(
        target: "sensorhub::access",
        %method,
        route = %route,
        status = res.status().as_u16(),
        latency_ms = started.elapsed().as_secs_f64() * 1000.0,
        "request"
    );
    res
}
