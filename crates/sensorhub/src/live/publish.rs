//! [`Publisher`]: the live hub as the store's after-commit observer
//! ([`sensorhub_store::observe`]): every write of readings in the process
//! (webhook, MQTT, line protocol, `import`, `apply`), and every alarm
//! transition, reaches open streams once it has committed, without any
//! writer knowing about them.

use super::{Live, LiveAlarm, LiveHub, LiveReading};
use async_trait::async_trait;
use sensorhub_core::model::ReadingInput;
use sensorhub_store::alarm::AlarmEvent;
use sensorhub_store::observe::AfterCommit;
use std::sync::Arc;

/// Publishes committed readings to a [`LiveHub`].
pub struct Publisher(pub Arc<LiveHub>);

#[async_trait]
impl AfterCommit for Publisher {
    async fn committed(&self, readings: &[ReadingInput], left_out: usize) {
        self.0.metrics.live_unpublished(left_out);
        self.0.publish(readings.iter().map(|r| Live::Reading(LiveReading::of(r))).collect()).await;
    }

    async fn alarms(&self, events: &[AlarmEvent]) {
        self.0.publish(events.iter().map(|e| Live::Alarm(LiveAlarm::of(e))).collect()).await;
    }
}
