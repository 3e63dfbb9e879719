//! Named data shapes for the storage benchmark: what real field stations
//! send, from tidy to ugly. Each profile is deterministic from its seed and
//! ends at [`END`], so its last day and last 30 days are the S1 and S2
//! windows of its first device.
//!
//! - `regular`: the fleet dataset of the other scenarios (`dataset.rs`).
//! - `stations`: 20 stations with 5 sensors at 1 minute whose values all
//!   carry three decimals (water level, battery, solar, air temperature,
//!   humidity): the shape the InfluxDB comparison (`peer`) was first run on.
//! - `field`: 12 sensors at 1 minute whose values carry 2 or 3 decimals and
//!   follow random walks with daily cycles (water level in metres to the
//!   millimetre, battery and solar voltages, air and water temperature,
//!   humidity, pressure, a rain counter that resets at midnight, wind, wind
//!   direction, signal, radiation).
//! - `irregular`: 5 of those sensors with timestamps jittered by seconds,
//!   gaps of minutes to days, bursts of 5-second readings, and readings
//!   that lack a sensor now and then.
//! - `raw`: 4 sensors whose values are arbitrary doubles with no short
//!   decimal form (a calibration's output, `x / 3`, tiny offsets).
//! - `sparse`: 100 stations at 15 minutes with 4 sensors.
//! - `wide`: 64 sensors at 1 minute (a data logger with many channels).
//! - `flatline`: 8 sensors at 1 minute that mostly repeat their last value
//!   (stuck sensors, alert levels, counters between tips), as public
//!   station archives are full of.

use crate::dataset::{self, Counts, END};
use serde_json::{Value, json};
use std::io::{self, Write};

/// The profiles, in the order the benchmark runs them.
pub const ALL: [&str; 8] = ["regular", "stations", "field", "irregular", "raw", "sparse", "wide", "flatline"];

/// A sensor: id suffix, name, type, unit, and how its values are made.
struct Channel {
    code: String,
    name: &'static str,
    kind: &'static str,
    unit: &'static str,
    signal: Signal,
}

/// How a channel's values move.
#[derive(Clone, Copy)]
enum Signal {
    /// A random walk around `base` with a daily cycle of `amplitude`,
    /// rounded to `decimals`, kept within [`lo`, `hi`].
    Walk { base: f64, amplitude: f64, step: f64, decimals: i32, lo: f64, hi: f64 },
    /// Zero at night, a daylight arch up to `peak`, with noise.
    Daylight { peak: f64, decimals: i32 },
    /// Tips of 0.2 mm during rain spells, summed since local midnight.
    RainCounter,
    /// Whole numbers between `lo` and `hi`, changing now and then.
    Steps { lo: i64, hi: i64, change: f64 },
    /// Arbitrary doubles: a walk plus tiny offsets and thirds.
    Raw,
}

fn channel(code: &str, name: &'static str, kind: &'static str, unit: &'static str, signal: Signal) -> Channel {
    Channel { code: code.to_owned(), name, kind, unit, signal }
}

/// The 12 channels of a field station.
fn field_channels() -> Vec<Channel> {
    use Signal::*;
    vec![
        channel(
            "wl",
            "Water Level",
            "FLUID_LEVEL",
            "m",
            Walk { base: 1.2, amplitude: 0.15, step: 0.004, decimals: 3, lo: 0.0, hi: 6.0 },
        ),
        channel(
            "batt",
            "Battery Voltage",
            "BATTERY",
            "V",
            Walk { base: 12.6, amplitude: 0.6, step: 0.01, decimals: 3, lo: 10.5, hi: 14.4 },
        ),
        channel("solar", "Solar Panel Voltage", "VOLTAGE", "V", Daylight { peak: 18.4, decimals: 3 }),
        channel(
            "temp",
            "Air Temperature",
            "AIR_TEMPERATURE",
            "°C",
            Walk { base: 27.0, amplitude: 4.5, step: 0.05, decimals: 2, lo: 15.0, hi: 40.0 },
        ),
        channel(
            "wtemp",
            "Water Temperature",
            "WATER_TEMPERATURE",
            "°C",
            Walk { base: 25.0, amplitude: 0.8, step: 0.01, decimals: 2, lo: 18.0, hi: 32.0 },
        ),
        channel(
            "hum",
            "Air Humidity",
            "AIR_HUMIDITY",
            "%RH",
            Walk { base: 80.0, amplitude: -12.0, step: 0.3, decimals: 2, lo: 20.0, hi: 100.0 },
        ),
        channel(
            "pres",
            "Air Pressure",
            "AIR_PRESSURE",
            "hPa",
            Walk { base: 1009.0, amplitude: 1.2, step: 0.02, decimals: 2, lo: 990.0, hi: 1030.0 },
        ),
        channel("rain", "Rainfall Today", "RAIN_FALL", "mm", RainCounter),
        channel(
            "wind",
            "Wind Speed",
            "WIND_SPEED",
            "m/s",
            Walk { base: 2.0, amplitude: 1.5, step: 0.4, decimals: 2, lo: 0.0, hi: 25.0 },
        ),
        channel(
            "wdir",
            "Wind Direction",
            "WIND_DIRECTION",
            "°",
            Walk { base: 180.0, amplitude: 40.0, step: 8.0, decimals: 1, lo: 0.0, hi: 359.9 },
        ),
        channel("sig", "Cellular Signal", "CELLULAR_SIGNAL", "dBm", Steps { lo: -109, hi: -61, change: 0.05 }),
        channel("rad", "Solar Radiation", "SOLAR_RADIATION", "W/m²", Daylight { peak: 950.0, decimals: 1 }),
    ]
}

/// One station of a profile: its id, channels and reporting pattern.
struct Series {
    id: String,
    channels: Vec<Channel>,
    /// Seconds between readings (the base interval when irregular).
    interval: i64,
    days: i64,
    irregular: bool,
    seed: u64,
}

/// A channel's state while its values are generated.
struct State {
    level: f64,
    rain: f64,
    raining: bool,
    last: Option<f64>,
}

const DAY: i64 = 86_400;

fn round(v: f64, decimals: i32) -> f64 {
    let f = 10f64.powi(decimals);
    (v * f).round() / f
}

impl Signal {
    /// The next value at second `ts` (local solar time is UTC+7).
    fn next(self, s: &mut State, ts: i64, rng: &mut fastrand::Rng) -> f64 {
        let hour = ((ts + 7 * 3600).rem_euclid(DAY)) as f64 / 3600.0;
        let cycle = ((hour - 8.0) / 24.0 * std::f64::consts::TAU).sin();
        match self {
            Signal::Walk { base, amplitude, step, decimals, lo, hi } => {
                s.level += (rng.f64() - 0.5) * step + (base - s.level) * 0.001;
                round((s.level + amplitude * cycle).clamp(lo, hi), decimals)
            }
            Signal::Daylight { peak, decimals } => {
                let sun = ((hour - 6.0) / 12.0 * std::f64::consts::PI).sin();
                if sun <= 0.0 { 0.0 } else { round(peak * sun * (0.85 + 0.15 * rng.f64()), decimals) }
            }
            Signal::RainCounter => {
                if (ts + 7 * 3600).rem_euclid(DAY) < 60 {
                    s.rain = 0.0;
                }
                if rng.f64() < if s.raining { 0.02 } else { 0.0015 } {
                    s.raining = !s.raining;
                }
                if s.raining && rng.f64() < 0.4 {
                    s.rain += 0.2;
                }
                round(s.rain, 1)
            }
            Signal::Steps { lo, hi, change } => {
                let keep = s.last.filter(|_| rng.f64() >= change);
                keep.unwrap_or_else(|| rng.i64(lo..=hi) as f64)
            }
            Signal::Raw => {
                s.level += (rng.f64() - 0.5) * 0.37;
                match rng.u8(0..3) {
                    0 => s.level / 3.0,
                    1 => s.level + rng.f64() * 1e-9,
                    _ => s.level * std::f64::consts::E,
                }
            }
        }
    }

    fn initial(self) -> f64 {
        match self {
            Signal::Walk { base, .. } => base,
            _ => 0.0,
        }
    }
}

/// The stations of `profile` with `days` of data (`regular` is not one:
/// it is [`dataset::stations`]).
fn series(profile: &str, seed: u64, days: i64) -> Option<Vec<Series>> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let station = |id: String, channels: Vec<Channel>, interval: i64, irregular: bool, rng: &mut fastrand::Rng| {
        Series { id, channels, interval, days, irregular, seed: rng.u64(..) }
    };
    let out = match profile {
        "stations" => (1..=20)
            .map(|i| {
                let channels = field_channels()
                    .into_iter()
                    .filter(|c| ["wl", "batt", "solar", "temp", "hum"].contains(&c.code.as_str()))
                    .map(|mut c| {
                        if let Signal::Walk { decimals, .. } = &mut c.signal {
                            *decimals = 3;
                        }
                        c
                    })
                    .collect();
                station(format!("STA-{i:02}"), channels, 60, false, &mut rng)
            })
            .collect(),
        "field" => (1..=4).map(|i| station(format!("FIELD-{i:02}"), field_channels(), 60, false, &mut rng)).collect(),
        "irregular" => (1..=6)
            .map(|i| {
                let channels = field_channels()
                    .into_iter()
                    .filter(|c| ["wl", "batt", "temp", "rain", "sig"].contains(&c.code.as_str()))
                    .collect();
                station(format!("IRR-{i:02}"), channels, 60, true, &mut rng)
            })
            .collect(),
        "raw" => (1..=4)
            .map(|i| {
                let channels = (0..4)
                    .map(|k| channel(&format!("cal{k}"), "Calibrated Output", "CALIBRATED", ".", Signal::Raw))
                    .collect();
                station(format!("RAW-{i:02}"), channels, 60, false, &mut rng)
            })
            .collect(),
        "sparse" => (1..=100)
            .map(|i| {
                let channels = field_channels()
                    .into_iter()
                    .filter(|c| ["wl", "batt", "sig", "rain"].contains(&c.code.as_str()))
                    .collect();
                station(format!("SPARSE-{i:03}"), channels, 900, false, &mut rng)
            })
            .collect(),
        "wide" => (1..=2)
            .map(|i| {
                let channels = (0..64)
                    .map(|k| {
                        let base = &field_channels()[k % 12];
                        channel(&format!("{}{k}", base.code), base.name, base.kind, base.unit, base.signal)
                    })
                    .collect();
                station(format!("WIDE-{i:02}"), channels, 60, false, &mut rng)
            })
            .collect(),
        "flatline" => (1..=4)
            .map(|i| {
                let channels = (0..8i64)
                    .map(|k| {
                        let signal = Signal::Steps { lo: 0, hi: 3 + k, change: 0.002 * (k + 1) as f64 };
                        channel(&format!("st{k}"), "Status Level", "ALERT_LEVEL", ".", signal)
                    })
                    .collect();
                station(format!("FLAT-{i:02}"), channels, 60, false, &mut rng)
            })
            .collect(),
        _ => return None,
    };
    Some(out)
}

/// The seconds a station reports at: every `interval`, or, when irregular,
/// jittered by up to 20 s, with gaps of minutes to days and bursts at 5 s.
fn times(s: &Series) -> Vec<i64> {
    let mut rng = fastrand::Rng::with_seed(s.seed ^ 0x5eed);
    let start = END - s.days * DAY;
    let mut out = Vec::new();
    let mut ts = start;
    let mut burst_until = i64::MIN;
    while ts <= END {
        if !s.irregular {
            out.push(ts);
            ts += s.interval;
            continue;
        }
        let jittered = (ts + rng.i64(-20..=20)).clamp(start, END);
        if out.last().is_none_or(|l| *l < jittered) {
            out.push(jittered);
        }
        if ts < burst_until {
            ts += 5;
            continue;
        }
        let roll = rng.f64();
        ts += if roll < 0.0002 {
            rng.i64(DAY..3 * DAY)
        } else if roll < 0.01 {
            rng.i64(120..1800)
        } else if roll < 0.012 {
            burst_until = ts + rng.i64(300..1200);
            5
        } else {
            s.interval
        };
    }
    out
}

/// A generated profile: its provisioning file, its first device (S1, S2)
/// and how much it holds.
pub struct Generated {
    /// The provisioning document.
    pub provision: Value,
    /// The device whose windows S1 and S2 read.
    pub device: String,
    /// Readings and values written.
    pub counts: Counts,
}

/// Writes `profile`'s readings as `sensorhub import` CSV to `csv`.
pub fn generate(profile: &str, seed: u64, days: i64, csv: &mut dyn Write) -> io::Result<Option<Generated>> {
    if profile == "regular" {
        let scale =
            dataset::Scale { name: "regular", devices: dataset::SMALL.devices, days: days.min(dataset::SMALL.days) };
        let mut stations = dataset::stations(scale, seed);
        stations[0].days = days;
        let counts = dataset::write_readings(&stations, &mut dataset::Sinks { csv: Some(csv), ..Default::default() })?;
        let provision = dataset::provision(&stations);
        return Ok(Some(Generated { provision, device: dataset::REF_DEVICE.into(), counts }));
    }
    let Some(all) = series(profile, seed, days) else { return Ok(None) };
    csv.write_all(b"device_id,timestamp,sensor_id,value\n")?;
    let mut counts = Counts::default();
    let mut text = Vec::with_capacity(32);
    for s in &all {
        let mut rng = fastrand::Rng::with_seed(s.seed);
        let mut states: Vec<State> = s
            .channels
            .iter()
            .map(|c| State { level: c.signal.initial(), rain: 0.0, raining: false, last: None })
            .collect();
        for ts in times(s) {
            text.clear();
            sensorhub_core::time::write_rfc3339(&mut text, ts, jiff::tz::Offset::UTC);
            let ts_text = std::str::from_utf8(&text).unwrap_or_default();
            counts.readings += 1;
            for (c, state) in s.channels.iter().zip(&mut states) {
                let v = c.signal.next(state, ts, &mut rng);
                state.last = Some(v);
                // An irregular station leaves a sensor out now and then.
                if s.irregular && rng.f64() < 0.03 {
                    continue;
                }
                writeln!(csv, "{},{ts_text},{}-{},{v}", s.id, s.id, c.code)?;
                counts.values += 1;
            }
        }
    }
    let devices: Vec<Value> = all
        .iter()
        .map(|s| {
            let sensors: Vec<Value> = s
                .channels
                .iter()
                .map(|c| json!({"sensor_id": format!("{}-{}", s.id, c.code), "name": c.name, "type": c.kind, "unit": c.unit}))
                .collect();
            json!({"device_id": s.id, "name": format!("Profile {profile} {}", s.id), "type": "AWS", "lat": -7.8, "long": 110.4,
                   "interval_seconds": s.interval, "sensors": sensors, "owner": dataset::BENCH_USER.0})
        })
        .collect();
    let ids: Vec<&str> = all.iter().map(|s| s.id.as_str()).collect();
    let provision = json!({
        "accounts": [{"username": dataset::BENCH_USER.0, "password": dataset::BENCH_USER.1, "devices": ids,
                      "api_keys": [{"id": dataset::BENCH_KEY}]}],
        "devices": devices
    });
    Ok(Some(Generated { provision, device: all[0].id.clone(), counts }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csv(profile: &str, seed: u64) -> (Vec<u8>, Generated) {
        let mut out = Vec::new();
        let g = generate(profile, seed, 2, &mut out).expect("in memory").expect("a profile");
        (out, g)
    }

    #[test]
    fn profiles_are_deterministic_valid_and_shaped_as_named() {
        for p in ALL {
            let (a, g) = csv(p, 42);
            assert_eq!(a, csv(p, 42).0, "{p}: the same seed gives the same bytes");
            assert_ne!(a, csv(p, 43).0, "{p}: another seed, other data");
            assert_eq!(String::from_utf8_lossy(&a).lines().count() as u64, g.counts.values + 1, "{p}");
            let mut doc: sensorhub_core::provision::Provision =
                sensorhub_core::provision::parse_json(&g.provision.to_string()).expect("parses");
            doc.check().expect("valid");
        }
        assert!(generate("nonsense", 1, 1, &mut Vec::new()).expect("io").is_none());
        // field: values with three decimals are common (millimetres, millivolts).
        let text = String::from_utf8(csv("field", 7).0).expect("utf-8");
        let three = text.lines().filter(|l| l.rsplit('.').next().is_some_and(|d| d.len() == 3)).count();
        assert!(three > text.lines().count() / 10, "{three}");
        // stations: 5 sensors, and most values carry three decimals.
        let text = String::from_utf8(csv("stations", 7).0).expect("utf-8");
        let three = text.lines().skip(1).filter(|l| l.rsplit('.').next().is_some_and(|d| d.len() == 3)).count();
        assert!(three > text.lines().count() / 2, "{three}");
        assert!(text.contains("STA-20,") && text.contains("STA-01-hum,"));
        // raw: most values have no short decimal form.
        let text = String::from_utf8(csv("raw", 7).0).expect("utf-8");
        let long = text.lines().skip(1).filter(|l| l.rsplit('.').next().is_some_and(|d| d.len() > 8)).count();
        assert!(long > text.lines().count() / 2, "{long}");
        // irregular: intervals differ.
        let text = String::from_utf8(csv("irregular", 7).0).expect("utf-8");
        let mut seconds: Vec<i64> = text
            .lines()
            .skip(1)
            .filter(|l| l.starts_with("IRR-01,"))
            .filter_map(|l| l.split(',').nth(1)?.parse::<jiff::Timestamp>().ok().map(|t| t.as_second()))
            .collect();
        seconds.dedup();
        let gaps: std::collections::BTreeSet<i64> = seconds.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.len() > 20 && gaps.contains(&5), "{gaps:?}");
    }
}
