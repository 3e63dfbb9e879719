//! The reading writer, once for every backend: readings are checked
//! against their device's sensors (looked up once per device and
//! transaction), gathered by hour, merged with the stored hours and
//! written, with the `latest` index and the outbox rows they owe, in the
//! transaction they came in.

use super::Kept;
use super::alarm_cache::Marks;
use super::device_alarms::DeviceAlarms;
use super::subscription_cache;
use super::tx::Tx;
use crate::alarm::AlarmEvent;
use crate::chunk::chunk_of;
use crate::decide::latest::Newest;
use crate::decide::outbox::Deliveries;
use crate::decide::{self, DeviceSensors, FastMap, Hours};
use crate::delivery::Outbox;
use crate::group::Single;
use crate::sql::alarms;
use crate::{Generations, ImportReport, ReadingSource, StoreError, StoreResult};
use sensorhub_core::model::ReadingInput;

/// Readings taken from an import's source at a time; after each slice a
/// batched import looks at the clock.
const IMPORT_SLICE: usize = 4096;

/// Stores readings inside one transaction; a value at an existing second
/// and sensor is replaced, the others at that second are kept.
pub(crate) struct ReadingWriter<'k> {
    /// What the store keeps between transactions.
    kept: &'k Kept,
    devices: FastMap<String, Option<DeviceSensors>>,
    hours: Hours,
    /// The newest value of each sensor written, for the `latest` index.
    newest: Newest,
    /// Readings that were new or different from what was stored.
    changed: u64,
    /// The deliveries the readings owe.
    deliveries: Deliveries,
    /// Whether any device has alarm rules (asked once, with the first devices).
    watching: Option<bool>,
    /// The alarms of the devices looked up that have rules, loaded with
    /// them (before any of their readings is stored, so that a load that
    /// replays stored readings does not replay these), moved by each
    /// reading as it is written.
    alarms: FastMap<i64, DeviceAlarms>,
    /// The marks the alarms were loaded at.
    marks: Option<Marks>,
    /// The generations the first devices were read at (under the write
    /// lock: those the transaction commits at).
    read_at: Option<Generations>,
    /// Hours guessed before the devices are looked up, to be read with
    /// them ([`Self::guess_hours`]).
    hours_guessed: Vec<(i64, i64)>,
    /// Stored hours read with the devices, by key (`None`: none stored),
    /// each taken by the first flush of its key.
    hours_ahead: FastMap<(i64, i64), Option<Vec<u8>>>,
    /// When the transaction stores its readings, by the server's clock (seconds).
    now: i64,
    /// Whether the hours written are kept decoded for the next transaction
    /// ([`super::hour_cache`]): all writes but a batched import (history
    /// in bulk, each hour written once).
    keep_hours: bool,
}

impl<'k> ReadingWriter<'k> {
    /// A writer whose readings owe deliveries when `outbox` says so,
    /// with the devices and alarms `kept` by its store.
    pub(crate) fn new(outbox: Outbox, kept: &'k Kept) -> Self {
        Self {
            kept,
            devices: FastMap::default(),
            hours: Hours::default(),
            newest: Newest::default(),
            changed: 0,
            deliveries: Deliveries::new(outbox),
            watching: None,
            alarms: FastMap::default(),
            marks: None,
            read_at: None,
            hours_guessed: Vec::new(),
            hours_ahead: FastMap::default(),
            now: crate::decide::now(),
            keep_hours: true,
        }
    }

    /// Looks the devices `ids` up, each once per transaction: those not
    /// looked up yet, from what the store keeps and the rest in a few
    /// queries however many they are (a group of readings from 2,000
    /// stations asked two queries a station). Queries that do not wait on
    /// each other are sent together: on PostgreSQL they share a round trip.
    /// The subscriptions of a device kept between transactions are asked
    /// with its lookup, by the key it was kept with, and used when the
    /// lookup returns that key (the rest are asked after it); so are the
    /// hours guessed ([`Self::guess_hours`]).
    async fn load<'a>(&mut self, tx: &impl Tx, ids: impl IntoIterator<Item = &'a str>) -> StoreResult<()> {
        let mut missing: Vec<&str> = ids.into_iter().filter(|id| !self.devices.contains_key(*id)).collect();
        if missing.is_empty() {
            // The guesses, if any, are read where they are needed ([`Self::flush`]).
            self.hours_guessed.clear();
            return Ok(());
        }
        missing.sort_unstable();
        missing.dedup();
        let ask_rules = self.watching.is_none();
        // The subscriptions of devices kept without theirs are asked with
        // the lookup, by the key the device was kept with.
        let wanted = self.deliveries.wanted();
        let guessed: Vec<i64> = match wanted {
            true => (missing.iter().filter_map(|id| self.kept.devices.guessed_pk(id)))
                .filter(|pk| !self.kept.subscriptions.holds(*pk))
                .collect(),
            false => Vec::new(),
        };
        let hours_guessed = std::mem::take(&mut self.hours_guessed);
        let ((found, any_rules, early), ahead) = futures_util::future::join(
            futures_util::future::join3(
                self.kept.devices.load(tx, &missing),
                async { if ask_rules { alarms::any_rules(tx).await.map(Some) } else { Ok(None) } },
                async {
                    if !wanted {
                        return Ok((0, Vec::new()));
                    }
                    let (generation, lists) = futures_util::future::join(subscription_cache::generation(tx), async {
                        if guessed.is_empty() { Ok(Vec::new()) } else { tx.subscriptions_of(&guessed).await }
                    })
                    .await;
                    Ok((generation?, lists?))
                },
            ),
            async { if hours_guessed.is_empty() { Ok(Vec::new()) } else { tx.hours(&hours_guessed).await } },
        )
        .await;
        // On PostgreSQL one failed statement fails those after it with an
        // echo: report the cause (a timeout is `Busy`) whichever failed first.
        let ((mut found, read_at), any_rules) = match (found, any_rules) {
            (Ok(found), Ok(any_rules)) => (found, any_rules),
            (Err(e), any_rules) => {
                let others = any_rules.err().into_iter().chain(early.err());
                return Err(StoreError::cause(e, others.chain(ahead.err())));
            }
            (Ok(_), Err(e)) => {
                let others = early.err().into_iter().chain(ahead.err());
                return Err(StoreError::cause(e, others));
            }
        };
        let ahead = match ahead {
            Ok(rows) => rows,
            // Sent after the subscriptions: their failure comes first.
            Err(e) => {
                let mut errors = early.err().into_iter().chain([e]);
                let first = errors.next().unwrap_or_else(|| StoreError::Backend("no error".into()));
                return Err(StoreError::cause(first, errors));
            }
        };
        self.hours_ahead.extend(hours_guessed.into_iter().map(|key| (key, None)));
        self.hours_ahead.extend(ahead.into_iter().map(|r| ((r.device_pk, r.chunk), Some(r.data))));
        if any_rules.is_some() {
            self.watching = any_rules;
        }
        self.read_at.get_or_insert(read_at);
        if self.deliveries.wanted() {
            let (generation, early) = early?;
            let early = guessed.into_iter().zip(early).collect();
            let pks = found.iter().flatten().map(|device| device.pk);
            let mut lists = self.kept.subscriptions.resolve(tx, generation, early, pks).await?;
            for device in found.iter_mut().flatten() {
                let list = lists.remove(&device.pk).unwrap_or_default();
                device.subscriptions = list.into_iter().map(|(id, _)| id).collect();
            }
        }
        let mut watched = Vec::new();
        for (id, entry) in missing.into_iter().zip(found) {
            if let Some(device) = &entry {
                watched.push((device.pk, id));
            }
            self.devices.insert(id.to_owned(), entry);
        }
        if !watched.is_empty() && self.watching == Some(true) {
            let (loaded, marks) = self.kept.alarms.load(tx, &watched).await?;
            self.alarms.extend(loaded.into_iter().map(|a| (a.pk(), a)));
            self.marks.get_or_insert(marks);
        }
        Ok(())
    }

    /// Guesses the hours that `readings` (device, second) will write, by
    /// the keys their devices were kept with, for [`Self::load`] to read
    /// with the devices: on PostgreSQL a group of single readings then
    /// reads nothing after its devices. A row is used by its key, read in
    /// this transaction before the transaction writes any, so it is the
    /// stored row even when a guess was wrong (then it is read for nothing).
    fn guess_hours<'a>(&mut self, readings: impl IntoIterator<Item = (&'a str, i64)>) {
        let devices = &self.kept.devices;
        let mut keys: Vec<(i64, i64)> =
            readings.into_iter().filter_map(|(id, ts)| Some((devices.guessed_pk(id)?, chunk_of(ts)))).collect();
        // Those read already (with a group's first readings) are not read again.
        keys.retain(|key| !self.hours_ahead.contains_key(key));
        keys.sort_unstable();
        keys.dedup();
        self.hours_guessed = keys;
    }

    /// Checks one reading and adds it to the hour being gathered, and to
    /// the deliveries it owes; a refused reading adds nothing.
    pub(crate) async fn write(&mut self, tx: &impl Tx, r: &ReadingInput) -> StoreResult<()> {
        self.load(tx, [r.device_id.as_str()]).await?;
        let device =
            self.devices.get(&r.device_id).and_then(Option::as_ref).ok_or_else(|| decide::unknown_device(r))?;
        let (pk, pairs) = (device.pk, device.values(r)?);
        self.deliveries.add(device, r);
        if let Some(alarms) = self.alarms.get_mut(&pk) {
            alarms.on_reading(r.timestamp, &pairs, device, self.now);
        }
        if self.hours.is_full_for(pk, r.timestamp) {
            self.flush(tx).await?;
        }
        self.newest.add(pk, r.timestamp, &pairs);
        self.hours.add(pk, r.timestamp, pairs);
        Ok(())
    }

    /// Writes what the readings did to the alarms ([`super::alarms::write_all`]).
    async fn write_alarms(&mut self, tx: &impl Tx) -> StoreResult<Vec<AlarmEvent>> {
        let Some(marks) = self.marks.take() else { return Ok(Vec::new()) };
        let devices = std::mem::take(&mut self.alarms).into_values().collect();
        super::alarms::write_all(tx, devices, self.now, &self.kept.alarms, marks).await
    }

    /// Merges every gathered hour with its stored row (read together, but
    /// for those read ahead) and writes the rows that change.
    async fn flush(&mut self, tx: &impl Tx) -> StoreResult<()> {
        if self.hours.is_empty() {
            return Ok(());
        }
        let rows = self.hours.take();
        let mut stored: FastMap<(i64, i64), Vec<u8>> = FastMap::default();
        let mut unread = Vec::new();
        for key in rows.iter().map(|r| (r.device_pk, r.chunk)) {
            match self.hours_ahead.remove(&key) {
                Some(Some(data)) => {
                    stored.insert(key, data);
                }
                Some(None) => {}
                None => unread.push(key),
            }
        }
        if !unread.is_empty() {
            stored.extend(tx.hours(&unread).await?.into_iter().map(|r| ((r.device_pk, r.chunk), r.data)));
        }
        let mut changed = Vec::with_capacity(rows.len());
        for row in rows {
            let key = (row.device_pk, row.chunk);
            let before = stored.get(&key).map(Vec::as_slice);
            let mut held = self.kept.hours.take(key, before).ok_or_else(|| decide::malformed(key.0, key.1))?;
            if self.keep_hours {
                // Held for the next write: each encodes only what came since.
                held.keep_coding();
            }
            let merged = decide::merge_hour(row, &mut held);
            // The row as it will be stored: the merged one, or the one read.
            let written = merged.as_ref().map(|(row, _)| row.data.as_slice()).or(before);
            if let Some(written) = written.filter(|_| self.keep_hours) {
                self.kept.hours.keep(key, written, held);
            }
            if let Some((row, n)) = merged {
                changed.push(row);
                self.changed += n;
            }
        }
        if !changed.is_empty() {
            if self.keep_hours {
                tx.put_open_hours(&changed).await?;
            } else {
                tx.put_hours(&changed).await?;
            }
        }
        Ok(())
    }

    /// Writes what is gathered, with the index and the outbox rows (sent
    /// together where the backend can), then the alarms the readings moved;
    /// returns how many readings were new or different (0 when everything
    /// was stored already) and the alarm transitions recorded.
    pub(crate) async fn finish(mut self, tx: &impl Tx) -> StoreResult<(u64, Vec<AlarmEvent>)> {
        let (newest, now) = (self.newest.take(), self.now);
        let deliveries = std::mem::take(&mut self.deliveries.rows);
        super::tx::together(self.flush(tx), tx.upsert_latest_and_outbox(&newest, now, &deliveries)).await?;
        let events = self.write_alarms(tx).await?;
        Ok((self.changed, events))
    }
}

/// The (device, second) of each reading of `readings`.
fn keys(readings: &[Single]) -> impl Iterator<Item = (&str, i64)> {
    readings.iter().map(|r| (r.reading.device_id.as_str(), r.reading.timestamp))
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
    kept: &Kept,
) -> StoreResult<Imported> {
    let started = std::time::Instant::now();
    let mut report = ImportReport::default();
    let mut writer = ReadingWriter::new(outbox, kept);
    // A batched import is history in bulk: each hour is written once.
    writer.keep_hours = limit.is_none();
    let mut source = Some(source);
    let mut rest = None;
    while let Some(src) = source.take() {
        let (src, items) = tx.take(src, IMPORT_SLICE).await?;
        let more = items.len() == IMPORT_SLICE;
        writer.load(tx, items.iter().filter_map(|item| item.as_ref().ok()).map(|r| r.device_id.as_str())).await?;
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
    let (_, events) = writer.finish(tx).await?;
    Ok((report, rest, events))
}

/// Stores single readings in one transaction (a group commit); each gets
/// its own outcome, in the order `first` and then `rest`: a refused one is
/// checked before anything of it is gathered, so the others are stored.
/// The devices and hours of `first` are read while `rest` comes (the
/// group fills, [`crate::group::Gather`]); those of `rest` not read yet
/// after. A reading to be written only at given generations is refused
/// with [`StoreError::Stale`] when the transaction reads others (with the
/// devices, under the write lock: a change committed before is seen, one
/// after waits for this commit). Also returns the alarm transitions.
pub(crate) async fn ingest_group(
    tx: &impl Tx,
    first: Vec<Single>,
    rest: impl Future<Output = Vec<Single>>,
    kept: &Kept,
) -> StoreResult<(Vec<StoreResult<()>>, Vec<AlarmEvent>)> {
    let mut writer = ReadingWriter::new(Outbox::Deliver, kept);
    writer.guess_hours(keys(&first));
    let ids = first.iter().map(|r| r.reading.device_id.as_str());
    let (loaded, rest) = futures_util::future::join(writer.load(tx, ids), rest).await;
    loaded?;
    if !rest.is_empty() {
        writer.guess_hours(keys(&rest));
        writer.load(tx, rest.iter().map(|r| r.reading.device_id.as_str())).await?;
    }
    let mut readings = first;
    readings.extend(rest);
    let now = writer.read_at;
    let mut outcomes = Vec::with_capacity(readings.len());
    for r in &readings {
        if r.at.is_some() && r.at != now {
            outcomes.push(Err(StoreError::Stale));
            continue;
        }
        outcomes.push(writer.write(tx, &r.reading).await);
    }
    let (_, events) = writer.finish(tx).await?;
    Ok((outcomes, events))
}
