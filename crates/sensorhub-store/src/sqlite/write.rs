//! Writes of the SQLite backend: provisioning, imports and admin changes.
//! Every entry point runs in one `IMMEDIATE` transaction: all or nothing.

use super::read::device_sensors;
use crate::chunk::{self, CHUNK_SECONDS, chunk_of};
use crate::{ApplyReport, Changes, ImportReport, ReadingSource, StoreError, StoreResult, packed};
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use sensorhub_core::model::{DeviceSpec, MAX_SENSORS_PER_DEVICE, ReadingInput};
use sensorhub_core::provision::{AccountSpec, InputError, Provision};
use sensorhub_core::secret::{hash_password, key_digest, key_prefix, verify_password};
use std::collections::{BTreeMap, BTreeSet, HashMap};

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

fn begin(c: &mut Connection) -> StoreResult<Transaction<'_>> {
    Ok(c.transaction_with_behavior(TransactionBehavior::Immediate)?)
}

fn invalid(at: impl Into<String>, msg: impl Into<String>) -> StoreError {
    StoreError::Invalid(InputError::new(at, msg))
}

/// Outcome of making one item true.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Change {
    Created,
    Updated,
    Unchanged,
}

impl Changes {
    fn count(&mut self, c: Change) {
        match c {
            Change::Created => self.created += 1,
            Change::Updated => self.updated += 1,
            Change::Unchanged => {}
        }
    }
}

pub(super) fn apply(c: &mut Connection, mut doc: Provision, readings: Vec<ReadingInput>) -> StoreResult<ApplyReport> {
    let tx = begin(c)?;
    let mut report = ApplyReport::default();
    for (i, d) in doc.devices.iter().enumerate() {
        report.devices.count(upsert_device(&tx, d, &format!("devices[{i}]"))?);
    }
    for (i, a) in std::mem::take(&mut doc.accounts).into_iter().enumerate() {
        apply_account(&tx, a, &format!("accounts[{i}]"), &mut report)?;
    }
    let mut writer = ReadingWriter::new(&tx);
    for r in &readings {
        writer.write(r)?;
    }
    report.readings.updated += writer.finish()?;
    tx.commit()?;
    Ok(report)
}

/// Creates or updates a device and its listed sensors.
fn upsert_device(tx: &Transaction<'_>, d: &DeviceSpec, at: &str) -> StoreResult<Change> {
    let existing = tx
        .query_row(
            "SELECT id, name, type, lat, long, interval_seconds FROM devices WHERE device_id = ?1",
            [&d.device_id],
            |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, f64>(3)?,
                    r.get::<_, f64>(4)?,
                    r.get::<_, i64>(5)?,
                ))
            },
        )
        .optional()?;
    let (pk, mut change) = match existing {
        None => {
            tx.execute(
                "INSERT INTO devices (device_id, name, type, lat, long, interval_seconds) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![d.device_id, d.name, d.kind, d.lat, d.long, d.interval_seconds],
            )?;
            (tx.last_insert_rowid(), Change::Created)
        }
        Some((pk, name, kind, lat, long, interval)) => {
            if (name, kind, lat, long, interval) == (d.name.clone(), d.kind.clone(), d.lat, d.long, d.interval_seconds)
            {
                (pk, Change::Unchanged)
            } else {
                tx.execute(
                    "UPDATE devices SET name = ?2, type = ?3, lat = ?4, long = ?5, interval_seconds = ?6 WHERE id = ?1",
                    params![pk, d.name, d.kind, d.lat, d.long, d.interval_seconds],
                )?;
                (pk, Change::Updated)
            }
        }
    };
    let mut current = device_sensors(tx, pk)?;
    for (j, s) in d.sensors.iter().enumerate() {
        match current.iter().position(|c| c.sensor_id == s.sensor_id) {
            Some(idx) if current[idx] == *s => {}
            Some(idx) => {
                tx.execute(
                    "UPDATE sensors SET name = ?3, type = ?4, unit = ?5 WHERE device_pk = ?1 AND idx = ?2",
                    params![pk, idx as i64, s.name, s.kind, s.unit],
                )?;
                current[idx] = s.clone();
                if change == Change::Unchanged {
                    change = Change::Updated;
                }
            }
            None => {
                let idx = current.len();
                if idx >= MAX_SENSORS_PER_DEVICE {
                    return Err(invalid(format!("{at}.sensors[{j}]"), "the device already has 64 sensors"));
                }
                tx.execute(
                    "INSERT INTO sensors (device_pk, idx, sensor_id, name, type, unit) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![pk, idx as i64, s.sensor_id, s.name, s.kind, s.unit],
                )?;
                current.push(s.clone());
                if change == Change::Unchanged {
                    change = Change::Updated;
                }
            }
        }
    }
    Ok(change)
}

fn device_pk(tx: &Transaction<'_>, device_id: &str) -> StoreResult<Option<i64>> {
    let mut stmt = tx.prepare_cached("SELECT id FROM devices WHERE device_id = ?1")?;
    Ok(stmt.query_row([device_id], |r| r.get(0)).optional()?)
}

/// Resolves a list of device ids to their numbers, naming the first unknown one.
fn device_pks(tx: &Transaction<'_>, ids: &[String], at: &str) -> StoreResult<BTreeSet<i64>> {
    let mut out = BTreeSet::new();
    for (j, id) in ids.iter().enumerate() {
        let pk = device_pk(tx, id)?.ok_or_else(|| invalid(format!("{at}[{j}]"), format!("unknown device {id:?}")))?;
        out.insert(pk);
    }
    Ok(out)
}

fn pk_set(tx: &Transaction<'_>, sql: &str, id: i64) -> StoreResult<BTreeSet<i64>> {
    let mut stmt = tx.prepare_cached(sql)?;
    let set = stmt.query_map([id], |r| r.get(0))?.collect::<Result<_, _>>()?;
    Ok(set)
}

/// Replaces the rows of a link table for `owner` with `pks`.
fn set_links(tx: &Transaction<'_>, table: &str, owner_col: &str, owner: i64, pks: &BTreeSet<i64>) -> StoreResult<()> {
    tx.execute(&format!("DELETE FROM {table} WHERE {owner_col} = ?1"), [owner])?;
    let mut stmt = tx.prepare_cached(&format!("INSERT INTO {table} ({owner_col}, device_pk) VALUES (?1, ?2)"))?;
    for pk in pks {
        stmt.execute([owner, *pk])?;
    }
    Ok(())
}

fn apply_account(tx: &Transaction<'_>, a: AccountSpec, at: &str, report: &mut ApplyReport) -> StoreResult<()> {
    let existing = tx
        .query_row("SELECT id, password_hash, disabled FROM accounts WHERE username = ?1", [&a.username], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, bool>(2)?))
        })
        .optional()?;
    let hash = |p: &str| hash_password(p).map_err(|e| StoreError::Backend(Box::new(e)));
    let (account_id, mut change) = match existing {
        None => {
            let phc = match (&a.password, &a.password_hash) {
                (Some(p), _) => hash(p)?,
                (None, Some(h)) => h.clone(),
                (None, None) => return Err(invalid(format!("{at}.password"), "a new account needs a password")),
            };
            tx.execute(
                "INSERT INTO accounts (username, password_hash, disabled, created_at) VALUES (?1, ?2, ?3, ?4)",
                params![a.username, phc, a.disabled.unwrap_or(false), now()],
            )?;
            (tx.last_insert_rowid(), Change::Created)
        }
        Some((id, stored, disabled)) => {
            let new_hash = match (&a.password, &a.password_hash) {
                (Some(p), _) if !verify_password(p, &stored) => Some(hash(p)?),
                (None, Some(h)) if *h != stored => Some(h.clone()),
                _ => None,
            };
            let new_disabled = a.disabled.filter(|d| *d != disabled);
            if new_hash.is_some() || new_disabled.is_some() {
                tx.execute(
                    "UPDATE accounts SET password_hash = coalesce(?2, password_hash), disabled = coalesce(?3, disabled) WHERE id = ?1",
                    params![id, new_hash, new_disabled],
                )?;
                (id, Change::Updated)
            } else {
                (id, Change::Unchanged)
            }
        }
    };
    let mut visible = pk_set(tx, "SELECT device_pk FROM account_devices WHERE account_id = ?1", account_id)?;
    if let Some(list) = &a.devices {
        let wanted = device_pks(tx, list, &format!("{at}.devices"))?;
        if wanted != visible {
            set_links(tx, "account_devices", "account_id", account_id, &wanted)?;
            visible = wanted;
            if change == Change::Unchanged {
                change = Change::Updated;
            }
        }
    }
    report.accounts.count(change);
    for (k, key) in a.api_keys.iter().enumerate() {
        let kat = format!("{at}.api_keys[{k}]");
        let scope = match &key.devices {
            Some(list) => {
                let pks = device_pks(tx, list, &format!("{kat}.devices"))?;
                if let Some(j) =
                    list.iter().position(|id| device_pk(tx, id).ok().flatten().is_some_and(|pk| !visible.contains(&pk)))
                {
                    return Err(invalid(format!("{kat}.devices[{j}]"), "the account cannot see this device"));
                }
                Some(pks)
            }
            None => None,
        };
        report.api_keys.count(upsert_api_key(tx, account_id, &key.id, scope, key.revoked, &kat)?);
    }
    for (k, key) in a.webhook_keys.iter().enumerate() {
        let kat = format!("{at}.webhook_keys[{k}]");
        report.webhook_keys.count(upsert_webhook_key(tx, account_id, &key.key, key.revoked, &kat)?);
    }
    Ok(())
}

fn upsert_api_key(
    tx: &Transaction<'_>,
    account_id: i64,
    id: &str,
    scope: Option<BTreeSet<i64>>,
    revoked: Option<bool>,
    at: &str,
) -> StoreResult<Change> {
    let digest = key_digest(id);
    let existing = tx
        .query_row("SELECT id, account_id, scoped, revoked FROM api_keys WHERE digest = ?1", [&digest[..]], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, bool>(2)?, r.get::<_, bool>(3)?))
        })
        .optional()?;
    let empty = BTreeSet::new();
    let wanted = scope.as_ref().unwrap_or(&empty);
    match existing {
        Some((_, owner, ..)) if owner != account_id => {
            Err(invalid(at, "this API key id already belongs to another account"))
        }
        Some((key_id, _, scoped, was_revoked)) => {
            let revoked = revoked.unwrap_or(was_revoked);
            let links = pk_set(tx, "SELECT device_pk FROM api_key_devices WHERE key_id = ?1", key_id)?;
            if scoped == scope.is_some() && was_revoked == revoked && links == *wanted {
                return Ok(Change::Unchanged);
            }
            tx.execute(
                "UPDATE api_keys SET scoped = ?2, revoked = ?3 WHERE id = ?1",
                params![key_id, scope.is_some(), revoked],
            )?;
            set_links(tx, "api_key_devices", "key_id", key_id, wanted)?;
            Ok(Change::Updated)
        }
        None => {
            tx.execute(
                "INSERT INTO api_keys (digest, prefix, account_id, scoped, revoked, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![&digest[..], key_prefix(id), account_id, scope.is_some(), revoked.unwrap_or(false), now()],
            )?;
            set_links(tx, "api_key_devices", "key_id", tx.last_insert_rowid(), wanted)?;
            Ok(Change::Created)
        }
    }
}

fn upsert_webhook_key(
    tx: &Transaction<'_>,
    account_id: i64,
    key: &str,
    revoked: Option<bool>,
    at: &str,
) -> StoreResult<Change> {
    let digest = key_digest(key);
    let existing = tx
        .query_row("SELECT id, account_id, revoked FROM webhook_keys WHERE digest = ?1", [&digest[..]], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, bool>(2)?))
        })
        .optional()?;
    match existing {
        Some((_, owner, _)) if owner != account_id => {
            Err(invalid(at, "this webhook key already belongs to another account"))
        }
        Some((_, _, was)) if revoked.is_none_or(|r| r == was) => Ok(Change::Unchanged),
        Some((id, ..)) => {
            tx.execute("UPDATE webhook_keys SET revoked = ?2 WHERE id = ?1", params![id, revoked.unwrap_or(false)])?;
            Ok(Change::Updated)
        }
        None => {
            tx.execute(
                "INSERT INTO webhook_keys (digest, prefix, account_id, revoked, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![&digest[..], key_prefix(key), account_id, revoked.unwrap_or(false), now()],
            )?;
            Ok(Change::Created)
        }
    }
}

/// A device as the reading writer needs it: its number and sensors by id.
struct DeviceEntry {
    pk: i64,
    sensors: HashMap<String, (u8, String)>,
}

/// The readings being gathered, by (device, hour): (sensor idx, value)
/// pairs by second offset.
type PendingHours = HashMap<(i64, i64), BTreeMap<u16, Vec<(u8, f64)>>>;

/// Hours gathered at most before they are written out.
const MAX_PENDING_HOURS: usize = 4096;

/// Stores readings inside a transaction, resolving device and sensor ids
/// once per device. Readings are gathered by device and hour, so that an
/// hour's row is read, merged and written once however the input
/// interleaves devices; a value at an existing second and sensor is
/// replaced, the others at that second are kept.
struct ReadingWriter<'t, 'c> {
    tx: &'t Transaction<'c>,
    devices: HashMap<String, Option<DeviceEntry>>,
    pending: PendingHours,
    /// Readings that were new or different from what was stored.
    changed: u64,
    reading: Vec<u8>,
}

impl<'t, 'c> ReadingWriter<'t, 'c> {
    fn new(tx: &'t Transaction<'c>) -> Self {
        Self { tx, devices: HashMap::new(), pending: HashMap::new(), changed: 0, reading: Vec::new() }
    }

    fn device(&mut self, device_id: &str) -> StoreResult<Option<&DeviceEntry>> {
        if !self.devices.contains_key(device_id) {
            let entry = match device_pk(self.tx, device_id)? {
                Some(pk) => {
                    let sensors = device_sensors(self.tx, pk)?
                        .into_iter()
                        .enumerate()
                        .filter(|(_, s)| !s.sensor_id.is_empty())
                        .map(|(idx, s)| (s.sensor_id, (idx as u8, s.unit)))
                        .collect();
                    Some(DeviceEntry { pk, sensors })
                }
                None => None,
            };
            self.devices.insert(device_id.to_owned(), entry);
        }
        Ok(self.devices.get(device_id).and_then(Option::as_ref))
    }

    /// Checks one reading and adds it to the hour being gathered.
    fn write(&mut self, r: &ReadingInput) -> StoreResult<()> {
        let device = self
            .device(&r.device_id)?
            .ok_or_else(|| invalid(r.origin.device_at(), format!("unknown device {:?}", r.device_id)))?;
        let pk = device.pk;
        let mut pairs = Vec::with_capacity(r.values.len());
        for (i, v) in r.values.iter().enumerate() {
            let at = || r.origin.value_at(i);
            let (idx, unit) = device.sensors.get(&v.sensor_id).ok_or_else(|| {
                invalid(at(), format!("unknown sensor {:?} for device {:?}", v.sensor_id, r.device_id))
            })?;
            if let Some(given) = v.unit.as_deref().filter(|u| u != unit) {
                return Err(invalid(at(), format!("unit {given:?} does not match the sensor's unit {unit:?}")));
            }
            pairs.push((*idx, v.value));
        }
        let chunk = chunk_of(r.timestamp);
        let offset = (r.timestamp - chunk * CHUNK_SECONDS) as u16;
        if self.pending.len() >= MAX_PENDING_HOURS && !self.pending.contains_key(&(pk, chunk)) {
            self.flush()?;
        }
        // A later value for the same second and sensor wins (`encode` keeps the last).
        self.pending.entry((pk, chunk)).or_default().entry(offset).or_default().extend(pairs);
        Ok(())
    }

    /// Merges every gathered hour into its row; rows that would not change
    /// are not written.
    fn flush(&mut self) -> StoreResult<()> {
        let mut select = self.tx.prepare_cached("SELECT data FROM readings WHERE device_pk = ?1 AND chunk = ?2")?;
        let mut upsert = self.tx.prepare_cached(
            "INSERT INTO readings (device_pk, chunk, data) VALUES (?1, ?2, ?3)
             ON CONFLICT (device_pk, chunk) DO UPDATE SET data = excluded.data",
        )?;
        let mut blob = Vec::new();
        for ((pk, chunk), readings) in self.pending.drain() {
            blob.clear();
            for (offset, pairs) in &readings {
                self.reading.clear();
                packed::encode(pairs, &mut self.reading);
                chunk::push_entry(&mut blob, *offset, &self.reading);
            }
            let old: Option<Vec<u8>> = select.query_row(params![pk, chunk], |r| r.get(0)).optional()?;
            let malformed = || StoreError::Backend(format!("malformed readings of device {pk} in hour {chunk}").into());
            let merged = match &old {
                Some(old) => chunk::merge(old, &blob).ok_or_else(malformed)?,
                None => std::mem::take(&mut blob),
            };
            let changed = chunk::changed_seconds(old.as_deref().unwrap_or_default(), &merged).ok_or_else(malformed)?;
            if changed > 0 {
                upsert.execute(params![pk, chunk, &merged])?;
                self.changed += changed;
            }
        }
        Ok(())
    }

    /// Writes what is gathered; returns how many readings were new or
    /// different (0 when everything was stored already).
    fn finish(mut self) -> StoreResult<u64> {
        self.flush()?;
        Ok(self.changed)
    }
}

pub(super) fn import(c: &mut Connection, source: ReadingSource) -> StoreResult<ImportReport> {
    let tx = begin(c)?;
    let mut report = ImportReport::default();
    let mut writer = ReadingWriter::new(&tx);
    for item in source {
        let r = item?;
        report.readings += 1;
        report.values += r.values.len() as u64;
        writer.write(&r)?;
    }
    writer.finish()?;
    tx.commit()?;
    Ok(report)
}

pub(super) fn revoke_api_key(c: &mut Connection, id_or_prefix: &str) -> StoreResult<String> {
    let tx = begin(c)?;
    let digest = key_digest(id_or_prefix);
    let mut found: Vec<(i64, String)> = {
        let mut stmt = tx.prepare("SELECT id, prefix FROM api_keys WHERE digest = ?1")?;
        stmt.query_map([&digest[..]], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?
    };
    if found.is_empty() && !id_or_prefix.is_empty() {
        let mut stmt = tx.prepare("SELECT id, prefix FROM api_keys WHERE prefix = ?1 AND revoked = 0")?;
        found = stmt.query_map([id_or_prefix], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?;
    }
    let (id, prefix) = match found.as_slice() {
        [one] => one.clone(),
        [] => return Err(StoreError::NotFound(format!("no API key matches {:?}", key_prefix(id_or_prefix)))),
        _ => {
            return Err(StoreError::Conflict(format!(
                "several keys start with {id_or_prefix:?}: give the whole key id"
            )));
        }
    };
    tx.execute("UPDATE api_keys SET revoked = 1 WHERE id = ?1", [id])?;
    tx.commit()?;
    Ok(prefix)
}
