//! `sensorhub key …`: API keys for the public endpoints. A new key id is
//! 160 random bits, printed once; only its digest and a short prefix are
//! stored.

use super::account::{change, require};
use super::{CliResult, Context, split_list};
use sensorhub_core::provision::{AccountSpec, ApiKeySpec, KeyDevices};
use sensorhub_core::secret::generate_key;

/// Key subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Create an API key for an account and print its id
    Add {
        /// The owning account
        #[arg(long)]
        account: String,
        /// Only these of the account's devices, comma-separated (default: all of them)
        #[arg(long)]
        devices: Option<String>,
    },
    /// Revoke a key, given its id or the prefix `key list` shows
    Revoke {
        /// Key id or prefix
        key: String,
    },
    /// List keys (prefix only)
    List,
}

/// Runs a key subcommand.
pub async fn run(ctx: &Context, cmd: Command) -> CliResult {
    let store = ctx.open().await?;
    match cmd {
        Command::Add { account, devices } => {
            require(&*store, &account).await?;
            let id = generate_key("pk_")?;
            let devices = devices.as_deref().map(split_list);
            let scope = devices.as_ref().map_or_else(|| "all of its devices".to_owned(), |d| d.join(","));
            let spec = AccountSpec {
                username: account.clone(),
                api_keys: vec![ApiKeySpec {
                    id: id.clone(),
                    devices: Some(devices.map_or(KeyDevices::All, KeyDevices::Only)),
                    revoked: None,
                }],
                ..AccountSpec::default()
            };
            change(&*store, spec).await?;
            println!("API key for {account} ({scope}); shown only now:\n{id}");
        }
        Command::Revoke { key } => {
            let prefix = store.revoke_api_key(&key).await?;
            println!("revoked API key {prefix}…");
        }
        Command::List => {
            let keys = store.api_keys().await?;
            if keys.is_empty() {
                println!("no API keys");
            }
            for k in keys {
                let state = if k.revoked { "revoked" } else { "active" };
                let devices = k.devices.map_or_else(|| "(all)".to_owned(), |d| d.join(","));
                println!("{:<10} {:<20} {:<8} {devices}", format!("{}…", k.prefix), k.username, state);
            }
        }
    }
    Ok(())
}
