//! `sensorhub-bench dashboard`: the dashboard in headless Chromium against
//! a release server over the small dataset. Reported: the first load's
//! bytes on the wire (page and assets, then the API answers the stations
//! view asks for) and time to a filled stations view, and how long the
//! reference station's page takes to draw a year of daily aggregates
//! (mean, min, max: three requests) and a week of raw one-minute readings,
//! from the page asking to every chart drawn, with the drawing alone beside.
//!
//! `sensorhub-bench screenshots` writes the README's screenshots from the
//! demo at 1440 and 390 px wide.

use crate::dataset;
use crate::run::{Server, prepare};
use sensorhub_browser::Browser;
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Arguments of `dashboard`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Times each chart page is drawn (median and max are reported)
    #[arg(long, default_value_t = 10)]
    loads: usize,
    /// Where the dataset and database are kept
    #[arg(long, default_value = "bench/data")]
    data: PathBuf,
    /// Loopback port of the server
    #[arg(long, default_value_t = 18450)]
    port: u16,
}

/// Arguments of `screenshots`.
#[derive(Debug, clap::Args)]
pub struct ShotArgs {
    /// Directory the PNG files go to
    #[arg(long, default_value = "docs/screenshots")]
    out: PathBuf,
    /// Loopback port of the demo server
    #[arg(long, default_value_t = 18451)]
    port: u16,
}

const WAIT: Duration = Duration::from_secs(60);

fn sensorhub() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    Ok(exe.parent().ok_or("no binary directory")?.join("sensorhub"))
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// Median and max of `xs`.
fn summary(mut xs: Vec<f64>) -> (f64, f64) {
    xs.sort_by(f64::total_cmp);
    (xs.get(xs.len() / 2).copied().unwrap_or(f64::NAN), xs.last().copied().unwrap_or(f64::NAN))
}

/// Bytes of the first load: [page and assets, API answers], as the browser received them.
const TRANSFER: &str = "const n = performance.getEntriesByType('navigation')[0].transferSize;
    const r = performance.getEntriesByType('resource');
    const sum = (f) => r.filter(f).reduce((a, e) => a + e.transferSize, 0);
    return [n + sum(e => e.name.includes('/assets/')), sum(e => e.name.includes('/external/v1/')), performance.now()]";

/// Opens `range` of the reference station `loads` times; returns (total ms, draw ms) per load.
async fn chart_loads(b: &Browser, root: &str, query: &str, loads: usize) -> Result<Vec<(f64, f64)>, String> {
    let mut out = Vec::with_capacity(loads);
    for i in 0..loads {
        // Through another page, so that each load is a whole one.
        b.js("location.hash = '#/'; return true").await?;
        b.until("the stations view", "return !!document.getElementById('stations')", WAIT).await?;
        b.js(&format!(
            "performance.clearMeasures(); location.hash = '#/station/{}?{query}'; return true",
            dataset::REF_DEVICE
        ))
        .await?;
        b.until("the charts", "return document.getElementById('charts')?.dataset.state === 'ready'", WAIT).await?;
        let m = b
            .js("const t = performance.getEntriesByType('measure');
                 return [t.find(e => e.name.startsWith('sensorhub:charts:')).duration,
                         t.find(e => e.name.startsWith('sensorhub:draw:')).duration,
                         Number(document.querySelector('figure.chart').dataset.points)]")
            .await?;
        if i == 0 {
            eprintln!("dashboard: {root}/#/station/{}?{query}: {} points per chart", dataset::REF_DEVICE, num(&m[2]));
        }
        out.push((num(&m[0]), num(&m[1])));
    }
    Ok(out)
}

/// Runs the benchmark and prints its figures.
pub fn run(args: Args) -> Result<(), String> {
    let bin = sensorhub()?;
    let store = prepare(&bin, &args.data, dataset::SMALL, 42, None)?;
    let port = args.port;
    let mut cmd = Command::new(&bin);
    cmd.args(["serve", "--rate-limit", "off", "--listen", &format!("127.0.0.1:{port}"), "--database", &store.db])
        .env("SENSORHUB_LOG", "warn");
    let _server = Server::start(&mut cmd, port)?;
    let root = format!("http://127.0.0.1:{port}");
    runtime()?.block_on(async {
        let b = Browser::start(1440, 900).await?;
        let result = async {
            b.client.goto(&format!("{root}/#key={}", dataset::BENCH_KEY)).await.map_err(|e| e.to_string())?;
            b.until(
                "the stations view with its latest values",
                "return document.getElementById('stations')?.getAttribute('aria-busy') === 'false'",
                WAIT,
            )
            .await?;
            let t = b.js(TRANSFER).await?;
            let stations = b.js("return document.querySelectorAll('li.station').length").await?;
            // 2025 ends where the dataset does: a year of daily buckets, and its last week raw.
            let year = chart_loads(&b, &root, "range=custom&from=2025-01-01&to=2025-12-31&tz=UTC", args.loads).await?;
            let week = chart_loads(&b, &root, "range=custom&from=2025-12-25&to=2025-12-31&tz=UTC", args.loads).await?;
            let errors: Vec<_> = b.console().await?.into_iter().filter(|(level, _)| level == "SEVERE").collect();
            Ok::<_, String>((t, stations, year, week, errors))
        }
        .await;
        b.finish().await;
        let (t, stations, year, week, errors) = result?;
        let kb = |v: &Value| num(v) / 1000.0;
        println!("dashboard (headless Chromium, small dataset, {} stations, cold cache)", stations);
        println!(
            "  first load: page + assets {:.1} KB compressed (target <= 300), API answers {:.1} KB, stations view filled at {:.0} ms",
            kb(&t[0]),
            kb(&t[1]),
            num(&t[2])
        );
        for (what, loads) in [
            ("year of daily mean/min/max (365 buckets; target <= 1000 ms)", year),
            ("week of raw 1-minute readings (10,080 a chart)", week),
        ] {
            let (total, total_max) = summary(loads.iter().map(|l| l.0).collect());
            let (draw, draw_max) = summary(loads.iter().map(|l| l.1).collect());
            println!(
                "  {what}: page to drawn median {total:.0} ms (max {total_max:.0}), drawing alone median {draw:.0} ms (max {draw_max:.0}), {} loads",
                loads.len()
            );
        }
        if !errors.is_empty() {
            return Err(format!("the browser logged errors: {errors:?}"));
        }
        Ok(())
    })
}

/// Writes the README's screenshots: the stations and a station's week, at both widths.
pub fn screenshots(args: ShotArgs) -> Result<(), String> {
    let bin = sensorhub()?;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let db = dir.path().join("demo.db");
    let port = args.port;
    let mut cmd = Command::new(&bin);
    cmd.args(["serve", "--demo", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--database")
        .arg(&db)
        .env("SENSORHUB_LOG", "warn");
    let _server = Server::start(&mut cmd, port)?;
    std::fs::create_dir_all(&args.out).map_err(|e| e.to_string())?;
    let root = format!("http://127.0.0.1:{port}");
    runtime()?.block_on(async {
        for (width, height) in [(1440, 900), (390, 844)] {
            let b = Browser::start(width, height).await?;
            let shots = async {
                b.client.goto(&format!("{root}/#key=pk-demo-alice-all")).await.map_err(|e| e.to_string())?;
                b.until(
                    "the stations",
                    "return document.getElementById('stations')?.getAttribute('aria-busy') === 'false'",
                    WAIT,
                )
                .await?;
                let mut pictures =
                    vec![(format!("stations-{width}.png"), b.client.screenshot().await.map_err(|e| e.to_string())?)];
                b.js("location.hash = '#/station/AWLR-001?range=7d&tz=Asia%2FJakarta'; return true").await?;
                b.until("the charts", "return document.getElementById('charts')?.dataset.state === 'ready'", WAIT)
                    .await?;
                pictures
                    .push((format!("station-{width}.png"), b.client.screenshot().await.map_err(|e| e.to_string())?));
                Ok::<_, String>(pictures)
            }
            .await;
            b.finish().await;
            for (name, png) in shots? {
                let path = args.out.join(name);
                std::fs::write(&path, png).map_err(|e| format!("{}: {e}", path.display()))?;
                println!("wrote {}", path.display());
            }
        }
        Ok(())
    })
}
