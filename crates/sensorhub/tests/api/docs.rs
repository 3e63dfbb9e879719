//! The documentation's relative links: every one in README.md,
//! CONTRIBUTING.md and docs/*.md names a file that exists and, with a
//! `#fragment` into a markdown file, a heading of it (GitHub's anchors).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The pages whose links are checked.
fn pages() -> Vec<PathBuf> {
    let root = root();
    let mut out = vec![root.join("README.md"), root.join("CONTRIBUTING.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    out.extend(docs);
    out
}

/// The targets of `[text](target)` links outside code blocks and spans.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Inline code may hold `](` that is not a link.
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = prose.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].split_whitespace().next().unwrap_or("").to_owned());
            rest = &after[end..];
        }
    }
    out
}

/// GitHub's anchor of a heading: lower case, punctuation dropped but `-`
/// and `_`, spaces as `-`; a repeated heading gets `-1`, `-2`, ….
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let base: String = title
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

#[test]
fn every_relative_link_of_the_docs_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        for link in links(&text) {
            if link.is_empty() || link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, fragment) = link.split_once('#').unwrap_or((&link, ""));
            let target = if file.is_empty() { page.clone() } else { page.parent().expect("a folder").join(file) };
            if !target.exists() {
                broken.push(format!("{}: {link} (no such file)", page.display()));
                continue;
            }
            if !fragment.is_empty() && target.extension().is_some_and(|x| x == "md") {
                let body = std::fs::read_to_string(&target).expect("a page");
                if !anchors(&body).contains(fragment) {
                    broken.push(format!("{}: {link} (no such heading)", page.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(checked > 10, "only {checked} relative links found: is the link reader broken?");
}

#[test]
fn anchors_follow_githubs_rule() {
    let a = anchors(
        "# Live streams (Server-Sent Events)\n## `sensorhub apply FILE`\n# Live streams (Server-Sent Events)\n",
    );
    assert!(a.contains("live-streams-server-sent-events"), "{a:?}");
    assert!(a.contains("sensorhub-apply-file"), "{a:?}");
    assert!(a.contains("live-streams-server-sent-events-1"), "{a:?}");
}
