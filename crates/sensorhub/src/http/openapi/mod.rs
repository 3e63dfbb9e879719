//! The OpenAPI 3.1 document at `/openapi.json`, generated from the handlers'
//! annotations and the schema types of [`super::schema`], and its handler.
//! Only the router refers to this module, so no handler depends on it.

mod complete;
mod outgoing;

use super::error::{JSON, WebhookReply};
use super::received::Received;
use super::schema::{ErrorBody, LatestValue, Reading, SensorValue, WebhookEnvelope};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use sensorhub_core::model::{Device, SensorMeta};
use utoipa::openapi::RefOr;
use utoipa::openapi::header::Header;
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

/// The security schemes: HTTP Basic, and the webhook's `X-API-KEY`. The
/// public reads carry their credential as the `api_key_id` path parameter,
/// which OpenAPI cannot express as a scheme.
struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme("basicAuth", SecurityScheme::Http(Http::new(HttpAuthScheme::Basic)));
        components
            .add_security_scheme("webhookKey", SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new("X-API-KEY"))));
        // The line-protocol writes: `Authorization: Token <webhook key>`.
        components.add_security_scheme(
            "influxToken",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "Authorization",
                "Token <webhook key>, as InfluxDB clients send it",
            ))),
        );
    }
}

/// The rate-limit headers, on every answer of a rate-limited operation
/// (those that answer 429): `RateLimit-*` always, `Retry-After` on 429.
struct RateLimitHeaders;

impl Modify for RateLimitHeaders {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let integer = |text: &str| {
            let schema = ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(0)).build();
            let mut header = Header::new(schema);
            header.description = Some(text.to_owned());
            header
        };
        for item in openapi.paths.paths.values_mut() {
            for op in [&mut item.get, &mut item.post].into_iter().flatten() {
                if !op.responses.responses.contains_key("429") {
                    continue;
                }
                for (status, response) in op.responses.responses.iter_mut() {
                    let RefOr::T(response) = response else { continue };
                    if status == "429" {
                        response
                            .headers
                            .insert("Retry-After".into(), RefOr::T(integer("Seconds to wait before retrying")));
                    }
                    if !status.starts_with('4') || status == "429" {
                        let h = &mut response.headers;
                        h.insert("RateLimit-Limit".into(), RefOr::T(integer("Requests allowed per period")));
                        h.insert("RateLimit-Remaining".into(), RefOr::T(integer("Requests left now")));
                        h.insert("RateLimit-Reset".into(), RefOr::T(integer("Seconds until the quota is whole")));
                    }
                }
            }
        }
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "sensorhub: Device Sensor Data Service", description = "Devices and readings of AWLR and AWS stations, and a sensor-data webhook receiver. Three ways to authenticate: HTTP Basic (basicAuth) for /devices and /devices/{device_id}/data; an API key id in the path ({api_key_id}) for the public reads, which OpenAPI cannot declare as a security scheme and so is documented as a path parameter; and the X-API-KEY header (webhookKey) for the webhook."),
    paths(
        super::devices::list_basic,
        super::readings::read_basic,
        super::devices::list_public,
        super::readings::read_public,
        super::latest::latest_basic,
        super::latest::latest_public,
        super::alarms::alarms_basic,
        super::alarms::alarms_public,
        super::alarms::active_basic,
        super::alarms::active_public,
        super::alarms::events_basic,
        super::alarms::events_public,
        super::alarms::acknowledge,
        super::stream::stream_basic,
        super::stream::stream_public,
        super::webhook::receive,
        super::webhook::received,
        super::influx::write_v2,
        super::influx::write_v1,
        super::influx::ping,
        super::ops::healthz,
        super::ops::readyz,
        super::ops::metrics,
        document,
    ),
    components(schemas(Device, SensorMeta, Reading, SensorValue, LatestValue, ErrorBody, WebhookEnvelope, WebhookReply, Received, super::influx::InfluxErrorBody, crate::alarm_view::AlarmView, crate::alarm_view::AlarmEventView)),
    modifiers(&Security, &RateLimitHeaders)
)]
struct ApiDoc;

/// The document as JSON, with the outgoing webhooks added and what every
/// operation shares completed (`complete`).
pub fn document_json() -> String {
    let Ok(mut doc) = serde_json::to_value(ApiDoc::openapi()) else { return "{}".into() };
    doc["webhooks"] = outgoing::webhooks();
    complete::examples_formats_and_links(&mut doc, jiff::Timestamp::now());
    serde_json::to_string(&doc).unwrap_or_else(|_| "{}".into())
}

/// GET /openapi.json.
#[utoipa::path(get, path = "/openapi.json", tag = "operations", responses((status = 200, description = "This document", content_type = "application/json", body = Object)))]
pub async fn document(_: super::ops::OpsCaller) -> Response {
    // Built once: the document never changes while the process runs.
    static DOCUMENT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ([(header::CONTENT_TYPE, JSON)], DOCUMENT.get_or_init(document_json).as_str()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_documented() {
        let doc: serde_json::Value = serde_json::from_str(&document_json()).expect("JSON");
        assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.1")), "{}", doc["openapi"]);
        let paths = doc["paths"].as_object().expect("paths");
        for path in super::super::routes().paths() {
            assert!(paths.contains_key(*path), "{path} is not in the OpenAPI document");
        }
        assert_eq!(paths.len(), super::super::routes().paths().len(), "no documented path is missing from the router");
        let schemes = doc["components"]["securitySchemes"].as_object().expect("schemes");
        assert!(schemes.contains_key("basicAuth") && schemes.contains_key("webhookKey"));
        let limited = &doc["paths"]["/external/v1/devices"]["get"]["responses"];
        assert!(limited["429"]["headers"].get("Retry-After").is_some());
        assert!(limited["200"]["headers"].get("RateLimit-Remaining").is_some());
        for schema in ["Device", "Reading", "ErrorBody", "WebhookEnvelope", "WebhookReply", "SensorValue"] {
            assert!(doc["components"]["schemas"].get(schema).is_some(), "{schema}");
        }
        // The outgoing webhooks, signed per Standard Webhooks.
        for event in ["sensor-data", "sensor-data.batch"] {
            let post = &doc["webhooks"][event]["post"];
            let headers: Vec<_> = post["parameters"].as_array().expect("headers").iter().map(|p| &p["name"]).collect();
            assert_eq!(headers, ["webhook-id", "webhook-timestamp", "webhook-signature"], "{event}");
            assert!(post["requestBody"]["content"]["application/json"]["schema"].is_object(), "{event}");
        }
    }
}
