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
    /// 403.
    #[error("forbidden")]
    Forbidden,
    /// 404 for a device the caller does not have (or that does not exist).
    #[error("device not found")]
    DeviceNotFound,
    /// 404 for a path the API does not have.
    #[error("not found")]
    NotFound,
    /// 405 on a read path; answered before authentication.
    #[error("method not allowed")]
    MethodNotAllowed,
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

/// `application/json`, on every answer.
pub const JSON: HeaderValue = HeaderValue::from_static("application/json");

impl ApiError {
    /// Status code and the spec's exact message.
    pub fn status_and_message(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "Bad Request"),
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "Unauthorized"),
            ApiError::Forbidden => (StatusCode::FORBIDDEN, "Forbidden"),
            ApiError::DeviceNotFound => (StatusCode::NOT_FOUND, "Device not found"),
            ApiError::NotFound => (StatusCode::NOT_FOUND, "Not Found"),
            ApiError::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed"),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error"),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, message) = self.status_and_message();
        let detail = match &self {
            ApiError::BadRequest(d) => Some(d.as_str()),
            ApiError::Internal(cause) => {
                tracing::error!(error = %cause, "request failed");
                None
            }
            _ => None,
        };
        let body = serde_json::to_vec(&Envelope::<()> { message, data: None, detail }).unwrap_or_default();
        let mut res = (status, body).into_response();
        let headers = res.headers_mut();
        headers.insert(header::CONTENT_TYPE, JSON);
        match self {
            ApiError::Unauthorized => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic realm=\"sensorhub\""));
            }
            ApiError::MethodNotAllowed => {
                headers.insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            }
            _ => {}
        }
        res
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Invalid(input) => ApiError::BadRequest(input.to_string()),
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
