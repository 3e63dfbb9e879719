//! `sensorhub device …`: add and list devices, set their retention.

use super::account::apply_doc;
use super::{CliResult, Context};
use jiff::tz::Offset;
use sensorhub_core::model::{DeviceSpec, SensorMeta};
use sensorhub_core::provision::{AccountSpec, Provision, check_device};
use sensorhub_core::retention::Retention;
use sensorhub_core::time::format_rfc3339;
use sensorhub_store::Scope;

/// Device subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Add a device with its sensors
    Add {
        /// Device id, e.g. AWLR-001
        device_id: String,
        /// Display name
        #[arg(long)]
        name: String,
        /// Device type, e.g. AWLR or AWS
        #[arg(long = "type")]
        kind: String,
        /// Latitude
        #[arg(long, allow_hyphen_values = true)]
        lat: f64,
        /// Longitude
        #[arg(long, allow_hyphen_values = true)]
        long: f64,
        /// Reporting interval in seconds
        #[arg(long)]
        interval: i64,
        /// A sensor as ID,NAME,TYPE,UNIT (repeatable), e.g. AWLR1-batt,Battery Level,BATTERY,%
        #[arg(long = "sensor")]
        sensors: Vec<String>,
        /// An account that may see the device (repeatable)
        #[arg(long = "account")]
        accounts: Vec<String>,
        /// The account that owns the device: it sees it and may write its readings
        #[arg(long)]
        owner: Option<String>,
        /// How long its readings are kept: forever, inherit (its owner's setting), or 36h, 90d, 8w, 2y
        #[arg(long, value_parser = Retention::parse)]
        retention: Option<Retention>,
    },
    /// Set how long a device's readings are kept
    Retention {
        /// Device id
        device_id: String,
        /// forever, inherit (its owner's setting, else the server's --retention), or 36h, 90d, 8w, 2y
        #[arg(value_parser = Retention::parse)]
        retention: Retention,
    },
    /// List all devices
    List,
}

/// Runs a device subcommand.
pub async fn run(ctx: &Context, cmd: Command) -> CliResult {
    match cmd {
        Command::Add { device_id, name, kind, lat, long, interval, sensors, mut accounts, owner, retention } => {
            let sensors = sensors.iter().map(|s| parse_sensor(s)).collect::<Result<Vec<_>, _>>()?;
            let spec = DeviceSpec {
                device_id: device_id.clone(),
                name,
                kind,
                lat,
                long,
                interval_seconds: interval,
                sensors,
                owner,
                retention,
                alarms: None,
            };
            check_device(&spec, "device").map_err(|e| e.message)?;
            let store = ctx.open().await?;
            if store.find_device(Scope::All, &device_id).await?.is_some() {
                return Err(format!("device {device_id:?} already exists").into());
            }
            // The accounts keep what they see and see the new device too.
            accounts.sort();
            accounts.dedup();
            let known = store.accounts().await?;
            let mut grants = Vec::new();
            for name in accounts {
                let account = known.iter().find(|a| a.username == name).ok_or(format!("no account named {name:?}"))?;
                let mut devices = account.devices.clone();
                devices.push(device_id.clone());
                grants.push(AccountSpec { username: name, devices: Some(devices), ..AccountSpec::default() });
            }
            let n = spec.sensors.len();
            apply_doc(&*store, Provision { devices: vec![spec], accounts: grants, readings: Vec::new() }).await?;
            println!("added device {device_id} with {n} sensors");
        }
        Command::Retention { device_id, retention } => {
            let store = ctx.open().await?;
            let d = store
                .list_devices(Scope::All)
                .await?
                .into_iter()
                .find(|d| d.device_id == device_id)
                .ok_or(format!("no device {device_id:?}"))?;
            let spec = DeviceSpec {
                device_id: d.device_id,
                name: d.name,
                kind: d.kind,
                lat: d.lat,
                long: d.long,
                interval_seconds: d.interval_seconds,
                sensors: Vec::new(),
                owner: None,
                retention: Some(retention),
                alarms: None,
            };
            let report = apply_doc(&*store, Provision { devices: vec![spec], ..Provision::default() }).await?;
            let verb = if report.is_noop() { "already keeps" } else { "now keeps" };
            println!("device {device_id} {verb} its readings: {retention}");
        }
        Command::List => {
            let devices = ctx.open().await?.list_devices(Scope::All).await?;
            if devices.is_empty() {
                println!("no devices");
            }
            for d in devices {
                let last = d.last_update_at.map_or_else(|| "never".to_owned(), |s| format_rfc3339(s, Offset::UTC));
                println!(
                    "{:<16} {:<6} {:<3} sensors  last {last:<20}  {}",
                    d.device_id,
                    d.kind,
                    d.sensors.len(),
                    d.name
                );
            }
        }
    }
    Ok(())
}

fn parse_sensor(s: &str) -> Result<SensorMeta, String> {
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    match parts.as_slice() {
        [id, name, kind, unit] => Ok(SensorMeta {
            sensor_id: (*id).to_owned(),
            name: (*name).to_owned(),
            kind: (*kind).to_owned(),
            unit: (*unit).to_owned(),
        }),
        _ => Err(format!("--sensor {s:?}: expected ID,NAME,TYPE,UNIT")),
    }
}
