//! Hour decisions: how a reading is checked against its device's sensors
//! and gathered by hour, how an hour merges with or is cut from what is
//! stored, upgraded, and expired.

use super::{FastMap, invalid, malformed};
use crate::chunk::{self, CHUNK_SECONDS, chunk_of};
use crate::{StoreError, StoreResult};
use sensorhub_core::model::{ReadingInput, SensorMeta};
use std::collections::BTreeMap;

/// The readings of a stored hour that fall in `range` cut out of it:
/// what remains (empty: delete the row), and the readings and values
/// removed; `None` when none of its readings is in the range.
pub(crate) fn cut_hour(
    device_pk: i64,
    chunk: i64,
    data: &[u8],
    range: sensorhub_core::time::TimeRange,
) -> StoreResult<Option<(Vec<u8>, u64, u64)>> {
    let (kept, readings, values) =
        chunk::remove_range(chunk, data, range.start, range.end).ok_or_else(|| malformed(device_pk, chunk))?;
    Ok((readings > 0).then_some((kept, readings, values)))
}

/// A stored hour of schema version 2 in the column format of version 3;
/// a row that does not decode stops the upgrade (it is never dropped).
pub(crate) fn upgrade_hour(device_pk: i64, chunk: i64, old: &[u8]) -> StoreResult<Vec<u8>> {
    let rows = crate::legacy::rows(old).ok_or_else(|| malformed(device_pk, chunk))?;
    Ok(chunk::encode(&rows))
}

/// Progress of an upgrade, logged after the first batch and then at most
/// once a second.
pub(crate) struct UpgradeLog {
    total: u64,
    done: u64,
    last: Option<std::time::Instant>,
}

impl UpgradeLog {
    /// Starts the log of an upgrade of `total` hours.
    pub(crate) fn start(total: u64) -> Self {
        if total > 0 {
            tracing::info!(hours = total, "upgrading stored readings to the column format (schema version 3)");
        }
        Self { total, done: 0, last: None }
    }

    /// Counts a committed batch of `n` hours.
    pub(crate) fn batch(&mut self, n: u64) {
        self.done += n;
        if self.last.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(1)) {
            tracing::info!(done = self.done, total = self.total, "upgraded hours");
            self.last = Some(std::time::Instant::now());
        }
    }

    /// Logs the end of the upgrade.
    pub(crate) fn finish(&self) {
        if self.total > 0 {
            tracing::info!(hours = self.done, "upgrade of stored readings finished");
        }
    }
}

/// Hours dropped or trimmed per transaction by retention, so that other
/// writers get their turn.
pub(crate) const RETENTION_BATCH: usize = 256;

/// A device's number with its own and its owner's stored retention.
pub(crate) type RetentionSettings = (i64, Option<i64>, Option<i64>);

/// The first second device readings are kept from, given the device's and
/// its owner's stored settings and the server's default; `None` keeps all.
pub(crate) fn retention_cutoff(
    device: Option<i64>,
    owner: Option<i64>,
    default: sensorhub_core::retention::Retention,
    now: i64,
) -> Option<i64> {
    use sensorhub_core::retention::Retention;
    Retention::effective(Retention::from_column(device), Retention::from_column(owner), default)
        .map(|keep| now.saturating_sub(keep))
}

/// What retention does to stored hours of a device before second `cutoff`:
/// an hour entirely before it is dropped; the hour it falls in is trimmed.
pub(crate) struct Expiry {
    pub report: crate::RetentionReport,
}

impl Expiry {
    pub(crate) fn new() -> Self {
        Self { report: crate::RetentionReport::default() }
    }

    /// The last hour dropped whole, and the hour to trim.
    pub(crate) fn hours(cutoff: i64) -> (i64, i64) {
        (chunk_of(cutoff) - 1, chunk_of(cutoff))
    }

    /// Counts an hour dropped whole.
    pub(crate) fn dropped(&mut self, device_pk: i64, chunk: i64, data: &[u8]) -> StoreResult<()> {
        self.report.readings += chunk::reading_count(data).ok_or_else(|| malformed(device_pk, chunk))?;
        self.report.bytes += data.len() as u64;
        self.report.hours_dropped += 1;
        Ok(())
    }

    /// Trims the hour `cutoff` falls in: what remains of it (empty: delete
    /// the row), or `None` when nothing in it is expired.
    pub(crate) fn trim(&mut self, device_pk: i64, data: &[u8], cutoff: i64) -> StoreResult<Option<Vec<u8>>> {
        let chunk = chunk_of(cutoff);
        if cutoff == chunk * CHUNK_SECONDS {
            return Ok(None);
        }
        let range = sensorhub_core::time::TimeRange { start: chunk * CHUNK_SECONDS, end: cutoff - 1 };
        let Some((kept, readings, _)) = cut_hour(device_pk, chunk, data, range)? else { return Ok(None) };
        self.report.readings += readings;
        self.report.bytes += (data.len() - kept.len().min(data.len())) as u64;
        self.report.hours_trimmed += 1;
        Ok(Some(kept))
    }
}

/// The hour rows that may hold readings of `range`, from first to last.
pub(crate) fn chunks_of(range: sensorhub_core::time::TimeRange) -> (i64, i64) {
    (chunk_of(range.start), chunk_of(range.end))
}

/// A device's sensors placed by idx, from (idx, sensor) rows in idx order:
/// a missing idx (a row removed by hand) holds an empty sensor, so that
/// every sensor keeps its idx and stored values stay with their sensor.
pub(crate) fn sensors_by_idx(rows: impl IntoIterator<Item = (i64, SensorMeta)>) -> Vec<SensorMeta> {
    let mut out: Vec<SensorMeta> = Vec::new();
    for (idx, s) in rows {
        let idx = usize::try_from(idx).unwrap_or(0);
        out.resize_with(idx, || SensorMeta {
            sensor_id: String::new(),
            name: String::new(),
            kind: String::new(),
            unit: String::new(),
        });
        out.push(s);
    }
    out
}

/// A device as the reading writer needs it: its number and sensors by id
/// (shared: a store keeps them between transactions).
#[derive(Clone)]
pub(crate) struct DeviceSensors {
    pub pk: i64,
    sensors: SensorTable,
    /// The enabled subscriptions that cover the device, when the write
    /// delivers (looked up once per device and transaction).
    pub subscriptions: Vec<std::sync::Arc<str>>,
}

/// A device's sensors by id: their idx and unit. Shared by every copy of
/// the device read at one generation, so that one pointer stands for
/// "these sensors" ([`DeviceSensors::table`]).
pub(crate) type SensorTable = std::sync::Arc<FastMap<String, (u8, String)>>;

impl DeviceSensors {
    /// Device `pk` with its sensors by idx.
    pub(crate) fn new(pk: i64, sensors: Vec<SensorMeta>) -> Self {
        let sensors = sensors
            .into_iter()
            .enumerate()
            .filter(|(_, s)| !s.sensor_id.is_empty())
            .map(|(idx, s)| (s.sensor_id, (idx as u8, s.unit)))
            .collect::<FastMap<_, _>>()
            .into();
        Self { pk, sensors, subscriptions: Vec::new() }
    }

    /// The idx of sensor `sensor_id`.
    pub(crate) fn idx(&self, sensor_id: &str) -> Option<u8> {
        self.sensors.get(sensor_id).map(|(idx, _)| *idx)
    }

    /// The device's sensor table: a copy of it kept (a strong reference,
    /// so its address is never reused) is the same table, by
    /// `Arc::ptr_eq`, exactly while the device was not read again.
    pub(crate) fn table(&self) -> &SensorTable {
        &self.sensors
    }

    /// The unit of sensor `sensor_id`.
    pub(crate) fn unit(&self, sensor_id: &str) -> Option<&str> {
        self.sensors.get(sensor_id).map(|(_, unit)| unit.as_str())
    }

    /// The reading's values as (sensor idx, value), or the first unknown
    /// sensor or mismatched unit.
    pub(crate) fn values(&self, r: &ReadingInput) -> StoreResult<Vec<(u8, f64)>> {
        let mut pairs = Vec::with_capacity(r.values.len());
        for (i, v) in r.values.iter().enumerate() {
            let at = || r.origin.value_at(i);
            let (idx, unit) = self.sensors.get(&*v.sensor_id).ok_or_else(|| {
                invalid(at(), format!("unknown sensor {:?} for device {:?}", v.sensor_id, r.device_id))
            })?;
            if let Some(given) = v.unit.as_deref().filter(|u| u != unit) {
                return Err(invalid(at(), format!("unit {given:?} does not match the sensor's unit {unit:?}")));
            }
            pairs.push((*idx, v.value));
        }
        Ok(pairs)
    }
}

/// The message for a reading of an unknown device.
pub(crate) fn unknown_device(r: &ReadingInput) -> StoreError {
    invalid(r.origin.device_at(), format!("unknown device {:?}", r.device_id))
}

/// Hours gathered at most before they are written out.
const MAX_PENDING_HOURS: usize = 4096;

/// One hour of one device, encoded as a stored row.
pub(crate) struct HourRow {
    pub device_pk: i64,
    pub chunk: i64,
    pub data: Vec<u8>,
}

/// One hour's readings being gathered: (sensor idx, value) pairs by second offset.
type HourReadings = BTreeMap<u16, Vec<(u8, f64)>>;

/// Readings gathered by (device, hour), so that an hour's row is read,
/// merged and written once however the input interleaves devices.
#[derive(Default)]
pub(crate) struct Hours {
    pending: FastMap<(i64, i64), HourReadings>,
}

impl Hours {
    /// Whether adding a reading of device `pk` at `ts` needs a flush first.
    pub(crate) fn is_full_for(&self, pk: i64, ts: i64) -> bool {
        self.pending.len() >= MAX_PENDING_HOURS && !self.pending.contains_key(&(pk, chunk_of(ts)))
    }

    /// Adds a reading's values; a later value for the same second and sensor wins.
    pub(crate) fn add(&mut self, pk: i64, ts: i64, pairs: Vec<(u8, f64)>) {
        let chunk = chunk_of(ts);
        let offset = (ts - chunk * CHUNK_SECONDS) as u16;
        self.pending.entry((pk, chunk)).or_default().entry(offset).or_default().extend(pairs);
    }

    /// Whether nothing is gathered.
    pub(crate) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// The gathered hours, ordered by device and hour; empties the set.
    pub(crate) fn take(&mut self) -> Vec<GatheredHour> {
        let mut hours: Vec<GatheredHour> = self
            .pending
            .drain()
            .map(|((device_pk, chunk), readings)| {
                let rows: Vec<chunk::Row> = readings
                    .into_iter()
                    .map(|(offset, mut pairs)| {
                        chunk::normalize(&mut pairs);
                        (offset, pairs)
                    })
                    .collect();
                GatheredHour { device_pk, chunk, rows }
            })
            .collect();
        hours.sort_unstable_by_key(|h| (h.device_pk, h.chunk));
        hours
    }
}

/// One hour of one device as a write gathered it: its readings in time
/// order, each normalized, not yet encoded.
pub(crate) struct GatheredHour {
    pub device_pk: i64,
    pub chunk: i64,
    pub rows: Vec<chunk::Row>,
}

/// Merges a gathered hour into the stored one, held as columns (`held`
/// is left holding the merged hour): the row to write and how many
/// readings it changes, or `None` when nothing would change.
pub(crate) fn merge_hour(hour: GatheredHour, held: &mut chunk::Columns) -> Option<(HourRow, u64)> {
    let GatheredHour { device_pk, chunk, rows } = hour;
    let changed = held.merge(rows);
    (changed > 0).then(|| (HourRow { device_pk, chunk, data: held.encode() }, changed))
}
