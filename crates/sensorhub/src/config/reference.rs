//! The configuration reference in docs/configuration.md, generated from
//! the command line's own definitions (flag, variable, default, meaning)
//! and the config file's keys, so that the page cannot drift from the
//! code: a test fails when the page differs from what this renders.

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// Where the generated part of the page begins and ends.
pub const BEGIN: &str = "<!-- BEGIN GENERATED: sensorhub config-reference -->";
/// The end marker of the generated part.
pub const END: &str = "<!-- END GENERATED -->";

/// The config file key of `serve`'s flag `long`, when the file has one:
/// the flag in snake_case, or a key of the `[mqtt]`, `[webhooks]` or
/// `[dashboard]` table named by the flag without its prefix.
pub fn file_key(long: &str) -> Option<String> {
    let snake = |s: &str| s.replace('-', "_");
    match long {
        // The file's own path, and a one-off action of this start.
        "config" | "demo" | "help" | "version" => None,
        "no-dashboard" => Some("[dashboard] enabled = false".into()),
        "webhook-mode" => Some("webhook_mode".into()),
        _ => Some(if let Some(rest) = long.strip_prefix("mqtt-") {
            format!("[mqtt] {}", snake(rest))
        } else if let Some(rest) = long.strip_prefix("webhook-") {
            format!("[webhooks] {}", snake(rest))
        } else if let Some(rest) = long.strip_prefix("dashboard-") {
            format!("[dashboard] {}", snake(rest))
        } else {
            snake(long)
        }),
    }
}

/// The keys the config file accepts: the top level's, and each table's
/// as `[table] key`.
pub fn file_keys() -> Vec<String> {
    let mut out: Vec<String> = fields_of::<super::FileConfig>().iter().map(|k| (*k).to_owned()).collect();
    let tables = [
        ("mqtt", fields_of::<super::mqtt::MqttFile>()),
        ("webhooks", fields_of::<super::delivery::DeliveryFile>()),
        ("dashboard", fields_of::<super::dashboard::DashboardFile>()),
    ];
    for (table, keys) in tables {
        out.extend(keys.iter().map(|k| format!("[{table}] {k}")));
    }
    out
}

/// `serve` as the command line `cli` sees it: with the global flags
/// (`--database`, `--config`, `--log-format`) among its own.
pub fn serve_command(mut cli: clap::Command) -> clap::Command {
    cli.build();
    cli.find_subcommand("serve").cloned().unwrap_or_default()
}

/// The markdown table of `serve`'s settings, one row per flag.
pub fn markdown(serve: &clap::Command) -> String {
    let mut out =
        String::from("| flag | environment variable | config file key | default | meaning |\n|---|---|---|---|---|\n");
    for arg in serve.get_arguments().filter(|a| !a.is_hide_set()) {
        let Some(long) = arg.get_long().filter(|l| !["help", "version"].contains(l)) else { continue };
        let env = arg.get_env().and_then(|e| e.to_str()).map_or_else(String::new, |e| format!("`{e}`"));
        let key = file_key(long).map_or_else(String::new, |k| format!("`{k}`"));
        let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
        let (meaning, default) = split_default(&help);
        let default = match default {
            Some(d) => format!("`{d}`"),
            None if matches!(arg.get_action(), clap::ArgAction::SetTrue) => "off".to_owned(),
            None if arg.get_default_values().is_empty() => "none".to_owned(),
            None => arg
                .get_default_values()
                .iter()
                .map(|v| format!("`{}`", v.to_string_lossy()))
                .collect::<Vec<_>>()
                .join(", "),
        };
        out.push_str(&format!("| `--{long}` | {env} | {key} | {default} | {} |\n", cell(meaning)));
    }
    out
}

/// A help text without its trailing `[default: …]` (where serve's
/// defaults are written, since they are applied after the file is read),
/// and that default.
fn split_default(help: &str) -> (&str, Option<&str>) {
    match help.trim_end().strip_suffix(']').and_then(|h| h.rsplit_once("[default: ")) {
        Some((meaning, default)) => (meaning.trim_end(), Some(default)),
        None => (help.trim_end(), None),
    }
}

/// `text` fit for one table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// The page `current` with its generated part replaced by `table`;
/// `None` when the markers are missing.
pub fn spliced(current: &str, table: &str) -> Option<String> {
    let start = current.find(BEGIN)? + BEGIN.len();
    let end = start + current[start..].find(END)?;
    Some(format!("{}\n{table}{}", &current[..start], &current[end..]))
}

/// The field names that `T`'s derived `Deserialize` accepts, read by
/// asking it to deserialize a struct from a deserializer that only
/// records the names it is given.
fn fields_of<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    struct Names(Option<&'static [&'static str]>);
    impl<'de> Deserializer<'de> for &mut Names {
        type Error = de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("only structs"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            self.0 = Some(fields);
            Err(de::Error::custom("names recorded"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
            unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let mut names = Names(None);
    let _ = T::deserialize(&mut names);
    names.0.unwrap_or(&[])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serve() -> clap::Command {
        let serve = serve_command(<crate::cli::Cli as clap::CommandFactory>::command());
        assert!(serve.get_arguments().any(|a| a.get_long() == Some("database")), "globals are in");
        serve
    }

    #[test]
    fn every_file_key_the_reference_names_is_one_the_file_accepts() {
        let keys = file_keys();
        assert!(keys.contains(&"database".to_owned()) && keys.contains(&"[mqtt] url".to_owned()), "{keys:?}");
        for arg in serve().get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            let Some(key) = file_key(long) else { continue };
            let key = key.trim_end_matches(" = false");
            assert!(keys.iter().any(|k| k == key), "--{long}: the file has no key {key:?} ({keys:?})");
        }
        // And the other way: every key of the file is some flag's.
        let named: Vec<String> = serve().get_arguments().filter_map(|a| file_key(a.get_long()?)).collect();
        for key in keys.iter().filter(|k| !["mqtt", "webhooks", "dashboard"].contains(&k.as_str())) {
            let flagged = named.iter().any(|n| n.trim_end_matches(" = false") == key);
            assert!(flagged, "the file key {key:?} is no flag's, so the reference does not show it");
        }
    }

    #[test]
    fn every_variable_of_serve_is_in_the_reference() {
        let table = markdown(&serve());
        for arg in serve().get_arguments() {
            if let Some(env) = arg.get_env().and_then(|e| e.to_str()) {
                assert!(table.contains(&format!("`{env}`")), "{env} is missing");
            }
        }
    }

    /// docs/configuration.md holds what [`markdown`] renders now. To
    /// bring it up to date: `SENSORHUB_TEST_UPDATE_DOCS=1 cargo test -p
    /// sensorhub --lib config::reference`.
    #[test]
    fn docs_configuration_md_is_up_to_date() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md");
        let current = std::fs::read_to_string(&path).expect("docs/configuration.md");
        let fresh = spliced(&current, &markdown(&serve())).expect("docs/configuration.md has the markers");
        if std::env::var_os("SENSORHUB_TEST_UPDATE_DOCS").is_some() {
            std::fs::write(&path, &fresh).expect("write docs/configuration.md");
            return;
        }
        assert!(
            current == fresh,
            "docs/configuration.md is stale: run SENSORHUB_TEST_UPDATE_DOCS=1 cargo test -p sensorhub --lib config::reference"
        );
    }
}
