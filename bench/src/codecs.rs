//! The codec comparison of issue 12: sensorhub's stored hour format against
//! pco (Pcodec, a well-kept crate made for numeric columns), on every data
//! profile. Each profile's readings are grouped by device and hour, as the
//! store keeps them, and encoded three ways:
//! - `sensorhub`: the stored hour format (`sensorhub_store::format`);
//! - `pco/hour`: pco on the same hours, one pco chunk for the seconds and
//!   one per sensor column (no presence bitmaps: a little in pco's favour);
//! - `pco/device`: pco on each device's whole columns over all its days,
//!   the large chunks pco is built for (a bound, not a storage layout: a
//!   window would have to decode a device's whole history).
//!
//! Bytes are the encoded payloads only (no database pages); speeds are
//! values per second on one core, encoding and decoding every hour.

use crate::profiles;
use std::collections::BTreeMap;
use std::time::Instant;

/// Arguments of `codecs`.
#[derive(clap::Args)]
pub struct Args {
    /// Days of data per profile
    #[arg(long, default_value_t = 30)]
    days: i64,
    /// Profiles to compare, comma-separated, or all
    #[arg(long, default_value = "all")]
    profiles: String,
}

/// One hour: readings by second within the hour, each (sensor idx, value).
type Hour = BTreeMap<u16, Vec<(u8, f64)>>;

/// An hour's readings as the store's format takes them.
type HourReadings = Vec<(u16, Vec<(u8, f64)>)>;

/// Columns: the seconds, and each sensor's values by idx.
type Columns = (Vec<i64>, BTreeMap<u8, Vec<f64>>);

/// A profile's readings: hours by (device, hour number).
struct Grouped {
    hours: BTreeMap<(String, i64), Hour>,
    values: u64,
}

fn group(csv: &[u8]) -> Result<Grouped, String> {
    let text = std::str::from_utf8(csv).map_err(|e| e.to_string())?;
    let mut sensors: BTreeMap<String, BTreeMap<String, u8>> = BTreeMap::new();
    let mut hours: BTreeMap<(String, i64), Hour> = BTreeMap::new();
    let mut values = 0;
    for line in text.lines().skip(1) {
        let mut f = line.split(',');
        let (Some(device), Some(ts), Some(sensor), Some(value)) = (f.next(), f.next(), f.next(), f.next()) else {
            return Err(format!("bad CSV line {line:?}"));
        };
        let ts: jiff::Timestamp = ts.parse().map_err(|e| format!("{ts}: {e}"))?;
        let value: f64 = value.parse().map_err(|e| format!("{value}: {e}"))?;
        let ids = sensors.entry(device.to_owned()).or_default();
        let next = ids.len() as u8;
        let idx = *ids.entry(sensor.to_owned()).or_insert(next);
        let s = ts.as_second();
        let offset = s.rem_euclid(3600) as u16;
        hours.entry((device.to_owned(), s.div_euclid(3600))).or_default().entry(offset).or_default().push((idx, value));
        values += 1;
    }
    Ok(Grouped { hours, values })
}

/// The columns of an hour: its seconds, and each sensor's values.
fn columns(hour: &Hour) -> Columns {
    let mut cols: BTreeMap<u8, Vec<f64>> = BTreeMap::new();
    for pairs in hour.values() {
        for (idx, v) in pairs {
            cols.entry(*idx).or_default().push(*v);
        }
    }
    (hour.keys().map(|t| i64::from(*t)).collect(), cols)
}

fn pco_len<T: pco::data_types::Number>(nums: &[T]) -> Result<usize, String> {
    pco_bytes(nums).map(|b| b.len())
}

/// `nums` compressed by pco at its default level (8).
fn pco_bytes<T: pco::data_types::Number>(nums: &[T]) -> Result<Vec<u8>, String> {
    pco::standalone::simple_compress(nums, &pco::ChunkConfig::default()).map_err(|e| e.to_string())
}

/// One profile's comparison.
struct Row {
    profile: &'static str,
    values: u64,
    ours: usize,
    pco_hour: usize,
    pco_device: usize,
    ours_encode: f64,
    ours_decode: f64,
    pco_encode: f64,
    pco_decode: f64,
}

fn compare(profile: &'static str, days: i64) -> Result<Row, String> {
    let mut csv = Vec::new();
    profiles::generate(profile, 42, days, &mut csv).map_err(|e| e.to_string())?;
    let g = group(&csv)?;
    let values = g.values.max(1) as f64;

    let readings: Vec<HourReadings> =
        g.hours.values().map(|h| h.iter().map(|(t, p)| (*t, p.clone())).collect()).collect();
    let started = Instant::now();
    let encoded: Vec<Vec<u8>> = readings.iter().map(|r| sensorhub_store::format::encode_hour(r)).collect();
    let ours_encode = values / started.elapsed().as_secs_f64();
    let started = Instant::now();
    let mut decoded = 0usize;
    for data in &encoded {
        decoded += sensorhub_store::format::decode_hour(data).ok_or("an hour does not decode")?.values.len();
    }
    let ours_decode = values / started.elapsed().as_secs_f64();
    if decoded as u64 != g.values {
        return Err(format!("{profile}: {decoded} values decoded of {}", g.values));
    }

    let started = Instant::now();
    let mut pco_hours: Vec<Vec<Vec<u8>>> = Vec::with_capacity(g.hours.len());
    for hour in g.hours.values() {
        let (times, cols) = columns(hour);
        let mut parts = vec![pco_bytes(&times)?];
        for col in cols.values() {
            parts.push(pco_bytes(col)?);
        }
        pco_hours.push(parts);
    }
    let pco_encode = values / started.elapsed().as_secs_f64();
    let started = Instant::now();
    for parts in &pco_hours {
        let _: Vec<i64> = pco::standalone::simple_decompress(&parts[0]).map_err(|e| e.to_string())?;
        for p in &parts[1..] {
            let _: Vec<f64> = pco::standalone::simple_decompress(p).map_err(|e| e.to_string())?;
        }
    }
    let pco_decode = values / started.elapsed().as_secs_f64();
    let pco_hour = pco_hours.iter().flatten().map(Vec::len).sum();

    let mut devices: BTreeMap<&str, Columns> = BTreeMap::new();
    for ((device, chunk), hour) in &g.hours {
        let (times, cols) = devices.entry(device.as_str()).or_default();
        let (t, c) = columns(hour);
        times.extend(t.iter().map(|o| chunk * 3600 + o));
        for (idx, v) in c {
            cols.entry(idx).or_default().extend(v);
        }
    }
    let mut pco_device = 0;
    for (times, cols) in devices.values() {
        pco_device += pco_len(times)?;
        for col in cols.values() {
            pco_device += pco_len(col)?;
        }
    }
    Ok(Row {
        profile,
        values: g.values,
        ours: encoded.iter().map(Vec::len).sum(),
        pco_hour,
        pco_device,
        ours_encode,
        ours_decode,
        pco_encode,
        pco_decode,
    })
}

/// Runs the comparison and prints a Markdown table.
pub fn run(args: Args) -> Result<(), String> {
    let wanted: Vec<&'static str> = profiles::ALL
        .iter()
        .copied()
        .filter(|p| args.profiles == "all" || args.profiles.split(',').any(|w| w == *p))
        .collect();
    if wanted.is_empty() {
        return Err(format!("no profile named in {:?}; known: {}", args.profiles, profiles::ALL.join(", ")));
    }
    println!("codec comparison: {} days per profile, payload bytes per value; M values/s on one core", args.days);
    println!();
    println!(
        "| profile | values | sensorhub B/value | pco/hour B/value | pco/device B/value | sensorhub encode | sensorhub decode | pco/hour encode | pco/hour decode |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for p in wanted {
        let r = compare(p, args.days)?;
        let per = |b: usize| b as f64 / r.values.max(1) as f64;
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.1} | {:.1} | {:.1} | {:.1} |",
            r.profile,
            r.values,
            per(r.ours),
            per(r.pco_hour),
            per(r.pco_device),
            r.ours_encode / 1e6,
            r.ours_decode / 1e6,
            r.pco_encode / 1e6,
            r.pco_decode / 1e6
        );
    }
    Ok(())
}
