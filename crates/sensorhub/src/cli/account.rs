//! `sensorhub account …`: create accounts, change passwords, disable and
//! enable them, list them. Every change goes through the same atomic path
//! as `apply`.

use super::{CliResult, Context, print_report, split_list};
use sensorhub_core::provision::{AccountSpec, Provision};
use sensorhub_store::Store;
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
    if let Command::HashPassword { password_stdin } = cmd {
        let password = read_password(password_stdin, true)?;
        println!("{}", sensorhub_core::secret::hash_password(&password)?);
        return Ok(());
    }
    let store = ctx.open().await?;
    match cmd {
        Command::Add { name, password_stdin, devices } => {
            if find(&*store, &name).await?.is_some() {
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
            require(&*store, &name).await?;
            let password = read_password(password_stdin, true)?;
            change(&*store, AccountSpec { username: name.clone(), password: Some(password), ..AccountSpec::default() })
                .await?;
            println!("password of {name} changed");
        }
        Command::Disable { name } => set_disabled(&*store, name, true).await?,
        Command::Enable { name } => set_disabled(&*store, name, false).await?,
        Command::List => {
            let accounts = store.accounts().await?;
            if accounts.is_empty() {
                println!("no accounts");
            }
            for a in accounts {
                let state = if a.disabled { "disabled" } else { "enabled" };
                println!("{:<20} {:<9} {}", a.username, state, a.devices.join(","));
            }
        }
        Command::HashPassword { .. } => {}
    }
    Ok(())
}

async fn set_disabled(store: &dyn Store, name: String, disabled: bool) -> CliResult {
    require(store, &name).await?;
    change(store, AccountSpec { username: name.clone(), disabled: Some(disabled), ..AccountSpec::default() }).await?;
    println!("account {name} {}", if disabled { "disabled" } else { "enabled" });
    Ok(())
}

async fn find(store: &dyn Store, name: &str) -> CliResult<Option<sensorhub_store::AccountSummary>> {
    Ok(store.accounts().await?.into_iter().find(|a| a.username == name))
}

/// Fails unless the account exists.
pub async fn require(store: &dyn Store, name: &str) -> CliResult {
    match find(store, name).await? {
        Some(_) => Ok(()),
        None => Err(format!("no account named {name:?}").into()),
    }
}

/// Applies one account change through the provisioning path.
pub async fn change(store: &dyn Store, spec: AccountSpec) -> CliResult {
    let mut doc = Provision { accounts: vec![spec], ..Provision::default() };
    let readings = doc.check()?;
    let report = store.apply(doc, readings).await?;
    print_report(&report);
    Ok(())
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
