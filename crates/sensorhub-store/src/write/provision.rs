//! Provisioning, once for every backend: making a document true (devices
//! and their sensors, accounts, their device links and write grants, API
//! and webhook keys, subscriptions, owners, readings) in one transaction,
//! and revoking a key. What each item changes is decided in
//! [`crate::decide`]; this is the order the steps run in.

use super::readings::ReadingWriter;
use super::tx::{DeviceFields, KeyKind, NewKey, RetentionOf, SubscriptionTx};
use crate::alarm::{AlarmEvent, RuleEdit, RuleEdited};
use crate::decide::subscriptions::{SubscriptionWrite, provisioned_of, subscription_devices, subscription_write};
use crate::decide::{self, AccountWrite, Change, KeyWrite, ScopeRequest, SensorWrite, invalid, now};
use crate::delivery::{Outbox, ProvisionedHooks, ProvisionedSubscription, Sealer};
use crate::{ApplyReport, StoreError, StoreResult};
use sensorhub_core::alarm::AlarmRule;
use sensorhub_core::model::{DeviceSpec, ReadingInput};
use sensorhub_core::provision::{AccountSpec, KeyDevices, Provision};
use sensorhub_core::secret::{key_digest, key_prefix};
use std::collections::BTreeSet;

/// Makes a provisioning document true; the caller commits. Also returns
/// the alarm transitions it recorded (episodes ended by changed rules, and
/// those the document's readings caused).
pub(crate) async fn apply(
    tx: &impl SubscriptionTx,
    mut doc: Provision,
    readings: Vec<ReadingInput>,
    hooks: Option<ProvisionedHooks>,
) -> StoreResult<(ApplyReport, Vec<AlarmEvent>)> {
    let mut report = ApplyReport::default();
    let mut events = Vec::new();
    let mut devices = Vec::with_capacity(doc.devices.len());
    for (i, d) in doc.devices.iter().enumerate() {
        let at = format!("devices[{i}]");
        devices.push(upsert_device(tx, d, &at).await?);
        if let Some(specs) = &d.alarms {
            let rules = sensorhub_core::alarm::check_rules(specs, &at)?;
            if let Some(ended) = set_alarm_rules(tx, &d.device_id, &rules, &at).await? {
                report.alarm_rules.updated += 1;
                events.extend(ended);
            }
        }
    }
    // The owners the document gives, by device number: an account's links
    // are worked out against them (set below, once every account exists),
    // so that a device moved to another owner leaves a listed account's
    // view in this run, not the next.
    let mut owners = Vec::new();
    for d in &doc.devices {
        if let (Some(owner), Some(pk)) = (&d.owner, tx.device_pk(&d.device_id).await?) {
            owners.push((pk, owner.clone()));
        }
    }
    for (i, a) in std::mem::take(&mut doc.accounts).into_iter().enumerate() {
        let at = format!("accounts[{i}]");
        let subs = provisioned_of(hooks.as_ref(), &a, &at)?;
        let (account_id, visible) = apply_account(tx, a, &owners, &at, &mut report).await?;
        for (p, sealer) in subs {
            report.subscriptions.count(provision_subscription(tx, account_id, &visible, p, sealer).await?);
        }
    }
    // Owners last: they may be accounts the document has just created.
    for ((i, d), change) in doc.devices.iter().enumerate().zip(&mut devices) {
        if let Some(owner) = &d.owner {
            let at = format!("devices[{i}].owner");
            let account =
                tx.account_row(owner).await?.ok_or_else(|| invalid(at, format!("unknown account {owner:?}")))?;
            if tx.set_owner(&d.device_id, account.id).await? {
                change.touch();
            }
        }
        report.devices.count(*change);
    }
    // Caches of its own: the document may have changed devices and rules just now.
    let kept = super::Kept::default();
    let mut writer = ReadingWriter::new(Outbox::Skip, &kept);
    for r in &readings {
        writer.write(tx, r).await?;
    }
    let (changed, moved) = writer.finish(tx).await?;
    report.readings.updated += changed;
    events.extend(moved);
    Ok((report, events))
}

/// Makes `rules` the alarm rules of device `device_id` (named `at` in
/// errors), each rule's sensor checked against the device's; `None` when
/// they were so already. A removed or changed rule ends its episode.
pub(crate) async fn set_alarm_rules(
    tx: &impl SubscriptionTx,
    device_id: &str,
    rules: &[AlarmRule],
    at: &str,
) -> StoreResult<Option<Vec<AlarmEvent>>> {
    let pk = tx.device_pk(device_id).await?.ok_or_else(|| StoreError::NotFound(format!("no device {device_id:?}")))?;
    let sensors = tx.device_sensors(pk).await?;
    for (k, rule) in rules.iter().enumerate() {
        if let Some(sensor) = rule.sensor().filter(|s| !sensors.iter().any(|m| m.sensor_id == *s)) {
            return Err(invalid(
                format!("{at}.alarms[{k}].sensor"),
                format!("{sensor:?} is not a sensor of device {device_id:?}"),
            ));
        }
    }
    super::alarms::replace_rules(tx, pk, device_id, rules, now()).await
}

/// Applies `edit` to device `device_id`'s rules as they are in `tx`, and
/// what it came to, with the transitions it ended (as [`set_alarm_rules`]).
pub(crate) async fn edit_alarm_rules(
    tx: &impl SubscriptionTx,
    device_id: &str,
    edit: &RuleEdit,
) -> StoreResult<(RuleEdited, Vec<AlarmEvent>)> {
    let mut rules: Vec<AlarmRule> =
        crate::sql::alarms::rules(tx, Some(device_id)).await?.into_iter().map(|(_, r)| r).collect();
    let edited = match edit {
        RuleEdit::Put(new) => match rules.iter_mut().find(|r| r.name == new.name) {
            Some(old) => {
                *old = new.clone();
                RuleEdited::Replaced
            }
            None => {
                rules.push(new.clone());
                RuleEdited::Added
            }
        },
        RuleEdit::Remove(name) => {
            let before = rules.len();
            rules.retain(|r| r.name != *name);
            if rules.len() == before {
                return Ok((RuleEdited::NoSuchRule, Vec::new()));
            }
            RuleEdited::Removed
        }
    };
    match set_alarm_rules(tx, device_id, &rules, "rule").await? {
        Some(ended) => Ok((edited, ended)),
        None => Ok((RuleEdited::Unchanged, Vec::new())),
    }
}

/// Creates or updates a device and its listed sensors.
async fn upsert_device(tx: &impl SubscriptionTx, d: &DeviceSpec, at: &str) -> StoreResult<Change> {
    let wanted = DeviceFields {
        name: d.name.clone(),
        kind: d.kind.clone(),
        lat: d.lat,
        long: d.long,
        interval_seconds: d.interval_seconds,
    };
    let (pk, mut change) = match tx.device_row(&d.device_id).await? {
        None => (tx.insert_device(&d.device_id, &wanted).await?, Change::Created),
        Some((pk, stored)) if stored == wanted => (pk, Change::Unchanged),
        Some((pk, _)) => {
            tx.update_device(pk, &wanted).await?;
            (pk, Change::Updated)
        }
    };
    if let Some(r) = d.retention
        && tx.set_retention(RetentionOf::Device(pk), r.to_column()).await?
    {
        change.touch();
    }
    let current = tx.device_sensors(pk).await?;
    for write in decide::sensor_writes(&current, &d.sensors, at)? {
        match write {
            SensorWrite::Update { idx, sensor } => tx.put_sensor(pk, idx, sensor, false).await?,
            SensorWrite::Insert { idx, sensor } => tx.put_sensor(pk, idx, sensor, true).await?,
        }
        change.touch();
    }
    Ok(change)
}

/// Resolves a list of device ids to their numbers, in order, naming the first unknown one.
pub(crate) async fn device_pks(tx: &impl super::tx::Tx, ids: &[String], at: &str) -> StoreResult<Vec<i64>> {
    let mut out = Vec::with_capacity(ids.len());
    for (j, id) in ids.iter().enumerate() {
        let pk = tx.device_pk(id).await?;
        out.push(pk.ok_or_else(|| invalid(format!("{at}[{j}]"), format!("unknown device {id:?}")))?);
    }
    Ok(out)
}

/// `list` resolved when it is given.
async fn listed(tx: &impl super::tx::Tx, list: Option<&Vec<String>>, at: String) -> StoreResult<Option<Vec<i64>>> {
    match list {
        Some(list) => Ok(Some(device_pks(tx, list, &at).await?)),
        None => Ok(None),
    }
}

/// Makes account item `a` true; returns the account's number and the devices it sees.
async fn apply_account(
    tx: &impl SubscriptionTx,
    a: AccountSpec,
    owners: &[(i64, String)],
    at: &str,
    report: &mut ApplyReport,
) -> StoreResult<(i64, BTreeSet<i64>)> {
    let stored = tx.account_row(&a.username).await?;
    let (account_id, mut change) = match decide::account_write(&a, stored, at)? {
        AccountWrite::Insert { password_hash, disabled } => {
            (tx.insert_account(&a.username, &password_hash, disabled, now()).await?, Change::Created)
        }
        AccountWrite::Update { id, password_hash, disabled } => {
            tx.update_account(id, password_hash.as_deref(), disabled).await?;
            (id, Change::Updated)
        }
        AccountWrite::Unchanged { id } => (id, Change::Unchanged),
    };
    if let Some(r) = a.retention
        && tx.set_retention(RetentionOf::Account(account_id), r.to_column()).await?
    {
        change.touch();
    }
    let stored = tx.links_of(account_id).await?;
    let mut owned = tx.owned_by(account_id).await?;
    for (pk, owner) in owners {
        if *owner == a.username {
            owned.insert(*pk);
        } else {
            owned.remove(pk);
        }
    }
    let devices = listed(tx, a.devices.as_ref(), format!("{at}.devices")).await?;
    let writes = listed(tx, a.write.as_ref(), format!("{at}.write")).await?;
    let links = decide::account_links(&stored, &owned, devices.as_deref(), writes.as_deref(), at)?;
    if links != stored {
        tx.set_links_of(account_id, &links).await?;
        change.touch();
    }
    let visible: BTreeSet<i64> = links.into_keys().collect();
    report.accounts.count(change);
    for (k, key) in a.api_keys.iter().enumerate() {
        let kat = format!("{at}.api_keys[{k}]");
        let scope = match &key.devices {
            Some(KeyDevices::Only(list)) => {
                let pks = device_pks(tx, list, &format!("{kat}.devices")).await?;
                ScopeRequest::Only(decide::key_scope(&pks, &visible, &kat)?)
            }
            Some(KeyDevices::All) => ScopeRequest::All,
            None => ScopeRequest::Keep,
        };
        report.api_keys.count(upsert_key(tx, KeyKind::Api, account_id, &key.id, scope, key.revoked, &kat).await?);
    }
    for (k, key) in a.webhook_keys.iter().enumerate() {
        let kat = format!("{at}.webhook_keys[{k}]");
        let change = upsert_key(tx, KeyKind::Webhook, account_id, &key.key, ScopeRequest::All, key.revoked, &kat);
        report.webhook_keys.count(change.await?);
    }
    Ok((account_id, visible))
}

/// Makes a key item true: an API key (`scope` its device list) or a
/// webhook key (never scoped).
async fn upsert_key(
    tx: &impl SubscriptionTx,
    kind: KeyKind,
    account_id: i64,
    id: &str,
    scope: ScopeRequest,
    revoked: Option<bool>,
    at: &str,
) -> StoreResult<Change> {
    let digest = key_digest(id);
    let stored = tx.key_row(kind, &digest).await?;
    let scope = scope.resolve(stored.as_ref());
    let what = if kind == KeyKind::Api { "API key id" } else { "webhook key" };
    let (key_id, change) = match decide::key_write(account_id, stored, scope.as_ref(), revoked, what, at)? {
        KeyWrite::Unchanged => return Ok(Change::Unchanged),
        KeyWrite::Update { id: key_id, revoked } => {
            tx.update_key(kind, key_id, Some(scope.is_some()), revoked).await?;
            (key_id, Change::Updated)
        }
        KeyWrite::Insert { revoked } => {
            let prefix = key_prefix(id);
            let scoped = scope.is_some();
            let new = NewKey { kind, digest: &digest, prefix: &prefix, account_id, scoped, revoked, created_at: now() };
            (tx.insert_key(new).await?, Change::Created)
        }
    };
    if kind == KeyKind::Api {
        tx.set_key_devices(key_id, &scope.unwrap_or_default()).await?;
    }
    Ok(change)
}

/// Makes provisioned subscription `p` of account `account` (which sees
/// `visible`) true, found by its name.
async fn provision_subscription(
    tx: &impl SubscriptionTx,
    account: i64,
    visible: &BTreeSet<i64>,
    p: &ProvisionedSubscription,
    sealer: &dyn Sealer,
) -> StoreResult<Change> {
    let listed = listed(tx, p.devices.as_ref(), format!("{}.devices", p.at)).await?;
    let devices = subscription_devices(listed.as_deref(), visible, &p.at)?;
    let stored = tx.subscription_row(account, &p.name).await?;
    let (row, change) = match subscription_write(p, devices, stored, sealer)? {
        SubscriptionWrite::Unchanged => return Ok(Change::Unchanged),
        SubscriptionWrite::Insert(row) => (row, Change::Created),
        SubscriptionWrite::Update(row) => (row, Change::Updated),
    };
    tx.put_subscription(account, &p.name, &row).await?;
    Ok(change)
}

/// Revokes the API key whose id is `id_or_prefix`, or whose shown prefix
/// it is when exactly one unrevoked key has that prefix; its prefix.
pub(crate) async fn revoke_api_key(tx: &impl SubscriptionTx, id_or_prefix: &str) -> StoreResult<String> {
    let found = tx.api_keys_matching(&key_digest(id_or_prefix), id_or_prefix).await?;
    match found.as_slice() {
        [(id, prefix)] => {
            tx.update_key(KeyKind::Api, *id, None, true).await?;
            Ok(prefix.clone())
        }
        [] => Err(StoreError::NotFound(format!("no API key matches {:?}", key_prefix(id_or_prefix)))),
        _ => Err(StoreError::Conflict(format!("several keys start with {id_or_prefix:?}: give the whole key id"))),
    }
}
