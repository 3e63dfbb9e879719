//! Integration tests: the real server on an ephemeral port, and the real
//! binary for the admin commands.

mod auth;
mod cli;
mod devices;
mod harness;
mod ops;
mod ratelimit;
mod readings;
mod webhook;
