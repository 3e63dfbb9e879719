//! The `sensorhub` binary: parse the command line, set up logging, run.
#![forbid(unsafe_code)]

use clap::Parser;
use sensorhub::config::LogFormat;
use std::io::IsTerminal;
use std::process::ExitCode;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    // Blocking work is bounded by the database pool (a few connections) and
    // the Argon2 permits (one per core); a small blocking pool keeps tokio
    // from growing dozens of threads (and malloc arenas) under bursts.
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().max_blocking_threads(8).build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run())
}

async fn run() -> ExitCode {
    let cli = sensorhub::cli::Cli::parse();
    let ctx = match cli.context() {
        Ok(ctx) => ctx,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let filter = EnvFilter::try_from_env(sensorhub::config::env::LOG_VAR).unwrap_or_else(|_| EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match ctx.log_format {
        LogFormat::Json => logs.json().flatten_event(true).init(),
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).init(),
    }
    match sensorhub::cli::run(cli, ctx).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
