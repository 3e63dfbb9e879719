//! Readings rendered for the wire: the spec's `{"message","data"}`
//! envelope, CSV (RFC 4180: a header row of sensor ids, a row per time,
//! empty cells for missing values) or NDJSON (one `{"timestamp","sensors"}`
//! object per line), with the sensor fragments escaped once per request and
//! timestamps formatted without allocation. Values are written as the JSON
//! answer writes them, in every format.

use bytes::Bytes;
use jiff::tz::Offset;
use sensorhub_core::model::SensorMeta;
use sensorhub_core::time::Rfc3339Writer;
use sensorhub_store::{ReadingBatch, StoredValue};

/// The format of a readings answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The spec's envelope (the default).
    Json,
    /// `text/csv`, RFC 4180.
    Csv,
    /// `application/x-ndjson`.
    Ndjson,
}

impl Format {
    /// The format a request asks for: its `format` parameter (`json`,
    /// `csv`, `ndjson`), else its `Accept` header (`text/csv`,
    /// `application/x-ndjson`), else JSON.
    pub fn chosen(param: Option<&str>, accept: Option<&str>) -> Result<Format, String> {
        match param.filter(|p| !p.is_empty()) {
            Some("json") => Ok(Format::Json),
            Some("csv") => Ok(Format::Csv),
            Some("ndjson") => Ok(Format::Ndjson),
            Some(other) => Err(format!("format {other:?} is not one of json, csv, ndjson")),
            None => {
                let accepts = |media: &str| {
                    accept.is_some_and(|a| {
                        a.split(',').any(|m| m.split(';').next().is_some_and(|t| t.trim().eq_ignore_ascii_case(media)))
                    })
                };
                Ok(if accepts("text/csv") {
                    Format::Csv
                } else if accepts("application/x-ndjson") {
                    Format::Ndjson
                } else {
                    Format::Json
                })
            }
        }
    }

    /// The answer's `Content-Type`.
    pub fn content_type(self) -> axum::http::HeaderValue {
        match self {
            Format::Json => super::error::JSON,
            Format::Csv => axum::http::HeaderValue::from_static("text/csv; charset=utf-8"),
            Format::Ndjson => axum::http::HeaderValue::from_static("application/x-ndjson"),
        }
    }
}

/// A CSV field: as it is, or quoted with its quotes doubled when it holds a
/// comma, a quote or a line break (RFC 4180).
fn csv_field(text: &str, out: &mut Vec<u8>) {
    if text.contains([',', '"', '\r', '\n']) {
        out.push(b'"');
        out.extend_from_slice(text.replace('"', "\"\"").as_bytes());
        out.push(b'"');
    } else {
        out.extend_from_slice(text.as_bytes());
    }
}

/// Renders readings in a [`Format`].
pub struct ReadingEncoder {
    format: Format,
    /// The CSV header row.
    header: Vec<u8>,
    /// The sensor idx of each CSV column.
    columns: Vec<usize>,
    /// `{"id":"…","value":` per sensor idx.
    before: Vec<Vec<u8>>,
    /// `,"unit":"…"}` per sensor idx.
    after: Vec<Vec<u8>>,
    time: Rfc3339Writer,
    first: bool,
    /// Values are counts, written as integers (`5`, not `5.0`).
    integers: bool,
    /// The time zone as a [`Shape`] names it; `None` for a zone without
    /// an IANA name.
    tz_key: Option<Vec<u8>>,
}

/// How an encoder renders a reading: its format, time zone and sensor
/// fragments, as bytes (compared whole) and their hash (a map key). Two
/// encoders with equal shapes render the same readings to the same bytes.
#[derive(Debug, Clone)]
pub struct Shape {
    /// Hash of `bytes`.
    pub id: u64,
    /// Format, integers, zone or offset, and each sensor's fragments.
    pub bytes: std::sync::Arc<[u8]>,
}

impl PartialEq for Shape {
    fn eq(&self, other: &Shape) -> bool {
        self.id == other.id && (std::sync::Arc::ptr_eq(&self.bytes, &other.bytes) || self.bytes == other.bytes)
    }
}

impl ReadingEncoder {
    /// An encoder for a device's sensors, rendering times in `offset`, or
    /// in a named `zone`'s offset at each instant.
    pub fn new(sensors: &[SensorMeta], offset: Offset, zone: Option<jiff::tz::TimeZone>) -> Self {
        Self::with_format(Format::Json, sensors, offset, zone)
    }

    /// [`ReadingEncoder::new`] for any format.
    pub fn with_format(
        format: Format,
        sensors: &[SensorMeta],
        offset: Offset,
        zone: Option<jiff::tz::TimeZone>,
    ) -> Self {
        let json = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
        // CSV columns: every sensor of the device, in its order (an idx
        // left empty by a removed sensor row has none).
        let columns: Vec<usize> = (0..sensors.len()).filter(|i| !sensors[*i].sensor_id.is_empty()).collect();
        let mut header = b"timestamp".to_vec();
        for &i in &columns {
            header.push(b',');
            csv_field(&sensors[i].sensor_id, &mut header);
        }
        header.extend_from_slice(b"\r\n");
        let mut enc = Self {
            format,
            header,
            columns,
            // An idx left empty by a removed sensor row renders nothing
            // (an empty `before`), as it has no CSV column.
            before: sensors
                .iter()
                .map(|s| match s.sensor_id.is_empty() {
                    true => Vec::new(),
                    false => format!("{{\"id\":{},\"value\":", json(&s.sensor_id)).into_bytes(),
                })
                .collect(),
            after: sensors.iter().map(|s| format!(",\"unit\":{}}}", json(&s.unit)).into_bytes()).collect(),
            time: Rfc3339Writer::new(offset),
            first: true,
            integers: false,
            tz_key: None,
        };
        enc.tz_key = match zone {
            Some(zone) => {
                let key = zone.iana_name().map(|name| [b"z", name.as_bytes()].concat());
                enc.time = Rfc3339Writer::in_zone(zone);
                key
            }
            None => Some([&b"o"[..], &offset.seconds().to_le_bytes()].concat()),
        };
        enc
    }

    /// The encoder writing its values as integers: counts (`agg=count`).
    pub fn with_integers(mut self, integers: bool) -> Self {
        self.integers = integers;
        self
    }

    /// How this encoder renders a reading; `None` when that cannot be
    /// named (a zone without an IANA name).
    pub fn shape(&self) -> Option<Shape> {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        let mut bytes = vec![self.format as u8, u8::from(self.integers)];
        bytes.extend_from_slice(self.tz_key.as_ref()?);
        for (before, after) in self.before.iter().zip(&self.after) {
            bytes.push(0);
            bytes.extend_from_slice(before);
            bytes.push(0);
            bytes.extend_from_slice(after);
        }
        let id = BuildHasherDefault::<DefaultHasher>::default().hash_one(&bytes);
        Some(Shape { id, bytes: bytes.into() })
    }

    /// What the answer starts with: the envelope's head (JSON), the header
    /// row (CSV), nothing (NDJSON).
    pub fn head(&self) -> &[u8] {
        match self.format {
            Format::Json => b"{\"message\":\"Success\",\"data\":[",
            Format::Csv => &self.header,
            Format::Ndjson => b"",
        }
    }

    /// What goes between two non-empty [`ReadingEncoder::piece`]s: a comma
    /// in JSON, nothing in the line formats.
    pub fn separator(&self) -> &'static [u8] {
        match self.format {
            Format::Json => b",",
            Format::Csv | Format::Ndjson => b"",
        }
    }

    /// `batch` rendered on its own, as if it came first: pieces joined by
    /// [`ReadingEncoder::separator`] after [`ReadingEncoder::head`] and
    /// before [`ReadingEncoder::end`] are the answer for their readings.
    pub fn piece(&mut self, batch: &ReadingBatch) -> Vec<u8> {
        let mut out = Vec::new();
        self.begin_piece();
        self.append(batch, &mut out);
        out
    }

    /// Begins a piece to [`ReadingEncoder::append`] batches to: batches
    /// appended in turn until the next begin are one piece, as if they were
    /// one batch.
    pub fn begin_piece(&mut self) {
        self.first = true;
    }

    /// Appends `batch` to the piece being written in `out`.
    pub fn append(&mut self, batch: &ReadingBatch, out: &mut Vec<u8>) {
        out.reserve(self.size_hint(batch));
        self.write_batch(batch, out);
    }

    /// Appends `value` as the answer writes it.
    fn write_value(&self, value: StoredValue, out: &mut Vec<u8>) {
        match value {
            StoredValue::Decimal { n, k: 0 } if self.integers => {
                out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
            }
            v => v.write_json(out),
        }
    }

    /// The start of the answer with the first batch: the envelope's head
    /// (JSON) or the header row (CSV).
    pub fn begin(&mut self, first: &ReadingBatch) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + self.header.len() + self.size_hint(first));
        out.extend_from_slice(self.head());
        self.write_batch(first, &mut out);
        out
    }

    /// The end of the answer: the envelope's tail (JSON), else nothing.
    pub fn end(&self) -> &'static [u8] {
        match self.format {
            Format::Json => b"]}",
            Format::Csv | Format::Ndjson => b"",
        }
    }

    /// One batch of readings, comma-separated from the previous ones.
    pub fn batch(&mut self, batch: &ReadingBatch) -> Bytes {
        let mut out = Vec::with_capacity(self.size_hint(batch));
        self.write_batch(batch, &mut out);
        Bytes::from(out)
    }

    /// Bytes `batch` will take, a little over, so that the buffer never grows.
    fn size_hint(&self, batch: &ReadingBatch) -> usize {
        let widest = match self.format {
            Format::Csv => 1,
            _ => self.before.iter().zip(&self.after).map(|(b, a)| b.len() + a.len()).max().unwrap_or(0),
        };
        // {"timestamp":"…+07:00","sensors":[…]}, and per value its fragments and up to 24 digits.
        batch.len() * 56 + batch.values.len() * (widest + 25) + 2
    }

    fn write_batch(&mut self, batch: &ReadingBatch, out: &mut Vec<u8>) {
        if self.format == Format::Csv {
            return self.write_csv(batch, out);
        }
        let mut values = batch.values.iter();
        for (&ts, &mask) in batch.timestamps.iter().zip(&batch.masks) {
            if !self.first && self.format == Format::Json {
                out.push(b',');
            }
            self.first = false;
            out.extend_from_slice(b"{\"timestamp\":\"");
            self.time.write(out, ts);
            out.extend_from_slice(b"\",\"sensors\":[");
            let mut m = mask;
            let mut comma = false;
            while m != 0 {
                let idx = m.trailing_zeros() as usize;
                m &= m - 1;
                let Some(value) = values.next() else { break };
                let (Some(before), Some(after)) = (self.before.get(idx), self.after.get(idx)) else { continue };
                if before.is_empty() {
                    continue;
                }
                if comma {
                    out.push(b',');
                }
                comma = true;
                out.extend_from_slice(before);
                self.write_value(*value, out);
                out.extend_from_slice(after);
            }
            out.extend_from_slice(b"]}");
            if self.format == Format::Ndjson {
                out.push(b'\n');
            }
        }
    }

    fn write_csv(&mut self, batch: &ReadingBatch, out: &mut Vec<u8>) {
        let mut values = batch.values.iter();
        let mut row: Vec<Option<StoredValue>> = vec![None; self.before.len()];
        for (&ts, &mask) in batch.timestamps.iter().zip(&batch.masks) {
            row.iter_mut().for_each(|cell| *cell = None);
            let mut m = mask;
            while m != 0 {
                let idx = m.trailing_zeros() as usize;
                m &= m - 1;
                let Some(value) = values.next() else { break };
                if let Some(cell) = row.get_mut(idx) {
                    *cell = Some(*value);
                }
            }
            self.time.write(out, ts);
            for &i in &self.columns {
                out.push(b',');
                if let Some(v) = row[i] {
                    self.write_value(v, out);
                }
            }
            out.extend_from_slice(b"\r\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_readings_like_serde_would() {
        let sensors = vec![
            SensorMeta { sensor_id: "A-b\"q".into(), name: "n".into(), kind: "BATTERY".into(), unit: "%".into() },
            SensorMeta { sensor_id: "A-x".into(), name: "n".into(), kind: "X".into(), unit: ".".into() },
        ];
        let mut enc = ReadingEncoder::new(&sensors, Offset::constant(7), None);
        let values = vec![
            StoredValue::Decimal { n: 925, k: 1 },
            StoredValue::Decimal { n: 100, k: 0 },
            StoredValue::Float(-1e-7),
        ];
        let batch = ReadingBatch { timestamps: vec![0, 60], masks: vec![0b11, 0b10], values };
        let mut text = enc.begin(&batch);
        text.extend_from_slice(b"]}");
        let parsed: serde_json::Value = serde_json::from_slice(&text).expect("valid JSON");
        assert_eq!(
            parsed,
            serde_json::json!({"message": "Success", "data": [
                {"timestamp": "1970-01-01T07:00:00+07:00", "sensors": [
                    {"id": "A-b\"q", "value": 92.5, "unit": "%"}, {"id": "A-x", "value": 100.0, "unit": "."}]},
                {"timestamp": "1970-01-01T07:01:00+07:00", "sensors": [{"id": "A-x", "value": -1e-7, "unit": "."}]}
            ]})
        );
        assert!(String::from_utf8_lossy(&text).contains("\"value\":100.0,"));

        let mut csv = ReadingEncoder::with_format(Format::Csv, &sensors, Offset::constant(7), None);
        let text = String::from_utf8(csv.begin(&batch)).expect("utf-8");
        assert_eq!(
            text,
            "timestamp,\"A-b\"\"q\",A-x\r\n1970-01-01T07:00:00+07:00,92.5,100.0\r\n1970-01-01T07:01:00+07:00,,-1e-7\r\n"
        );
        let mut nd = ReadingEncoder::with_format(Format::Ndjson, &sensors, Offset::constant(7), None);
        let text = String::from_utf8(nd.begin(&batch)).expect("utf-8");
        let lines: Vec<serde_json::Value> =
            text.lines().map(|l| serde_json::from_str(l).expect("a JSON object per line")).collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(
            lines[1],
            serde_json::json!({"timestamp": "1970-01-01T07:01:00+07:00", "sensors": [{"id": "A-x", "value": -1e-7, "unit": "."}]})
        );
    }

    #[test]
    fn a_position_left_by_a_removed_sensor_renders_nothing() {
        let meta = |id: &str| SensorMeta { sensor_id: id.into(), name: "n".into(), kind: "T".into(), unit: "u".into() };
        let sensors = vec![meta("a"), meta(""), meta("c")];
        let values = vec![StoredValue::Float(1.5), StoredValue::Float(2.5), StoredValue::Float(3.5)];
        let batch = ReadingBatch { timestamps: vec![0], masks: vec![0b111], values };
        let mut enc = ReadingEncoder::new(&sensors, Offset::UTC, None);
        let mut text = enc.begin(&batch);
        text.extend_from_slice(b"]}");
        let parsed: serde_json::Value = serde_json::from_slice(&text).expect("valid JSON");
        assert_eq!(
            parsed["data"][0]["sensors"],
            serde_json::json!([{"id": "a", "value": 1.5, "unit": "u"}, {"id": "c", "value": 3.5, "unit": "u"}])
        );
        let mut csv = ReadingEncoder::with_format(Format::Csv, &sensors, Offset::UTC, None);
        let text = String::from_utf8(csv.begin(&batch)).expect("utf-8");
        assert_eq!(text, "timestamp,a,c\r\n1970-01-01T00:00:00Z,1.5,3.5\r\n");
    }

    #[test]
    fn formats_come_from_the_parameter_then_accept() {
        assert_eq!(Format::chosen(None, None), Ok(Format::Json));
        assert_eq!(Format::chosen(Some("csv"), Some("application/json")), Ok(Format::Csv));
        assert_eq!(Format::chosen(None, Some("text/html, text/CSV;q=0.9")), Ok(Format::Csv));
        assert_eq!(Format::chosen(None, Some("application/x-ndjson")), Ok(Format::Ndjson));
        assert_eq!(Format::chosen(None, Some("*/*")), Ok(Format::Json));
        assert_eq!(Format::chosen(Some(""), None), Ok(Format::Json));
        assert!(Format::chosen(Some("xml"), None).is_err_and(|e| e.starts_with("format \"xml\"")));
    }
}
