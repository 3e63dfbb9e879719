//! Names the commit a binary was built from, for `sensorhub --version`
//! (`sensorhub 0.1.0 (commit abc123def456)`): `SENSORHUB_COMMIT` when the
//! builder sets it (a source tarball has no git), else git's HEAD, else
//! `unknown`. Rebuilt when HEAD moves.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
}

fn main() {
    println!("cargo:rerun-if-env-changed=SENSORHUB_COMMIT");
    let commit = std::env::var("SENSORHUB_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=SENSORHUB_COMMIT={commit}");
    if let (Some(dir), Some(common)) = (git(&["rev-parse", "--git-dir"]), git(&["rev-parse", "--git-common-dir"])) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        if let Some(reference) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={common}/{reference}");
        }
        println!("cargo:rerun-if-changed={common}/packed-refs");
    }
}
