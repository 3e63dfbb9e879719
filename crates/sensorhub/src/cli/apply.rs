//! `sensorhub apply FILE`: make a provisioning document true, atomically,
//! its webhook subscriptions' secret references read first.

use super::{CliResult, Context, print_report};
use sensorhub_core::provision::{Provision, parse_json};
use std::path::PathBuf;

/// Arguments of `apply`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The provisioning file (JSON; see examples/provision.json)
    file: PathBuf,
}

/// Validates the whole file, then writes it in one transaction.
pub async fn run(ctx: &Context, args: Args) -> CliResult {
    let text = std::fs::read_to_string(&args.file).map_err(|e| format!("cannot read {}: {e}", args.file.display()))?;
    let name = args.file.display().to_string();
    let mut doc: Provision = parse_json(&text).map_err(|e| format!("{name}: {e}; nothing was written"))?;
    let readings = doc.check().map_err(|e| format!("{name}: {e}; nothing was written"))?;
    for warning in doc.warnings() {
        eprintln!("warning: {name}: {warning}");
    }
    // Secret references are read before the database is touched.
    let key = || crate::delivery::key_file::sealing_key(&ctx.database, true);
    let hooks =
        crate::delivery::provision::resolve(&doc, key).map_err(|e| format!("{name}: {e}; nothing was written"))?;
    let store = ctx.open().await?;
    let report =
        store.apply_with_hooks(doc, readings, hooks).await.map_err(|e| format!("{name}: {e}; nothing was written"))?;
    print_report(&report);
    Ok(())
}
