//! Alarms on SQLite: the steps written once ([`crate::write::alarms`],
//! [`crate::sql::alarms`]), run on the reader pool or, for what writes,
//! in one `IMMEDIATE` transaction on the writer.

use super::SqliteStore;
use super::tx::{in_tx, on};
use crate::alarm::{Alarm, AlarmEvent, RuleEdit, RuleEdited, SilenceDue};
use crate::sql::alarms as sql;
use crate::write::{alarm_reads, alarms, provision};
use crate::{Scope, StoreResult};
use async_trait::async_trait;
use sensorhub_core::alarm::AlarmRule;
use sensorhub_core::time::TimeRange;

#[async_trait]
impl crate::store::Alarms for SqliteStore {
    async fn alarm_rules(&self, device_id: Option<&str>) -> StoreResult<Vec<(String, AlarmRule)>> {
        let id = device_id.map(str::to_owned);
        self.reads.run(move |c| on(c, async |c| sql::rules(c, id.as_deref()).await)).await
    }

    async fn set_alarm_rules(&self, device_id: &str, rules: Vec<AlarmRule>) -> StoreResult<bool> {
        let id = device_id.to_owned();
        let set = move |c: &mut _| in_tx(c, async |tx| provision::set_alarm_rules(tx, &id, &rules, "rules").await);
        let ended = self.writes.run(set).await?;
        let changed = ended.is_some();
        self.observers.alarms(&ended.unwrap_or_default()).await;
        Ok(changed)
    }

    async fn edit_alarm_rules(&self, device_id: &str, edit: RuleEdit) -> StoreResult<RuleEdited> {
        let id = device_id.to_owned();
        let change = move |c: &mut _| in_tx(c, async |tx| provision::edit_alarm_rules(tx, &id, &edit).await);
        let (edited, ended) = self.writes.run(change).await?;
        self.observers.alarms(&ended).await;
        Ok(edited)
    }

    async fn alarms(&self, scope: Scope, device_id: &str) -> StoreResult<Option<Vec<Alarm>>> {
        let id = device_id.to_owned();
        self.reads.run_short(move |c| on(c, async |c| alarm_reads::alarms_of(c, scope, &id).await)).await
    }

    async fn alarms_of_devices(&self, device_ids: &[&str]) -> StoreResult<Vec<(String, Vec<Alarm>)>> {
        let ids: Vec<String> = device_ids.iter().map(|id| (*id).to_owned()).collect();
        self.reads
            .run(move |c| {
                on(c, async |c| {
                    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
                    alarm_reads::alarms_of_many(c, &ids).await
                })
            })
            .await
    }

    async fn active_alarms(&self, scope: Scope) -> StoreResult<Vec<Alarm>> {
        self.reads.run(move |c| on(c, async |c| alarm_reads::active(c, scope).await)).await
    }

    async fn alarm_events(
        &self,
        scope: Scope,
        device_id: &str,
        range: TimeRange,
    ) -> StoreResult<Option<Vec<AlarmEvent>>> {
        let id = device_id.to_owned();
        self.reads.run(move |c| on(c, async |c| alarm_reads::events_of(c, scope, &id, range).await)).await
    }

    async fn acknowledge_alarm(&self, device_id: &str, rule: &str, now: i64) -> StoreResult<AlarmEvent> {
        let (id, rule, kept) = (device_id.to_owned(), rule.to_owned(), self.kept.clone());
        let acknowledge =
            move |c: &mut _| in_tx(c, async |tx| alarms::acknowledge(tx, &kept.alarms, &id, &rule, now).await);
        let (event, recorded) = self.writes.run(acknowledge).await?;
        if recorded {
            self.observers.alarms(std::slice::from_ref(&event)).await;
        }
        Ok(event)
    }

    async fn alarm_generation(&self) -> StoreResult<i64> {
        self.reads.run_short(|c| on(c, async |c| sql::generation(c).await)).await
    }

    async fn silence_due(&self, started: i64) -> StoreResult<Vec<SilenceDue>> {
        self.reads.run(move |c| on(c, async |c| alarms::silence_due(c, started).await)).await
    }

    async fn check_silence(&self, due: Vec<SilenceDue>, now: i64, started: i64) -> StoreResult<Vec<SilenceDue>> {
        let kept = self.kept.clone();
        let check =
            move |c: &mut _| in_tx(c, async |tx| alarms::check_silence(tx, &kept.alarms, &due, now, started).await);
        let (events, next) = self.writes.run(check).await?;
        self.observers.alarms(&events).await;
        Ok(next)
    }
}
