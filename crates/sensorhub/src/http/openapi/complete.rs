//! What many operations share, added to the generated document as JSON
//! rather than repeated on each handler's annotation: path parameters'
//! examples that work against `serve --demo` (alice's key, her first
//! water-level station and its rule, yesterday as the range), the CSV and
//! NDJSON answers of the data operations, `WWW-Authenticate` on every 401,
//! and links from each device list to the operations on one device, so a
//! stateful tool can walk from the list to a station's data.

use serde_json::{Value, json};

/// Examples of path parameters, by name: the demo's (`sensorhub demo`).
const PATH_EXAMPLES: [(&str, &str); 3] =
    [("api_key_id", "pk-demo-alice-all"), ("device_id", "AWLR-001"), ("rule", "siaga")];

/// The operations a device list links to, by link name: (Basic, key) operation ids.
const DEVICE_LINKS: [(&str, &str, &str); 5] = [
    ("data", "read_basic", "read_public"),
    ("latest", "latest_basic", "latest_public"),
    ("stream", "stream_basic", "stream_public"),
    ("alarms", "alarms_basic", "alarms_public"),
    ("alarm_events", "events_basic", "events_public"),
];

/// Completes `doc`; `now` dates the range examples (the day before it,
/// which the demo always holds).
pub(super) fn examples_formats_and_links(doc: &mut Value, now: jiff::Timestamp) {
    let yesterday = now.to_zoned(jiff::tz::TimeZone::UTC).date().yesterday().ok();
    let range = yesterday.map(|d| (format!("{d}T00:00:00Z"), format!("{d}T23:59:59Z")));
    schemas(doc);
    let Some(paths) = doc["paths"].as_object_mut() else { return };
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else { continue };
        for (method, op) in item.iter_mut() {
            parameter_examples(op, range.as_ref());
            if let Some(unauthorized) = op.pointer_mut("/responses/401") {
                unauthorized["headers"]["WWW-Authenticate"] = json!({
                    "description": "The challenge: Basic realm=\"sensorhub\" (Bearer for /metrics)",
                    "schema": {"type": "string"},
                });
            }
            if path.ends_with("/data") {
                formats(op);
            }
            links(op);
            server_trouble(op);
            if matches!(op["operationId"].as_str(), Some("write-v2" | "write-v1")) {
                // An empty body is a write of no points, answered 204.
                op["requestBody"]["required"] = json!(false);
            }
            allow_on_405(op, method);
        }
    }
}

/// Schemas the types cannot say: the webhook's `data` in its two shapes
/// (named values, or a `sensors` list of `{id, value}`: a value may be
/// anything in simulate mode, which warns, and must be a number in ingest
/// mode, which refuses), free-form objects open to any member (a code
/// generator reads a bare object as one with no members), `data: null`
/// in an error, and the metrics' text.
fn schemas(doc: &mut Value) {
    let open = |what: &str| json!({"type": "object", "additionalProperties": true, "description": what});
    let value =
        json!({"description": "A number (ingest mode refuses anything else; simulate mode accepts it with a warning)"});
    if let Some(envelope) = doc.pointer_mut("/components/schemas/WebhookEnvelope/properties") {
        envelope["data"] = json!({
            "description": "The values: named values ({\"AWLR1-wl\": 84.1}), or a sensors list ({\"sensors\": [{\"id\": \"AWLR1-wl\", \"value\": 84.1}]}), not both",
            "oneOf": [
                {"type": "object", "required": ["sensors"], "additionalProperties": false, "properties": {
                    "sensors": {"type": "array", "items": {"type": "object", "required": ["id", "value"], "properties": {
                        "id": {"type": "string", "pattern": "\\S"}, "value": value}}}}},
                {"type": "object", "not": {"required": ["sensors"], "properties": {"sensors": {"type": "array"}}},
                 "additionalProperties": value},
            ],
        });
        envelope["metadata"] =
            json!({"type": ["object", "null"], "additionalProperties": true, "description": "Free-form"});
    }
    if let Some(spec) = doc.pointer_mut("/components/schemas/AlarmView/properties/spec") {
        *spec = open("The rule as written (docs/alarms.md)");
    }
    if let Some(envelope) = doc.pointer_mut("/components/schemas/Received/properties/envelope") {
        *envelope = open("The envelope as it was received");
    }
    if let Some(data) = doc.pointer_mut("/components/schemas/ErrorBody/properties/data") {
        *data = json!({"type": "null", "description": "Always null"});
    }
    if let Some(this) = doc.pointer_mut("/paths/~1openapi.json/get/responses/200/content/application~1json/schema") {
        *this = open("This document");
    }
    if let Some(text) = doc.pointer_mut("/paths/~1metrics/get/responses/200/content/application~1openmetrics-text") {
        text["schema"] = json!({"type": "string"});
    }
}

/// The values the query parameters of a closed set take, as the server
/// reads them (an empty value is as if the parameter were absent), and
/// the shape of an interval (its count's limits are checked beyond it).
fn query_schema(name: &str) -> Option<Value> {
    let one_of = |values: &[&str]| json!({"type": "string", "enum": values});
    match name {
        "format" => Some(one_of(&["json", "csv", "ndjson", ""])),
        "agg" => Some(one_of(&["mean", "min", "max", "sum", "count", "first", "last", ""])),
        "interval" => Some(json!({"type": "string", "pattern": "^([0-9]+(m|h|d|w|mo))?$"})),
        // The line-protocol writes (sensorhub_core::lineproto::Precision::parse).
        "precision" => Some(one_of(&["ns", "n", "us", "u", "µ", "ms", "s", "m", "h"])),
        _ => None,
    }
}

/// Sets the example of each path parameter named in [`PATH_EXAMPLES`],
/// of `start` and `end` in the query to `range`, and the closed sets of
/// the query's values ([`query_schema`]).
fn parameter_examples(op: &mut Value, range: Option<&(String, String)>) {
    let Some(params) = op.get_mut("parameters").and_then(Value::as_array_mut) else { return };
    for p in params {
        let name = p["name"].as_str().unwrap_or_default().to_owned();
        let name = name.as_str();
        if p["in"] == "query"
            && let Some(schema) = query_schema(name)
        {
            p["schema"] = schema;
        }
        let example = match (p["in"].as_str(), name) {
            (Some("path"), _) => PATH_EXAMPLES.iter().find(|(n, _)| *n == name).map(|(_, e)| (*e).to_owned()),
            (Some("query"), "start") => range.map(|r| r.0.clone()),
            (Some("query"), "end") => range.map(|r| r.1.clone()),
            _ => None,
        };
        if let Some(example) = example {
            p["example"] = Value::String(example);
        }
    }
}

/// The data operations' answers besides JSON: CSV and NDJSON, chosen by
/// `format` or `Accept`.
fn formats(op: &mut Value) {
    let Some(content) = op.pointer_mut("/responses/200/content").and_then(Value::as_object_mut) else { return };
    content.insert(
        "text/csv".into(),
        json!({
            "schema": {"type": "string", "description": "RFC 4180: a header row timestamp,<sensor id>,… and a row per time, empty cells where a sensor has no value"},
            "example": "timestamp,AWLR1-wl,AWLR1-batt\r\n2026-05-05T07:00:00+07:00,84.1,97.9\r\n",
        }),
    );
    content.insert(
        "application/x-ndjson".into(),
        json!({
            "schema": {"type": "string", "description": "One {\"timestamp\", \"sensors\"} object (a Reading) per line"},
            "example": "{\"timestamp\":\"2026-05-05T07:00:00+07:00\",\"sensors\":[{\"id\":\"AWLR1-wl\",\"value\":84.1,\"unit\":\"cm\"}]}\n",
        }),
    );
}

/// 500 and 503 (a request that timed out, or a shared rate-limit store
/// that cannot be reached while limits are closed), in the body the
/// operation's other errors have, on every operation that is rate
/// limited (those answering 429).
fn server_trouble(op: &mut Value) {
    let Some(limited) = op.pointer("/responses/429/content").cloned() else { return };
    for (status, description) in [
        ("500", "Internal Server Error"),
        ("503", "Service Unavailable: the request timed out, or the server is overloaded"),
    ] {
        op["responses"][status] = json!({"description": description, "content": limited});
    }
    op["responses"]["503"]["headers"]["Retry-After"] = json!({"description": "Seconds to wait before retrying (when the request timed out)", "schema": {"type": "integer", "minimum": 0}});
}

/// The `Allow` header of each 405: the methods the path answers.
fn allow_on_405(op: &mut Value, method: &str) {
    let allowed = if method == "get" { "GET, HEAD" } else { "POST" };
    if let Some(refused) = op.pointer_mut("/responses/405") {
        refused["headers"]["Allow"] =
            json!({"description": format!("The methods this path answers: {allowed}"), "schema": {"type": "string"}});
    }
}

/// A device list's links to the operations on one of its devices.
fn links(op: &mut Value) {
    let public = match op["operationId"].as_str() {
        Some("list_basic") => false,
        Some("list_public") => true,
        _ => return,
    };
    let mut links = serde_json::Map::new();
    for (name, basic, keyed) in DEVICE_LINKS {
        let mut parameters = json!({"device_id": "$response.body#/data/0/device_id"});
        if public {
            parameters["api_key_id"] = json!("$request.path.api_key_id");
        }
        let id = if public { keyed } else { basic };
        links.insert(name.into(), json!({"operationId": id, "parameters": parameters}));
    }
    if let Some(ok) = op.pointer_mut("/responses/200") {
        ok["links"] = Value::Object(links);
    }
}

#[cfg(test)]
mod tests {
    use super::super::document_json;
    use serde_json::Value;

    fn document() -> Value {
        serde_json::from_str(&document_json()).expect("JSON")
    }

    #[test]
    fn every_key_path_parameter_has_the_demos_key_and_every_device_a_demo_device() {
        let doc = document();
        let mut seen = 0;
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for op in item.as_object().expect("an item").values() {
                for p in op["parameters"].as_array().into_iter().flatten() {
                    let expected = match p["name"].as_str() {
                        Some("api_key_id") => "pk-demo-alice-all",
                        Some("device_id") => "AWLR-001",
                        _ => continue,
                    };
                    assert_eq!(p["example"], expected, "{path} {}", p["name"]);
                    seen += 1;
                }
            }
        }
        assert!(seen >= 18, "7 key operations and 11 on one device: {seen}");
    }

    #[test]
    fn the_data_operations_declare_csv_and_ndjson_and_a_401_its_challenge() {
        let doc = document();
        for path in ["/external/v1/devices/{device_id}/data", "/external/v1/{api_key_id}/devices/{device_id}/data"] {
            let content = &doc["paths"][path]["get"]["responses"]["200"]["content"];
            for kind in ["application/json", "text/csv", "application/x-ndjson"] {
                assert!(content.get(kind).is_some(), "{path} {kind}");
            }
        }
        let responses = &doc["paths"]["/external/v1/devices"]["get"]["responses"];
        assert!(responses["401"]["headers"]["WWW-Authenticate"].is_object(), "{responses}");
        assert!(responses["405"]["headers"]["Allow"].is_object(), "{responses}");
        for status in ["500", "503"] {
            assert_eq!(responses[status]["content"], responses["429"]["content"], "{status}: the envelope");
        }
        let envelope = &doc["components"]["schemas"]["WebhookEnvelope"]["properties"];
        assert_eq!(
            (envelope["device_id"]["pattern"].as_str(), envelope["event"]["pattern"].as_str()),
            (Some("\\S"), Some("\\S"))
        );
        let params =
            doc["paths"]["/external/v1/devices/{device_id}/data"]["get"]["parameters"].as_array().expect("params");
        let format = params.iter().find(|p| p["name"] == "format").expect("format");
        assert_eq!(format["schema"]["enum"], serde_json::json!(["json", "csv", "ndjson", ""]));
    }

    #[test]
    fn a_device_list_links_to_the_operations_on_its_devices() {
        let doc = document();
        let ids: Vec<String> = doc["paths"]
            .as_object()
            .expect("paths")
            .values()
            .flat_map(|item| item.as_object().expect("an item").values())
            .filter_map(|op| op["operationId"].as_str().map(str::to_owned))
            .collect();
        for (list, key) in [("/external/v1/devices", false), ("/external/v1/{api_key_id}/devices", true)] {
            let links = doc["paths"][list]["get"]["responses"]["200"]["links"].as_object().expect("links");
            assert_eq!(links.len(), 5, "{list}");
            for link in links.values() {
                assert!(ids.iter().any(|id| link["operationId"] == id.as_str()), "{link} names an operation");
                assert_eq!(link["parameters"]["device_id"], "$response.body#/data/0/device_id");
                assert_eq!(link["parameters"].get("api_key_id").is_some(), key, "{link}");
            }
        }
    }

    #[test]
    fn free_form_objects_are_open_and_the_envelope_says_its_two_shapes() {
        let doc = document();
        let schemas = &doc["components"]["schemas"];
        assert_eq!(schemas["WebhookEnvelope"]["properties"]["data"]["oneOf"].as_array().map(Vec::len), Some(2));
        for (schema, field) in [("WebhookEnvelope", "metadata"), ("AlarmView", "spec"), ("Received", "envelope")] {
            assert_eq!(schemas[schema]["properties"][field]["additionalProperties"], true, "{schema}.{field}");
        }
        assert_eq!(schemas["ErrorBody"]["properties"]["data"]["type"], "null");
        let metrics = &doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"]["application/openmetrics-text"];
        assert_eq!(metrics["schema"]["type"], "string");
    }

    #[test]
    fn only_the_events_operations_take_a_range() {
        let doc = document();
        let names = |path: &str, method: &str| -> Vec<String> {
            let params = doc["paths"][path][method]["parameters"].as_array().cloned().unwrap_or_default();
            params.iter().filter(|p| p["in"] == "query").filter_map(|p| p["name"].as_str().map(str::to_owned)).collect()
        };
        assert_eq!(names("/external/v1/devices/{device_id}/alarms/events", "get"), ["start", "end", "tz"]);
        for (path, method) in [
            ("/external/v1/devices/{device_id}/alarms", "get"),
            ("/external/v1/alarms", "get"),
            ("/external/v1/{api_key_id}/alarms", "get"),
            ("/external/v1/devices/{device_id}/alarms/{rule}/acknowledge", "post"),
        ] {
            assert_eq!(names(path, method), ["tz"], "{path}");
        }
    }

    #[test]
    fn nothing_is_added_as_null() {
        let doc = document();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, op) in item.as_object().expect("an item") {
                for (key, value) in op.as_object().expect("an operation") {
                    assert!(!value.is_null(), "{method} {path}: {key} is null");
                }
            }
        }
    }

    #[test]
    fn the_range_examples_are_the_day_before_the_document_was_made() {
        let mut doc = serde_json::json!({"paths": {"/x/data": {"get": {"parameters": [
            {"name": "start", "in": "query"}, {"name": "end", "in": "query"}, {"name": "tz", "in": "query", "example": "7"}],
            "responses": {"200": {"content": {"application/json": {}}}}}}}});
        let now: jiff::Timestamp = "2026-03-01T05:00:00Z".parse().expect("a time");
        super::examples_formats_and_links(&mut doc, now);
        let params = &doc["paths"]["/x/data"]["get"]["parameters"];
        assert_eq!(
            (params[0]["example"].as_str(), params[1]["example"].as_str()),
            (Some("2026-02-28T00:00:00Z"), Some("2026-02-28T23:59:59Z"))
        );
        assert_eq!(params[2]["example"], "7", "others as annotated");
    }
}
