//! The results of `run`, written as JSON and printed as a table.

use super::Results;
use std::fs;
use std::path::{Path, PathBuf};

/// Writes the results as JSON under `out` and returns the path.
pub fn save(results: &Results, out: &Path) -> Result<PathBuf, String> {
    fs::create_dir_all(out).map_err(|e| e.to_string())?;
    let name = format!("{}-{}-{}.json", results.date.replace(':', ""), results.scale, results.backend);
    let path = out.join(name);
    let text = serde_json::to_string_pretty(results).map_err(|e| e.to_string())?;
    fs::write(&path, text).map_err(|e| e.to_string())?;
    Ok(path)
}

/// The results as a terminal table.
pub fn table(r: &Results) -> String {
    let mut t = format!(
        "sensorhub bench {} (commit {}, {}), {}, scale {}, {} s per scenario, idle RSS {:.1} MiB\n\n",
        r.date, r.commit, r.machine, r.backend, r.scale, r.duration_s, r.idle_rss_mib
    );
    t += &format!(
        "{:<7} {:<40} {:>5} {:>10} {:>9} {:>9} {:>9} {:>9}\n",
        "", "scenario", "conns", "req/s", "p50 ms", "p99 ms", "MB/s", "peak MiB"
    );
    for (name, l) in &r.loads {
        t += &format!(
            "{name:<7} {:<40} {:>5} {:>10.0} {:>9.2} {:>9.2} {:>9.1} {:>9.1}\n",
            l.what, l.connections, l.wrk.requests_per_s, l.wrk.p50_ms, l.wrk.p99_ms, l.wrk.mb_per_s, l.peak_rss_mib
        );
    }
    if r.scale_p50_ms.is_none() {
        t += "S6      skipped: it compares the small store with a bigger one (--scale medium)\n";
    }
    if let Some((small, big)) = r.scale_p50_ms {
        t += &format!("S6      S1 p50, mean of two turns each: {small:.2} ms on small, {big:.2} ms on {}\n", r.scale);
    }
    let i = &r.ingest;
    t += &format!(
        "S5      import of the {} dataset: {} values in {:.1} s = {:.0} values/s; {} bytes = {:.2} bytes/value\n\n",
        i.scale, i.values, i.seconds, i.values_per_s, i.bytes, i.bytes_per_value
    );
    if let Some(d) = r.durability {
        t += &format!(
            "S9      durability: webhook ingest {:.0} req/s with synchronous=FULL, {:.0} with NORMAL ({:.2}x); \
             small import {:.0} values/s FULL, {:.0} NORMAL ({:.2}x)\n\n",
            d.ingest_full,
            d.ingest_normal,
            d.ingest_full / d.ingest_normal,
            d.import_full,
            d.import_normal,
            d.import_full / d.import_normal
        );
    }
    if !r.profiles.is_empty() {
        t += &format!(
            "{:<10} {:>10} {:>8} {:>12} {:>10} {:>10}\n",
            "profile", "values", "B/value", "import v/s", "S1 req/s", "S2 req/s"
        );
        for p in &r.profiles {
            t += &format!(
                "{:<10} {:>10} {:>8.2} {:>12.0} {:>10.0} {:>10.1}\n",
                p.name,
                p.ingest.values,
                p.ingest.bytes_per_value,
                p.ingest.values_per_s,
                p.s1.requests_per_s,
                p.s2.requests_per_s
            );
        }
        t += "\n";
    }
    for target in &r.targets {
        let mark = if target.met { "met   " } else { "MISSED" };
        t += &format!("{mark} {:<34} {:>12.3}  (target {})\n", target.name, target.value, target.limit);
    }
    t
}
