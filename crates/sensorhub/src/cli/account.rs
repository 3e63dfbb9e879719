//! `sensorhub account …`: create accounts, change passwords, disable and
//! enable them, list them, set their retention. Every change goes through the same atomic path
//! as `apply`.

use super::{CliResult, Context, split_list};
use sensorhub_core::provision::{AccountSpec, Provision};
use sensorhub_store::{ApplyReport, Store, StoreError};
use std::io::{BufRead, IsTerminal};

/// Account subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Create an account
    Add {
        /// Login name
        name: String,
        /// Read the password from the first line of standard input
        #[arg(long)]
        password_stdin: bool,
        /// Devices the account may see, comma-separated
        #[arg(long)]
        devices: Option<String>,
    },
    /// Change an account's password
    Passwd {
        /// Login name
        name: String,
        /// Read the password from the first line of standard input
        #[arg(long)]
        password_stdin: bool,
    },
    /// Disable an account: its logins and API keys get 403
    Disable {
        /// Login name
        name: String,
    },
    /// Enable a disabled account
    Enable {
        /// Login name
        name: String,
    },
    /// Set how long the readings of the devices an account owns are kept
    Retention {
        /// Login name
        name: String,
        /// forever, inherit (the server's --retention), or 36h, 90d, 8w, 2y
        #[arg(value_parser = sensorhub_core::retention::Retention::parse)]
        retention: sensorhub_core::retention::Retention,
    },
    /// List accounts and the devices they may see
    List,
    /// Print the Argon2id hash of a password, for `password_hash` in provisioning files
    HashPassword {
        /// Read the password from the first line of standard input
        #[arg(long)]
        password_stdin: bool,
    },
}

/// Runs an account subcommand.
pub async fn run(ctx: &Context, cmd: Command) -> CliResult {
    match cmd {
        Command::Add { name, password_stdin, devices } => {
            let store = ctx.open().await?;
            if store.account_auth(&name).await?.is_some() {
                return Err(
                    format!("account {name:?} already exists (use `account passwd` to change its password)").into()
                );
            }
            let password = read_password(password_stdin, true)?;
            let spec = AccountSpec {
                username: name.clone(),
                password: Some(password),
                devices: devices.as_deref().map(split_list),
                ..AccountSpec::default()
            };
            change(&*store, spec).await?;
            println!("created account {name}");
        }
        Command::Passwd { name, password_stdin } => {
            let store = ctx.open().await?;
            require(&*store, &name).await?;
            let password = read_password(password_stdin, true)?;
            let spec = AccountSpec { username: name.clone(), password: Some(password), ..AccountSpec::default() };
            if change(&*store, spec).await?.is_noop() {
                println!("password of {name} unchanged: it is the same as before");
            } else {
                println!("password of {name} changed");
            }
        }
        Command::Disable { name } => set_disabled(&*ctx.open().await?, name, true).await?,
        Command::Enable { name } => set_disabled(&*ctx.open().await?, name, false).await?,
        Command::List => {
            let accounts = ctx.open().await?.accounts().await?;
            if accounts.is_empty() {
                println!("no accounts");
            }
            for a in accounts {
                let state = if a.disabled { "disabled" } else { "enabled" };
                // A device the account may write is marked with a `*`.
                let devices: Vec<String> =
                    a.devices.iter().map(|d| if a.writes.contains(d) { format!("{d}*") } else { d.clone() }).collect();
                println!("{:<20} {:<9} {}", a.username, state, devices.join(","));
            }
        }
        Command::Retention { name, retention } => {
            let store = ctx.open().await?;
            require(&*store, &name).await?;
            let report = change(
                &*store,
                AccountSpec { username: name.clone(), retention: Some(retention), ..AccountSpec::default() },
            )
            .await?;
            let verb = if report.is_noop() { "already keeps" } else { "now keeps" };
            println!("account {name} {verb} its devices' readings: {retention} (unless a device says otherwise)");
        }
        Command::HashPassword { password_stdin } => {
            let password = read_password(password_stdin, true)?;
            println!("{}", sensorhub_core::secret::hash_password(&password)?);
        }
    }
    Ok(())
}

async fn set_disabled(store: &dyn Store, name: String, disabled: bool) -> CliResult {
    require(store, &name).await?;
    let report =
        change(store, AccountSpec { username: name.clone(), disabled: Some(disabled), ..AccountSpec::default() })
            .await?;
    let state = if disabled { "disabled" } else { "enabled" };
    if report.is_noop() {
        println!("account {name} was already {state}");
    } else {
        println!("account {name} {state}");
    }
    Ok(())
}

/// Fails unless the account exists.
pub async fn require(store: &dyn Store, name: &str) -> CliResult {
    match store.account_auth(name).await? {
        Some(_) => Ok(()),
        None => Err(format!("no account named {name:?}").into()),
    }
}

/// Applies one account change through the provisioning path.
pub async fn change(store: &dyn Store, spec: AccountSpec) -> CliResult<ApplyReport> {
    apply_doc(store, Provision { accounts: vec![spec], ..Provision::default() }).await
}

/// Applies a document built by a command. Errors are reported without the
/// document positions, which mean nothing to someone who typed a command.
pub async fn apply_doc(store: &dyn Store, mut doc: Provision) -> CliResult<ApplyReport> {
    let readings = doc.check().map_err(|e| e.message)?;
    match store.apply(doc, readings).await {
        Ok(report) => Ok(report),
        Err(StoreError::Invalid(e)) => Err(e.message.into()),
        Err(e) => Err(e.into()),
    }
}

/// Reads a password from stdin (first line) or, on a terminal, a prompt.
fn read_password(from_stdin: bool, confirm: bool) -> CliResult<String> {
    let password = if from_stdin {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        line.trim_end_matches(['\r', '\n']).to_owned()
    } else if std::io::stdin().is_terminal() {
        let first = rpassword::prompt_password("password: ")?;
        if confirm && rpassword::prompt_password("again: ")? != first {
            return Err("the passwords differ".into());
        }
        first
    } else {
        return Err("no terminal to ask for the password: pass --password-stdin".into());
    };
    if password.is_empty() {
        return Err("the password must not be empty".into());
    }
    Ok(password)
}
