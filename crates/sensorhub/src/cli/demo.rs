//! `sensorhub demo` (and `serve --demo`): fill an empty database with the
//! demo network ([`crate::demo`]) and print its credentials and curl lines.
//! The demo credentials are public: never use a demo database in production.

use super::{CliResult, Context};
use crate::config::DEFAULT_LISTEN;
use crate::demo::DAYS;
use sensorhub_store::Store;
use std::sync::Arc;

/// Arguments of `demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address the server will listen on, for the printed curl commands
    #[arg(long, env = "SENSORHUB_LISTEN")]
    listen: Option<String>,
}

/// Fills the database named in `ctx` when it is empty.
pub async fn run(ctx: &Context, args: Args) -> CliResult {
    let listen =
        args.listen.or_else(|| ctx.file.listen.map(|a| a.to_string())).unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
    fill(&ctx.open().await?, &listen, ctx.file.dashboard.as_ref().is_none_or(|d| d.enabled != Some(false))).await
}

/// Fills `store` with the demo when it is empty, then prints how to use it
/// (the dashboard's address too when it is served).
pub async fn fill(store: &Arc<dyn Store>, listen: &str, dashboard: bool) -> CliResult {
    if let Some(report) = crate::demo::write(store).await? {
        println!(
            "demo data written: 2 accounts, 5 stations, {} readings ({} values) over {DAYS} days",
            report.readings, report.values
        );
    } else {
        println!("the database is not empty: demo data not written (credentials below work on a demo database)");
    }
    let base = format!("http://{listen}/external/v1");
    let day = jiff::Timestamp::now().strftime("%Y-%m-%d");
    if dashboard {
        println!("\nDashboard: http://{listen}/  (sign in as alice, or open http://{listen}/#key=pk-demo-alice-all)");
    }
    println!(
        "\nDemo credentials (public: never use a demo database in production):
  Basic auth   alice / alice-demo-password   (all 5 stations)
               budi  / budi-demo-password    (AWLR-002, AWS-002)
  API key ids  pk-demo-alice-all (alice's stations), pk-demo-alice-awlr (AWLR only), pk-demo-budi
  Webhook key  wh-demo-alice

Try:
  curl -u alice:alice-demo-password {base}/devices
  curl -u alice:alice-demo-password '{base}/devices/AWLR-001/data?tz=7'
  curl '{base}/pk-demo-alice-all/devices/AWS-001/data?start={day}T00:00:00Z&end={day}T03:00:00Z'
"
    );
    Ok(())
}
