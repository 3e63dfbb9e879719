//! `sensorhub alarm …`: a device's alarm rules, added (or replaced, by
//! name), listed and removed. A running server takes a change up within
//! seconds; removing or changing a rule ends its episode. A provisioning
//! file's `"alarms"` on a device sets them all at once (`sensorhub apply`).

use super::{CliResult, Context};
use sensorhub_core::alarm::RuleSpec;
use sensorhub_store::alarm::{RuleEdit, RuleEdited};

/// Alarm subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Add a rule to a device, or replace its rule of the same name
    Add {
        /// The device
        device: String,
        /// The rule as JSON, e.g. '{"name": "siaga", "sensor": "AWLR1-wl", "levels": [{"name": "Siaga 4", "at": 60}], "deadband": 5}'
        rule: String,
    },
    /// List the rules of one device, or of every device
    List {
        /// Only this device's
        #[arg(long)]
        device: Option<String>,
    },
    /// Remove a rule from a device (an active episode is cleared)
    Remove {
        /// The device
        device: String,
        /// The rule's name
        rule: String,
    },
}

/// Runs an alarm subcommand.
pub async fn run(ctx: &Context, cmd: Command) -> CliResult {
    let store = ctx.open().await?;
    match cmd {
        Command::Add { device, rule } => {
            let spec: RuleSpec = serde_json::from_str(&rule).map_err(|e| format!("the rule is not valid JSON: {e}"))?;
            let new = spec.check("rule").map_err(|e| e.to_string())?;
            let name = new.name.clone();
            // Read and written in one transaction: a command run at the same time keeps its change too.
            match store.edit_alarm_rules(&device, RuleEdit::Put(new)).await? {
                RuleEdited::Unchanged => println!("device {device} already has this rule {name}: nothing changed"),
                RuleEdited::Replaced => println!("alarm rule {name} of device {device} replaced"),
                _ => println!("alarm rule {name} of device {device} added"),
            }
        }
        Command::List { device } => {
            let rules = store.alarm_rules(device.as_deref()).await?;
            if rules.is_empty() {
                println!("no alarm rules");
            }
            for (device, rule) in rules {
                let spec = serde_json::to_string(&rule.spec()).unwrap_or_default();
                println!("{device:<16} {spec}");
            }
        }
        Command::Remove { device, rule } => {
            if store.edit_alarm_rules(&device, RuleEdit::Remove(rule.clone())).await? == RuleEdited::NoSuchRule {
                return Err(format!("device {device:?} has no alarm rule {rule:?}").into());
            }
            println!("alarm rule {rule} of device {device} removed");
        }
    }
    Ok(())
}
