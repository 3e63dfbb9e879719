//! `sensorhub import FILE`: load readings from NDJSON (one reading object per
//! line) or CSV (`device_id,timestamp,sensor_id,value` with a header row),
//! in short transactions (or, with `--atomic`, one), streaming the file
//! rather than holding it in memory.

use super::progress::{CountingReader, Progress, Unit};
use super::{CliResult, Context};
use sensorhub_core::model::{Origin, ReadingInput, ValueInput, is_valid_identifier};
use sensorhub_core::provision::{InputError, ReadingSpec, parse_json_at};
use sensorhub_core::time::parse_reading_timestamp;
use sensorhub_store::delivery::Outbox;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// File formats `import` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One JSON reading per line: {"device_id","timestamp","sensors":[{"id","value"}]}
    Ndjson,
    /// device_id,timestamp,sensor_id,value with a header row
    Csv,
}

/// Arguments of `import`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The file to import
    file: PathBuf,
    /// Format; by default from the extension (.csv, otherwise NDJSON)
    #[arg(long, value_enum)]
    format: Option<Format>,
    /// All or nothing: one transaction for the whole file (which holds the
    /// database's writes for as long as the import runs). By default the
    /// import commits every half second, so that the service's own writes
    /// get their turn, and an error keeps what was committed before it.
    #[arg(long)]
    atomic: bool,
    /// Deliver the imported readings to the webhook subscriptions that
    /// cover their devices, as if they had just arrived (by default an
    /// import is history and delivers nothing)
    #[arg(long)]
    deliver: bool,
    /// The Redis the serving instances share (their --rate-limit-store):
    /// the imported readings are sent to their open live streams
    #[arg(long, env = "SENSORHUB_RATE_LIMIT_STORE")]
    rate_limit_store: Option<crate::config::Url>,
    /// Prefix of sensorhub's Redis keys, as the servers have it [default: sensorhub]
    #[arg(long, env = "SENSORHUB_REDIS_PREFIX")]
    redis_prefix: Option<String>,
}

/// `store`, publishing what it imports to the servers' live streams when
/// they share a Redis (flag, environment or config file); without one, a
/// server's streams do not see this process's writes.
fn publishing(
    store: std::sync::Arc<dyn sensorhub_store::Store>,
    ctx: &Context,
    args: &Args,
) -> CliResult<std::sync::Arc<dyn sensorhub_store::Store>> {
    let url = args.rate_limit_store.as_ref().map(|u| u.0.clone()).or_else(|| ctx.file.rate_limit_store.clone());
    let Some(url) = url.filter(|u| u.starts_with("redis://")) else { return Ok(store) };
    let prefix = args.redis_prefix.as_ref().or(ctx.file.redis_prefix.as_ref());
    let prefix = prefix.map_or(crate::config::serve::DEFAULT_REDIS_PREFIX, String::as_str);
    let redis = std::sync::Arc::new(crate::redis_client::SharedRedis::new(&url, prefix)?);
    let hub = crate::live::LiveHub::new(Some(redis), std::sync::Arc::new(crate::metrics::Metrics::default()));
    store.observe(std::sync::Arc::new(crate::live::Publisher(hub)));
    Ok(store)
}

/// Imports the file and reports the rate.
pub async fn run(ctx: &Context, args: Args) -> CliResult {
    let format = args.format.unwrap_or_else(|| guess_format(&args.file));
    let name = args.file.display().to_string();
    let file = File::open(&args.file).map_err(|e| format!("cannot read {name}: {e}"))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let store = publishing(ctx.open().await?, ctx, &args)?;
    let started = Instant::now();
    let progress = Progress::start("import", size, Unit::Bytes);
    let file = CountingReader::new(file, progress.counter());
    let source: sensorhub_store::ReadingSource = match format {
        Format::Ndjson => Box::new(ndjson_readings(BufReader::with_capacity(1 << 20, file))),
        Format::Csv => Box::new(CsvReadings::new(BufReader::with_capacity(1 << 20, file))),
    };
    let source = sensorhub_store::read_ahead(source);
    let outbox = if args.deliver { Outbox::Deliver } else { Outbox::Skip };
    let report = if args.atomic {
        store.import(source, outbox).await.map_err(|e| format!("{name}: {e}; nothing was imported"))?
    } else {
        store.import_batched(source, outbox).await.map_err(|p| match p.committed.readings {
            0 => format!("{name}: {}; nothing was imported", p.error),
            n => format!(
                "{name}: {}; the {n} readings ({} values) before it were imported and kept \
                 (run it again once the file is fixed: a repeated reading replaces itself; \
                 --atomic imports all or nothing)",
                p.error, p.committed.values
            ),
        })?
    };
    drop(progress);
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    let rows = if format == Format::Csv { report.values } else { report.readings };
    println!(
        "imported {} readings ({} values) from {name} in {secs:.2} s: {:.0} rows/s, {:.0} values/s",
        report.readings,
        report.values,
        rows as f64 / secs,
        report.values as f64 / secs
    );
    Ok(())
}

fn guess_format(path: &Path) -> Format {
    match path.extension().and_then(|e| e.to_str()) {
        Some(ext) if ext.eq_ignore_ascii_case("csv") => Format::Csv,
        _ => Format::Ndjson,
    }
}

/// Readings of an NDJSON stream; blank lines are skipped.
pub fn ndjson_readings(reader: impl BufRead + Send) -> impl Iterator<Item = Result<ReadingInput, InputError>> + Send {
    reader.lines().enumerate().filter_map(|(i, line)| {
        let at = format!("line {}", i + 1);
        match line {
            Err(e) => Some(Err(InputError::new(at, e.to_string()))),
            Ok(l) if l.trim().is_empty() => None,
            Ok(l) => Some(parse_json_at::<ReadingSpec>(&l, i + 1).and_then(|r| r.into_input(&at))),
        }
    })
}

/// Readings of a CSV stream. Rows of the same device and timestamp on
/// consecutive lines become one reading; a later value for the same sensor
/// replaces an earlier one, as a later import would.
pub struct CsvReadings<R: std::io::Read> {
    rows: csv::Reader<R>,
    record: csv::StringRecord,
    pending: Option<ReadingInput>,
    /// Timestamp text and line of the last row added to `pending`.
    pending_ts: String,
    pending_line: u64,
    /// Each sensor id seen, shared by every value of that sensor.
    sensor_ids: SensorIds,
    checked_header: bool,
    done: bool,
}

impl<R: std::io::Read> CsvReadings<R> {
    /// Reads CSV from `reader`.
    pub fn new(reader: R) -> Self {
        Self {
            // Fields are trimmed where they are read: the csv crate's own
            // trimming rebuilds each record, the import's largest cost.
            rows: csv::ReaderBuilder::new().has_headers(true).from_reader(reader),
            record: csv::StringRecord::new(),
            pending: None,
            pending_ts: String::new(),
            pending_line: 0,
            sensor_ids: SensorIds::default(),
            checked_header: false,
            done: false,
        }
    }

    fn check_header(&mut self) -> Result<(), InputError> {
        let header = self.rows.headers().map_err(|e| InputError::new("line 1", e.to_string()))?;
        let want = ["device_id", "timestamp", "sensor_id", "value"];
        if header.iter().map(str::trim).ne(want) {
            return Err(InputError::new("line 1", "the header must be device_id,timestamp,sensor_id,value"));
        }
        Ok(())
    }

    fn step(&mut self) -> Result<Option<ReadingInput>, InputError> {
        if !self.checked_header {
            self.checked_header = true;
            self.check_header()?;
        }
        loop {
            match self.rows.read_record(&mut self.record) {
                Ok(false) => return Ok(self.pending.take()),
                Ok(true) => {}
                Err(e) => {
                    let at = e.position().map_or_else(|| "line ?".to_owned(), |p| format!("line {}", p.line()));
                    return Err(InputError::new(at, e.to_string()));
                }
            }
            let line = self.record.position().map_or(0, |p| p.line());
            let field = |i: usize| self.record.get(i).map_or("", str::trim);
            let r = [field(0), field(1), field(2), field(3)];
            let value: f64 = r[3].parse().ok().filter(|v: &f64| v.is_finite()).ok_or_else(|| {
                InputError::new(format!("line {line}"), format!("value {:?} is not a finite number", r[3]))
            })?;
            let value = ValueInput { sensor_id: self.sensor_ids.get(r[2]), value, unit: None };
            let follows = line == self.pending_line + 1;
            self.pending_line = line;
            // Rows of the same reading follow each other: compare before allocating.
            // A sensor given again at the same instant (a logger whose clock
            // stopped repeats its time) starts a reading of its own, which
            // the store merges into the last sensor by sensor (the later
            // value wins), so that a run of such rows is never held in
            // memory as one reading.
            if let Some(p) = self.pending.as_mut().filter(|p| follows && p.device_id == r[0] && self.pending_ts == r[1])
                && !p.values.iter().any(|v| v.sensor_id == value.sensor_id)
            {
                p.values.push(value);
                continue;
            }
            if !is_valid_identifier(r[0]) {
                return Err(InputError::new(
                    format!("line {line}"),
                    format!("device_id {:?} is not a device id", r[0]),
                ));
            }
            let timestamp = parse_reading_timestamp(r[1])
                .map_err(|e| InputError::new(format!("line {line}"), e.to_string()))?
                .as_second();
            let next = ReadingInput {
                device_id: r[0].to_owned(),
                timestamp,
                values: vec![value],
                origin: Origin::Lines(line),
            };
            self.pending_ts.clear();
            self.pending_ts.push_str(r[1]);
            if let Some(done) = self.pending.replace(next) {
                return Ok(Some(done));
            }
        }
    }
}

/// Sensor ids as shared strings, one allocation per distinct id: a file
/// of millions of values names a few hundred sensors, and each value's id
/// is then a reference count rather than a string allocated here and
/// freed on the writing thread.
#[derive(Default)]
struct SensorIds(std::collections::HashMap<Box<str>, std::sync::Arc<str>>);

impl SensorIds {
    /// Ids kept at most; past it the map starts again (a file naming more
    /// sensors than that still imports, with an allocation per new id).
    const KEPT: usize = 65_536;

    fn get(&mut self, id: &str) -> std::sync::Arc<str> {
        if let Some(shared) = self.0.get(id) {
            return shared.clone();
        }
        if self.0.len() >= Self::KEPT {
            self.0.clear();
        }
        let shared: std::sync::Arc<str> = id.into();
        self.0.insert(id.into(), shared.clone());
        shared
    }
}

impl<R: std::io::Read> Iterator for CsvReadings<R> {
    type Item = Result<ReadingInput, InputError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.step().transpose();
        if !matches!(item, Some(Ok(_))) {
            self.done = true;
        }
        item
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Any bytes as NDJSON or CSV give readings or line-numbered errors, never a panic.
        #[test]
        fn fuzz_import_formats_never_panic(data in proptest::collection::vec(proptest::num::u8::ANY, 0..1024)) {
            for r in ndjson_readings(&data[..]).take(64) {
                if let Err(e) = r { proptest::prop_assert!(!e.to_string().is_empty()); }
            }
            for r in CsvReadings::new(&data[..]).take(64) {
                if let Err(e) = r { proptest::prop_assert!(!e.to_string().is_empty()); }
            }
        }

        /// Lines shaped like real imports, with their fields garbled.
        #[test]
        fn fuzz_import_lines_shaped_like_readings(device in "[A-Z0-9-]{0,8}", ts in "[0-9T:Z+.-]{0,28}",
                                                  id in "[a-zA-Z0-9-]{0,8}", value in "[0-9eE.+-]{0,12}") {
            let ndjson = format!("{{\"device_id\":\"{device}\",\"timestamp\":\"{ts}\",\"sensors\":[{{\"id\":\"{id}\",\"value\":{value}}}]}}\n");
            let _ = ndjson_readings(ndjson.as_bytes()).count();
            let csv = format!("device_id,timestamp,sensor_id,value\n{device},{ts},{id},{value}\n");
            let _ = CsvReadings::new(csv.as_bytes()).count();
        }
    }

    #[test]
    fn a_csv_device_id_that_no_device_can_have_is_refused_by_its_line() {
        let text = "device_id,timestamp,sensor_id,value\nD,2026-05-05T00:00:00Z,a,1\nD\0x,2026-05-05T00:01:00Z,a,1\n";
        let got: Vec<_> = CsvReadings::new(text.as_bytes()).collect();
        let e = got.last().and_then(|r| r.as_ref().err()).expect("refused");
        assert_eq!(e.position, "line 3", "{e}");
    }

    #[test]
    fn csv_groups_rows_of_one_instant() {
        let text = "device_id,timestamp,sensor_id,value\nD,2026-05-05T00:00:00Z,a,1\nD,2026-05-05T00:00:00Z,b,2\nD,2026-05-05T00:01:00Z,a,3\n";
        let got: Vec<_> = CsvReadings::new(text.as_bytes()).collect::<Result<_, _>>().expect("valid");
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].values.len(), 2);
        assert_eq!(got[1].values[0].value, 3.0);
        assert_eq!(got[1].origin, Origin::Lines(4));
        assert_eq!(got[0].origin.value_at(1), "line 3");
        let (first, again) = (&got[0].values[0].sensor_id, &got[1].values[0].sensor_id);
        assert_eq!((&**first, &**again), ("a", "a"));
        assert!(std::sync::Arc::ptr_eq(first, again), "one allocation per sensor id, shared by its values");
    }

    #[test]
    fn a_stopped_clock_makes_readings_of_one_value_each_not_one_of_every_row() {
        let mut text = "device_id,timestamp,sensor_id,value\n".to_owned();
        for n in 0..1000 {
            text.push_str(&format!("D,2026-05-05T00:00:00Z,a,{n}\nD,2026-05-05T00:00:00Z,b,{n}\n"));
        }
        let got: Vec<_> = CsvReadings::new(text.as_bytes()).collect::<Result<_, _>>().expect("valid");
        assert_eq!(got.len(), 1000, "a reading for each repeat of a sensor");
        assert!(got.iter().all(|r| r.values.len() == 2), "each holds a sensor once");
        assert_eq!((got[999].values[0].value, got[999].origin.value_at(1)), (999.0, "line 2001".to_owned()));
    }

    #[test]
    fn csv_errors_name_the_line() {
        let text = "device_id,timestamp,sensor_id,value\nD,2026-05-05T00:00:00Z,a,1\nD,2026-05-05T00:01:00Z,a,x\n";
        let err = CsvReadings::new(text.as_bytes()).find_map(Result::err).expect("error");
        assert_eq!(err.position, "line 3");
        let text = "device_id,timestamp,sensor_id,value\nD,2026-05-05T00:00:00Z,a,1\nD,2026-05-05T00:01:00Z,a,1,5\n";
        let err = CsvReadings::new(text.as_bytes()).find_map(Result::err).expect("error");
        assert_eq!(err.position, "line 3");
        let err = CsvReadings::new("a,b\n".as_bytes()).find_map(Result::err).expect("error");
        assert_eq!(err.position, "line 1");
        let text = "device_id,timestamp,sensor_id,value\nD,yesterday,a,1\n";
        let err = CsvReadings::new(text.as_bytes()).find_map(Result::err).expect("error");
        assert_eq!(err.position, "line 2");
    }

    #[test]
    fn ndjson_skips_blank_lines_and_names_bad_ones() {
        let text = "{\"device_id\":\"D\",\"timestamp\":\"2026-05-05T00:00:00Z\",\"sensors\":[{\"id\":\"a\",\"value\":1}]}\n\n{oops}\n";
        let got: Vec<_> = ndjson_readings(text.as_bytes()).collect();
        assert_eq!(got.len(), 2);
        assert!(got[0].is_ok());
        assert!(matches!(&got[1], Err(e) if e.position == "line 3 column 2"), "{:?}", got[1]);
    }
}
