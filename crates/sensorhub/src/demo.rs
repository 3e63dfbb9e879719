//! The demo network around Yogyakarta: water-level (AWLR) and weather
//! (AWS) stations with 35 days of readings that follow daily cycles, two
//! accounts and their keys (`sensorhub demo`, `serve --demo`), and the
//! stations' readings as they keep coming while `serve --demo` runs. The
//! demo credentials are public: never use a demo database in production.

use sensorhub_core::alarm::{Direction, Level, RuleSpec};
use sensorhub_core::model::{DeviceSpec, Origin, ReadingInput, SensorMeta, ValueInput};
use sensorhub_core::provision::{AccountSpec, ApiKeySpec, KeyDevices, Provision, WebhookKeySpec};
use sensorhub_core::simulate::Weather;
use sensorhub_store::delivery::Outbox;
use sensorhub_store::{ImportReport, Store, StoreResult};
use std::sync::Arc;

/// Days of readings the demo holds.
pub const DAYS: i64 = 35;

/// Writes the demo into `store` when it is empty: what was written, or
/// `None` when the store held something already.
pub async fn write(store: &Arc<dyn Store>) -> StoreResult<Option<ImportReport>> {
    if !store.is_empty().await? {
        return Ok(None);
    }
    let devices = AWLR.iter().map(|s| device(s, "AWLR")).chain(AWS.iter().map(|s| device(s, "AWS"))).collect();
    let mut doc = Provision { accounts: accounts(), devices, readings: Vec::new() };
    let readings = doc.check()?;
    store.apply(doc, readings).await?;
    let now = jiff::Timestamp::now().as_second();
    Ok(Some(store.import(Box::new(readings_until(now).map(Ok)), Outbox::Skip).await?))
}

/// A station of the demo network.
struct Station {
    id: &'static str,
    prefix: &'static str,
    name: &'static str,
    lat: f64,
    long: f64,
    interval: i64,
}

const AWLR: [Station; 3] = [
    Station {
        id: "AWLR-001",
        prefix: "AWLR1",
        name: "Kali Code - Jembatan Gondolayu",
        lat: -7.7829,
        long: 110.3671,
        interval: 600,
    },
    Station {
        id: "AWLR-002",
        prefix: "AWLR2",
        name: "Kali Winongo - Pakuncen",
        lat: -7.7956,
        long: 110.3512,
        interval: 900,
    },
    Station {
        id: "AWLR-003",
        prefix: "AWLR3",
        name: "Kali Gajahwong - Wonocatur",
        lat: -7.7990,
        long: 110.4032,
        interval: 300,
    },
];

const AWS: [Station; 2] = [
    Station {
        id: "AWS-001",
        prefix: "AWS1",
        name: "Stasiun Cuaca Sleman",
        lat: -7.7156,
        long: 110.3556,
        interval: 600,
    },
    Station {
        id: "AWS-002",
        prefix: "AWS2",
        name: "Stasiun Cuaca Bantul",
        lat: -7.8881,
        long: 110.3289,
        interval: 900,
    },
];

fn sensor(prefix: &str, code: &str, name: &str, kind: &str, unit: &str) -> SensorMeta {
    SensorMeta { sensor_id: format!("{prefix}-{code}"), name: name.into(), kind: kind.into(), unit: unit.into() }
}

fn device(s: &Station, kind: &str) -> DeviceSpec {
    let p = s.prefix;
    let mut sensors = vec![
        sensor(p, "batt", "Battery Level", "BATTERY", "%"),
        sensor(p, "sig", "Cellular Signal", "CELLULAR_SIGNAL", "dBm"),
    ];
    if kind == "AWLR" {
        sensors.push(sensor(p, "wl", "Water Level", "FLUID_LEVEL", "cm"));
        sensors.push(sensor(p, "alert", "Flood Alert Level", "ALERT_LEVEL", "."));
    } else {
        sensors.push(sensor(p, "temp", "Air Temperature", "AIR_TEMPERATURE", "°C"));
        sensors.push(sensor(p, "hum", "Air Humidity", "AIR_HUMIDITY", "%RH"));
        sensors.push(sensor(p, "rain", "Rainfall", "RAIN_FALL", "mm"));
        sensors.push(sensor(p, "wind", "Wind Speed", "WIND_SPEED", "m/s"));
    }
    DeviceSpec {
        device_id: s.id.into(),
        name: s.name.into(),
        kind: kind.into(),
        lat: s.lat,
        long: s.long,
        interval_seconds: s.interval,
        sensors,
        // alice runs the stations (and may write their readings); budi only reads two of them.
        owner: Some("alice".into()),
        retention: None,
        alarms: (s.id == FLOODED).then(|| alarms(p)),
    }
}

/// The station with the demo's alarm rules, through which a flood wave
/// passes in the demo's first hours (so that a newcomer sees an alarm
/// raised, escalated through the bands and, hours later, easing).
const FLOODED: &str = "AWLR-001";

/// The demo's alarm rules, on AWLR-001: warning bands in the manner of
/// Katulampa's (set to this river's levels, so that the afternoon's high
/// water enters the first), and a silence rule of two missed reports.
fn alarms(prefix: &str) -> Vec<RuleSpec> {
    let level = |name: &str, at: f64| Level { name: name.into(), at };
    vec![
        RuleSpec {
            name: "siaga".into(),
            sensor: Some(format!("{prefix}-wl")),
            direction: Some(Direction::Above),
            levels: Some(vec![
                level("Siaga 4", 84.0),
                level("Siaga 3", 110.0),
                level("Siaga 2", 140.0),
                level("Siaga 1", 180.0),
            ]),
            deadband: Some(1.0),
            hold: Some("0s".into()),
            ..RuleSpec::default()
        },
        RuleSpec { name: "silent".into(), no_data_for: Some("20m".into()), ..RuleSpec::default() },
    ]
}

/// The demo's accounts and keys. The passwords and ids are public.
fn accounts() -> Vec<AccountSpec> {
    let all: Vec<String> = AWLR.iter().chain(&AWS).map(|s| s.id.to_owned()).collect();
    let awlr: Vec<String> = AWLR.iter().map(|s| s.id.to_owned()).collect();
    vec![
        AccountSpec {
            username: "alice".into(),
            password: Some("alice-demo-password".into()),
            devices: Some(all),
            api_keys: vec![
                ApiKeySpec { id: "pk-demo-alice-all".into(), devices: None, revoked: None },
                ApiKeySpec { id: "pk-demo-alice-awlr".into(), devices: Some(KeyDevices::Only(awlr)), revoked: None },
            ],
            webhook_keys: vec![WebhookKeySpec { key: "wh-demo-alice".into(), revoked: None }],
            ..AccountSpec::default()
        },
        AccountSpec {
            username: "budi".into(),
            password: Some("budi-demo-password".into()),
            devices: Some(vec!["AWLR-002".into(), "AWS-002".into()]),
            api_keys: vec![ApiKeySpec { id: "pk-demo-budi".into(), devices: None, revoked: None }],
            ..AccountSpec::default()
        },
    ]
}

/// The demo stations, each with whether it measures water and its simulation's seed.
fn stations() -> impl Iterator<Item = (&'static Station, bool, u64)> {
    AWLR.iter().map(|s| (s, true)).chain(AWS.iter().map(|s| (s, false))).zip(1u64..).map(|((s, w), seed)| (s, w, seed))
}

/// Every demo reading from `DAYS` days before `now` up to `now`, device by device.
fn readings_until(now: i64) -> impl Iterator<Item = ReadingInput> + Send {
    stations().collect::<Vec<_>>().into_iter().flat_map(move |(station, water, seed)| {
        let start = (now - DAYS * 86_400) / station.interval * station.interval;
        station_readings(station, water, seed, start).take_while(move |r| r.timestamp <= now)
    })
}

/// One station's readings from `start` on, one per interval, without end.
fn station_readings(
    station: &'static Station,
    water: bool,
    seed: u64,
    start: i64,
) -> impl Iterator<Item = ReadingInput> {
    let mut sim = Weather::new(seed, station.interval);
    if station.id == FLOODED {
        // 40 minutes after the demo started (`start` is DAYS before it).
        sim = sim.with_flood(start + DAYS * 86_400 + 2400);
    }
    (0..).map(move |i| start + i * station.interval).map(move |ts| {
        let p = station.prefix;
        let w = sim.step(ts, start);
        let v = |code: &str, value: f64| ValueInput { sensor_id: format!("{p}-{code}").into(), value, unit: None };
        let mut values = vec![v("batt", w.battery), v("sig", w.signal)];
        if water {
            values.push(v("wl", w.water_level));
            values.push(v("alert", w.alert));
        } else {
            values.extend([v("temp", w.temperature), v("hum", w.humidity), v("rain", w.rain), v("wind", w.wind)]);
        }
        ReadingInput { device_id: station.id.into(), timestamp: ts, values, origin: Origin::Item("demo".into()) }
    })
}

/// Whether `store` holds the demo (its public key is there): only then do
/// its stations keep reporting, never into an operator's own database.
pub async fn is_demo(store: &Arc<dyn Store>) -> bool {
    let digest = sensorhub_core::secret::key_digest("pk-demo-alice-all");
    store.api_key_auth(&digest).await.is_ok_and(|key| key.is_some())
}

/// Keeps the demo stations reporting while `serve --demo` runs: each
/// station's next reading is stored when its interval comes round, by the
/// path webhook ingest takes (live streams and subscriptions see it).
pub fn keep_reporting(store: Arc<dyn Store>) {
    let now = jiff::Timestamp::now().as_second();
    for (station, water, seed) in stations() {
        let store = store.clone();
        let start = (now - DAYS * 86_400) / station.interval * station.interval;
        tokio::spawn(async move {
            for reading in station_readings(station, water, seed, start).skip_while(|r| r.timestamp <= now) {
                let wait = reading.timestamp - jiff::Timestamp::now().as_second();
                tokio::time::sleep(std::time::Duration::from_secs(u64::try_from(wait).unwrap_or(0))).await;
                if let Err(e) = store.ingest(reading).await {
                    tracing::warn!(station = station.id, error = %e, "demo station: reading not stored");
                }
            }
        });
    }
}
