//! Alarms go out at once: an observer of the store's commits that wakes
//! the delivery worker when a transaction queued deliveries of alarm
//! transitions, rather than leave them for its next poll.

use super::worker::WorkerHandle;
use async_trait::async_trait;
use sensorhub_core::model::ReadingInput;
use sensorhub_store::alarm::AlarmEvent;
use sensorhub_store::observe::AfterCommit;

/// Wakes the worker when a committed transaction queued deliveries of
/// alarm transitions, so that an alarm goes out within moments rather
/// than at the next poll. (Readings' deliveries wait for the poll: they
/// come in every transaction, and a claim per commit would take the writer
/// from ingest.) Registered with the store by `serve`.
pub struct AlarmWake(pub WorkerHandle);

#[async_trait]
impl AfterCommit for AlarmWake {
    async fn committed(&self, _: &[ReadingInput], _: usize) {}

    async fn alarms(&self, events: &[AlarmEvent]) {
        if events.iter().any(|e| e.queued > 0) {
            self.0.wake();
        }
    }
}
