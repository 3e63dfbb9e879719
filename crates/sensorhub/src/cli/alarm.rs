//! `sensorhub alarm …`: a device's alarm rules, added (or replaced, by
//! name), listed and removed. A running server takes a change up within
//! seconds; removing or changing a rule ends its episode. A provisioning
//! file's `"alarms"` on a device sets them all at once (`sensorhub apply`).

use super::{CliResult, Context};
use sensorhub_core::alarm::RuleSpec;

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
            let mut rules: Vec<_> = store.alarm_rules(Some(&device)).await?.into_iter().map(|(_, r)| r).collect();
            let verb = match rules.iter_mut().find(|r| r.name == new.name) {
                Some(old) => {
                    *old = new.clone();
                    "replaced"
                }
                None => {
                    rules.push(new.clone());
                    "added"
                }
            };
            if store.set_alarm_rules(&device, rules).await? {
                println!("alarm rule {} of device {device} {verb}", new.name);
            } else {
                println!("device {device} already has this rule {}: nothing changed", new.name);
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
            let rules = store.alarm_rules(Some(&device)).await?;
            if !rules.iter().any(|(_, r)| r.name == rule) {
                return Err(format!("device {device:?} has no alarm rule {rule:?}").into());
            }
            let kept = rules.into_iter().map(|(_, r)| r).filter(|r| r.name != rule).collect();
            store.set_alarm_rules(&device, kept).await?;
            println!("alarm rule {rule} of device {device} removed");
        }
    }
    Ok(())
}
