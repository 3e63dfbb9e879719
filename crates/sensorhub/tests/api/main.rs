//! Integration tests: the real server on an ephemeral port, and the real
//! binary for the admin commands.

#[macro_use]
mod harness;

mod access;
mod aggregate;
mod alarms;
mod alarms_pushed;
mod answer_bytes;
mod auth;
mod backends;
mod busy;
mod cli;
mod compression;
mod connections;
mod copy;
mod corpus;
mod dashboard;
mod devices;
mod docs;
mod faults;
mod h2_stall;
mod hooks;
mod influx;
mod instances;
mod latest;
mod login_race;
mod long_answers;
mod mqtt;
mod mqtt_devices;
mod mqtt_identity;
mod mqtt_memory;
mod mqtt_tls;
mod nul;
mod ops;
mod ratelimit;
mod readings;
mod shared;
mod slow;
mod slow_writes;
mod stream;
mod tls;
mod upgrade;
mod webhook;
