//! `sensorhub copy --from URL --to URL`: moves a whole installation between
//! databases (SQLite to PostgreSQL, or back): accounts with their password
//! hashes, keys as digests, devices, sensors, alarm rules and readings as
//! stored, then checks the target table by table with a row count and a
//! SHA-256 over the rows in a canonical order. `--verify-only` runs just
//! the check.

use super::CliResult;
use super::progress::{Progress, Unit};
use sensorhub_store::{Installation, Store, redact_url};
use sha2::{Digest, Sha256};
use std::collections::HashSet;

/// Hours of readings moved per transaction.
const HOURS_PER_BATCH: usize = 2000;

/// Arguments of `copy`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The installation to copy (file path, sqlite:// or postgres:// URL)
    #[arg(long)]
    from: crate::config::Url,
    /// The database to copy into; must be empty unless --append is given
    #[arg(long)]
    to: crate::config::Url,
    /// Copy into a database that already holds data (its accounts, devices and keys must differ)
    #[arg(long)]
    append: bool,
    /// Only compare the target with the source; write nothing
    #[arg(long)]
    verify_only: bool,
}

/// Row count and checksum of one table.
#[derive(Default)]
struct Tally {
    rows: u64,
    hasher: Sha256,
}

impl Tally {
    /// Adds a row: each field length-prefixed, so that no two rows hash alike.
    fn add(&mut self, fields: &[&[u8]]) {
        for f in fields {
            self.hasher.update((f.len() as u64).to_le_bytes());
            self.hasher.update(f);
        }
        self.rows += 1;
    }

    /// The count and the first 8 bytes of the checksum, in hex.
    fn finish(self) -> (u64, String) {
        (self.rows, self.hasher.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect())
    }
}

/// Count and checksum of each table but readings, of the rows whose
/// natural keys are in `keep` (the source's).
fn tally(rows: &Installation, keep: &Installation) -> Vec<(&'static str, (u64, String))> {
    let users: HashSet<&str> = keep.accounts.iter().map(|a| a.username.as_str()).collect();
    let devices: HashSet<&str> = keep.devices.iter().map(|d| d.device_id.as_str()).collect();
    let keys: HashSet<&[u8]> = keep.api_keys.iter().chain(&keep.webhook_keys).map(|k| k.digest.as_slice()).collect();
    let b = |v: bool| if v { &[1u8][..] } else { &[0u8][..] };
    let mut out = Vec::new();
    let mut t = Tally::default();
    for a in rows.accounts.iter().filter(|a| users.contains(a.username.as_str())) {
        let retention = a.retention_seconds.map_or(Vec::new(), |s| s.to_le_bytes().to_vec());
        t.add(&[
            a.username.as_bytes(),
            a.password_hash.as_bytes(),
            b(a.disabled),
            &a.created_at.to_le_bytes(),
            &retention,
        ]);
    }
    out.push(("accounts", t.finish()));
    let mut t = Tally::default();
    for d in rows.devices.iter().filter(|d| devices.contains(d.device_id.as_str())) {
        t.add(&[
            d.device_id.as_bytes(),
            d.name.as_bytes(),
            d.kind.as_bytes(),
            &d.lat.to_bits().to_le_bytes(),
            &d.long.to_bits().to_le_bytes(),
            &d.interval_seconds.to_le_bytes(),
            d.owner.as_deref().unwrap_or_default().as_bytes(),
            &d.retention_seconds.map_or(Vec::new(), |s| s.to_le_bytes().to_vec()),
        ]);
    }
    out.push(("devices", t.finish()));
    let mut t = Tally::default();
    for s in rows.sensors.iter().filter(|s| devices.contains(s.device_id.as_str())) {
        let m = &s.sensor;
        t.add(&[
            s.device_id.as_bytes(),
            &s.idx.to_le_bytes(),
            m.sensor_id.as_bytes(),
            m.name.as_bytes(),
            m.kind.as_bytes(),
            m.unit.as_bytes(),
        ]);
    }
    out.push(("sensors", t.finish()));
    let mut t = Tally::default();
    for link in rows.account_devices.iter().filter(|l| users.contains(l.username.as_str())) {
        t.add(&[link.username.as_bytes(), link.device_id.as_bytes(), b(link.can_write)]);
    }
    out.push(("account_devices", t.finish()));
    for (name, list) in [("api_keys", &rows.api_keys), ("webhook_keys", &rows.webhook_keys)] {
        let mut t = Tally::default();
        for k in list.iter().filter(|k| keys.contains(k.digest.as_slice())) {
            let fields: [&[u8]; 6] = [
                &k.digest,
                k.prefix.as_bytes(),
                k.username.as_bytes(),
                b(k.scoped),
                b(k.revoked),
                &k.created_at.to_le_bytes(),
            ];
            t.add(&fields);
        }
        out.push((name, t.finish()));
    }
    let mut t = Tally::default();
    for (k, d) in rows.api_key_devices.iter().filter(|(k, _)| keys.contains(k.as_slice())) {
        t.add(&[k, d.as_bytes()]);
    }
    out.push(("api_key_devices", t.finish()));
    out
}

/// Every alarm rule in `store` of `devices`, as (device id, the rule's spec
/// as JSON), by device and position.
async fn alarm_rules(store: &dyn Store, devices: &HashSet<&str>) -> CliResult<Vec<(String, String)>> {
    let rules = store.alarm_rules(None).await?;
    let mut out = Vec::with_capacity(rules.len());
    for (device, rule) in rules.into_iter().filter(|(d, _)| devices.contains(d.as_str())) {
        out.push((device, serde_json::to_string(&rule.spec())?));
    }
    Ok(out)
}

/// Count and checksum of alarm rules.
fn tally_rules(rules: &[(String, String)]) -> (u64, String) {
    let mut t = Tally::default();
    for (device, spec) in rules {
        t.add(&[device.as_bytes(), spec.as_bytes()]);
    }
    t.finish()
}

/// Gives each device of `rules` (by device and position) its rules in `target`.
async fn restore_rules(target: &dyn Store, rules: &[(String, String)]) -> CliResult {
    let mut by_device: Vec<(&str, Vec<sensorhub_core::alarm::AlarmRule>)> = Vec::new();
    for (device, spec) in rules {
        let rule = serde_json::from_str::<sensorhub_core::alarm::RuleSpec>(spec)?
            .check("copy")
            .map_err(|e| format!("an alarm rule of device {device}: {e}"))?;
        match by_device.last_mut() {
            Some((d, list)) if *d == device.as_str() => list.push(rule),
            _ => by_device.push((device, vec![rule])),
        }
    }
    for (device, list) in by_device {
        target.set_alarm_rules(device, list).await?;
    }
    Ok(())
}

/// Count and checksum of the readings of `devices` in `store`, hour by hour.
async fn tally_readings(store: &dyn Store, devices: &[String]) -> CliResult<(u64, String)> {
    let mut t = Tally::default();
    for id in devices {
        let mut after = None;
        loop {
            let hours = store.export_hours(id, after, HOURS_PER_BATCH).await?;
            for h in &hours {
                t.add(&[id.as_bytes(), &h.chunk.to_le_bytes(), &h.data]);
            }
            match hours.last() {
                Some(last) if hours.len() == HOURS_PER_BATCH => after = Some(last.chunk),
                _ => break,
            }
        }
    }
    Ok(t.finish())
}

/// Runs the copy (unless `--verify-only`), then the check.
pub async fn run(args: Args) -> CliResult {
    let (from_name, to_name) = (redact_url(&args.from.0), redact_url(&args.to.0));
    let source = sensorhub_store::open(&args.from.0).await.map_err(|e| format!("source {from_name}: {e}"))?;
    let target = sensorhub_store::open(&args.to.0).await.map_err(|e| format!("target {to_name}: {e}"))?;
    let rows = source.export().await?;
    let devices: Vec<String> = rows.devices.iter().map(|d| d.device_id.clone()).collect();
    let ids: HashSet<&str> = devices.iter().map(String::as_str).collect();
    let rules = alarm_rules(&*source, &ids).await?;
    if !args.verify_only {
        if !args.append && !target.is_empty().await? {
            return Err(
                format!("the target {to_name} is not empty: copy into an empty database, or give --append").into()
            );
        }
        target.restore(rows.clone()).await?;
        let total_hours: u64 = source.export_hour_count().await?;
        let progress = Progress::start("copy", total_hours, Unit::Items("hours"));
        let copied = progress.counter();
        let mut hours_copied = 0usize;
        for id in &devices {
            let mut after = None;
            loop {
                let hours = source.export_hours(id, after, HOURS_PER_BATCH).await?;
                let full = hours.len() == HOURS_PER_BATCH;
                after = hours.last().map(|h| h.chunk);
                hours_copied += hours.len();
                copied.fetch_add(hours.len() as u64, std::sync::atomic::Ordering::Relaxed);
                if !hours.is_empty() {
                    target.restore_hours(id, hours).await?;
                }
                if !full {
                    break;
                }
            }
        }
        drop(progress);
        // The rules after the readings: their states start at rest as of
        // each device's newest copied reading, not before all of them (a
        // load would replay the history as live).
        restore_rules(&*target, &rules).await?;
        println!(
            "copied {} accounts, {} devices, {} API keys, {} webhook keys, {} alarm rules and {hours_copied} hours of readings from {from_name} to {to_name}",
            rows.accounts.len(),
            rows.devices.len(),
            rows.api_keys.len(),
            rows.webhook_keys.len(),
            rules.len(),
        );
    }
    let mut expected = tally(&rows, &rows);
    let mut found = tally(&target.export().await?, &rows);
    expected.push(("alarm_rules", tally_rules(&rules)));
    found.push(("alarm_rules", tally_rules(&alarm_rules(&*target, &ids).await?)));
    expected.push(("readings", tally_readings(&*source, &devices).await?));
    found.push(("readings", tally_readings(&*target, &devices).await?));
    println!("{:<16} {:>10}  {:<16}  target", "table", "rows", "sha256");
    let mut differ = Vec::new();
    for ((table, (rows, sum)), (_, (trows, tsum))) in expected.iter().zip(&found) {
        let same = rows == trows && sum == tsum;
        let verdict = if same { "ok".to_owned() } else { format!("DIFFERS: {trows} rows, sha256 {tsum}") };
        println!("{table:<16} {rows:>10}  {sum:<16}  {verdict}");
        if !same {
            differ.push(*table);
        }
    }
    if differ.is_empty() {
        println!("verified: the target holds every row of the source");
        Ok(())
    } else {
        Err(format!("verification failed: the target differs from the source in {}", differ.join(", ")).into())
    }
}
