//! Which `SENSORHUB_*` environment variables sensorhub reads: every `env =`
//! of the command line's definitions (so the list cannot drift from them),
//! and the few read directly. Any other variable with the prefix is
//! probably a typo and gets a warning (`SENSORHUB_TEST_*` belong to the
//! tests).

use std::collections::BTreeSet;

/// The log filter (read by `main` before the command line is parsed).
pub const LOG_VAR: &str = "SENSORHUB_LOG";
/// The sealing key of webhook secrets (a secret: never a flag).
pub const SECRET_KEY_VAR: &str = "SENSORHUB_SECRET_KEY";
/// The commit a build names in `--version`, read by `build.rs` when
/// building; cargo also sets it for the binaries it runs (`cargo run`,
/// `cargo test`), so the README's first command must not warn about it.
pub const COMMIT_VAR: &str = "SENSORHUB_COMMIT";

/// Every variable `cmd` (and its subcommands) reads, and those read directly.
pub fn known(cmd: &clap::Command) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = [LOG_VAR, SECRET_KEY_VAR, COMMIT_VAR].map(str::to_owned).into();
    collect(cmd, &mut out);
    out
}

fn collect(cmd: &clap::Command, out: &mut BTreeSet<String>) {
    for arg in cmd.get_arguments() {
        if let Some(name) = arg.get_env().and_then(|n| n.to_str()) {
            out.insert(name.to_owned());
        }
    }
    for sub in cmd.get_subcommands() {
        collect(sub, out);
    }
}

/// The `SENSORHUB_*` variables of this process that `cmd` does not know.
pub fn unknown(cmd: &clap::Command) -> Vec<String> {
    let known = known(cmd);
    std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| k.starts_with("SENSORHUB_") && !k.starts_with("SENSORHUB_TEST_") && !known.contains(k))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn every_variable_of_the_command_line_is_known_and_mqtts_among_them() {
        let cmd = crate::cli::Cli::command();
        let known = known(&cmd);
        for var in ["SENSORHUB_MQTT_URL", "SENSORHUB_NO_DASHBOARD", "SENSORHUB_DASHBOARD_TILES", "SENSORHUB_DATABASE"] {
            assert!(known.contains(var), "{var} is read by the command line but not known");
        }
        assert!(known.contains(LOG_VAR) && known.contains(SECRET_KEY_VAR) && known.contains(COMMIT_VAR));
        assert!(known.iter().all(|v| v.starts_with("SENSORHUB_")), "{known:?}");
    }
}
