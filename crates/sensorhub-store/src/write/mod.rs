//! The write steps, written once for every backend against the
//! transaction seam ([`tx::Tx`]): the reading writer, removals and
//! rewrites of stored hours. Each backend opens the transaction, runs a
//! step with its own [`tx::Tx`], and commits.

pub(crate) mod alarm_cache;
pub(crate) mod alarm_envelope;
pub(crate) mod alarm_reads;
pub(crate) mod alarms;
pub(crate) mod checkpoint;
pub(crate) mod copy;
pub(crate) mod device_alarms;
pub(crate) mod device_cache;
pub(crate) mod hour_cache;
pub(crate) mod migrate;
pub(crate) mod provision;
pub(crate) mod provision_tx;
pub(crate) mod readings;
pub(crate) mod remove;
pub(crate) mod subscription_cache;
pub(crate) mod tx;
pub(crate) mod upgrade;

/// What a store keeps between its write transactions, each part trusted
/// only while a mark in the database says it is still what is stored.
#[derive(Default)]
pub(crate) struct Kept {
    /// Each device's alarm rules and states.
    pub(crate) alarms: alarm_cache::AlarmCache,
    /// Each device's key and sensors.
    pub(crate) devices: device_cache::DeviceCache,
    /// The hours written last, decoded.
    pub(crate) hours: hour_cache::HourCache,
    /// Each device's webhook subscriptions.
    pub(crate) subscriptions: subscription_cache::SubscriptionCache,
}
