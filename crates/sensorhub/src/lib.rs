//! sensorhub: the Device Sensor Data Service (HTTP API) and its admin
//! commands, over a pluggable store.
#![forbid(unsafe_code)]

pub mod cli;
pub mod config;
pub mod hooks;
pub mod http;
pub mod live;
pub mod metrics;
pub mod mqtt;
pub mod ratelimit;
pub mod retention;
pub mod shared;
