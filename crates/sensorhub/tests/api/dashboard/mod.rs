//! The dashboard in a real browser (headless Chromium over WebDriver)
//! against `sensorhub serve --demo`: sign-in, the stations and their map,
//! a station's charts, a year of aggregates, live updates from the webhook's
//! ingest mode, plain-word errors, the Content-Security-Policy, and no
//! console errors. The dashboard speaks only HTTP to the API, so these run
//! on SQLite; the API under it is tested on both backends elsewhere.

mod browser;

use crate::harness::ServeProcess;
use browser::Browser;
use fantoccini::Locator;

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
    let errors: Vec<_> = b.console().await.into_iter().filter(|(level, _)| level == "SEVERE").collect();
    assert!(errors.is_empty(), "console errors: {errors:?}");
}

async fn sign_in(b: &Browser, user: &str, password: &str) {
    b.until("the sign-in form", "return !!document.getElementById('username')").await;
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
    let b = Browser::start(1440, 900).await;
    b.client.goto(&format!("{}/", site.root)).await.expect("open");
    sign_in(&b, "alice", "alice-demo-password").await;
    b.until(
        "five stations with their latest values",
        "const l = document.getElementById('stations');
         return !!l && l.getAttribute('aria-busy') === 'false' && l.querySelectorAll('li.station').length === 5",
    )
    .await;
    let names = b.js("return [...document.querySelectorAll('li.station .name')].map(a => a.textContent)").await;
    for name in NAMES {
        assert!(names.as_array().expect("names").iter().any(|n| n == name), "{name} is listed: {names}");
    }
    let with_values = b.js("return [...document.querySelectorAll('li.station')].filter(li => li.querySelectorAll('.values li').length >= 4).length").await;
    assert_eq!(with_values, 5, "every station shows its latest values");
    let when = b.js("return document.querySelector('li.station .when').textContent").await;
    assert!(when.as_str().is_some_and(|w| w.contains("Last update") && w.contains("ago")), "{when}");
    assert_eq!(b.js("return document.querySelectorAll('svg.map a.marker').length").await, 5, "five markers");
    let land = b.js("return (document.querySelector('svg.map path.land')?.getAttribute('d') || '').length").await;
    assert!(land.as_u64().is_some_and(|n| n > 100), "country outlines drawn from the vendored atlas: {land}");
    assert_eq!(b.js("return document.getElementById('who').textContent").await, "alice");
    // A marker is a link to its station.
    b.client
        .find(Locator::Css("svg.map a.marker[data-device='AWS-002']"))
        .await
        .expect("marker")
        .click()
        .await
        .expect("click");
    b.until("the station page", "return location.hash.startsWith('#/station/AWS-002')").await;
    assert_no_console_errors(&b).await;
    assert_eq!(site.csp_reports().await, 0, "no Content-Security-Policy violation");
    b.finish().await;
}

#[tokio::test]
async fn a_station_page_draws_charts_and_a_year_asks_for_aggregates() {
    let site = demo_site();
    let b = Browser::start(1440, 1200).await;
    b.client.goto(&format!("{}/#key=pk-demo-alice-all&station=AWLR-001", site.root)).await.expect("open");
    b.until("today's charts", "return document.getElementById('charts')?.dataset.state === 'ready'").await;
    assert_eq!(b.js("return location.hash").await, "#/station/AWLR-001", "the key left the address bar");
    assert_eq!(b.js("return document.querySelector('h1').textContent").await, NAMES[0]);
    let figures = b.js("return [...document.querySelectorAll('figure.chart')].map(f => [f.dataset.sensor, Number(f.dataset.points)])").await;
    let figures = figures.as_array().expect("figures").clone();
    assert_eq!(figures.len(), 4, "one chart per sensor: {figures:?}");
    assert!(figures.iter().all(|f| f[1].as_u64().is_some_and(|n| n > 0)), "each chart has data points: {figures:?}");
    // uPlot painted the line: the water level's canvas has coloured pixels.
    let painted = b
        .js("const c = document.querySelector('figure[data-sensor=\"AWLR1-wl\"] canvas');
             const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
             let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n")
        .await;
    assert!(painted.as_u64().is_some_and(|n| n > 200), "the chart is drawn: {painted} painted pixels");
    assert_eq!(b.js("return document.getElementById('charts').dataset.mode").await, "raw");

    b.client.find(Locator::Css("button[data-range='1y']")).await.expect("1 year").click().await.expect("click");
    b.until(
        "a year of daily aggregates",
        "const c = document.getElementById('charts'); return c.dataset.range === '1y' && c.dataset.state === 'ready'",
    )
    .await;
    assert_eq!(b.js("return document.getElementById('charts').dataset.mode").await, "aggregate");
    let asked = b
        .js("return performance.getEntriesByType('resource').map(e => e.name).filter(n => n.includes('/devices/AWLR-001/data?'))")
        .await;
    let asked: Vec<String> =
        asked.as_array().expect("urls").iter().map(|u| u.as_str().unwrap_or_default().to_owned()).collect();
    for agg in ["mean", "min", "max"] {
        assert!(
            asked.iter().any(|u| u.contains("interval=1d") && u.contains(&format!("agg={agg}"))),
            "a daily {agg} request: {asked:?}"
        );
    }
    let days = b.js("return Number(document.querySelector('figure[data-sensor=\"AWLR1-wl\"]').dataset.points)").await;
    assert!(days.as_u64().is_some_and(|n| (35..=37).contains(&n)), "35 days of demo data, one bucket a day: {days}");

    // The CSV of the range shown, and another zone.
    b.client.find(Locator::Id("csv")).await.expect("csv").click().await.expect("click");
    b.until(
        "a CSV request",
        "return performance.getEntriesByType('resource').some(e => e.name.includes('format=csv') && e.name.includes('interval=1d'))",
    )
    .await;
    b.js("const s = document.getElementById('tz'); s.value = 'Asia/Jakarta'; s.dispatchEvent(new Event('change')); return true").await;
    b.until("the charts in Jakarta time", "return document.getElementById('charts')?.dataset.state === 'ready' && location.hash.includes('tz=Asia%2FJakarta')").await;
    let jakarta =
        b.js("return performance.getEntriesByType('resource').some(e => e.name.includes('tz=Asia%2FJakarta'))").await;
    assert_eq!(jakarta, true, "requests carry the chosen zone");
    assert_no_console_errors(&b).await;
    assert_eq!(site.csp_reports().await, 0, "no Content-Security-Policy violation");
    b.finish().await;
}

#[tokio::test]
async fn a_reading_sent_to_the_webhook_appears_live() {
    let site = demo_site();
    let b = Browser::start(390, 844).await;
    b.client.goto(&format!("{}/#key=pk-demo-alice-all&station=AWLR-001", site.root)).await.expect("open");
    b.until("the live stream", "return document.getElementById('live')?.dataset.state === 'live'").await;
    let points = "return Number(document.querySelector('figure[data-sensor=\"AWLR1-wl\"]').dataset.points)";
    let before = b.js(points).await.as_u64().expect("points");
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
    b.until(
        "the new reading on the chart",
        &format!(
            "return Number(document.querySelector('figure[data-sensor=\"AWLR1-wl\"]').dataset.points) > {before}
                && !!document.getElementById('live').dataset.last"
        ),
    )
    .await;
    assert_no_console_errors(&b).await;
    b.finish().await;
}

#[tokio::test]
async fn errors_read_in_plain_words_and_keys_see_their_stations() {
    let site = demo_site();
    let b = Browser::start(390, 844).await;
    b.client.goto(&format!("{}/", site.root)).await.expect("open");
    sign_in(&b, "alice", "not-her-password").await;
    b.until(
        "the refusal in words",
        "return document.getElementById('notice').textContent === 'The username or password is not right.'",
    )
    .await;
    // The console is really read: the refused request is in it (so the other tests' "no errors" means something).
    let console = b.console().await;
    assert!(console.iter().any(|(level, text)| level == "SEVERE" && text.contains("401")), "{console:?}");
    b.client.goto(&format!("{}/#key=pk-nope", site.root)).await.expect("open");
    b.until(
        "the key's refusal",
        "return document.getElementById('notice').textContent.startsWith('This API key is unknown or revoked')
            && !!document.getElementById('api-key')",
    )
    .await;
    b.client.goto(&format!("{}/#key=pk-demo-budi", site.root)).await.expect("open");
    b.until("budi's two stations", "return document.querySelectorAll('li.station').length === 2").await;
    // The policy is enforced and its reports reach the server: an inline script is refused and counted.
    b.js("document.body.append(Object.assign(document.createElement('script'), {textContent: 'window.ran = 1'})); return true")
        .await;
    assert_eq!(b.js("return window.ran === undefined").await, true, "an inline script does not run");
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

    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("off.db").display().to_string();
    let off = ServeProcess::start(&["--database", &db, "--no-dashboard"]);
    let root = off.base.trim_end_matches("/external/v1");
    let page = reqwest::get(format!("{root}/")).await.expect("page");
    assert_eq!(page.status(), 404);
    assert_eq!(page.text().await.expect("body"), r#"{"message":"Not Found","data":null}"#);
}
