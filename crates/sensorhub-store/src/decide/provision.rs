//! Provisioning decisions: what one item of a provisioning document (an
//! account, its device links, a key, a device's sensors) changes.

use super::invalid;
use crate::{Changes, StoreError, StoreResult};
use sensorhub_core::model::{MAX_SENSORS_PER_DEVICE, SensorMeta};
use sensorhub_core::provision::AccountSpec;
use sensorhub_core::secret::{hash_password, verify_password};
use std::collections::{BTreeMap, BTreeSet};

/// Outcome of making one item true.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Change {
    Created,
    Updated,
    Unchanged,
}

impl Change {
    /// Marks an unchanged item as updated (a part of it changed).
    pub(crate) fn touch(&mut self) {
        if *self == Change::Unchanged {
            *self = Change::Updated;
        }
    }
}

impl Changes {
    pub(crate) fn count(&mut self, c: Change) {
        match c {
            Change::Created => self.created += 1,
            Change::Updated => self.updated += 1,
            Change::Unchanged => {}
        }
    }
}

/// One sensor write that makes a device's sensor list true.
#[derive(Debug)]
pub(crate) enum SensorWrite<'a> {
    /// The sensor at `idx` gets new metadata.
    Update { idx: usize, sensor: &'a SensorMeta },
    /// A new sensor at `idx`.
    Insert { idx: usize, sensor: &'a SensorMeta },
}

/// The writes that add or update `wanted` over `current` (sensors by idx).
/// Sensors not listed are kept: stored readings refer to them.
pub(crate) fn sensor_writes<'a>(
    current: &[SensorMeta],
    wanted: &'a [SensorMeta],
    at: &str,
) -> StoreResult<Vec<SensorWrite<'a>>> {
    let mut current = current.to_vec();
    let mut out = Vec::new();
    for (j, s) in wanted.iter().enumerate() {
        match current.iter().position(|c| c.sensor_id == s.sensor_id) {
            Some(idx) if current[idx] == *s => {}
            Some(idx) => {
                current[idx] = s.clone();
                out.push(SensorWrite::Update { idx, sensor: s });
            }
            None => {
                let idx = current.len();
                if idx >= MAX_SENSORS_PER_DEVICE {
                    return Err(invalid(format!("{at}.sensors[{j}]"), "the device already has 64 sensors"));
                }
                current.push(s.clone());
                out.push(SensorWrite::Insert { idx, sensor: s });
            }
        }
    }
    Ok(out)
}

/// An account row as the write path needs it.
pub(crate) struct StoredAccount {
    pub id: i64,
    pub password_hash: String,
    pub disabled: bool,
}

/// What to write for an account of a provisioning document.
pub(crate) enum AccountWrite {
    Insert { password_hash: String, disabled: bool },
    Update { id: i64, password_hash: Option<String>, disabled: Option<bool> },
    Unchanged { id: i64 },
}

/// Decides an account's write. A password equal to the stored one (checked
/// with Argon2) is not re-hashed, so applying a file twice changes nothing.
pub(crate) fn account_write(a: &AccountSpec, stored: Option<StoredAccount>, at: &str) -> StoreResult<AccountWrite> {
    let hash = |p: &str| hash_password(p).map_err(|e| StoreError::Backend(Box::new(e)));
    Ok(match stored {
        None => {
            let password_hash = match (&a.password, &a.password_hash) {
                (Some(p), _) => hash(p)?,
                (None, Some(h)) => h.clone(),
                (None, None) => return Err(invalid(format!("{at}.password"), "a new account needs a password")),
            };
            AccountWrite::Insert { password_hash, disabled: a.disabled.unwrap_or(false) }
        }
        Some(s) => {
            let password_hash = match (&a.password, &a.password_hash) {
                (Some(p), _) if !verify_password(p, &s.password_hash) => Some(hash(p)?),
                (None, Some(h)) if *h != s.password_hash => Some(h.clone()),
                _ => None,
            };
            let disabled = a.disabled.filter(|d| *d != s.disabled);
            if password_hash.is_some() || disabled.is_some() {
                AccountWrite::Update { id: s.id, password_hash, disabled }
            } else {
                AccountWrite::Unchanged { id: s.id }
            }
        }
    })
}

/// An account's links to the devices it sees: device number → whether it
/// has a write grant on it.
pub(crate) type Links = BTreeMap<i64, bool>;

/// Decides an account's device links. `listed` (its `devices`, when given)
/// is exactly the set it sees, with the devices it owns (`owned`) added;
/// `writes` (its `write`, when given) is exactly the set it has write grants
/// on, each one a device it sees. What is not given is kept as `stored`.
pub(crate) fn account_links(
    stored: &Links,
    owned: &BTreeSet<i64>,
    listed: Option<&[i64]>,
    writes: Option<&[i64]>,
    at: &str,
) -> StoreResult<Links> {
    let visible: BTreeSet<i64> = match listed {
        Some(list) => list.iter().chain(owned).copied().collect(),
        None => stored.keys().copied().collect(),
    };
    if let Some(j) = writes.and_then(|w| w.iter().position(|pk| !visible.contains(pk))) {
        return Err(invalid(format!("{at}.write[{j}]"), "the account cannot see this device"));
    }
    Ok(visible
        .into_iter()
        .map(|pk| {
            let can_write = match writes {
                Some(w) => w.contains(&pk),
                None => stored.get(&pk).copied().unwrap_or(false),
            };
            (pk, can_write)
        })
        .collect())
}

/// The device numbers of a key's device list (in list order, resolved), checked
/// against the devices its account may see.
pub(crate) fn key_scope(listed: &[i64], visible: &BTreeSet<i64>, at: &str) -> StoreResult<BTreeSet<i64>> {
    if let Some(j) = listed.iter().position(|pk| !visible.contains(pk)) {
        return Err(invalid(format!("{at}.devices[{j}]"), "the account cannot see this device"));
    }
    Ok(listed.iter().copied().collect())
}

/// The scope a provisioning item asks of an API key.
pub(crate) enum ScopeRequest {
    /// Not given: a stored key keeps its scope; a new key sees all.
    Keep,
    /// Every device of the account.
    All,
    /// Only these devices.
    Only(BTreeSet<i64>),
}

impl ScopeRequest {
    /// The key's device list after the write (`None`: all of the account's).
    pub(crate) fn resolve(self, stored: Option<&StoredKey>) -> Option<BTreeSet<i64>> {
        match self {
            ScopeRequest::Keep => stored.filter(|k| k.scoped).map(|k| k.devices.clone()),
            ScopeRequest::All => None,
            ScopeRequest::Only(set) => Some(set),
        }
    }
}

/// A key row (API or webhook) as the write path needs it.
pub(crate) struct StoredKey {
    pub id: i64,
    pub account_id: i64,
    pub scoped: bool,
    pub revoked: bool,
    /// A scoped API key's devices (empty otherwise).
    pub devices: BTreeSet<i64>,
}

/// What to write for a key.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum KeyWrite {
    Insert { revoked: bool },
    Update { id: i64, revoked: bool },
    Unchanged,
}

/// Decides a key's write: `scope` is the device list of a scoped API key
/// (`None` for unscoped and webhook keys), `revoked` the wanted state if given.
pub(crate) fn key_write(
    account_id: i64,
    stored: Option<StoredKey>,
    scope: Option<&BTreeSet<i64>>,
    revoked: Option<bool>,
    what: &str,
    at: &str,
) -> StoreResult<KeyWrite> {
    match stored {
        Some(k) if k.account_id != account_id => {
            Err(invalid(at, format!("this {what} already belongs to another account")))
        }
        Some(k) => {
            let revoked = revoked.unwrap_or(k.revoked);
            let same_scope = k.scoped == scope.is_some() && scope.is_none_or(|s| *s == k.devices);
            if same_scope && revoked == k.revoked {
                Ok(KeyWrite::Unchanged)
            } else {
                Ok(KeyWrite::Update { id: k.id, revoked })
            }
        }
        None => Ok(KeyWrite::Insert { revoked: revoked.unwrap_or(false) }),
    }
}
