//! The one error type of the HTTP API and its rendering as the spec's
//! envelope `{"message": …, "data": null}` with the exact texts of spec §7.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sensorhub_store::StoreError;
use serde::Serialize;

/// Everything a request can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400; the detail says what is wrong.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// 401, with a `WWW-Authenticate` challenge.
    #[error("unauthorized")]
    Unauthorized,
    /// 401 on `/metrics` without its bearer token, with a `Bearer` challenge.
    #[error("unauthorized: no or a wrong metrics token")]
    TokenRequired,
    /// 403.
    #[error("forbidden")]
    Forbidden,
    /// 403 with a detail: the caller may see the thing but not change it.
    #[error("forbidden: {0}")]
    WriteForbidden(String),
    /// 404 for a device the caller does not have (or that does not exist).
    #[error("device not found")]
    DeviceNotFound,
    /// 404 for a path the API does not have.
    #[error("not found")]
    NotFound,
    /// 405 on a read path; answered before authentication.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// 405 on the webhook path, which takes only POST.
    #[error("method not allowed")]
    WebhookMethodNotAllowed,
    /// 429; `Retry-After` and the `RateLimit-*` headers are added by the rate-limit layer.
    #[error("too many requests")]
    TooManyRequests,
    /// 429 for a stream past a cap (see `live::slots`), with `Retry-After`;
    /// the connection is closed so that it does not hold a place either.
    #[error("too many streams")]
    TooManyStreams,
    /// 429 for a connection past its address's share (see `http::peers`),
    /// with `Retry-After: 1`; the connection is closed.
    #[error("too many connections")]
    TooManyConnections,
    /// 409 with a detail: the request clashes with the thing's state (an
    /// alarm acknowledged while it is not active).
    #[error("conflict: {0}")]
    Conflict(String),
    /// 413: the body is larger than `--max-body-bytes`.
    #[error("payload too large")]
    PayloadTooLarge,
    /// 415: the body is declared as something other than JSON.
    #[error("unsupported media type: {0}")]
    UnsupportedMediaType(String),
    /// 503: a dependency (the database) does not answer.
    #[error("service unavailable: {0}")]
    Unavailable(String),
    /// 503 with `Retry-After`: the request could not be served now (no
    /// answer within the request timeout, the rate-limit store down with
    /// `--rate-limit-fail closed`); the cause is logged, never sent.
    #[error("busy: {0}")]
    Busy(String),
    /// 500; the cause is logged, never sent.
    #[error("internal error: {0}")]
    Internal(String),
}

/// The body of every answer: success and error alike.
#[derive(Serialize)]
pub struct Envelope<'a, T: Serialize> {
    /// Success or error text.
    pub message: &'a str,
    /// Payload; `null` on error.
    pub data: Option<T>,
    /// Why a request was refused (400 only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<&'a str>,
}

/// Seconds a client refused a stream is told to wait (`Retry-After`).
pub const STREAM_RETRY_AFTER: u64 = 10;

/// `application/json`, on every answer.
pub const JSON: HeaderValue = HeaderValue::from_static("application/json");

impl ApiError {
    /// Status code and the spec's exact message.
    pub fn status_and_message(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "Bad Request"),
            ApiError::Unauthorized | ApiError::TokenRequired => (StatusCode::UNAUTHORIZED, "Unauthorized"),
            ApiError::Forbidden | ApiError::WriteForbidden(_) => (StatusCode::FORBIDDEN, "Forbidden"),
            ApiError::DeviceNotFound => (StatusCode::NOT_FOUND, "Device not found"),
            ApiError::NotFound => (StatusCode::NOT_FOUND, "Not Found"),
            ApiError::MethodNotAllowed | ApiError::WebhookMethodNotAllowed => {
                (StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed")
            }
            // The spec's spelling for the read endpoints, kept on purpose.
            ApiError::TooManyRequests | ApiError::TooManyStreams | ApiError::TooManyConnections => {
                (StatusCode::TOO_MANY_REQUESTS, "To Many Request")
            }
            ApiError::Conflict(_) => (StatusCode::CONFLICT, "Conflict"),
            ApiError::PayloadTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "Payload Too Large"),
            ApiError::UnsupportedMediaType(_) => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "Unsupported Media Type"),
            ApiError::Unavailable(_) | ApiError::Busy(_) => (StatusCode::SERVICE_UNAVAILABLE, "Service Unavailable"),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error"),
        }
    }
}

impl ApiError {
    pub(crate) fn detail(&self) -> Option<&str> {
        match self {
            ApiError::BadRequest(d)
            | ApiError::UnsupportedMediaType(d)
            | ApiError::WriteForbidden(d)
            | ApiError::Conflict(d) => Some(d.as_str()),
            _ => None,
        }
    }

    /// Renders `body` with this error's status and headers.
    pub(crate) fn respond(self, body: Vec<u8>) -> Response {
        let (status, _) = self.status_and_message();
        match &self {
            ApiError::Internal(cause) => tracing::error!(error = %cause, "request failed"),
            ApiError::Unavailable(cause) => tracing::warn!(error = %cause, "dependency unavailable"),
            ApiError::Busy(cause) => tracing::warn!(error = %cause, "request not served"),
            _ => {}
        }
        let mut res = (status, body).into_response();
        let headers = res.headers_mut();
        headers.insert(header::CONTENT_TYPE, JSON);
        match self {
            ApiError::Unauthorized => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic realm=\"sensorhub\""));
            }
            ApiError::TokenRequired => {
                headers
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"sensorhub-metrics\""));
            }
            ApiError::MethodNotAllowed => {
                headers.insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            }
            ApiError::WebhookMethodNotAllowed => {
                headers.insert(header::ALLOW, HeaderValue::from_static("POST"));
            }
            ApiError::Busy(_) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            ApiError::TooManyStreams => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(STREAM_RETRY_AFTER));
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            ApiError::TooManyConnections => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            ApiError::PayloadTooLarge => {
                // The rest of the body is not read: the connection cannot be reused.
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            _ => {}
        }
        res
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (_, message) = self.status_and_message();
        let body =
            serde_json::to_vec(&Envelope::<()> { message, data: None, detail: self.detail() }).unwrap_or_default();
        self.respond(body)
    }
}

/// An error of the webhook endpoint: `{"message", "detail"?}` without
/// `data` (spec 2.7), and "Too Many Requests" spelled correctly there.
#[derive(Debug)]
pub struct WebhookError(pub ApiError);

impl<E: Into<ApiError>> From<E> for WebhookError {
    fn from(e: E) -> Self {
        WebhookError(e.into())
    }
}

/// The body of a webhook answer (spec 2.7): `Data received successfully`,
/// or an error text (`Unauthorized`, `Bad Request`, `Payload Too Large`,
/// `Too Many Requests`, …).
#[derive(Serialize, utoipa::ToSchema)]
pub struct WebhookReply<'a> {
    /// What happened.
    #[schema(example = "Data received successfully")]
    pub message: &'a str,
    /// Why a request was refused, naming the field.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<&'a str>,
}

impl IntoResponse for WebhookError {
    fn into_response(self) -> Response {
        let (_, message) = self.0.status_and_message();
        let message = match self.0 {
            ApiError::TooManyRequests | ApiError::TooManyConnections => "Too Many Requests",
            _ => message,
        };
        let body = serde_json::to_vec(&WebhookReply { message, detail: self.0.detail() }).unwrap_or_default();
        let mut res = self.0.respond(body);
        // The webhook authenticates with X-API-KEY, not Basic.
        res.headers_mut().remove(header::WWW_AUTHENTICATE);
        res
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Invalid(input) => ApiError::BadRequest(input.to_string()),
            StoreError::Unavailable(why) | StoreError::Busy(why) => ApiError::Busy(why),
            other => ApiError::Internal(other.to_string()),
        }
    }
}

/// A 200 answer `{"message": "Success", "data": data}`.
pub fn success<T: Serialize>(data: T) -> Response {
    match serde_json::to_vec(&Envelope { message: "Success", data: Some(data), detail: None }) {
        Ok(body) => ([(header::CONTENT_TYPE, JSON)], body).into_response(),
        Err(e) => ApiError::Internal(e.to_string()).into_response(),
    }
}
