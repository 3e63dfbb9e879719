//! `sensorhub copy`'s writing half, once for every backend: an
//! installation's rows added by natural key (ids renumbered on the way in),
//! refused whole when any of them already exists in the target, and a
//! device's stored hours added as they are, with the `latest` entries they
//! hold.

use super::tx::{DeviceFields, KeyKind, NewKey, ProvisionTx, RetentionOf};
use crate::decide::latest::Newest;
use crate::decide::{HourRow, Links};
use crate::{Installation, StoreError, StoreResult, StoredHour};
use sensorhub_core::provision::InputError;
use std::collections::{BTreeMap, BTreeSet, HashMap};

fn exists(what: String) -> StoreError {
    StoreError::Conflict(format!("{what} already exists in the target"))
}

fn missing(what: &str, id: &str) -> StoreError {
    StoreError::Invalid(InputError::new("copy", format!("{what} {id:?} is not in the copy")))
}

/// Adds an installation's rows, all or none; the caller commits.
pub(crate) async fn restore(tx: &impl ProvisionTx, rows: Installation) -> StoreResult<()> {
    let mut accounts = HashMap::new();
    for a in &rows.accounts {
        if tx.account_row(&a.username).await?.is_some() {
            return Err(exists(format!("account {:?}", a.username)));
        }
        let id = tx.insert_account(&a.username, &a.password_hash, a.disabled, a.created_at).await?;
        if a.retention_seconds.is_some() {
            tx.set_retention(RetentionOf::Account(id), a.retention_seconds).await?;
        }
        accounts.insert(a.username.as_str(), id);
    }
    let account = |name: &str| accounts.get(name).copied().ok_or_else(|| missing("account", name));
    let mut devices = HashMap::new();
    for d in &rows.devices {
        if tx.device_row(&d.device_id).await?.is_some() {
            return Err(exists(format!("device {:?}", d.device_id)));
        }
        let fields = DeviceFields {
            name: d.name.clone(),
            kind: d.kind.clone(),
            lat: d.lat,
            long: d.long,
            interval_seconds: d.interval_seconds,
        };
        let pk = tx.insert_device(&d.device_id, &fields).await?;
        if d.retention_seconds.is_some() {
            tx.set_retention(RetentionOf::Device(pk), d.retention_seconds).await?;
        }
        devices.insert(d.device_id.as_str(), pk);
    }
    let device = |id: &str| devices.get(id).copied().ok_or_else(|| missing("device", id));
    for s in &rows.sensors {
        tx.put_sensor(device(&s.device_id)?, usize::try_from(s.idx).unwrap_or(0), &s.sensor, true).await?;
    }
    let mut links: BTreeMap<i64, Links> = BTreeMap::new();
    for link in &rows.account_devices {
        links.entry(account(&link.username)?).or_default().insert(device(&link.device_id)?, link.can_write);
    }
    for (account, links) in &links {
        tx.set_links_of(*account, links).await?;
    }
    // Owners after the links: an owner's link is one of them.
    for d in &rows.devices {
        if let Some(owner) = &d.owner {
            tx.set_owner(&d.device_id, account(owner)?).await?;
        }
    }
    let mut key_devices: HashMap<&[u8], BTreeSet<i64>> = HashMap::new();
    for (digest, dev) in &rows.api_key_devices {
        key_devices.entry(digest.as_slice()).or_default().insert(device(dev)?);
    }
    for (kind, keys) in [(KeyKind::Api, &rows.api_keys), (KeyKind::Webhook, &rows.webhook_keys)] {
        for k in keys {
            if tx.key_row(kind, &k.digest).await?.is_some() {
                let what = if kind == KeyKind::Api { "API key" } else { "webhook key" };
                return Err(exists(format!("{what} {}…", k.prefix)));
            }
            let new = NewKey {
                kind,
                digest: &k.digest,
                prefix: &k.prefix,
                account_id: account(&k.username)?,
                scoped: k.scoped,
                revoked: k.revoked,
                created_at: k.created_at,
            };
            let id = tx.insert_key(new).await?;
            if let Some(devices) = key_devices.remove(k.digest.as_slice()).filter(|_| kind == KeyKind::Api) {
                tx.set_key_devices(id, &devices).await?;
            }
        }
    }
    if !key_devices.is_empty() {
        return Err(missing("API key", "?"));
    }
    Ok(())
}

/// Adds stored hours of device `device_id` as they are, with the `latest`
/// entries they hold; the caller commits.
pub(crate) async fn restore_hours(tx: &impl ProvisionTx, device_id: &str, hours: Vec<StoredHour>) -> StoreResult<()> {
    let pk = tx
        .device_pk(device_id)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("device {device_id:?} is not in the target")))?;
    let mut newest = Newest::default();
    let mut rows = Vec::with_capacity(hours.len());
    for h in hours {
        newest.add_hour(pk, h.chunk, &h.data)?;
        rows.push(HourRow { device_pk: pk, chunk: h.chunk, data: h.data });
    }
    futures_util::future::try_join(tx.put_hours(&rows), tx.upsert_latest(&newest.take(), 0)).await?;
    Ok(())
}
