//! Alarms on PostgreSQL: the steps written once ([`crate::write::alarms`],
//! [`crate::sql::alarms`]), run on a pooled connection or, for what writes,
//! in one transaction under the write lock, so that several instances
//! record each transition once.

use super::{PgStore, lookup_name};
use crate::alarm::{Alarm, AlarmEvent, RuleEdit, RuleEdited, SilenceDue};
use crate::sql::alarms as sql;
use crate::write::{alarm_reads, alarms, provision};
use crate::{Scope, StoreResult};
use async_trait::async_trait;
use sensorhub_core::alarm::AlarmRule;
use sensorhub_core::time::TimeRange;

#[async_trait]
impl crate::store::Alarms for PgStore {
    async fn alarm_rules(&self, device_id: Option<&str>) -> StoreResult<Vec<(String, AlarmRule)>> {
        self.on(async |c| sql::rules(c, device_id).await).await
    }

    async fn set_alarm_rules(&self, device_id: &str, rules: Vec<AlarmRule>) -> StoreResult<bool> {
        let ended = self.in_tx(async |tx| provision::set_alarm_rules(tx, device_id, &rules, "rules").await).await?;
        let changed = ended.is_some();
        self.observers.alarms(&ended.unwrap_or_default()).await;
        Ok(changed)
    }

    async fn edit_alarm_rules(&self, device_id: &str, edit: RuleEdit) -> StoreResult<RuleEdited> {
        let device_id = &*lookup_name(device_id);
        let (edited, ended) = self.in_tx(async |tx| provision::edit_alarm_rules(tx, device_id, &edit).await).await?;
        self.observers.alarms(&ended).await;
        Ok(edited)
    }

    async fn alarms(&self, scope: Scope, device_id: &str) -> StoreResult<Option<Vec<Alarm>>> {
        let device_id = &*lookup_name(device_id);
        self.on(async |c| alarm_reads::alarms_of(c, scope, device_id).await).await
    }

    async fn alarms_of_devices(&self, device_ids: &[&str]) -> StoreResult<Vec<(String, Vec<Alarm>)>> {
        let names: Vec<_> = device_ids.iter().map(|id| lookup_name(id)).collect();
        let device_ids: Vec<&str> = names.iter().map(|id| &**id).collect();
        self.on(async |c| alarm_reads::alarms_of_many(c, &device_ids).await).await
    }

    async fn active_alarms(&self, scope: Scope) -> StoreResult<Vec<Alarm>> {
        self.on(async |c| alarm_reads::active(c, scope).await).await
    }

    async fn alarm_events(
        &self,
        scope: Scope,
        device_id: &str,
        range: TimeRange,
    ) -> StoreResult<Option<Vec<AlarmEvent>>> {
        let device_id = &*lookup_name(device_id);
        self.on(async |c| alarm_reads::events_of(c, scope, device_id, range).await).await
    }

    async fn acknowledge_alarm(&self, device_id: &str, rule: &str, now: i64) -> StoreResult<AlarmEvent> {
        let (device_id, rule) = (&*lookup_name(device_id), &*lookup_name(rule));
        let (event, recorded) =
            self.in_tx(async |tx| alarms::acknowledge(tx, &self.kept.alarms, device_id, rule, now).await).await?;
        if recorded {
            self.observers.alarms(std::slice::from_ref(&event)).await;
        }
        Ok(event)
    }

    async fn alarm_generation(&self) -> StoreResult<i64> {
        self.on(async |c| sql::generation(c).await).await
    }

    async fn silence_due(&self, started: i64) -> StoreResult<Vec<SilenceDue>> {
        self.on(async |c| alarms::silence_due(c, started).await).await
    }

    async fn check_silence(&self, due: Vec<SilenceDue>, now: i64, started: i64) -> StoreResult<Vec<SilenceDue>> {
        let (events, next) =
            self.in_tx(async |tx| alarms::check_silence(tx, &self.kept.alarms, &due, now, started).await).await?;
        self.observers.alarms(&events).await;
        Ok(next)
    }
}
