//! The silence watch: raises silence alarms by the server's clock, never
//! only when a reading arrives (a station that sends nothing sends no
//! reading to notice it by). It keeps every silence rule's next due time
//! in memory, sleeps until the earliest (or a second, to notice changed
//! rules through the store's alarm generation), and asks the store to
//! check those due in one transaction: a rule that heard data meanwhile
//! is simply due later. A silence alarm cleared by data on this instance
//! is watched again at once (the watch hears of it after its commit); it
//! reloads every rule's due time when the rules change and every
//! `RELOAD` (one cleared on another instance is watched again from
//! then). Silence is counted from the later of a station's last data and
//! this server's start, so a server that was down does not raise for
//! stations that reported shortly before. Several instances may each run
//! it: the store records each transition once.

use sensorhub_core::alarm::TransitionKind;
use sensorhub_store::Store;
use sensorhub_store::alarm::{AlarmEvent, SilenceDue};
use sensorhub_store::observe::AfterCommit;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// How often the watch looks whether rules changed, at the most.
const LOOK: Duration = Duration::from_secs(1);
/// How often every rule's due time is read again.
const RELOAD: Duration = Duration::from_secs(30);
/// Rules checked per transaction.
const BATCH: usize = 1000;

/// Starts the watch; it runs as long as the process. `started` is this
/// server's start (seconds).
pub fn spawn(store: Arc<dyn Store>, started: i64) {
    let cleared = Arc::new(Cleared::default());
    store.observe(cleared.clone());
    tokio::spawn(async move {
        let mut watch = Watch {
            store,
            started,
            generation: None,
            loaded: std::time::Instant::now(),
            due: BinaryHeap::new(),
            rules: HashSet::new(),
            cleared,
        };
        loop {
            if let Err(e) = watch.step().await {
                tracing::warn!(error = %e, "the silence watch failed; it tries again in a second");
            }
            let wait = watch.wait();
            // Woken early by a clear, to watch that rule again at once.
            let _ = tokio::time::timeout(wait, watch.cleared.wake.notified()).await;
        }
    });
}

/// The alarms cleared on this instance since the watch last looked: each
/// is checked at once, which tells when it is next due (a level or rate
/// rule's clear is checked too, and found not to be a silence rule).
#[derive(Default)]
struct Cleared {
    alarms: Mutex<Vec<SilenceDue>>,
    wake: tokio::sync::Notify,
}

#[async_trait::async_trait]
impl AfterCommit for Cleared {
    async fn committed(&self, _readings: &[sensorhub_core::model::ReadingInput], _left_out: usize) {}

    async fn alarms(&self, events: &[AlarmEvent]) {
        let cleared = events.iter().filter(|e| e.transition == TransitionKind::Cleared).map(|e| SilenceDue {
            at: e.at,
            device_pk: e.device_pk,
            device_id: e.device_id.clone(),
            rule: e.rule.clone(),
        });
        let mut alarms = self.alarms.lock().unwrap_or_else(PoisonError::into_inner);
        let before = alarms.len();
        alarms.extend(cleared);
        if alarms.len() > before {
            self.wake.notify_one();
        }
    }
}

struct Watch {
    store: Arc<dyn Store>,
    started: i64,
    /// The alarm generation the due times were loaded at.
    generation: Option<i64>,
    /// When they were loaded.
    loaded: std::time::Instant,
    /// Every silence rule's next due time, earliest first.
    due: BinaryHeap<Reverse<SilenceDue>>,
    /// The silence rules loaded (device, rule).
    rules: HashSet<(i64, String)>,
    cleared: Arc<Cleared>,
}

impl Watch {
    /// Reloads the rules when they changed, then checks those due.
    async fn step(&mut self) -> sensorhub_store::StoreResult<()> {
        let generation = self.store.alarm_generation().await?;
        if self.generation != Some(generation) || self.loaded.elapsed() >= RELOAD {
            let due = self.store.silence_due(self.started).await?;
            self.rules = due.iter().map(|d| (d.device_pk, d.rule.clone())).collect();
            self.due = due.into_iter().filter(|d| d.at != SilenceDue::ACTIVE).map(Reverse).collect();
            self.generation = Some(generation);
            self.loaded = std::time::Instant::now();
        }
        let cleared = std::mem::take(&mut *self.cleared.alarms.lock().unwrap_or_else(PoisonError::into_inner));
        // Due now: the check finds it heard data and says when it is next due.
        let silence = cleared.into_iter().filter(|d| self.rules.contains(&(d.device_pk, d.rule.clone())));
        self.due.extend(silence.map(Reverse));
        let now = now();
        loop {
            let mut batch = Vec::new();
            while batch.len() < BATCH && self.due.peek().is_some_and(|Reverse(d)| d.at <= now) {
                batch.extend(self.due.pop().map(|Reverse(d)| d));
            }
            if batch.is_empty() {
                return Ok(());
            }
            let next = match self.store.check_silence(batch.clone(), now, self.started).await {
                Ok(next) => next,
                Err(e) => {
                    // Looked at again at the next step.
                    self.due.extend(batch.into_iter().map(Reverse));
                    return Err(e);
                }
            };
            self.due.extend(next.into_iter().map(Reverse));
        }
    }

    /// How long to sleep: until the next due time, at most [`LOOK`].
    fn wait(&self) -> Duration {
        match self.due.peek() {
            Some(Reverse(d)) => {
                Duration::from_secs(u64::try_from(d.at - now()).unwrap_or(0)).clamp(Duration::from_millis(50), LOOK)
            }
            None => LOOK,
        }
    }
}

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// This server's start for the watch: now, rounded up to the second. The
/// rules count whole seconds, so a start rounded down would give a
/// station up to a second less than its rule's time after a restart.
pub fn started_now() -> i64 {
    let t = jiff::Timestamp::now();
    t.as_second() + i64::from(t.subsec_nanosecond() > 0)
}
