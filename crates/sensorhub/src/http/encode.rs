//! Readings rendered for the wire: the spec's `{"message","data"}`
//! envelope, with the sensor fragments escaped once per request and
//! timestamps formatted without allocation.

use bytes::Bytes;
use jiff::tz::Offset;
use sensorhub_core::model::SensorMeta;
use sensorhub_core::time::Rfc3339Writer;
use sensorhub_store::ReadingBatch;

/// Renders readings as JSON with the sensor fragments escaped once per
/// request and timestamps formatted without allocation.
pub struct ReadingEncoder {
    /// `{"id":"…","value":` per sensor idx.
    before: Vec<Vec<u8>>,
    /// `,"unit":"…"}` per sensor idx.
    after: Vec<Vec<u8>>,
    time: Rfc3339Writer,
    first: bool,
}

impl ReadingEncoder {
    /// An encoder for a device's sensors, rendering times in `offset`, or
    /// in a named `zone`'s offset at each instant.
    pub fn new(sensors: &[SensorMeta], offset: Offset, zone: Option<jiff::tz::TimeZone>) -> Self {
        let json = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
        Self {
            before: sensors
                .iter()
                .map(|s| format!("{{\"id\":{},\"value\":", json(&s.sensor_id)).into_bytes())
                .collect(),
            after: sensors.iter().map(|s| format!(",\"unit\":{}}}", json(&s.unit)).into_bytes()).collect(),
            time: zone.map_or_else(|| Rfc3339Writer::new(offset), Rfc3339Writer::in_zone),
            first: true,
        }
    }

    /// The start of the envelope with the first batch.
    pub fn begin(&mut self, first: &ReadingBatch) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + self.size_hint(first));
        out.extend_from_slice(b"{\"message\":\"Success\",\"data\":[");
        self.write_batch(first, &mut out);
        out
    }

    /// One batch of readings, comma-separated from the previous ones.
    pub fn batch(&mut self, batch: &ReadingBatch) -> Bytes {
        let mut out = Vec::with_capacity(self.size_hint(batch));
        self.write_batch(batch, &mut out);
        Bytes::from(out)
    }

    /// Bytes `batch` will take, a little over, so that the buffer never grows.
    fn size_hint(&self, batch: &ReadingBatch) -> usize {
        let widest = self.before.iter().zip(&self.after).map(|(b, a)| b.len() + a.len()).max().unwrap_or(0);
        // {"timestamp":"…+07:00","sensors":[…]}, and per value its fragments and up to 24 digits.
        batch.len() * 56 + batch.values.len() * (widest + 25) + 2
    }

    fn write_batch(&mut self, batch: &ReadingBatch, out: &mut Vec<u8>) {
        let mut values = batch.values.iter();
        for (&ts, &mask) in batch.timestamps.iter().zip(&batch.masks) {
            if !self.first {
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
                if comma {
                    out.push(b',');
                }
                comma = true;
                out.extend_from_slice(before);
                value.write_json(out);
                out.extend_from_slice(after);
            }
            out.extend_from_slice(b"]}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_readings_like_serde_would() {
        use sensorhub_store::StoredValue;
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
    }
}
