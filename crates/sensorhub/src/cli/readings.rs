//! `sensorhub readings …`: remove stored readings (a device's bad data, a
//! clock error from the future) by device and time range, or those past
//! their retention now.

use super::{CliResult, Context};
use sensorhub_core::retention::Retention;
use sensorhub_core::time::{TimeRange, format_rfc3339, parse_rfc3339};

/// Readings subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Delete a device's readings from START to END (both included), atomically
    Delete {
        /// The device
        #[arg(long)]
        device: String,
        /// First second to delete, RFC 3339 with Z or an offset (e.g. 2026-05-05T00:00:00Z)
        #[arg(long)]
        start: String,
        /// Last second to delete, RFC 3339 with Z or an offset (e.g. 9999-12-29T23:59:59Z)
        #[arg(long)]
        end: String,
    },
    /// Remove the readings past their retention now (what `serve` does every --retention-every)
    Expire {
        /// The server's default retention, as `serve --retention` [default: forever]
        #[arg(long, env = "SENSORHUB_RETENTION", value_parser = Retention::parse)]
        retention: Option<Retention>,
    },
}

/// Runs a readings subcommand.
pub async fn run(ctx: &Context, cmd: Command) -> CliResult {
    match cmd {
        Command::Delete { device, start, end } => {
            // A fraction rounds inwards: only whole seconds within the range go.
            let first = parse_rfc3339("start", &start)?;
            let last = parse_rfc3339("end", &end)?;
            let range = TimeRange {
                start: first.as_second() + i64::from(first.subsec_nanosecond() > 0),
                end: last.as_second() - i64::from(last.subsec_nanosecond() < 0),
            };
            if range.start > range.end {
                return Err(format!("--start ({start}) is after --end ({end})").into());
            }
            let store = ctx.open().await?;
            let report = store.delete_readings(&device, range).await?;
            let utc = |s| format_rfc3339(s, jiff::tz::Offset::UTC);
            println!(
                "deleted {} readings ({} values) of device {device} from {} to {}, in {} stored hours",
                report.readings,
                report.values,
                utc(range.start),
                utc(range.end),
                report.hours
            );
        }
        Command::Expire { retention } => {
            let default = match retention.or(ctx.file.retention.as_deref().map(Retention::parse).transpose()?) {
                Some(Retention::Inherit) => return Err("--retention: the server's default cannot inherit".into()),
                r => r.unwrap_or(Retention::Forever),
            };
            let store = ctx.open().await?;
            let metrics = crate::metrics::Metrics::default();
            let r = crate::retention::pass(&*store, default, &metrics).await?;
            println!(
                "removed {} readings of {} devices past their retention: {} stored hours dropped, {} trimmed, {} bytes",
                r.readings, r.devices, r.hours_dropped, r.hours_trimmed, r.bytes
            );
        }
    }
    Ok(())
}
