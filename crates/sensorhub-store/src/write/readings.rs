//! The reading writer, once for every backend: readings are checked
//! against their device's sensors (looked up once per device and
//! transaction), gathered by hour, merged with the stored hours and
//! written, with the `latest` index and the outbox rows they owe, in the
//! transaction they came in.

use super::alarm_cache::AlarmCache;
use super::alarms::DeviceAlarms;
use super::tx::Tx;
use crate::alarm::AlarmEvent;
use crate::decide::latest::Newest;
use crate::decide::outbox::Deliveries;
use crate::decide::{self, DeviceSensors, FastMap, Hours};
use crate::delivery::Outbox;
use crate::sql::alarms;
use crate::{ImportReport, ReadingSource, StoreResult};
use sensorhub_core::model::ReadingInput;

/// Readings taken from an import's source at a time; after each slice a
/// batched import looks at the clock.
const IMPORT_SLICE: usize = 4096;

/// Stores readings inside one transaction; a value at an existing second
/// and sensor is replaced, the others at that second are kept.
pub(crate) struct ReadingWriter {
    devices: FastMap<String, Option<DeviceSensors>>,
    hours: Hours,
    /// The newest value of each sensor written, for the `latest` index.
    newest: Newest,
    /// Readings that were new or different from what was stored.
    changed: u64,
    /// The deliveries the readings owe.
    deliveries: Deliveries,
    /// Whether any device has alarm rules (asked once, at the first reading).
    watching: Option<bool>,
    /// When watching, each device's readings as (second, sensor idx and
    /// value pairs), in order: the alarms are moved by them at the end, a
    /// few queries for every device of the transaction.
    watched: FastMap<i64, Vec<Watched>>,
    /// When the transaction stores its readings, by the server's clock (seconds).
    now: i64,
}

/// One reading kept for the alarms: its second and its (sensor idx, value) pairs.
type Watched = (i64, Vec<(u8, f64)>);

impl ReadingWriter {
    /// A writer whose readings owe deliveries when `outbox` says so.
    pub(crate) fn new(outbox: Outbox) -> Self {
        Self {
            devices: FastMap::default(),
            hours: Hours::default(),
            newest: Newest::default(),
            changed: 0,
            deliveries: Deliveries::new(outbox),
            watching: None,
            watched: FastMap::default(),
            now: crate::decide::now(),
        }
    }

    /// Looks device `device_id` up, once per transaction.
    async fn load(&mut self, tx: &impl Tx, device_id: &str) -> StoreResult<()> {
        if !self.devices.contains_key(device_id) {
            let entry = match tx.device_pk(device_id).await? {
                Some(pk) => {
                    let mut device = DeviceSensors::new(pk, tx.device_sensors(pk).await?);
                    if self.deliveries.wanted() {
                        device.subscriptions = tx.subscriptions_of(pk).await?;
                    }
                    Some(device)
                }
                None => None,
            };
            self.devices.insert(device_id.to_owned(), entry);
        }
        Ok(())
    }

    /// Checks one reading and adds it to the hour being gathered, and to
    /// the deliveries it owes; a refused reading adds nothing.
    pub(crate) async fn write(&mut self, tx: &impl Tx, r: &ReadingInput) -> StoreResult<()> {
        self.load(tx, &r.device_id).await?;
        let device =
            self.devices.get(&r.device_id).and_then(Option::as_ref).ok_or_else(|| decide::unknown_device(r))?;
        let (pk, pairs) = (device.pk, device.values(r)?);
        self.deliveries.add(device, r)?;
        if self.hours.is_full_for(pk, r.timestamp) {
            self.flush(tx).await?;
        }
        self.newest.add(pk, r.timestamp, &pairs);
        if self.watching(tx).await? {
            self.watched.entry(pk).or_default().push((r.timestamp, pairs.clone()));
        }
        self.hours.add(pk, r.timestamp, pairs);
        Ok(())
    }

    /// Whether any device has alarm rules, asked once per transaction.
    async fn watching(&mut self, tx: &impl Tx) -> StoreResult<bool> {
        if self.watching.is_none() {
            self.watching = Some(alarms::any_rules(tx).await?);
        }
        Ok(self.watching == Some(true))
    }

    /// Moves the alarms of the devices written by their readings, in
    /// order, and writes what changed: every device's rules and states
    /// read in a few queries, every changed state written in a few.
    async fn move_alarms(&mut self, tx: &impl Tx, rules: &AlarmCache) -> StoreResult<Vec<AlarmEvent>> {
        if self.watched.is_empty() {
            return Ok(Vec::new());
        }
        let devices: FastMap<i64, (&str, &DeviceSensors)> = self
            .devices
            .iter()
            .filter_map(|(id, d)| d.as_ref().map(|d| (d.pk, (id.as_str(), d))))
            .filter(|(pk, _)| self.watched.contains_key(pk))
            .collect();
        let ids: Vec<(i64, &str)> = devices.iter().map(|(pk, (id, _))| (*pk, *id)).collect();
        let (mut loaded, marks) = DeviceAlarms::load_many(tx, rules, &ids).await?;
        for alarms in &mut loaded {
            let (Some(readings), Some((_, sensors))) = (self.watched.get(&alarms.pk()), devices.get(&alarms.pk()))
            else {
                continue;
            };
            for (timestamp, pairs) in readings {
                let value_of = |s: &str| sensors.idx(s).and_then(|i| pairs.iter().find(|(k, _)| *k == i)).map(|p| p.1);
                alarms.on_reading(*timestamp, value_of, self.now);
            }
        }
        self.watched.clear();
        super::alarms::write_all(tx, loaded, self.now, rules, marks).await
    }

    /// Merges every gathered hour with its stored row (read together) and
    /// writes the rows that change.
    async fn flush(&mut self, tx: &impl Tx) -> StoreResult<()> {
        if self.hours.is_empty() {
            return Ok(());
        }
        let rows = self.hours.take();
        let keys: Vec<(i64, i64)> = rows.iter().map(|r| (r.device_pk, r.chunk)).collect();
        let stored: FastMap<(i64, i64), Vec<u8>> =
            tx.hours(&keys).await?.into_iter().map(|r| ((r.device_pk, r.chunk), r.data)).collect();
        let mut changed = Vec::with_capacity(rows.len());
        for row in rows {
            let before = stored.get(&(row.device_pk, row.chunk)).map(Vec::as_slice);
            if let Some((row, n)) = decide::merge_hour(row, before)? {
                changed.push(row);
                self.changed += n;
            }
        }
        if !changed.is_empty() {
            tx.put_hours(&changed).await?;
        }
        Ok(())
    }

    /// Writes what is gathered, with the index and the outbox rows (sent
    /// together where the backend can), then the alarms the readings moved;
    /// returns how many readings were new or different (0 when everything
    /// was stored already) and the alarm transitions recorded.
    /// The devices' alarm rules come from `rules`.
    pub(crate) async fn finish(mut self, tx: &impl Tx, rules: &AlarmCache) -> StoreResult<(u64, Vec<AlarmEvent>)> {
        let newest = self.newest.take();
        let deliveries = std::mem::take(&mut self.deliveries.rows);
        futures_util::future::try_join3(self.flush(tx), tx.upsert_latest(&newest), tx.insert_outbox(&deliveries))
            .await?;
        let events = self.move_alarms(tx, rules).await?;
        Ok((self.changed, events))
    }
}

/// What one transaction of an import did: its report, the rest of the
/// source when there may be more, and the alarm transitions it recorded.
pub(crate) type Imported = (ImportReport, Option<ReadingSource>, Vec<AlarmEvent>);

/// Stores readings from `source` in one transaction: all of them, or with
/// `limit`, those it takes that long to write; then also returns the rest
/// of the source when there may be more.
pub(crate) async fn import(
    tx: &impl Tx,
    source: ReadingSource,
    limit: Option<std::time::Duration>,
    outbox: Outbox,
    rules: &AlarmCache,
) -> StoreResult<Imported> {
    let started = std::time::Instant::now();
    let mut report = ImportReport::default();
    let mut writer = ReadingWriter::new(outbox);
    let mut source = Some(source);
    let mut rest = None;
    while let Some(src) = source.take() {
        let (src, items) = tx.take(src, IMPORT_SLICE).await?;
        let more = items.len() == IMPORT_SLICE;
        for item in items {
            let r = item?;
            report.readings += 1;
            report.values += r.values.len() as u64;
            writer.write(tx, &r).await?;
        }
        if more && limit.is_some_and(|l| started.elapsed() >= l) {
            rest = Some(src);
        } else if more {
            source = Some(src);
        }
    }
    let (_, events) = writer.finish(tx, rules).await?;
    Ok((report, rest, events))
}

/// Stores single readings in one transaction (a group commit); each gets
/// its own outcome: a refused one is checked before anything of it is
/// gathered, so the others are stored. Also returns the alarm transitions.
pub(crate) async fn ingest_group(
    tx: &impl Tx,
    readings: &[ReadingInput],
    rules: &AlarmCache,
) -> StoreResult<(Vec<StoreResult<()>>, Vec<AlarmEvent>)> {
    let mut writer = ReadingWriter::new(Outbox::Deliver);
    let mut outcomes = Vec::with_capacity(readings.len());
    for r in readings {
        outcomes.push(writer.write(tx, r).await);
    }
    let (_, events) = writer.finish(tx, rules).await?;
    Ok((outcomes, events))
}
