//! [`PublishingStore`]: a [`Store`] that forwards every call and, after a
//! write of readings succeeds, publishes what it stored to the live hub,
//! so that every writer in the process (webhook, MQTT, `import`, `apply`)
//! feeds open streams without knowing about them.

use super::{LiveHub, LiveReading};
use async_trait::async_trait;
use sensorhub_core::model::{Device, ReadingInput};
use sensorhub_core::provision::Provision;
use sensorhub_core::retention::Retention;
use sensorhub_core::secret::KeyDigest;
use sensorhub_core::time::TimeRange;
use sensorhub_store::hooks::{
    ClaimRequest, Claimed, DeliveryRecord, Finished, NewSubscription, Outbox, ProvisionedHooks, Replay, Subscription,
};
use sensorhub_store::{
    AccountAuth, AccountSummary, ApiKeyAuth, ApiKeySummary, ApplyReport, DeleteReport, DeviceHandle, ImportReport,
    Installation, LatestValue, PartialImport, PoolStatus, ReadingSource, ReadingStream, RetentionReport, Scope, Store,
    StoreResult, StoredHour, WebhookKeyAuth, Window,
};
use std::sync::{Arc, Mutex};

/// Readings of one import or apply that are published; an import of more
/// sends events for its first this many (a bulk load is not live data).
pub const PUBLISH_PER_WRITE: usize = 10_000;

/// A store whose writes of readings are published to a [`LiveHub`].
pub struct PublishingStore {
    inner: Arc<dyn Store>,
    hub: Arc<LiveHub>,
}

impl PublishingStore {
    /// `inner`, publishing to `hub`.
    pub fn new(inner: Arc<dyn Store>, hub: Arc<LiveHub>) -> Self {
        Self { inner, hub }
    }

    /// Publishes the first `n` tapped readings, and counts the ones left out.
    async fn publish_tapped(&self, tap: &Tap, n: u64) {
        let (mut readings, seen) = tap.take();
        let n = usize::try_from(n).unwrap_or(usize::MAX).min(seen);
        readings.truncate(n);
        self.hub.metrics.live_unpublished(n - readings.len());
        self.hub.publish(readings).await;
    }
}

/// What an import read from its source: the first [`PUBLISH_PER_WRITE`]
/// readings, and how many there were.
#[derive(Clone, Default)]
struct Tap(Arc<Mutex<(Vec<LiveReading>, usize)>>);

impl Tap {
    /// `source`, recording each reading it yields.
    fn wrap(&self, source: ReadingSource) -> ReadingSource {
        let tap = self.clone();
        Box::new(source.inspect(move |item| {
            if let Ok(reading) = item {
                let mut seen = tap.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if seen.1 < PUBLISH_PER_WRITE {
                    seen.0.push(LiveReading::of(reading));
                }
                seen.1 += 1;
            }
        }))
    }

    fn take(&self) -> (Vec<LiveReading>, usize) {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

#[async_trait]
impl Store for PublishingStore {
    async fn ingest(&self, reading: ReadingInput) -> StoreResult<()> {
        let live = LiveReading::of(&reading);
        self.inner.ingest(reading).await?;
        self.hub.publish(vec![live]).await;
        Ok(())
    }

    async fn import(&self, source: ReadingSource, outbox: Outbox) -> StoreResult<ImportReport> {
        let tap = Tap::default();
        let report = self.inner.import(tap.wrap(source), outbox).await?;
        self.publish_tapped(&tap, u64::MAX).await;
        Ok(report)
    }

    async fn import_batched(&self, source: ReadingSource, outbox: Outbox) -> Result<ImportReport, PartialImport> {
        let tap = Tap::default();
        let result = self.inner.import_batched(tap.wrap(source), outbox).await;
        // What was committed before an error is a prefix of the input.
        let committed = match &result {
            Ok(_) => u64::MAX,
            Err(partial) => partial.committed.readings,
        };
        self.publish_tapped(&tap, committed).await;
        result
    }

    async fn apply_with_hooks(
        &self,
        doc: Provision,
        readings: Vec<ReadingInput>,
        hooks: Option<ProvisionedHooks>,
    ) -> StoreResult<ApplyReport> {
        let live: Vec<LiveReading> = readings.iter().take(PUBLISH_PER_WRITE).map(LiveReading::of).collect();
        let left_out = readings.len() - live.len();
        let report = self.inner.apply_with_hooks(doc, readings, hooks).await?;
        self.hub.metrics.live_unpublished(left_out);
        self.hub.publish(live).await;
        Ok(report)
    }

    async fn ping(&self) -> StoreResult<()> {
        self.inner.ping().await
    }

    async fn access_generation(&self) -> StoreResult<i64> {
        self.inner.access_generation().await
    }

    async fn installation_id(&self) -> StoreResult<String> {
        self.inner.installation_id().await
    }

    async fn installation_fact(&self, key: &str) -> StoreResult<Option<String>> {
        self.inner.installation_fact(key).await
    }

    async fn record_installation_fact(&self, key: &str, value: &str) -> StoreResult<()> {
        self.inner.record_installation_fact(key, value).await
    }

    async fn account_auth(&self, username: &str) -> StoreResult<Option<AccountAuth>> {
        self.inner.account_auth(username).await
    }

    async fn api_key_auth(&self, digest: &KeyDigest) -> StoreResult<Option<ApiKeyAuth>> {
        self.inner.api_key_auth(digest).await
    }

    async fn webhook_key_auth(&self, digest: &KeyDigest) -> StoreResult<Option<WebhookKeyAuth>> {
        self.inner.webhook_key_auth(digest).await
    }

    fn pool_status(&self) -> PoolStatus {
        self.inner.pool_status()
    }

    fn ingest_waiting(&self) -> usize {
        self.inner.ingest_waiting()
    }

    async fn list_devices(&self, scope: Scope) -> StoreResult<Vec<Device>> {
        self.inner.list_devices(scope).await
    }

    async fn find_device(&self, scope: Scope, device_id: &str) -> StoreResult<Option<DeviceHandle>> {
        self.inner.find_device(scope, device_id).await
    }

    async fn may_write(&self, account_id: i64, device_pk: i64) -> StoreResult<bool> {
        self.inner.may_write(account_id, device_pk).await
    }

    async fn grant_write_to_viewers(&self) -> StoreResult<u64> {
        self.inner.grant_write_to_viewers().await
    }

    async fn delete_readings(&self, device_id: &str, range: TimeRange) -> StoreResult<DeleteReport> {
        self.inner.delete_readings(device_id, range).await
    }

    async fn expire_readings(&self, default: Retention, now: i64) -> StoreResult<RetentionReport> {
        self.inner.expire_readings(default, now).await
    }

    async fn read_hours(&self, device_pk: i64, from: i64, to: i64, limit: usize) -> StoreResult<Vec<StoredHour>> {
        self.inner.read_hours(device_pk, from, to, limit).await
    }

    async fn add_hour_summaries(&self, batch: usize) -> StoreResult<u64> {
        // The readings do not change: nothing to publish.
        self.inner.add_hour_summaries(batch).await
    }

    async fn latest(&self, scope: Scope, device_id: &str) -> StoreResult<Option<(DeviceHandle, Vec<LatestValue>)>> {
        self.inner.latest(scope, device_id).await
    }

    fn read_readings(&self, device: &DeviceHandle, range: TimeRange) -> ReadingStream {
        self.inner.read_readings(device, range)
    }

    async fn read_window(&self, scope: Scope, device_id: &str, range: TimeRange) -> StoreResult<Option<Window>> {
        self.inner.read_window(scope, device_id, range).await
    }

    async fn is_empty(&self) -> StoreResult<bool> {
        self.inner.is_empty().await
    }

    async fn accounts(&self) -> StoreResult<Vec<AccountSummary>> {
        self.inner.accounts().await
    }

    async fn api_keys(&self) -> StoreResult<Vec<ApiKeySummary>> {
        self.inner.api_keys().await
    }

    async fn revoke_api_key(&self, id_or_prefix: &str) -> StoreResult<String> {
        self.inner.revoke_api_key(id_or_prefix).await
    }

    async fn export(&self) -> StoreResult<Installation> {
        self.inner.export().await
    }

    async fn export_hour_count(&self) -> StoreResult<u64> {
        self.inner.export_hour_count().await
    }

    async fn export_hours(&self, device_id: &str, after: Option<i64>, limit: usize) -> StoreResult<Vec<StoredHour>> {
        self.inner.export_hours(device_id, after, limit).await
    }

    async fn restore(&self, rows: Installation) -> StoreResult<()> {
        self.inner.restore(rows).await
    }

    async fn restore_hours(&self, device_id: &str, hours: Vec<StoredHour>) -> StoreResult<()> {
        self.inner.restore_hours(device_id, hours).await
    }

    async fn add_subscription(&self, sub: NewSubscription) -> StoreResult<()> {
        self.inner.add_subscription(sub).await
    }

    async fn subscriptions(&self) -> StoreResult<Vec<Subscription>> {
        self.inner.subscriptions().await
    }

    async fn remove_subscription(&self, id: &str) -> StoreResult<()> {
        self.inner.remove_subscription(id).await
    }

    async fn replace_subscription_secret(&self, id: &str, sealed_secret: Vec<u8>) -> StoreResult<()> {
        self.inner.replace_subscription_secret(id, sealed_secret).await
    }

    async fn set_subscription_enabled(&self, id: &str, enabled: bool) -> StoreResult<()> {
        self.inner.set_subscription_enabled(id, enabled).await
    }

    async fn claim_deliveries(&self, now: i64, lease: i64, req: &ClaimRequest) -> StoreResult<Claimed> {
        self.inner.claim_deliveries(now, lease, req).await
    }

    async fn finish_deliveries(&self, now: i64, done: Vec<Finished>) -> StoreResult<()> {
        self.inner.finish_deliveries(now, done).await
    }

    async fn deliveries(&self, id: &str, failed_only: bool) -> StoreResult<Vec<DeliveryRecord>> {
        self.inner.deliveries(id, failed_only).await
    }

    async fn replay_deliveries(&self, id: &str, which: Replay, now: i64) -> StoreResult<u64> {
        self.inner.replay_deliveries(id, which, now).await
    }

    async fn outbox_backlog(&self) -> StoreResult<u64> {
        self.inner.outbox_backlog().await
    }

    async fn prune_failed_deliveries(&self, before: i64) -> StoreResult<u64> {
        self.inner.prune_failed_deliveries(before).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::Next;
    use crate::metrics::Metrics;

    #[tokio::test]
    async fn every_write_of_readings_is_published_once_stored() {
        let dir = tempfile::tempdir().expect("dir");
        let db = dir.path().join("t.db");
        let raw = sensorhub_store::open(db.to_str().expect("utf-8")).await.expect("open");
        let hub = LiveHub::new(None, Arc::new(Metrics::default()));
        let store = PublishingStore::new(raw, hub.clone());
        let doc = r#"{"devices":[{"device_id":"D","name":"d","type":"AWLR","lat":0,"long":0,"interval_seconds":60,
            "sensors":[{"sensor_id":"D-a","name":"a","type":"T","unit":"cm"}]}]}"#;
        let mut doc: Provision = sensorhub_core::provision::parse_json(doc).expect("parses");
        let readings = doc.check().expect("valid");
        store.apply(doc, readings).await.expect("applies");
        let mut sub = hub.subscribe("D", None);
        let input = |t: i64, sensor: &str| ReadingInput {
            device_id: "D".into(),
            timestamp: t,
            values: vec![sensorhub_core::model::ValueInput { sensor_id: sensor.into(), value: 1.25, unit: None }],
            origin: sensorhub_core::model::Origin::Item("t".into()),
        };
        store.ingest(input(60, "D-a")).await.expect("ingest");
        assert!(store.ingest(input(120, "D-nope")).await.is_err(), "a refused reading is not published");
        store.import(Box::new([Ok(input(180, "D-a"))].into_iter()), Outbox::Skip).await.expect("import");
        store.import_batched(Box::new([Ok(input(240, "D-a"))].into_iter()), Outbox::Skip).await.expect("import");
        for t in [60, 180, 240] {
            let Next::Event(e) = sub.next().await else { panic!("an event") };
            assert_eq!(
                e.reading,
                LiveReading { device_id: "D".into(), timestamp: t, values: vec![("D-a".into(), 1.25)] }
            );
        }
        hub.close();
        assert!(matches!(sub.next().await, Next::Closed), "nothing else was published");
    }
}
