//! The write steps, written once for every backend against the
//! transaction seam ([`tx::Tx`]): the reading writer, removals and
//! rewrites of stored hours. Each backend opens the transaction, runs a
//! step with its own [`tx::Tx`], and commits.

pub(crate) mod alarm_cache;
pub(crate) mod alarms;
pub(crate) mod copy;
pub(crate) mod migrate;
pub(crate) mod provision;
pub(crate) mod provision_tx;
pub(crate) mod readings;
pub(crate) mod remove;
pub(crate) mod tx;
pub(crate) mod upgrade;
