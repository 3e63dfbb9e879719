//! Readings coming in, by the ways other than a single HTTP handler: the
//! webhook envelope's JSON rules ([`envelope`], used by the webhook
//! receiver in `http/webhook.rs` and by MQTT) and MQTT ingestion
//! ([`mqtt`]). Every way in turns what it received into readings with
//! `sensorhub-core`'s one set of rules (`sensorhub_core::ingest`).

pub mod envelope;
pub mod mqtt;
