//! GET /devices/{device_id}/data (Basic) and its public twin: the readings
//! of one device in a time range, streamed from the store to the socket.

use super::AppState;
use super::auth::{BasicCaller, Caller, KeptReader, PublicReader, path_param};
use super::encode::{Format, ReadingEncoder};
use super::error::ApiError;
use super::guard::{AccessSeen, Cut, Guard};
use super::hours::Windowed;
use super::schema::{ErrorBody, ReadingList};
use axum::body::Body;
use axum::extract::{FromRequestParts, State};
use axum::http::header;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::{StreamExt, stream};
use jiff::tz::TimeZone;
use sensorhub_core::bucket::{Agg, Aggregation, Buckets, LONG_RANGE_DAYS};
use sensorhub_core::time::{RangeQuery, ResolvedRange};
use sensorhub_store::aggregate::{Aggregator, aggregated_window};
use serde::Deserialize;

/// The query of a readings request, as received.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RangeParams {
    /// Start, inclusive: RFC 3339 with Z or an offset, or without one (read in tz). Default: today 00:00:00.
    #[param(example = "2026-05-05T00:00:00Z")]
    start: Option<String>,
    /// End, inclusive, same forms. Default: now.
    #[param(example = "2026-05-05T23:59:59Z")]
    end: Option<String>,
    /// Time zone of rendered times and of bounds without an offset: whole hours -12..14, ±HH:MM, or an IANA name (Asia/Jakarta, Europe/Berlin), with which each time carries the zone's offset at that instant. Default: the server's --default-tz.
    #[param(example = "7")]
    tz: Option<String>,
    /// json (the default), csv (RFC 4180: a header row timestamp,<sensor id>,… and a row per time, empty cells where a sensor has no value) or ndjson (one {"timestamp","sensors"} object per line). Without it, an Accept of text/csv or application/x-ndjson chooses. Errors are JSON whatever the format.
    // The text is the OpenAPI document's, not rustdoc's: `<sensor id>` is not a tag.
    #[allow(rustdoc::invalid_html_tags)]
    #[param(example = "csv")]
    format: Option<String>,
    /// Aggregate the readings into buckets of this length: a positive whole number and m, h, d, w or mo (15m, 1h, 6h, 1d, 1w, 1mo). Buckets follow the calendar in tz: minutes and hours count from local midnight, days start at local midnight, weeks on Monday, months on the 1st. Each bucket is one element of data, its timestamp the bucket's start, with each sensor measured in it. With an interval of 1d or longer the range may span 3,660 days. At most 100,000 buckets.
    #[param(example = "1h")]
    interval: Option<String>,
    /// The aggregate of each sensor in a bucket (needs interval): mean (the default), min, max, sum, count (an integer), first or last.
    #[param(example = "mean")]
    agg: Option<String>,
    /// The request's `Accept` header, read with the query.
    #[serde(skip)]
    accept: Option<String>,
}

impl<S: Send + Sync> FromRequestParts<S> for RangeParams {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let mut params: RangeParams = serde_urlencoded::from_str(parts.uri.query().unwrap_or_default())
            .map_err(|e| ApiError::BadRequest(format!("malformed query string: {e}")))?;
        params.accept = parts.headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).map(str::to_owned);
        Ok(params)
    }
}

/// The `{device_id}` of the path.
pub struct DevicePath(pub(super) String);

impl<S: Send + Sync> FromRequestParts<S> for DevicePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        path_param(parts, state, "device_id").await.map(DevicePath).ok_or(ApiError::DeviceNotFound)
    }
}

/// Spec 4.2.
#[utoipa::path(get, path = "/external/v1/devices/{device_id}/data", tag = "readings",
    security(("basicAuth" = [])),
    params(("device_id" = String, Path, description = "Device id"), RangeParams),
    responses(
        (status = 200, description = "Readings grouped by timestamp, ascending", body = ReadingList),
        (status = 400, description = "Bad Request, with a detail", body = ErrorBody),
        (status = 401, description = "Unauthorized", body = ErrorBody),
        (status = 403, description = "Forbidden: the account is disabled", body = ErrorBody),
        (status = 404, description = "Device not found", body = ErrorBody),
        (status = 405, description = "Method Not Allowed", body = ErrorBody),
        (status = 429, description = "To Many Request", body = ErrorBody),
    ))]
pub async fn read_basic(
    State(state): State<AppState>,
    AccessSeen(seen): AccessSeen,
    BasicCaller(caller): BasicCaller,
    DevicePath(device_id): DevicePath,
    params: RangeParams,
) -> Result<Response, ApiError> {
    read(&state, &caller, seen, &device_id, &params).await
}

/// Spec 4.4.
#[utoipa::path(get, path = "/external/v1/{api_key_id}/devices/{device_id}/data", tag = "readings",
    params(
        ("api_key_id" = String, Path, description = "API key id: the credential of the public endpoints"),
        ("device_id" = String, Path, description = "Device id"),
        RangeParams,
    ),
    responses(
        (status = 200, description = "Readings grouped by timestamp, ascending", body = ReadingList),
        (status = 400, description = "Bad Request, with a detail", body = ErrorBody),
        (status = 403, description = "Forbidden: unknown or revoked key, or disabled account", body = ErrorBody),
        (status = 404, description = "Device not found", body = ErrorBody),
        (status = 405, description = "Method Not Allowed", body = ErrorBody),
        (status = 429, description = "To Many Request", body = ErrorBody),
    ))]
pub async fn read_public(
    State(state): State<AppState>,
    AccessSeen(seen): AccessSeen,
    reader: PublicReader,
    DevicePath(device_id): DevicePath,
    params: Result<RangeParams, ApiError>,
) -> Result<Response, ApiError> {
    let caller = match reader {
        PublicReader::Checked(caller) => caller,
        PublicReader::Kept(kept) => match kept_raw(&state, &kept, &device_id, &params).await {
            Some(Ok(Windowed::Body(response))) => return kept.confirmed(&state).map(|()| response),
            Some(Ok(Windowed::NotVisible)) => return kept.confirmed(&state).and(Err(ApiError::DeviceNotFound)),
            // The store failed: the key decides between its 403 and this error.
            Some(Err(e)) => return kept.check(&state).await.and(Err(e)),
            Some(Ok(Windowed::Unconfirmed)) | None => kept.check(&state).await?,
        },
    };
    read(&state, &caller, seen, &device_id, &params?).await
}

/// A raw window read on an API key's kept answer, confirmed by the access
/// generation the store reads with the device (`Unconfirmed` when it moved
/// since the key was found valid); `None` when the request is not a raw
/// window with a good query. Whatever is not confirmed is answered after
/// looking the key up again, so that it is the answer a fresh lookup gives
/// (a revoked key with a bad query is still a 403).
async fn kept_raw(
    state: &AppState,
    kept: &KeptReader,
    device_id: &str,
    params: &Result<RangeParams, ApiError>,
) -> Option<Result<Windowed<Response>, ApiError>> {
    let asked = Asked::of(state, params.as_ref().ok()?).ok()?;
    if asked.aggregation.is_some() {
        return None;
    }
    Some(raw(state, &kept.caller, Some(kept.access), kept.access, device_id, asked).await)
}

/// What a readings request asks for, checked.
struct Asked {
    format: Format,
    aggregation: Option<Aggregation>,
    resolved: ResolvedRange,
    zone: TimeZone,
}

impl Asked {
    /// The request's parameters checked against the server's rules (400s).
    fn of(state: &AppState, params: &RangeParams) -> Result<Self, ApiError> {
        let format =
            Format::chosen(params.format.as_deref(), params.accept.as_deref()).map_err(ApiError::BadRequest)?;
        let aggregation = Aggregation::from_params(params.interval.as_deref(), params.agg.as_deref())
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let max_days = match aggregation {
            Some(a) if a.interval.is_daily_or_longer() => state.rules.max_range_days.max(LONG_RANGE_DAYS),
            _ => state.rules.max_range_days,
        };
        let query = RangeQuery { start: params.start.as_deref(), end: params.end.as_deref(), tz: params.tz.as_deref() };
        let resolved = state
            .rules
            .resolve_within(query, jiff::Timestamp::now(), max_days)
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let zone = resolved.zone.clone().unwrap_or_else(|| TimeZone::fixed(resolved.offset));
        if let (Some(a), Some(raw)) = (aggregation, params.interval.as_deref()) {
            a.interval
                .check_buckets(resolved.range.start, resolved.range.end, &zone, raw)
                .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        }
        Ok(Self { format, aggregation, resolved, zone })
    }
}

/// Spec 4.2 and 4.4, for `caller`, authenticated at access generation
/// `seen` or later.
async fn read(
    state: &AppState,
    caller: &Caller,
    seen: i64,
    device_id: &str,
    params: &RangeParams,
) -> Result<Response, ApiError> {
    let asked = Asked::of(state, params)?;
    match asked.aggregation {
        None => match raw(state, caller, None, seen, device_id, asked).await? {
            Windowed::Body(response) => Ok(response),
            // (Unconfirmed needs a generation to confirm; none was given.)
            Windowed::NotVisible | Windowed::Unconfirmed => Err(ApiError::DeviceNotFound),
        },
        Some(a) => aggregated(state, caller, seen, device_id, asked, a).await,
    }
}

/// A raw window as a response ([`super::hours::window`]; `confirm` and
/// `seen` as there).
/// The device and the first readings come together, so that a failing store
/// still gets a 500 rather than a cut-off 200.
async fn raw(
    state: &AppState,
    caller: &Caller,
    confirm: Option<i64>,
    seen: i64,
    device_id: &str,
    asked: Asked,
) -> Result<Windowed<Response>, ApiError> {
    let Asked { format, resolved, .. } = asked;
    let (offset, zone) = (resolved.offset, resolved.zone);
    let encoder = move |sensors: &[_]| ReadingEncoder::with_format(format, sensors, offset, zone);
    let windowed = super::hours::window(state, caller, (confirm, seen), device_id, resolved.range, encoder).await?;
    Ok(windowed.map(|body| ([(header::CONTENT_TYPE, format.content_type())], body).into_response()))
}

/// An aggregated window, batch by batch; the caller (authenticated at
/// access generation `seen` or later) checked again before each batch
/// after the first ([`Guard`]).
async fn aggregated(
    state: &AppState,
    caller: &Caller,
    seen: i64,
    device_id: &str,
    asked: Asked,
    a: Aggregation,
) -> Result<Response, ApiError> {
    let Asked { format, resolved, zone, .. } = asked;
    let aggregator = Aggregator::new(Buckets::new(a.interval, zone), a.agg);
    let window = aggregated_window(state.store.clone(), caller.scope, device_id, resolved.range, aggregator)
        .await?
        .ok_or(ApiError::DeviceNotFound)?;
    let metrics = state.metrics.clone();
    metrics.readings_served(window.first.len());
    let counts = a.agg == Agg::Count;
    let mut encoder = ReadingEncoder::with_format(format, &window.device.sensors, resolved.offset, resolved.zone)
        .with_integers(counts);
    let (content_type, tail) = (format.content_type(), encoder.end());
    if window.complete {
        // Everything is in the first batch: one body with a length, no chunks.
        let mut body = encoder.begin(&window.first);
        body.extend_from_slice(tail);
        return Ok(([(header::CONTENT_TYPE, content_type.clone())], body).into_response());
    }
    let head = Bytes::from(encoder.begin(&window.first));
    // An answer of more batches: the store's generation now holds any
    // change made while the caller was checked (the watch may not yet).
    let known = state.store.access_generation().await?;
    let guard = Guard::new(state, caller, device_id, seen.min(known)).knowing(known);
    let rest = stream::unfold((window.rest, Some(guard)), |(mut rest, guard)| async move {
        let mut guard = guard?;
        if !guard.holds().await {
            return Some((Err(Cut::Refused), (rest, None)));
        }
        let batch = rest.next().await?;
        Some((batch.map_err(Cut::from), (rest, Some(guard))))
    });
    let body = stream::once(async move { Ok::<_, std::io::Error>(head) })
        .chain(rest.map(move |batch| match batch {
            Ok(b) => {
                metrics.readings_served(b.len());
                Ok(encoder.batch(&b))
            }
            Err(cut) => Err(cut.ended()),
        }))
        .chain(stream::once(async move { Ok(Bytes::from_static(tail)) }));
    Ok(([(header::CONTENT_TYPE, content_type)], Body::from_stream(body)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Any query string: parameters or a 400 detail, and any parameters
        /// a range or a 400 detail, never a panic.
        #[test]
        fn fuzz_query_strings_never_panic(query in "\\PC{0,80}", start in "[0-9T:Z +.-]{0,26}",
                                          end in "[0-9T:Z +.-]{0,26}", tz in "[0-9:+ Z-]{0,7}") {
            let rules = sensorhub_core::time::RangeRules { default_tz: sensorhub_core::time::Zone::Fixed(jiff::tz::Offset::UTC), max_range_days: 366 };
            let _ = serde_urlencoded::from_str::<RangeParams>(&query);
            let q = sensorhub_core::time::RangeQuery { start: Some(&start), end: Some(&end), tz: Some(&tz) };
            if let Err(e) = rules.resolve(q, jiff::Timestamp::now()) {
                proptest::prop_assert!(!e.to_string().is_empty());
            }
        }
    }
}
