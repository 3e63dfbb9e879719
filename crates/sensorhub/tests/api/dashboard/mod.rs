//! The dashboard in a real browser (headless Chromium over WebDriver)
//! against `sensorhub serve --demo`: sign-in, the stations and their map,
//! a station's charts, a year of aggregates, live updates from the webhook's
//! ingest mode, plain-word errors, the Content-Security-Policy, and no
//! console errors. The dashboard speaks only HTTP to the API, so these run
//! on SQLite; the API under it is tested on both backends elsewhere.

use crate::harness::ServeProcess;
use fantoccini::Locator;
use sensorhub_browser::Browser;
use std::time::Duration;

async fn js(b: &Browser, script: &str) -> serde_json::Value {
    b.js(script).await.expect("the script runs")
}

async fn until(b: &Browser, what: &str, script: &str) {
    b.until(what, script, Duration::from_secs(15)).await.unwrap_or_else(|e| panic!("{e}"));
}

/// A demo server (ingest mode) over a database of its own.
struct Site {
    server: ServeProcess,
    /// `http://127.0.0.1:PORT`
    root: String,
    _dir: tempfile::TempDir,
}

fn demo_site() -> Site {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("demo.db").display().to_string();
    let server = ServeProcess::start(&["--database", &db, "--demo", "--webhook-mode", "ingest"]);
    let root = server.base.trim_end_matches("/external/v1").to_owned();
    Site { server, root, _dir: dir }
}

impl Site {
    /// The server's count of CSP violation reports.
    async fn csp_reports(&self) -> u64 {
        let text = reqwest::get(format!("{}/metrics", self.root)).await.expect("metrics").text().await.expect("text");
        text.lines()
            .find_map(|l| l.strip_prefix("sensorhub_dashboard_csp_reports_total "))
            .and_then(|v| v.trim().parse().ok())
            .expect("the CSP report counter")
    }
}

/// Asserts the browser logged no error (a failed request, a script error, a CSP refusal).
async fn assert_no_console_errors(b: &Browser) {
    let errors: Vec<_> =
        b.console().await.expect("the console").into_iter().filter(|(level, _)| level == "SEVERE").collect();
    assert!(errors.is_empty(), "console errors: {errors:?}");
}

/// Asserts that the session logged no error and broke no policy, then closes it.
async fn finish_clean(site: &Site, b: Browser) {
    assert_no_console_errors(&b).await;
    assert_eq!(site.csp_reports().await, 0, "no Content-Security-Policy violation");
    b.finish().await;
}

async fn sign_in(b: &Browser, user: &str, password: &str) {
    until(b, "the sign-in form", "return !!document.getElementById('username')").await;
    b.client.find(Locator::Id("username")).await.expect("username").send_keys(user).await.expect("type");
    b.client.find(Locator::Id("password")).await.expect("password").send_keys(password).await.expect("type");
    b.client.find(Locator::Id("sign-in")).await.expect("button").click().await.expect("click");
}

const NAMES: [&str; 5] = [
    "Kali Code - Jembatan Gondolayu",
    "Kali Winongo - Pakuncen",
    "Kali Gajahwong - Wonocatur",
    "Stasiun Cuaca Sleman",
    "Stasiun Cuaca Bantul",
];

#[tokio::test]
async fn signing_in_lists_the_five_stations_and_maps_them() {
    let site = demo_site();
    let b = Browser::start(1440, 900).await.expect("a browser");
    b.client.goto(&format!("{}/", site.root)).await.expect("open");
    sign_in(&b, "alice", "alice-demo-password").await;
    until(
        &b,
        "five stations with their latest values",
        "const l = document.getElementById('stations');
         return !!l && l.getAttribute('aria-busy') === 'false' && l.querySelectorAll('li.station').length === 5",
    )
    .await;
    let names = js(&b, "return [...document.querySelectorAll('li.station .name')].map(a => a.textContent)").await;
    for name in NAMES {
        assert!(names.as_array().expect("names").iter().any(|n| n == name), "{name} is listed: {names}");
    }
    let with_values = js(&b, "return [...document.querySelectorAll('li.station')].filter(li => li.querySelectorAll('.values li').length >= 4).length").await;
    assert_eq!(with_values, 5, "every station shows its latest values");
    let when = js(&b, "return document.querySelector('li.station .when').textContent").await;
    let ago = js(&b, "return document.querySelector('li.station .when .ago').textContent").await;
    assert!(when.as_str().is_some_and(|w| w.starts_with("Last update")), "{when}");
    assert!(ago.as_str().is_some_and(|a| a == "just now" || a.ends_with(" ago")), "how long ago: {ago}");
    assert_eq!(js(&b, "return document.querySelectorAll('svg.map a.marker').length").await, 5, "five markers");
    let land = js(&b, "return (document.querySelector('svg.map path.land')?.getAttribute('d') || '').length").await;
    assert!(land.as_u64().is_some_and(|n| n > 100), "country outlines drawn from the vendored atlas: {land}");
    assert_eq!(js(&b, "return document.getElementById('who').textContent").await, "alice");
    // Keyboard alone reaches a station: Tab to its first link, Enter opens it.
    let body = b.client.find(Locator::Css("body")).await.expect("body");
    let mut reached = false;
    for _ in 0..30 {
        body.send_keys("\u{E004}").await.expect("Tab");
        if js(&b, "return !!document.activeElement.closest('a.marker, li.station a.name')").await == true {
            reached = true;
            break;
        }
    }
    assert!(reached, "Tab reaches a station's link");
    let target = js(&b, "return document.activeElement.closest('a').getAttribute('href')").await;
    b.client.active_element().await.expect("focused").send_keys("\u{E007}").await.expect("Enter");
    until(&b, "the station page by keyboard", &format!("return location.hash === {target}")).await;
    b.client.goto(&format!("{}/#/", site.root)).await.expect("back");
    until(&b, "the stations again", "return document.querySelectorAll('svg.map a.marker').length === 5").await;
    // A marker is a link to its station.
    b.client
        .find(Locator::Css("svg.map a.marker[data-device='AWS-002']"))
        .await
        .expect("marker")
        .click()
        .await
        .expect("click");
    until(&b, "the station page", "return location.hash.startsWith('#/station/AWS-002')").await;
    finish_clean(&site, b).await;
}

#[tokio::test]
async fn a_station_page_draws_charts_and_a_year_asks_for_aggregates() {
    let site = demo_site();
    let b = Browser::start(1440, 1200).await.expect("a browser");
    b.client.goto(&format!("{}/#key=pk-demo-alice-all&station=AWLR-001", site.root)).await.expect("open");
    until(&b, "today's charts", "return document.getElementById('charts')?.dataset.state === 'ready'").await;
    assert_eq!(js(&b, "return location.hash").await, "#/station/AWLR-001", "the key left the address bar");
    assert_eq!(js(&b, "return document.querySelector('h1').textContent").await, NAMES[0]);
    let figures = js(
        &b,
        "return [...document.querySelectorAll('figure.chart')].map(f => [f.dataset.sensor, Number(f.dataset.points)])",
    )
    .await;
    let figures = figures.as_array().expect("figures").clone();
    assert_eq!(figures.len(), 4, "one chart per sensor: {figures:?}");
    assert!(figures.iter().all(|f| f[1].as_u64().is_some_and(|n| n > 0)), "each chart has data points: {figures:?}");
    // uPlot painted the line: the water level's canvas has coloured pixels.
    let painted = js(
        &b,
        "const c = document.querySelector('figure[data-sensor=\"AWLR1-wl\"] canvas');
             const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
             let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n",
    )
    .await;
    assert!(painted.as_u64().is_some_and(|n| n > 200), "the chart is drawn: {painted} painted pixels");
    assert_eq!(js(&b, "return document.getElementById('charts').dataset.mode").await, "raw");

    b.client.find(Locator::Css("button[data-range='1y']")).await.expect("1 year").click().await.expect("click");
    until(
        &b,
        "a year of daily aggregates",
        "const c = document.getElementById('charts'); return c.dataset.range === '1y' && c.dataset.state === 'ready'",
    )
    .await;
    assert_eq!(js(&b, "return document.getElementById('charts').dataset.mode").await, "aggregate");
    let asked = js(&b, "return performance.getEntriesByType('resource').map(e => e.name).filter(n => n.includes('/devices/AWLR-001/data?'))")
        .await;
    let asked: Vec<String> =
        asked.as_array().expect("urls").iter().map(|u| u.as_str().unwrap_or_default().to_owned()).collect();
    for agg in ["mean", "min", "max"] {
        assert!(
            asked.iter().any(|u| u.contains("interval=1d") && u.contains(&format!("agg={agg}"))),
            "a daily {agg} request: {asked:?}"
        );
    }
    let days = js(&b, "return Number(document.querySelector('figure[data-sensor=\"AWLR1-wl\"]').dataset.points)").await;
    assert!(days.as_u64().is_some_and(|n| (35..=37).contains(&n)), "35 days of demo data, one bucket a day: {days}");

    // The CSV of the range shown, and another zone.
    b.client.find(Locator::Id("csv")).await.expect("csv").click().await.expect("click");
    until(&b,
        "a CSV request",
        "return performance.getEntriesByType('resource').some(e => e.name.includes('format=csv') && e.name.includes('interval=1d'))",
    )
    .await;
    js(&b, "const s = document.getElementById('tz'); s.value = 'Asia/Jakarta'; s.dispatchEvent(new Event('change')); return true").await;
    until(&b, "the charts in Jakarta time", "return document.getElementById('charts')?.dataset.state === 'ready' && location.hash.includes('tz=Asia%2FJakarta')").await;
    let jakarta =
        js(&b, "return performance.getEntriesByType('resource').some(e => e.name.includes('tz=Asia%2FJakarta'))").await;
    assert_eq!(jakarta, true, "requests carry the chosen zone");
    finish_clean(&site, b).await;
}

#[tokio::test]
async fn a_reading_sent_to_the_webhook_appears_live() {
    let site = demo_site();
    let b = Browser::start(390, 844).await.expect("a browser");
    b.client.goto(&format!("{}/#key=pk-demo-alice-all&station=AWLR-001", site.root)).await.expect("open");
    until(
        &b,
        "today's charts and the live stream",
        "return document.getElementById('charts')?.dataset.state === 'ready'
            && document.getElementById('live').dataset.state === 'live'",
    )
    .await;
    let points = "return Number(document.querySelector('figure[data-sensor=\"AWLR1-wl\"]').dataset.points)";
    let before = js(&b, points).await.as_u64().expect("points");
    let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let posted = reqwest::Client::new()
        .post(format!("{}/webhook/sensor-data", site.server.base))
        .header("X-API-KEY", "wh-demo-alice")
        .header("Content-Type", "application/json")
        .body(format!(
            r#"{{"event":"sensor-data","device_id":"AWLR-001","timestamp":"{now}","data":{{"AWLR1-wl":432.125}}}}"#
        ))
        .send()
        .await
        .expect("post");
    assert_eq!(posted.status(), 200, "{}", posted.text().await.unwrap_or_default());
    until(
        &b,
        "the new reading on the chart",
        &format!(
            "return Number(document.querySelector('figure[data-sensor=\"AWLR1-wl\"]').dataset.points) > {before}
                && !!document.getElementById('live').dataset.last"
        ),
    )
    .await;
    finish_clean(&site, b).await;
}

#[tokio::test]
async fn errors_read_in_plain_words_and_keys_see_their_stations() {
    let site = demo_site();
    let b = Browser::start(390, 844).await.expect("a browser");
    b.client.goto(&format!("{}/", site.root)).await.expect("open");
    sign_in(&b, "alice", "not-her-password").await;
    until(
        &b,
        "the refusal in words",
        "return document.getElementById('notice').textContent === 'The username or password is not right.'",
    )
    .await;
    // The console is really read: the refused request is in it (so the other tests' "no errors" means something).
    let console = b.console().await.expect("the console");
    assert!(console.iter().any(|(level, text)| level == "SEVERE" && text.contains("401")), "{console:?}");
    b.client.goto(&format!("{}/#key=pk-nope", site.root)).await.expect("open");
    until(
        &b,
        "the key's refusal",
        "return document.getElementById('notice').textContent.startsWith('This API key is unknown or revoked')
            && !!document.getElementById('api-key')",
    )
    .await;
    b.client.goto(&format!("{}/#key=pk-demo-budi", site.root)).await.expect("open");
    until(&b, "budi's two stations", "return document.querySelectorAll('li.station').length === 2").await;
    // The policy is enforced and its reports reach the server: an inline script is refused and counted.
    js(&b, "document.body.append(Object.assign(document.createElement('script'), {textContent: 'window.ran = 1'})); return true")
        .await;
    assert_eq!(js(&b, "return window.ran === undefined").await, true, "an inline script does not run");
    let started = std::time::Instant::now();
    while site.csp_reports().await == 0 {
        assert!(started.elapsed().as_secs() < 10, "the violation was reported to the server");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    b.finish().await;
}

#[tokio::test]
async fn the_page_and_its_files_are_served_with_their_policy_and_caching() {
    let site = demo_site();
    let page = reqwest::get(format!("{}/", site.root)).await.expect("page");
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"].to_str().expect("ascii").to_owned();
    assert!(csp.contains("script-src 'self'") && !csp.contains("unsafe"), "{csp}");
    assert_eq!(page.headers()["cache-control"], "no-cache");
    let html = page.text().await.expect("html");
    let app = html.split("src=\"").find(|s| s.contains("/app.js")).and_then(|s| s.split('"').next()).expect("app.js");
    assert!(app.starts_with("/assets/") && app.len() > "/assets//app.js".len() + 8, "a hashed path: {app}");
    let js = reqwest::get(format!("{}{app}", site.root)).await.expect("app.js");
    assert_eq!(js.status(), 200);
    assert_eq!(js.headers()["cache-control"], "public, max-age=31536000, immutable");
    assert!(js.headers()["content-type"].to_str().expect("ascii").starts_with("text/javascript"));
    let stale = reqwest::get(format!("{}/assets/0000000000000000/app.js", site.root)).await.expect("old hash");
    assert_eq!(stale.status(), 404, "files of another build are not served");
    // Other methods and undecodable paths get the JSON 404 every unknown path got before the dashboard.
    let client = reqwest::Client::new();
    for (method, path) in [
        (reqwest::Method::POST, "/"),
        (reqwest::Method::PUT, app),
        (reqwest::Method::GET, "/dashboard/csp-report"),
        (reqwest::Method::GET, "/assets/%FF/app.js"),
    ] {
        let answer = client.request(method.clone(), format!("{}{path}", site.root)).send().await.expect("answer");
        assert_eq!(answer.status(), 404, "{method} {path}");
        assert_eq!(answer.text().await.expect("body"), r#"{"message":"Not Found","data":null}"#, "{method} {path}");
    }

    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("off.db").display().to_string();
    let off = ServeProcess::start(&["--database", &db, "--no-dashboard"]);
    let root = off.base.trim_end_matches("/external/v1");
    let page = reqwest::get(format!("{root}/")).await.expect("page");
    assert_eq!(page.status(), 404);
    assert_eq!(page.text().await.expect("body"), r#"{"message":"Not Found","data":null}"#);
}

/// A tile server on loopback answering every tile with one PNG pixel; counts requests.
async fn tile_server() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use base64::Engine;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let png = base64::engine::general_purpose::STANDARD
        .decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
        .expect("a PNG");
    let count = std::sync::Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    let app = axum::Router::new().fallback(move || {
        seen.fetch_add(1, Ordering::SeqCst);
        let png = png.clone();
        async move { ([("content-type", "image/png")], png) }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/{{z}}/{{x}}/{{y}}.png"), count)
}

#[tokio::test]
async fn a_configured_tile_server_draws_the_map_within_the_policy() {
    let (tiles, requests) = tile_server().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("tiles.db").display().to_string();
    let server = ServeProcess::start(&[
        "--database",
        &db,
        "--demo",
        "--dashboard-tiles",
        &tiles,
        "--dashboard-tiles-attribution",
        "© test tiles",
    ]);
    let root = server.base.trim_end_matches("/external/v1");
    let b = Browser::start(1440, 900).await.expect("a browser");
    b.client.goto(&format!("{root}/#key=pk-demo-alice-all")).await.expect("open");
    until(&b, "the tiled map", "return document.querySelectorAll('svg.map image').length > 0 && document.querySelectorAll('svg.map a.marker').length === 5").await;
    until(
        &b,
        "the tiles loaded",
        "return performance.getEntriesByType('resource').filter(e => e.initiatorType === 'image').length > 0",
    )
    .await;
    assert!(
        requests.load(std::sync::atomic::Ordering::SeqCst) > 0,
        "the browser fetched tiles from the configured server"
    );
    assert_eq!(js(&b, "return document.querySelector('.attribution').textContent").await, "© test tiles");
    assert_eq!(
        js(&b, "return document.querySelectorAll('svg.map path.land').length").await,
        0,
        "tiles replace the outlines"
    );
    assert_no_console_errors(&b).await;
    b.finish().await;
}

#[tokio::test]
async fn a_rate_limited_page_says_when_to_try_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("limited.db").display().to_string();
    let server = ServeProcess::start(&["--database", &db, "--demo", "--rate-limit", "3/minute"]);
    let root = server.base.trim_end_matches("/external/v1");
    let b = Browser::start(1440, 900).await.expect("a browser");
    // The station page takes the three requests of the minute: today's stream, the device list and today's readings.
    b.client.goto(&format!("{root}/#key=pk-demo-alice-all&station=AWLR-001")).await.expect("open");
    until(&b, "today's charts", "return document.getElementById('charts')?.dataset.state === 'ready'").await;
    b.client.find(Locator::Css("button[data-range='7d']")).await.expect("7 days").click().await.expect("click");
    until(
        &b,
        "the limit in words",
        "return /^Too many requests in a short time\\. Try again in \\d+ s\\.$/.test(document.getElementById('station-status').textContent)",
    )
    .await;
    assert_eq!(js(&b, "return document.getElementById('charts').dataset.state").await, "error");
    b.finish().await;
}

#[tokio::test]
async fn a_key_link_in_a_signed_in_tab_asks_before_switching() {
    let site = demo_site();
    let b = Browser::start(1440, 900).await.expect("a browser");
    b.client.goto(&format!("{}/", site.root)).await.expect("open");
    sign_in(&b, "alice", "alice-demo-password").await;
    until(&b, "alice's five stations", "return document.querySelectorAll('li.station').length === 5").await;
    let ask = "the question whether to switch";
    let asking = "return !!document.getElementById('switch-key') && document.activeElement.id === 'keep-session'";
    b.client.goto(&format!("{}/#key=pk-demo-budi", site.root)).await.expect("open the link");
    until(&b, ask, asking).await;
    assert_eq!(js(&b, "return location.hash").await, "#/", "the key left the address bar while asking");
    assert_eq!(js(&b, "return document.getElementById('who').textContent").await, "alice", "nothing switched yet");
    let text = js(&b, "return document.getElementById('switch-text').textContent").await;
    assert!(text.as_str().is_some_and(|t| t.contains("pk-demo-budi") && t.contains("alice")), "{text}");
    b.client.find(Locator::Id("keep-session")).await.expect("stay").click().await.expect("click");
    until(&b, "alice's stations again", "return document.querySelectorAll('li.station').length === 5").await;
    assert_eq!(js(&b, "return document.getElementById('who').textContent").await, "alice");
    // Asked again, and this time switched.
    b.client.goto(&format!("{}/#key=pk-demo-budi", site.root)).await.expect("open the link again");
    until(&b, ask, asking).await;
    b.client.find(Locator::Id("switch-key")).await.expect("switch").click().await.expect("click");
    until(&b, "budi's two stations", "return document.querySelectorAll('li.station').length === 2").await;
    assert_eq!(js(&b, "return document.getElementById('who').textContent").await, "key pk-demo-budi");
    // A link with the key already in use opens without asking.
    b.client.goto(&format!("{}/#key=pk-demo-budi&station=AWS-002", site.root)).await.expect("same key");
    until(
        &b,
        "the station without a question",
        "return location.hash.startsWith('#/station/AWS-002') && !document.getElementById('switch-key')",
    )
    .await;
    finish_clean(&site, b).await;
}

/// Posts AWLR-001's water level `level` at this second to the demo's webhook.
async fn post_level(site: &Site, level: f64) {
    let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let posted = reqwest::Client::new()
        .post(format!("{}/webhook/sensor-data", site.server.base))
        .header("X-API-KEY", "wh-demo-alice")
        .header("Content-Type", "application/json")
        .body(format!(
            r#"{{"event":"sensor-data","device_id":"AWLR-001","timestamp":"{now}","data":{{"AWLR1-wl":{level}}}}}"#
        ))
        .send()
        .await
        .expect("post");
    assert_eq!(posted.status(), 200, "{}", posted.text().await.unwrap_or_default());
}

#[tokio::test]
async fn an_alarm_is_shown_on_the_list_the_charts_and_its_page_and_acknowledged() {
    let site = demo_site();
    // The demo's bands on AWLR-001: Siaga 4 from 84, 3 from 110, 2 from 140, 1 from 180.
    post_level(&site, 150.0).await;
    let b = Browser::start(1440, 900).await.expect("a browser");
    b.client.goto(&format!("{}/", site.root)).await.expect("open");
    sign_in(&b, "alice", "alice-demo-password").await;
    until(&b, "alice's five stations", "return document.querySelectorAll('li.station').length === 5").await;
    let first = js(&b, "return document.querySelector('li.station').dataset.device").await;
    assert_eq!(first, "AWLR-001", "the station in alarm comes first");
    let badge = "document.querySelector('li.station[data-device=\"AWLR-001\"] span.alarm')";
    assert_eq!(js(&b, &format!("return {badge}.textContent")).await, "Siaga 2");
    assert_eq!(js(&b, &format!("return {badge}.classList.contains('sev-3')")).await, true, "the third of four bands");
    let colour = js(&b, &format!("return getComputedStyle({badge}).backgroundColor")).await;
    assert_eq!(colour, "rgb(254, 228, 205)", "the third band's colour");

    b.client.goto(&format!("{}/#/station/AWLR-001", site.root)).await.expect("the station");
    until(&b, "the station's charts", "return document.getElementById('charts')?.dataset.state === 'ready'").await;
    assert_eq!(
        js(&b, "return document.querySelector('figure[data-sensor=\"AWLR1-wl\"]').dataset.levels").await,
        "4",
        "its four levels drawn"
    );
    let label =
        js(&b, "return document.querySelector('figure[data-sensor=\"AWLR1-wl\"]').getAttribute('aria-label')").await;
    assert!(label.as_str().is_some_and(|l| l.contains("Siaga 1 at 180")), "{label}");
    assert!(
        js(&b, "return document.getElementById('station-alarms').textContent")
            .await
            .as_str()
            .is_some_and(|t| t.contains("Siaga 2"))
    );

    b.client.goto(&format!("{}/#/alarms", site.root)).await.expect("the alarms page");
    let item = "li.alarm-item[data-device=\"AWLR-001\"][data-rule=\"siaga\"]";
    until(&b, "the active alarm with its history", &format!("return !!document.querySelector('{item} li.transition')"))
        .await;
    b.client
        .find(Locator::Css(&format!("{item} button.acknowledge")))
        .await
        .expect("the button")
        .click()
        .await
        .expect("click");
    until(&b, "the acknowledgement", &format!("return !!document.querySelector('{item} .acknowledged')")).await;
    assert!(
        js(&b, &format!("return document.querySelector('{item} li.transition').dataset.transition")).await
            == "acknowledged",
        "the newest transition first"
    );
    finish_clean(&site, b).await;

    // A key sees the alarm, and no button.
    let b = Browser::start(390, 844).await.expect("a browser");
    b.client.goto(&format!("{}/#key=pk-demo-alice-all", site.root)).await.expect("open");
    until(&b, "the stations", "return document.querySelectorAll('li.station').length === 5").await;
    b.client.goto(&format!("{}/#/alarms", site.root)).await.expect("the alarms page");
    until(&b, "the alarm", &format!("return !!document.querySelector('{item}')")).await;
    assert_eq!(js(&b, &format!("return document.querySelectorAll('{item} button.acknowledge').length")).await, 0);
    finish_clean(&site, b).await;
}
