//! `sensorhub subscription …`: outgoing webhook subscriptions. A new
//! subscription's secret (`whsec_…`) is printed once; the database keeps it
//! sealed under `SENSORHUB_SECRET_KEY`, so these commands need that key.

use super::{CliResult, Context};
use crate::delivery::headers::{parse_header, seal_headers};
use crate::delivery::key_file::sealing_key;
use crate::delivery::sign::SigningSecret;
use crate::delivery::target::check_url;
use sensorhub_core::provision::{DEFAULT_BATCH, EVENTS, MAX_BATCH};
use sensorhub_core::secret::generate_key;
use sensorhub_store::delivery::{NewSubscription, Replay, SENSOR_DATA};

/// Subscription subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Subscribe an endpoint to an account's readings; prints its id and secret once
    Add {
        /// The owning account
        #[arg(long)]
        account: String,
        /// Where deliveries are POSTed (https://…)
        #[arg(long)]
        url: String,
        /// Only this device of the account's (repeatable; default: all it sees)
        #[arg(long = "device")]
        devices: Vec<String>,
        /// Allow a plain http:// URL
        #[arg(long)]
        allow_http: bool,
        /// An extra request header, `Name: value` (repeatable; stored sealed, e.g. a receiver's API key)
        #[arg(long = "header", value_parser = parse_header)]
        headers: Vec<(String, String)>,
        /// Send readings that arrive together in one POST (`sensor-data.batch`)
        #[arg(long)]
        batch: bool,
        /// The most readings in one batched POST [default: 100]
        #[arg(long, requires = "batch", value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_BATCH)))]
        batch_max: Option<u32>,
        /// The events delivered, comma-separated: sensor-data (each stored reading), alarms (each alarm transition) [default: sensor-data]
        #[arg(long)]
        events: Option<String>,
    },
    /// List subscriptions
    List,
    /// Remove a subscription
    Remove {
        /// Subscription id
        id: String,
    },
    /// Give a subscription a new secret and print it once
    RotateSecret {
        /// Subscription id
        id: String,
    },
    /// Turn a subscription on (again)
    Enable {
        /// Subscription id
        id: String,
    },
    /// Turn a subscription off
    Disable {
        /// Subscription id
        id: String,
    },
    /// List a subscription's pending and failed deliveries (delivered ones are not kept)
    Deliveries {
        /// Subscription id
        id: String,
        /// Only the failed ones
        #[arg(long)]
        failed: bool,
    },
    /// Send deliveries again: every failed one, or one by its number (from `deliveries`)
    Replay {
        /// Subscription id
        id: String,
        /// The delivery's number
        #[arg(required_unless_present = "failed", conflicts_with = "failed")]
        delivery: Option<i64>,
        /// Every failed delivery
        #[arg(long)]
        failed: bool,
    },
}

/// A comma-separated list of event kinds, each one sensorhub delivers.
fn parse_events(text: &str) -> Result<Vec<String>, String> {
    let events = super::split_list(text);
    if events.is_empty() {
        return Err("name at least one event kind".into());
    }
    match events.iter().find(|e| !EVENTS.contains(&e.as_str())) {
        Some(bad) => Err(format!("unknown event kind {bad:?} (known: {})", EVENTS.join(", "))),
        None => Ok(events),
    }
}

/// Runs a subscription subcommand.
pub async fn run(ctx: &Context, cmd: Command) -> CliResult {
    let store = ctx.open().await?;
    match cmd {
        Command::Add { account, url, devices, allow_http, headers, batch, batch_max, events } => {
            check_url(&url, allow_http)?;
            let key = sealing_key(&ctx.database, true)?;
            let id = generate_key("sub_")?;
            let secret = SigningSecret::generate()?;
            let sealed_headers = if headers.is_empty() { None } else { Some(seal_headers(&key, &id, &headers)?) };
            let sealed_secret = key.seal(&id, secret.as_bytes())?;
            let devices = (!devices.is_empty()).then_some(devices);
            let scope = devices.as_ref().map_or_else(|| "all of its devices".to_owned(), |d| d.join(","));
            let events = match events {
                Some(list) => parse_events(&list)?,
                None => vec![SENSOR_DATA.to_owned()],
            };
            let sub = NewSubscription {
                id: id.clone(),
                username: account.clone(),
                url,
                devices,
                events,
                sealed_secret,
                sealed_headers,
                batch,
                batch_max: batch_max.unwrap_or(DEFAULT_BATCH),
                allow_http,
            };
            store.add_subscription(sub).await?;
            println!("subscription {id} for {account} ({scope}); its secret, shown only now:\n{}", secret.reveal());
        }
        Command::List => {
            let subs = store.subscriptions().await?;
            if subs.is_empty() {
                println!("no webhook subscriptions");
            }
            for s in subs {
                let state = if s.enabled { "enabled" } else { "disabled" };
                let devices = s.devices.map_or_else(|| "(all)".to_owned(), |d| d.join(","));
                let batch = if s.batch { format!(" batch={}", s.batch_max) } else { String::new() };
                let name = s.name.map_or_else(String::new, |n| format!(" name={n}"));
                println!("{} {:<16} {state:<8} {} {devices}{batch}{name}", s.id, s.username, s.url);
            }
        }
        Command::Remove { id } => {
            store.remove_subscription(&id).await?;
            println!("removed subscription {id}");
        }
        Command::RotateSecret { id } => {
            let key = sealing_key(&ctx.database, true)?;
            let secret = SigningSecret::generate()?;
            store.replace_subscription_secret(&id, key.seal(&id, secret.as_bytes())?).await?;
            println!("subscription {id} has a new secret, shown only now:\n{}", secret.reveal());
        }
        Command::Enable { id } => {
            store.set_subscription_enabled(&id, true).await?;
            println!("subscription {id} is enabled");
        }
        Command::Disable { id } => {
            store.set_subscription_enabled(&id, false).await?;
            println!("subscription {id} is disabled");
        }
        Command::Deliveries { id, failed } => {
            let list = store.deliveries(&id, failed).await?;
            if list.is_empty() {
                println!("no {}deliveries", if failed { "failed " } else { "pending or failed " });
            }
            for d in list {
                let status = d.last_status.map_or_else(|| "-".to_owned(), |s| s.to_string());
                let error = d.last_error.unwrap_or_default();
                println!(
                    "{:<8} {} {:<8} attempts={} stored={} status={status} {error}",
                    d.id,
                    d.message_id,
                    d.state,
                    d.attempts,
                    time(d.created_at)
                );
            }
        }
        Command::Replay { id, delivery, failed } => {
            let which = match (failed, delivery) {
                (_, Some(n)) => Replay::One(n),
                _ => Replay::Failed,
            };
            let n = store.replay_deliveries(&id, which, jiff::Timestamp::now().as_millisecond()).await?;
            println!("{n} deliveries of {id} are due again (a disabled subscription sends them once enabled)");
        }
    }
    Ok(())
}

/// Milliseconds since the epoch as RFC 3339 UTC.
fn time(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms).map_or_else(|_| ms.to_string(), |t| t.to_string())
}
