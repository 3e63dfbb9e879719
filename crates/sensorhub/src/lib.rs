//! sensorhub: the Device Sensor Data Service (HTTP API) and its admin
//! commands, over a pluggable store.
#![forbid(unsafe_code)]

pub mod alarm_view;
pub mod cli;
pub mod config;
pub mod delivery;
pub mod demo;
pub mod http;
pub mod ingest;
pub mod limiter;
pub mod live;
pub mod metrics;
pub mod redis_client;
pub mod retention;
pub mod service;
pub mod silence;
pub mod vacuum;
