//! What the API reads of alarms, once for every backend: each device's
//! rules with their states as stored and replayed ([`super::checkpoint`]),
//! the active ones of every visible device, and the transitions recorded.

use super::checkpoint::{self, Rules};
use crate::alarm::{Alarm, AlarmEvent};
use crate::sql::alarms;
use crate::sql::{DeviceHours, Sql};
use crate::{Scope, StoreResult};
use sensorhub_core::alarm::{AlarmRule, AlarmState};

/// The rules of devices `pks` with their states as stored and replayed
/// ([`checkpoint::load`]), by device; devices without rules are left out.
async fn loaded(
    c: &impl DeviceHours,
    pks: &[i64],
) -> StoreResult<crate::decide::FastMap<i64, Vec<(AlarmRule, AlarmState)>>> {
    let rules = alarms::rules_only_of_many(c, pks).await?;
    let devices = rules.into_iter().map(|(pk, rules)| (pk, Rules::from(rules))).collect();
    let loaded = checkpoint::load(c, devices).await?;
    Ok(loaded.into_iter().map(|(pk, (rules, states, _))| (pk, rules.iter().cloned().zip(states).collect())).collect())
}

/// The alarms of device `device_id` visible in `scope`, in rule order;
/// `None` when the device is not visible.
pub(crate) async fn alarms_of(c: &impl DeviceHours, scope: Scope, device_id: &str) -> StoreResult<Option<Vec<Alarm>>> {
    let Some(device) = crate::sql::access::find_device(c, scope, device_id).await? else { return Ok(None) };
    let rules = loaded(c, &[device.pk]).await?.remove(&device.pk).unwrap_or_default();
    let device_id = device_id.to_owned();
    Ok(Some(rules.into_iter().map(|(rule, state)| Alarm { device_id: device_id.clone(), rule, state }).collect()))
}

/// The alarms of those of devices `ids` that exist, each in rule order
/// (empty: no rules), by device id; a few queries for all of them.
pub(crate) async fn alarms_of_many(c: &impl DeviceHours, ids: &[&str]) -> StoreResult<Vec<(String, Vec<Alarm>)>> {
    let devices = alarms::device_pks(c, ids).await?;
    let pks: Vec<i64> = devices.iter().map(|(pk, _)| *pk).collect();
    let mut loaded = loaded(c, &pks).await?;
    Ok(devices
        .into_iter()
        .map(|(pk, device_id)| {
            let rules = loaded.remove(&pk).unwrap_or_default();
            let alarms =
                rules.into_iter().map(|(rule, state)| Alarm { device_id: device_id.clone(), rule, state }).collect();
            (device_id, alarms)
        })
        .collect())
}

/// The active alarms of every device visible in `scope`, highest level first.
pub(crate) async fn active(c: &impl DeviceHours, scope: Scope) -> StoreResult<Vec<Alarm>> {
    let devices = alarms::active_devices(c, scope).await?;
    let pks: Vec<i64> = devices.iter().map(|(pk, _)| *pk).collect();
    let mut loaded = loaded(c, &pks).await?;
    let mut active = Vec::new();
    for (pk, device_id) in devices {
        let rules = loaded.remove(&pk).unwrap_or_default();
        active.extend(rules.into_iter().filter(|(_, state)| state.active).map(|(rule, state)| Alarm {
            device_id: device_id.clone(),
            rule,
            state,
        }));
    }
    crate::alarm::most_severe_first(&mut active);
    Ok(active)
}

/// The transitions of device `device_id` (visible in `scope`) recorded
/// (by the server's clock, `at`) in `range`, oldest first; `None` when the device is not visible.
pub(crate) async fn events_of(
    c: &impl Sql,
    scope: Scope,
    device_id: &str,
    range: sensorhub_core::time::TimeRange,
) -> StoreResult<Option<Vec<AlarmEvent>>> {
    let Some(device) = crate::sql::access::find_device(c, scope, device_id).await? else { return Ok(None) };
    Ok(Some(alarms::events(c, device.pk, device_id, range.start, range.end).await?))
}
