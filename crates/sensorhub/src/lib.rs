//! sensorhub: the Device Sensor Data Service (HTTP API) and its admin
//! commands, over a pluggable store.
#![forbid(unsafe_code)]

pub mod cli;
pub mod config;
pub mod demo;
pub mod hooks;
pub mod http;
pub mod limiter;
pub mod live;
pub mod metrics;
pub mod mqtt;
pub mod redis_client;
pub mod retention;
pub mod service;
