//! How long readings are kept: the text operators write (`90d`, `2y`,
//! `forever`, `inherit`), how it is stored, and which setting wins (a
//! device's own, else its owner's, else the server's default).

use serde::{Deserialize, Serialize};

/// Shortest retention accepted: an hour (one stored hour row).
pub const MIN_RETENTION_SECONDS: i64 = 3600;

/// A retention setting of the server, an account or a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Retention {
    /// As the level above decides (a device: its owner's; an account: the
    /// server's `--retention`).
    Inherit,
    /// Readings are kept forever.
    Forever,
    /// Readings older than this many seconds are removed.
    Seconds(i64),
}

impl Retention {
    /// Parses `forever`, `inherit`, or a whole number followed by `h`, `d`,
    /// `w` or `y` (365 days): `90d`, `2y`, `36h`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        match text {
            "forever" => return Ok(Retention::Forever),
            "inherit" => return Ok(Retention::Inherit),
            _ => {}
        }
        let bad = || {
            format!(
                "{text:?} is not a retention: use forever, inherit, or a number of hours, days, weeks or years (36h, 90d, 8w, 2y)"
            )
        };
        let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let (n, unit) = text.split_at(split);
        let n: i64 = n.parse().map_err(|_| bad())?;
        let unit_seconds = match unit {
            "h" => 3600,
            "d" => 86_400,
            "w" => 7 * 86_400,
            "y" => 365 * 86_400,
            _ => return Err(bad()),
        };
        let seconds = n.checked_mul(unit_seconds).filter(|s| *s <= 1000 * 365 * 86_400).ok_or_else(bad)?;
        if seconds < MIN_RETENTION_SECONDS {
            return Err(format!("{text:?}: a retention is at least 1h"));
        }
        Ok(Retention::Seconds(seconds))
    }

    /// The stored column: NULL inherits, 0 is forever, else seconds.
    pub fn to_column(self) -> Option<i64> {
        match self {
            Retention::Inherit => None,
            Retention::Forever => Some(0),
            Retention::Seconds(s) => Some(s),
        }
    }

    /// The setting a stored column holds.
    pub fn from_column(column: Option<i64>) -> Self {
        match column {
            None => Retention::Inherit,
            Some(s) if s <= 0 => Retention::Forever,
            Some(s) => Retention::Seconds(s),
        }
    }

    /// The seconds a device's readings are kept (`None`: forever): its own
    /// setting, else its owner's, else the server's `default`.
    pub fn effective(device: Retention, owner: Retention, default: Retention) -> Option<i64> {
        [device, owner, default].into_iter().find_map(|r| match r {
            Retention::Inherit => None,
            Retention::Forever => Some(None),
            Retention::Seconds(s) => Some(Some(s)),
        })?
    }
}

impl TryFrom<String> for Retention {
    type Error = String;
    fn try_from(text: String) -> Result<Self, String> {
        Retention::parse(&text)
    }
}

impl From<Retention> for String {
    fn from(r: Retention) -> String {
        r.to_string()
    }
}

impl std::fmt::Display for Retention {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Retention::Inherit => f.write_str("inherit"),
            Retention::Forever => f.write_str("forever"),
            Retention::Seconds(s) if s % (365 * 86_400) == 0 => write!(f, "{}y", s / (365 * 86_400)),
            Retention::Seconds(s) if s % (7 * 86_400) == 0 => write!(f, "{}w", s / (7 * 86_400)),
            Retention::Seconds(s) if s % 86_400 == 0 => write!(f, "{}d", s / 86_400),
            Retention::Seconds(s) => write!(f, "{}h", s / 3600),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Retention::{self, Forever, Inherit, Seconds};

    #[test]
    fn texts_parse_and_print_back() {
        for (text, r) in [("90d", Seconds(90 * 86_400)), ("2y", Seconds(2 * 365 * 86_400)), ("36h", Seconds(36 * 3600))]
        {
            assert_eq!(Retention::parse(text), Ok(r));
            assert_eq!(r.to_string(), text);
        }
        assert_eq!(Retention::parse("14d").map(|r| r.to_string()), Ok("2w".into()));
        assert_eq!(Retention::parse("forever"), Ok(Forever));
        assert_eq!(Retention::parse("inherit"), Ok(Inherit));
        for bad in ["", "d", "90", "90 days", "-1d", "0h", "30m", "1.5d", "99999999999999y"] {
            assert!(Retention::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_nearest_setting_wins() {
        let year = Seconds(365 * 86_400);
        assert_eq!(Retention::effective(Inherit, Inherit, Forever), None);
        assert_eq!(Retention::effective(Inherit, year, Forever), Some(365 * 86_400));
        assert_eq!(Retention::effective(Forever, year, Seconds(3600)), None, "a device kept forever");
        assert_eq!(Retention::effective(Seconds(7200), year, Forever), Some(7200));
        assert_eq!(Retention::effective(Inherit, Inherit, Seconds(3600)), Some(3600));
        for r in [Inherit, Forever, year] {
            assert_eq!(Retention::from_column(r.to_column()), r);
        }
    }
}
