//! The dashboard settings of `sensorhub serve`: `--no-dashboard` and the
//! map's optional tiles, flags (each also an environment variable) over
//! the config file's `[dashboard]` table.

use serde::Deserialize;

/// The dashboard flags of `serve`.
#[derive(Debug, Default, clap::Args)]
pub struct DashboardFlags {
    /// Do not serve the dashboard at / (the API is unchanged)
    #[arg(long, env = "SENSORHUB_NO_DASHBOARD")]
    pub no_dashboard: bool,
    /// Map tiles for the dashboard, e.g. https://tile.example.org/{z}/{x}/{y}.png (default: country outlines, offline)
    // The text is `--help`'s, not rustdoc's: the URL is an example.
    #[allow(rustdoc::bare_urls)]
    #[arg(long, env = "SENSORHUB_DASHBOARD_TILES")]
    pub dashboard_tiles: Option<String>,
    /// Attribution shown under the tiles (their licence usually requires one)
    #[arg(long, env = "SENSORHUB_DASHBOARD_TILES_ATTRIBUTION")]
    pub dashboard_tiles_attribution: Option<String>,
}

/// The `[dashboard]` table of the config file.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DashboardFile {
    /// `false` turns the dashboard off.
    pub enabled: Option<bool>,
    /// Tile URL template.
    pub tiles: Option<String>,
    /// Attribution of the tiles.
    pub tiles_attribution: Option<String>,
}

/// The dashboard, resolved: `None` from [`resolve`] means it is off.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DashboardSettings {
    /// A tile URL template with `{z}`, `{x}` and `{y}`.
    pub tiles: Option<TileUrl>,
    /// Shown under the tiles.
    pub tiles_attribution: Option<String>,
}

/// A checked tile URL template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TileUrl {
    /// The template as given.
    pub template: String,
    /// `scheme://host[:port]`, for the Content-Security-Policy's `img-src`.
    pub origin: String,
}

impl TileUrl {
    /// Checks `template`: http(s), a plain host, and `{z}`, `{x}`, `{y}` in the path.
    pub fn parse(template: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("--dashboard-tiles {template:?}: {why}");
        let rest = template
            .strip_prefix("https://")
            .or_else(|| template.strip_prefix("http://"))
            .ok_or_else(|| bad("must start with https:// or http://"))?;
        let host = rest.split('/').next().unwrap_or_default();
        // What a Content-Security-Policy host-source can name: a name or IPv4 address, and a port.
        let host_ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':');
        if host.is_empty() || !host.chars().all(host_ok) {
            return Err(bad(
                "the host must be a plain name or IPv4 address, with an optional port (no placeholders such as {s}, \
                 no IPv6 literal)",
            ));
        }
        for p in ["{z}", "{x}", "{y}"] {
            if !rest[host.len()..].contains(p) {
                return Err(bad(&format!("the path lacks {p}")));
            }
        }
        if template.chars().any(|c| c.is_whitespace() || c == '"' || c == '<' || c == '>') {
            return Err(bad("must not contain spaces, quotes or angle brackets"));
        }
        let scheme_len = template.len() - rest.len();
        Ok(Self { template: template.to_owned(), origin: format!("{}{host}", &template[..scheme_len]) })
    }
}

/// Layers the flags over the file; `Ok(None)` when the dashboard is off.
pub fn resolve(flags: &DashboardFlags, file: Option<&DashboardFile>) -> Result<Option<DashboardSettings>, String> {
    let file = file.cloned().unwrap_or_default();
    if flags.no_dashboard || file.enabled == Some(false) {
        return Ok(None);
    }
    let tiles = flags.dashboard_tiles.clone().or(file.tiles).map(|t| TileUrl::parse(&t)).transpose()?;
    Ok(Some(DashboardSettings {
        tiles,
        tiles_attribution: flags.dashboard_tiles_attribution.clone().or(file.tiles_attribution),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tile_urls_are_checked_and_give_their_origin() {
        let t = TileUrl::parse("https://tiles.example.org:8443/osm/{z}/{x}/{y}.png").expect("valid");
        assert_eq!(t.origin, "https://tiles.example.org:8443");
        for bad in [
            "ftp://x/{z}/{x}/{y}",
            "https://{s}.tile.example.org/{z}/{x}/{y}.png",
            "https://x.org/{z}/{x}.png",
            "https://x.org/{z}/{x}/{y}.png; script-src *",
            "https:///{z}/{x}/{y}",
            "http://[::1]:8000/{z}/{x}/{y}.png",
        ] {
            assert!(TileUrl::parse(bad).is_err(), "{bad} is refused");
        }
    }

    #[test]
    fn flags_win_over_the_file_and_either_turns_it_off() {
        let file = DashboardFile { tiles: Some("https://a.org/{z}/{x}/{y}.png".into()), ..DashboardFile::default() };
        let on = resolve(&DashboardFlags::default(), Some(&file)).expect("ok").expect("on");
        assert_eq!(on.tiles.expect("tiles").origin, "https://a.org");
        let off = DashboardFlags { no_dashboard: true, ..DashboardFlags::default() };
        assert_eq!(resolve(&off, Some(&file)), Ok(None));
        let disabled = DashboardFile { enabled: Some(false), ..DashboardFile::default() };
        assert_eq!(resolve(&DashboardFlags::default(), Some(&disabled)), Ok(None));
        assert_eq!(resolve(&DashboardFlags::default(), None), Ok(Some(DashboardSettings::default())));
    }
}
