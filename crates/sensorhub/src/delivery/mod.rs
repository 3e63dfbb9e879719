//! Outgoing webhooks (issue 15): partners' subscriptions are signed by the
//! Standard Webhooks scheme, and their secrets are sealed at rest.

pub mod alarm_wake;
pub mod batch;
pub mod headers;
pub mod key_file;
pub mod lane;
pub mod pool;
pub mod provision;
pub mod record;
pub mod retry;
pub mod seal;
pub mod send;
pub mod sign;
pub mod target;
pub mod worker;
pub mod yielding;
