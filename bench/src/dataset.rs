//! The dataset generator: a fleet of AWLR (4 sensors) and AWS (5 sensors)
//! stations at 1 to 15 minute intervals with daily cycles, noise and a few
//! gaps, plus one reference station at 1 minute over 365 days for the window
//! scenarios. Deterministic from a seed. Writes a provisioning file and the
//! readings as `sensorhub import` CSV and NDJSON and as InfluxDB line
//! protocol (precision seconds), so a peer can load the very same data.

use jiff::tz::Offset;
use sensorhub_core::simulate::{Sample, Weather};
use sensorhub_core::time::write_rfc3339;
use serde_json::json;
use std::io::{self, Write};

/// How much data: fleet size and days of readings per fleet station.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scale {
    /// Name used in paths and results.
    pub name: &'static str,
    /// Fleet stations (the reference station comes on top).
    pub devices: usize,
    /// Days of readings per fleet station.
    pub days: i64,
}

/// ~0.5 M fleet values.
pub const SMALL: Scale = Scale { name: "small", devices: 50, days: 7 };
/// ~20 M fleet values.
pub const MEDIUM: Scale = Scale { name: "medium", devices: 500, days: 30 };
/// ~100 M fleet values.
pub const LARGE: Scale = Scale { name: "large", devices: 1000, days: 74 };

impl Scale {
    /// The scale called `name`.
    pub fn named(name: &str) -> Option<Scale> {
        [SMALL, MEDIUM, LARGE].into_iter().find(|s| s.name == name)
    }
}

/// The last second of every series: 2026-01-01T00:00:00Z.
pub const END: i64 = 1_767_225_600;
/// The reference station: 1-minute interval, 365 days, 4 sensors.
pub const REF_DEVICE: &str = "REF-1MIN";
/// Days of the reference station.
pub const REF_DAYS: i64 = 365;
/// Accounts and keys of the generated provisioning file.
pub const BENCH_USER: (&str, &str) = ("bench", "bench-password");
/// An account that sees exactly 50 stations (scenario S3).
pub const FIFTY_USER: (&str, &str) = ("fifty", "fifty-password");
/// The API key of `bench` (all stations).
pub const BENCH_KEY: &str = "pk-bench-all-0123456789abcdef01234567";
/// The webhook key of `bench` (the soak's ingest).
pub const BENCH_WEBHOOK_KEY: &str = "wh-bench-0123456789abcdef0123456789ab";
/// The API key of `fifty`.
pub const FIFTY_KEY: &str = "pk-bench-fifty-0123456789abcdef012345";

/// One generated station.
#[derive(Debug, Clone, PartialEq)]
pub struct Station {
    /// Device id.
    pub id: String,
    /// Sensor id prefix.
    pub prefix: String,
    /// `AWLR` or `AWS`.
    pub kind: &'static str,
    /// Seconds between readings.
    pub interval: i64,
    /// Days of readings up to [`END`].
    pub days: i64,
    /// Seed of its noise.
    pub seed: u64,
}

const AWLR_SENSORS: [(&str, &str, &str, &str); 4] = [
    ("batt", "Battery Level", "BATTERY", "%"),
    ("sig", "Cellular Signal", "CELLULAR_SIGNAL", "dBm"),
    ("wl", "Water Level", "FLUID_LEVEL", "cm"),
    ("alert", "Flood Alert Level", "ALERT_LEVEL", "."),
];
const AWS_SENSORS: [(&str, &str, &str, &str); 5] = [
    ("batt", "Battery Level", "BATTERY", "%"),
    ("temp", "Air Temperature", "AIR_TEMPERATURE", "°C"),
    ("hum", "Air Humidity", "AIR_HUMIDITY", "%RH"),
    ("rain", "Rainfall", "RAIN_FALL", "mm"),
    ("wind", "Wind Speed", "WIND_SPEED", "m/s"),
];

impl Station {
    /// Its sensors' ids, in sensor order (the battery first).
    pub fn sensor_ids(&self) -> Vec<String> {
        self.sensors().iter().map(|(code, ..)| format!("{}-{code}", self.prefix)).collect()
    }

    fn sensors(&self) -> &'static [(&'static str, &'static str, &'static str, &'static str)] {
        if self.kind == "AWLR" { &AWLR_SENSORS } else { &AWS_SENSORS }
    }

    /// The values of one sample, in sensor order.
    fn values(&self, s: &Sample) -> Vec<f64> {
        if self.kind == "AWLR" {
            vec![s.battery, s.signal, s.water_level, s.alert]
        } else {
            vec![s.battery, s.temperature, s.humidity, s.rain, s.wind]
        }
    }
}

/// The stations of a scale: the reference station first, then the fleet.
pub fn stations(scale: Scale, seed: u64) -> Vec<Station> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut out = vec![Station {
        id: REF_DEVICE.into(),
        prefix: "REF".into(),
        kind: "AWLR",
        interval: 60,
        days: REF_DAYS,
        seed: rng.u64(..),
    }];
    for i in 1..=scale.devices {
        let kind = if rng.bool() { "AWLR" } else { "AWS" };
        // 10% at 1 minute, the rest at 5, 10 or 15 minutes.
        let interval = match rng.u8(0..10) {
            0 => 60,
            1..=3 => 300,
            4..=6 => 600,
            _ => 900,
        };
        out.push(Station {
            id: format!("{kind}-{i:04}"),
            prefix: format!("{kind}{i}"),
            kind,
            interval,
            days: scale.days,
            seed: rng.u64(..),
        });
    }
    out
}

/// The provisioning file: the stations, `bench` seeing all of them and
/// `fifty` seeing the first 50 of the fleet, each with an API key. `bench`
/// owns every station, so its webhook key may write their readings.
pub fn provision(stations: &[Station]) -> serde_json::Value {
    let devices: Vec<_> = stations
        .iter()
        .map(|s| {
            let sensors: Vec<_> = s
                .sensors()
                .iter()
                .map(|(code, name, kind, unit)| {
                    json!({"sensor_id": format!("{}-{code}", s.prefix), "name": name, "type": kind, "unit": unit})
                })
                .collect();
            json!({"device_id": s.id, "name": format!("Bench {} {}", s.kind, s.id), "type": s.kind,
                   "lat": -7.8, "long": 110.4, "interval_seconds": s.interval, "sensors": sensors,
                   "owner": BENCH_USER.0})
        })
        .collect();
    let all: Vec<&str> = stations.iter().map(|s| s.id.as_str()).collect();
    let fifty: Vec<&str> = stations.iter().skip(1).take(50).map(|s| s.id.as_str()).collect();
    json!({
        "accounts": [
            {"username": BENCH_USER.0, "password": BENCH_USER.1, "devices": all, "api_keys": [{"id": BENCH_KEY}],
             "webhook_keys": [{"key": BENCH_WEBHOOK_KEY}]},
            {"username": FIFTY_USER.0, "password": FIFTY_USER.1, "devices": fifty, "api_keys": [{"id": FIFTY_KEY}]}
        ],
        "devices": devices
    })
}

/// Where readings go; any of them may be absent.
#[derive(Default)]
pub struct Sinks<'a> {
    /// `device_id,timestamp,sensor_id,value`.
    pub csv: Option<&'a mut dyn Write>,
    /// One reading object per line.
    pub ndjson: Option<&'a mut dyn Write>,
    /// InfluxDB line protocol, seconds.
    pub influx: Option<&'a mut dyn Write>,
}

/// What was generated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Readings (device and second).
    pub readings: u64,
    /// Values.
    pub values: u64,
}

/// Writes every reading of `stations`, station by station in time order.
pub fn write_readings(stations: &[Station], sinks: &mut Sinks<'_>) -> io::Result<Counts> {
    if let Some(w) = sinks.csv.as_mut() {
        w.write_all(b"device_id,timestamp,sensor_id,value\n")?;
    }
    let mut counts = Counts::default();
    let mut ts_text = Vec::with_capacity(32);
    for station in stations {
        let start = END - station.days * 86_400;
        let mut weather = Weather::new(station.seed, station.interval);
        let mut gaps = fastrand::Rng::with_seed(station.seed ^ 0x9e37_79b9_7f4a_7c15);
        let mut gap_until = i64::MIN;
        let ids: Vec<String> =
            station.sensors().iter().map(|(code, ..)| format!("{}-{code}", station.prefix)).collect();
        let mut ts = start;
        while ts <= END {
            let sample = weather.step(ts, start);
            // Now and then a fleet station goes quiet for one to six hours
            // (the reference station never does: its windows are exact).
            if station.id != REF_DEVICE && gap_until < ts && gaps.f64() < 0.0005 * station.interval as f64 / 60.0 {
                gap_until = ts + gaps.i64(3600..6 * 3600);
            }
            if ts > gap_until {
                let values = station.values(&sample);
                ts_text.clear();
                write_rfc3339(&mut ts_text, ts, Offset::UTC);
                let ts_str = std::str::from_utf8(&ts_text).unwrap_or_default();
                write_one(sinks, station, ts, ts_str, &ids, &values)?;
                counts.readings += 1;
                counts.values += values.len() as u64;
            }
            ts += station.interval;
        }
    }
    Ok(counts)
}

fn write_one(
    sinks: &mut Sinks<'_>,
    station: &Station,
    ts: i64,
    ts_str: &str,
    ids: &[String],
    values: &[f64],
) -> io::Result<()> {
    if let Some(w) = sinks.csv.as_mut() {
        for (id, v) in ids.iter().zip(values) {
            writeln!(w, "{},{ts_str},{id},{v}", station.id)?;
        }
    }
    if let Some(w) = sinks.ndjson.as_mut() {
        write!(w, "{{\"device_id\":\"{}\",\"timestamp\":\"{ts_str}\",\"sensors\":[", station.id)?;
        for (i, (id, v)) in ids.iter().zip(values).enumerate() {
            let comma = if i > 0 { "," } else { "" };
            write!(w, "{comma}{{\"id\":\"{id}\",\"value\":{v}}}")?;
        }
        w.write_all(b"]}\n")?;
    }
    if let Some(w) = sinks.influx.as_mut() {
        write!(w, "readings,device_id={} ", station.id)?;
        for (i, (id, v)) in ids.iter().zip(values).enumerate() {
            let comma = if i > 0 { "," } else { "" };
            write!(w, "{comma}{id}={v:?}")?;
        }
        writeln!(w, " {ts}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TINY: Scale = Scale { name: "tiny", devices: 3, days: 1 };

    fn generate(seed: u64) -> (Vec<u8>, Vec<u8>, Vec<u8>, Counts) {
        // A short reference station keeps the test fast.
        let mut st = stations(TINY, seed);
        st[0].days = 1;
        let (mut csv, mut ndjson, mut influx) = (Vec::new(), Vec::new(), Vec::new());
        let mut sinks = Sinks { csv: Some(&mut csv), ndjson: Some(&mut ndjson), influx: Some(&mut influx) };
        let counts = write_readings(&st, &mut sinks).expect("in memory");
        (csv, ndjson, influx, counts)
    }

    #[test]
    fn the_same_seed_gives_the_same_bytes() {
        assert_eq!(generate(42), generate(42));
        assert_ne!(generate(42).0, generate(43).0);
        assert_eq!(stations(MEDIUM, 7), stations(MEDIUM, 7));
    }

    #[test]
    fn every_format_holds_every_value() {
        let (csv, ndjson, influx, counts) = generate(42);
        let csv = String::from_utf8(csv).expect("utf-8");
        assert_eq!(csv.lines().count() as u64, counts.values + 1, "a header and a row per value");
        assert_eq!(String::from_utf8(ndjson).expect("utf-8").lines().count() as u64, counts.readings);
        assert_eq!(String::from_utf8(influx).expect("utf-8").lines().count() as u64, counts.readings);
        let first = csv.lines().nth(1).expect("a row");
        assert!(first.starts_with("REF-1MIN,2025-12-31T00:00:00Z,REF-batt,"), "{first}");
    }

    #[test]
    fn scales_hit_their_sizes() {
        // Expected values per day of a fleet station, averaged over intervals and kinds.
        let per_day = |st: &[Station]| -> f64 {
            st.iter().skip(1).map(|s| (86_400 / s.interval) as f64 * s.sensors().len() as f64).sum()
        };
        let small = per_day(&stations(SMALL, 42)) * SMALL.days as f64;
        let medium = per_day(&stations(MEDIUM, 42)) * MEDIUM.days as f64;
        assert!((350_000.0..700_000.0).contains(&small), "{small}");
        assert!((14e6..26e6).contains(&medium), "{medium}");
    }

    #[test]
    fn the_provisioning_file_is_valid() {
        let st = stations(SMALL, 42);
        let text = provision(&st).to_string();
        let mut doc: sensorhub_core::provision::Provision =
            sensorhub_core::provision::parse_json(&text).expect("parses");
        doc.check().expect("valid");
        assert!(doc.warnings().is_empty(), "{:?}", doc.warnings());
        assert_eq!(doc.accounts[1].devices.as_ref().map(Vec::len), Some(50));
    }
}
