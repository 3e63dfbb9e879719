//! Domain types, time-range rules, secrets and provisioning validation of
//! sensorhub. This crate does no I/O.
#![forbid(unsafe_code)]

pub mod alarm;
pub mod bucket;
pub mod ingest;
pub mod input;
pub mod lineproto;
pub mod model;
pub mod provision;
pub mod retention;
pub mod secret;
pub mod simulate;
pub mod time;
