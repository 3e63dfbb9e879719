//! OpenAPI 3.1's `webhooks`: the requests sensorhub sends to a
//! subscription's URL (docs/webhooks.md), signed per Standard Webhooks.

/// OpenAPI 3.1's `webhooks`: what sensorhub POSTs to a subscription's URL
/// (docs/webhooks.md), with the Standard Webhooks headers.
pub(super) fn webhooks() -> serde_json::Value {
    let header = |name: &str, text: &str| serde_json::json!({"name": name, "in": "header", "required": true, "description": text, "schema": {"type": "string"}});
    let parameters = serde_json::json!([
        header(
            "webhook-id",
            "The delivery's id, the same on every attempt (msg_…, or batch_… for a batch): de-duplicate by it"
        ),
        header("webhook-timestamp", "Seconds since the epoch when this attempt was sent"),
        header(
            "webhook-signature",
            "v1,<base64 of HMAC-SHA256 over \"{webhook-id}.{webhook-timestamp}.{body}\" keyed with the secret's bytes (whsec_…)>"
        ),
    ]);
    let reading = serde_json::json!({
        "type": "object",
        "required": ["event", "device_id", "timestamp", "data"],
        "properties": {
            "event": {"const": "sensor-data"},
            "device_id": {"type": "string"},
            "timestamp": {"type": "string", "format": "date-time", "description": "RFC 3339, UTC"},
            "data": {"type": "object", "required": ["sensors"], "properties": {
                "sensors": {"type": "array", "items": {"$ref": "#/components/schemas/SensorValue"}}}},
        },
    });
    let responses = serde_json::json!({
        "2XX": {"description": "Delivered"},
        "408": {"description": "Retried with backoff"},
        "429": {"description": "Retried after Retry-After, or with backoff"},
        "5XX": {"description": "Retried with backoff for --webhook-retry-for (24 h)"},
        "default": {"description": "Any other answer (other 4xx, 3xx) fails the delivery at once; it can be replayed"},
    });
    let post = |summary: &str, schema: serde_json::Value| {
        serde_json::json!({"post": {
            "summary": summary,
            "parameters": parameters,
            "requestBody": {"required": true, "content": {"application/json": {"schema": schema}}},
            "responses": responses,
        }})
    };
    let alarm = serde_json::json!({
        "type": "object",
        "required": ["event", "device_id", "timestamp", "data"],
        "properties": {
            "event": {"enum": ["alarm.raised", "alarm.level_changed", "alarm.acknowledged", "alarm.cleared"]},
            "device_id": {"type": "string"},
            "timestamp": {"type": "string", "format": "date-time", "description": "The reading's time (RFC 3339, UTC); for silence, the last one seen, else when it was recorded"},
            "data": {"$ref": "#/components/schemas/AlarmEventView"},
        },
    });
    serde_json::json!({
        "sensor-data": post("One reading, POSTed to each enabled subscription covering its device", reading.clone()),
        "alarm": post(
            "One alarm transition, POSTed to each enabled subscription to alarms (--events alarms) covering its device; its webhook-id is the same for the same transition",
            alarm,
        ),
        "sensor-data.batch": post(
            "The readings due together, for a subscription added with --batch",
            serde_json::json!({
                "type": "object",
                "required": ["event", "data"],
                "properties": {
                    "event": {"const": "sensor-data.batch"},
                    "data": {"type": "array", "items": {"type": "object", "required": ["webhook_id", "envelope"], "properties": {
                        "webhook_id": {"type": "string", "description": "The id this reading would have had alone"},
                        "envelope": reading,
                    }}},
                },
            }),
        ),
    })
}
