//! The 429 a request or connection is refused with when its client address
//! holds its share (of connections, or of answer bytes), in the form of the
//! path it asked for.

use super::error::{ApiError, WebhookError};
use super::influx::InfluxError;
use axum::response::{IntoResponse, Response};

/// The 429 of the path's family: the read API's envelope ("To Many
/// Request", as the spec spells it), the webhook's or InfluxDB's form.
pub(super) fn refusal(path: &str) -> Response {
    if path.starts_with("/external/v1/webhook/") {
        WebhookError(ApiError::TooManyConnections).into_response()
    } else if matches!(path, "/write" | "/api/v2/write") {
        InfluxError(ApiError::TooManyConnections).into_response()
    } else {
        ApiError::TooManyConnections.into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_family_gets_its_own_429() {
        let status = |path: &str| refusal(path).status().as_u16();
        assert_eq!(status("/external/v1/devices"), 429);
        assert_eq!(status("/external/v1/webhook/sensor-data"), 429);
        assert_eq!(status("/write"), 429);
        let retry = refusal("/external/v1/devices");
        assert!(retry.headers().contains_key("retry-after"));
        assert_eq!(retry.headers().get("connection").map(|v| v.as_bytes()), Some(&b"close"[..]));
    }
}
