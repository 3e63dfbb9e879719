//! The dashboard: its files, embedded in the binary, served at `/` (the
//! page, never cached) and under `/assets/<hash>/` (cached for a year: the
//! hash of all the files is in the path), with a strict
//! Content-Security-Policy whose violation reports are counted.

use super::AppState;
use super::error::ApiError;
use super::ratelimit::ClientAddress;
use crate::config::dashboard::DashboardSettings;
use crate::limiter::memory::MemoryLimiter;
use crate::limiter::{Limiter, Quota};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// One embedded file.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

macro_rules! asset {
    ($path:literal, $type:expr) => {
        Asset { path: $path, content_type: $type, bytes: include_bytes!(concat!("../../dashboard/", $path)) }
    };
}

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// Every file under `/assets/<hash>/`.
const ASSETS: &[Asset] = &[
    asset!("alarms.js", JS),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("chart.js", JS),
    asset!("format.js", JS),
    asset!("live.js", JS),
    asset!("map.js", JS),
    asset!("station.js", JS),
    asset!("stations.js", JS),
    asset!("style.css", CSS),
    asset!("icon.svg", "image/svg+xml"),
    asset!("vendor/uPlot.iife.min.js", JS),
    asset!("vendor/uPlot.min.css", CSS),
    asset!("vendor/topojson-client.min.js", JS),
    asset!("vendor/countries-110m.json", "application/json"),
];

/// The page, with `{{assets}}`, `{{tiles}}` and `{{attribution}}` to fill.
const INDEX: &str = include_str!("../../dashboard/index.html");

/// Largest CSP report accepted (a larger one is refused with 413).
const REPORT_LIMIT: usize = 16 * 1024;

/// CSP reports one client address may send a minute; past it, 429 (a page
/// that breaks its policy reports a few times per load, not more).
pub const REPORTS_PER_MINUTE: u32 = 10;

/// The dashboard as served: the page, its assets' path prefix, its policy.
pub struct Dashboard {
    index: Bytes,
    prefix: String,
    csp: HeaderValue,
    /// Second of the last CSP report logged (one a minute at most).
    last_report_logged: AtomicI64,
    /// CSP reports per client address.
    reports: Arc<MemoryLimiter>,
}

impl Dashboard {
    /// The dashboard for `settings`.
    pub fn new(settings: &DashboardSettings) -> Self {
        let mut hash = Sha256::new();
        for a in ASSETS {
            hash.update(a.path.as_bytes());
            hash.update((a.bytes.len() as u64).to_le_bytes());
            hash.update(a.bytes);
        }
        let digest = hash.finalize();
        let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
        let prefix = format!("/assets/{hex}");
        let tiles = settings.tiles.as_ref();
        let index = INDEX
            .replace("{{assets}}", &prefix)
            .replace("{{tiles}}", &attribute(tiles.map_or("", |t| t.template.as_str())))
            .replace("{{attribution}}", &attribute(settings.tiles_attribution.as_deref().unwrap_or("")));
        let img = tiles.map_or_else(|| "'self'".to_owned(), |t| format!("'self' {}", t.origin));
        let csp = format!(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src {img}; connect-src 'self'; \
             base-uri 'none'; form-action 'none'; frame-ancestors 'none'; report-uri /dashboard/csp-report"
        );
        Self {
            index: Bytes::from(index),
            prefix,
            // The origin was checked to hold only host characters.
            csp: HeaderValue::from_str(&csp).unwrap_or(HeaderValue::from_static("default-src 'none'")),
            last_report_logged: AtomicI64::new(0),
            reports: super::memory_limiter(Quota { count: REPORTS_PER_MINUTE, period: Duration::from_secs(60) }),
        }
    }

    /// `/assets/<hash>`, where the page finds its files.
    pub fn assets_prefix(&self) -> &str {
        &self.prefix
    }
}

/// `text` escaped for an HTML attribute value.
fn attribute(text: &str) -> String {
    text.replace('&', "&amp;").replace('"', "&quot;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The dashboard's routes. Another method on them, or a path that does not
/// decode, is the 404 every unknown path gets, as before the dashboard.
pub fn router(dashboard: Arc<Dashboard>) -> Router<AppState> {
    let page = dashboard.clone();
    let files = dashboard.clone();
    let not_found = || async { ApiError::NotFound };
    Router::new()
        .route("/", get(move || async move { index(&page) }).fallback(not_found))
        .route(
            "/assets/{hash}/{*file}",
            get(move |path: Result<Path<(String, String)>, PathRejection>| async move {
                match path {
                    Ok(Path((hash, file))) => asset(&files, &hash, &file),
                    Err(_) => ApiError::NotFound.into_response(),
                }
            })
            .fallback(not_found),
        )
        .route(
            "/dashboard/csp-report",
            post(move |state: State<AppState>, ClientAddress(address): ClientAddress, body: Bytes| async move {
                csp_report(&dashboard, &state, address, &body).await
            })
            .fallback(not_found)
            .layer(DefaultBodyLimit::max(REPORT_LIMIT)),
        )
}

fn index(d: &Dashboard) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8")),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (header::CONTENT_SECURITY_POLICY, d.csp.clone()),
            (header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
            (header::REFERRER_POLICY, HeaderValue::from_static("no-referrer")),
            (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        ],
        Body::from(d.index.clone()),
    )
        .into_response()
}

fn asset(d: &Dashboard, hash: &str, file: &str) -> Response {
    let found = d.prefix.strip_prefix("/assets/") == Some(hash);
    match ASSETS.iter().find(|a| found && a.path == file) {
        Some(a) => (
            [
                (header::CONTENT_TYPE, HeaderValue::from_static(a.content_type)),
                (header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=31536000, immutable")),
                (header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
            ],
            Body::from(Bytes::from_static(a.bytes)),
        )
            .into_response(),
        // An old page asking for files of an earlier build, or a wrong path.
        None => ApiError::NotFound.into_response(),
    }
}

/// Counts a CSP violation the browser reports, and logs one a minute;
/// 429 past [`REPORTS_PER_MINUTE`] from the client's address.
async fn csp_report(d: &Dashboard, state: &AppState, address: [u8; 32], body: &[u8]) -> Response {
    let decision = d.reports.check(&address).await;
    if !decision.allowed {
        state.metrics.rate_limited("csp");
        let mut res = ApiError::TooManyRequests.into_response();
        res.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(decision.retry_after_secs));
        return res;
    }
    state.metrics.dashboard_csp_report();
    let now = jiff::Timestamp::now().as_second();
    let last = d.last_report_logged.load(Ordering::Relaxed);
    if now - last >= 60
        && d.last_report_logged.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    {
        // Debug-quoted: a report is the client's text and must not forge log lines.
        let text: String = String::from_utf8_lossy(body).chars().take(1000).collect();
        tracing::warn!(report = ?text, "a browser reported a Content-Security-Policy violation on the dashboard");
    }
    StatusCode::NO_CONTENT.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_the_page_and_modules_name_is_embedded() {
        let d = Dashboard::new(&DashboardSettings::default());
        let page = String::from_utf8(d.index.to_vec()).expect("utf-8");
        for a in ASSETS.iter().filter(|a| a.path.ends_with(".js")) {
            let text = std::str::from_utf8(a.bytes).expect("utf-8");
            for line in text.lines().filter(|l| l.starts_with("import ")) {
                let name = line.rsplit("'./").next().and_then(|s| s.split('\'').next()).expect("an import path");
                assert!(ASSETS.iter().any(|x| x.path == name), "{} imports {name}, which is not embedded", a.path);
            }
        }
        for part in page.split(&format!("{}/", d.prefix)).skip(1) {
            let name = part.split('"').next().expect("a quoted path");
            assert!(ASSETS.iter().any(|x| x.path == name), "the page names {name}, which is not embedded");
        }
        assert!(!page.contains("{{"), "every placeholder is filled");
        assert!(!page.contains("<script>") && !page.contains("style="), "no inline script or style");
    }
}
