//! Outgoing webhooks (issue 15): partners' subscriptions are signed by the
//! Standard Webhooks scheme, and their secrets are sealed at rest.

pub mod seal;
pub mod sign;
pub mod target;
