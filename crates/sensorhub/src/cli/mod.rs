//! The command line: one file per command, each with its arguments and a
//! `run` function.

mod account;
mod alarm;
mod apply;
mod copy;
mod demo;
mod device;
mod import;
mod key;
mod progress;
mod readings;
mod serve;
mod subscription;

use crate::config::{self, FileConfig, LogFormat};
use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// The version and the commit the binary was built from (`build.rs`).
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("SENSORHUB_COMMIT"), ")");

/// sensorhub: the Device Sensor Data Service for AWLR and AWS stations.
#[derive(Debug, Parser)]
#[command(name = "sensorhub", version = VERSION, about, propagate_version = true)]
pub struct Cli {
    /// Database: a SQLite file path or a sqlite:// URL [default: ./sensorhub.db]
    #[arg(long, global = true, env = "SENSORHUB_DATABASE")]
    database: Option<config::Url>,
    /// TOML config file; its keys are the long flags in snake_case (docs/configuration.md)
    #[arg(long, global = true, env = "SENSORHUB_CONFIG")]
    config: Option<PathBuf>,
    /// Log format on stderr: text or json [default: text]
    #[arg(long, global = true, env = "SENSORHUB_LOG_FORMAT", value_enum)]
    log_format: Option<LogFormat>,
    #[command(subcommand)]
    command: Command,
}

impl Cli {
    /// What every command shares, resolved once: the config file (read
    /// here, once), the database and the log format.
    pub fn context(&self) -> CliResult<Context> {
        let file = FileConfig::load(self.config.as_deref())?;
        Ok(config::Common::resolve(self.database.clone(), self.log_format, file))
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the HTTP API
    Serve(Box<config::serve::ServeArgs>),
    /// Fill an empty database with demo stations, accounts and 35 days of readings
    Demo(demo::Args),
    /// Make a provisioning file (accounts, devices, keys, readings) true, atomically
    Apply(apply::Args),
    /// Import readings from NDJSON or CSV (in short transactions; --atomic: all or nothing)
    Import(import::Args),
    /// Copy a whole installation to another database and verify it (SQLite → PostgreSQL, or back)
    Copy(copy::Args),
    /// Create or upgrade the database schema
    Migrate(MigrateArgs),
    /// Manage stored readings
    #[command(subcommand)]
    Readings(readings::Command),
    /// Manage accounts
    #[command(subcommand)]
    Account(account::Command),
    /// Manage API keys for public access
    #[command(subcommand)]
    Key(key::Command),
    /// Manage devices
    #[command(subcommand)]
    Device(device::Command),
    /// Manage devices' alarm rules (river warning levels, rises, silent stations)
    #[command(subcommand)]
    Alarm(alarm::Command),
    /// Manage outgoing webhook subscriptions (needs SENSORHUB_SECRET_KEY to add or rotate)
    #[command(subcommand)]
    Subscription(subscription::Command),
}

/// Arguments of `migrate`.
#[derive(Debug, clap::Args)]
struct MigrateArgs {
    /// Give every account write permission on every device it sees, as
    /// before write grants existed (a choice made once, on upgrade)
    #[arg(long)]
    grant_write_to_viewers: bool,
    /// Hours of stored readings converted per transaction while an older
    /// schema's readings are upgraded (each batch commits on its own, so an
    /// interrupted upgrade carries on at the next start)
    #[arg(long, default_value_t = sensorhub_store::UPGRADE_BATCH_HOURS as u32, value_parser = clap::value_parser!(u32).range(1..))]
    batch_hours: u32,
    /// Rewrite the hours stored before this release with the summaries
    /// aggregated reads use (readings unchanged; resumable)
    #[arg(long)]
    summaries: bool,
}

/// What every command gets: the config file, the database and the log format.
pub type Context = config::Common;

/// Result of a command; an error is reported on stderr with exit code 1.
pub type CliResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Runs the command of `cli` with what [`Cli::context`] resolved.
pub async fn run(cli: Cli, ctx: Context) -> CliResult {
    for var in config::env::unknown(&<Cli as clap::CommandFactory>::command()) {
        tracing::warn!(variable = %var, "unknown SENSORHUB_ environment variable ignored");
    }
    match cli.command {
        Command::Serve(args) => serve::run(&ctx, *args).await,
        Command::Demo(args) => demo::run(&ctx, args).await,
        Command::Apply(args) => apply::run(&ctx, args).await,
        Command::Import(args) => import::run(&ctx, args).await,
        Command::Copy(args) => copy::run(args).await,
        Command::Migrate(args) => {
            let options = sensorhub_store::OpenOptions { upgrade_batch_hours: args.batch_hours as usize };
            let store = sensorhub_store::open_with(&ctx.database, options).await?;
            println!("database {} is migrated to the current schema", sensorhub_store::redact_url(&ctx.database));
            if args.grant_write_to_viewers {
                let n = store.grant_write_to_viewers().await?;
                println!("write grants added: {n} (every account may now write every device it sees)");
            }
            if args.summaries {
                let n = store.add_hour_summaries(args.batch_hours as usize).await?;
                println!("stored hours rewritten with summaries: {n}");
            }
            Ok(())
        }
        Command::Readings(cmd) => readings::run(&ctx, cmd).await,
        Command::Account(cmd) => account::run(&ctx, cmd).await,
        Command::Key(cmd) => key::run(&ctx, cmd).await,
        Command::Device(cmd) => device::run(&ctx, cmd).await,
        Command::Alarm(cmd) => alarm::run(&ctx, cmd).await,
        Command::Subscription(cmd) => subscription::run(&ctx, cmd).await,
    }
}

/// Splits a comma-separated list, dropping empty items.
pub fn split_list(s: &str) -> Vec<String> {
    s.split(',').map(str::trim).filter(|x| !x.is_empty()).map(str::to_owned).collect()
}

/// Prints what `apply` changed, one line per kind that changed.
pub fn print_report(report: &sensorhub_store::ApplyReport) {
    if report.is_noop() {
        println!("nothing changed: the database already matches");
        return;
    }
    let kinds = [
        ("accounts", report.accounts),
        ("devices", report.devices),
        ("api keys", report.api_keys),
        ("webhook keys", report.webhook_keys),
        ("webhook subscriptions", report.subscriptions),
        ("devices' alarm rules", report.alarm_rules),
    ];
    for (name, c) in kinds {
        if c.created + c.updated > 0 {
            println!("{name}: {} created, {} updated", c.created, c.updated);
        }
    }
    if report.readings.updated > 0 {
        println!("readings: {} stored or changed", report.readings.updated);
    }
}
