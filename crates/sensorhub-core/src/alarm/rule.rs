//! Alarm rules as operators write them (`"alarms"` on a device in a
//! provisioning file, `sensorhub alarm add`), checked field by field:
//! a level rule (warning bands with a deadband and a hold time), a rate
//! rule (a rise within a window) or a silence rule (no data for a while).

use crate::input::{InputError, is_valid_identifier};
use serde::{Deserialize, Serialize};

/// The most alarm rules one device may have.
pub const MAX_RULES: usize = 32;
/// The most levels one rule may have.
pub const MAX_LEVELS: usize = 16;
/// The longest `for`, `within` or `no_data_for`: a week.
pub const MAX_DURATION_SECONDS: i64 = 7 * 86_400;

/// Which way a level rule's values are dangerous.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// A level is reached at or above its `at` (a rising river).
    #[default]
    Above,
    /// A level is reached at or below its `at` (a falling tank).
    Below,
}

/// One warning band of a level rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Level {
    /// Its name, e.g. `Siaga 3`.
    pub name: String,
    /// The value at which it is reached.
    pub at: f64,
}

/// Warning bands of one sensor: a level is entered when the value reaches
/// its `at` and has stayed there for `hold_seconds`, and left when the
/// value goes past `at − deadband` (`+` for `below`).
#[derive(Debug, Clone, PartialEq)]
pub struct LevelRule {
    pub sensor: String,
    pub direction: Direction,
    /// Least severe first.
    pub levels: Vec<Level>,
    pub deadband: f64,
    pub hold_seconds: i64,
}

/// Active while the value is at least `rise` above its minimum over the
/// last `within_seconds`.
#[derive(Debug, Clone, PartialEq)]
pub struct RateRule {
    pub sensor: String,
    pub rise: f64,
    pub within_seconds: i64,
}

/// Active when nothing has been stored for `no_data_for_seconds` (of the
/// device, or of one sensor), by the server's clock.
#[derive(Debug, Clone, PartialEq)]
pub struct SilenceRule {
    pub sensor: Option<String>,
    pub no_data_for_seconds: i64,
}

/// What a rule watches.
#[derive(Debug, Clone, PartialEq)]
pub enum RuleKind {
    Level(LevelRule),
    Rate(RateRule),
    Silence(SilenceRule),
}

impl RuleKind {
    /// The kind's name, as the API and the published alarms show it.
    pub fn name(&self) -> &'static str {
        match self {
            RuleKind::Level(_) => "level",
            RuleKind::Rate(_) => "rate",
            RuleKind::Silence(_) => "silence",
        }
    }
}

/// One alarm rule of a device.
#[derive(Debug, Clone, PartialEq)]
pub struct AlarmRule {
    /// Unique per device: how events, the API and the CLI name it.
    pub name: String,
    pub kind: RuleKind,
}

/// A rule as written (JSON): the fields of every kind, all optional, so
/// that each missing or misplaced one gets its own message.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sensor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub levels: Option<Vec<Level>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadband: Option<f64>,
    #[serde(default, rename = "for", skip_serializing_if = "Option::is_none")]
    pub hold: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rise: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_data_for: Option<String>,
}

/// Parses a duration: a whole number of seconds, minutes, hours or days
/// (`0s`, `90s`, `30m`, `2h`, `1d`).
pub fn parse_duration(text: &str) -> Result<i64, String> {
    let bad = || format!("{text:?} is not a duration: use a whole number of s, m, h or d (0s, 30m, 2h)");
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (n, unit) = text.split_at(split);
    let n: i64 = n.parse().map_err(|_| bad())?;
    let unit = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    n.checked_mul(unit).filter(|s| *s <= MAX_DURATION_SECONDS).ok_or_else(|| format!("{text:?} is longer than a week"))
}

/// Seconds as the shortest duration text that [`parse_duration`] reads back.
pub fn format_duration(seconds: i64) -> String {
    match seconds {
        0 => "0s".into(),
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

impl RuleSpec {
    /// The rule this spec describes, or the first problem, named by its
    /// field under `at` (`devices[0].alarms[1].levels[2].at`).
    pub fn check(&self, at: &str) -> Result<AlarmRule, InputError> {
        let err = |field: &str, msg: String| InputError::new(format!("{at}.{field}"), msg);
        if !is_valid_identifier(&self.name) || self.name.len() > 64 {
            return Err(err("name", "must be 1 to 64 characters without spaces or '/'".into()));
        }
        let duration = |field: &str, text: &Option<String>| -> Result<Option<i64>, InputError> {
            text.as_deref().map(|t| parse_duration(t).map_err(|e| err(field, e))).transpose()
        };
        let sensor = || self.sensor.clone().ok_or_else(|| err("sensor", "is required for this kind of rule".into()));
        let kinds = [self.levels.is_some(), self.rise.is_some(), self.no_data_for.is_some()];
        let unexpected = |fields: &[(&str, bool)]| -> Result<(), InputError> {
            match fields.iter().find(|(_, given)| *given) {
                Some((field, _)) => Err(err(field, "does not belong to this kind of rule".into())),
                None => Ok(()),
            }
        };
        let kind = match kinds {
            [true, false, false] => {
                unexpected(&[("within", self.within.is_some())])?;
                let direction = self.direction.unwrap_or_default();
                let levels = self.levels.clone().unwrap_or_default();
                check_levels(&levels, direction, at)?;
                let deadband = self.deadband.unwrap_or(0.0);
                if !deadband.is_finite() || deadband < 0.0 {
                    return Err(err("deadband", "must be a number of at least 0".into()));
                }
                let hold_seconds = duration("for", &self.hold)?.unwrap_or(0);
                RuleKind::Level(LevelRule { sensor: sensor()?, direction, levels, deadband, hold_seconds })
            }
            [false, true, false] => {
                unexpected(&[
                    ("direction", self.direction.is_some()),
                    ("deadband", self.deadband.is_some()),
                    ("for", self.hold.is_some()),
                ])?;
                let rise = self.rise.unwrap_or(0.0);
                if !rise.is_finite() || rise <= 0.0 {
                    return Err(err("rise", "must be a number above 0".into()));
                }
                let within_seconds = duration("within", &self.within)?
                    .filter(|s| *s > 0)
                    .ok_or_else(|| err("within", "is required: a duration above 0 (30m)".into()))?;
                RuleKind::Rate(RateRule { sensor: sensor()?, rise, within_seconds })
            }
            [false, false, true] => {
                unexpected(&[
                    ("direction", self.direction.is_some()),
                    ("deadband", self.deadband.is_some()),
                    ("for", self.hold.is_some()),
                    ("within", self.within.is_some()),
                ])?;
                let no_data_for_seconds = duration("no_data_for", &self.no_data_for)?
                    .filter(|s| *s > 0)
                    .ok_or_else(|| err("no_data_for", "must be a duration above 0 (30m)".into()))?;
                RuleKind::Silence(SilenceRule { sensor: self.sensor.clone(), no_data_for_seconds })
            }
            _ => {
                return Err(InputError::new(
                    at,
                    "a rule has exactly one of \"levels\" (a level rule), \"rise\" (a rate rule) or \"no_data_for\" \
                     (a silence rule)",
                ));
            }
        };
        Ok(AlarmRule { name: self.name.clone(), kind })
    }
}

fn check_levels(levels: &[Level], direction: Direction, at: &str) -> Result<(), InputError> {
    if levels.is_empty() || levels.len() > MAX_LEVELS {
        return Err(InputError::new(format!("{at}.levels"), format!("must list 1 to {MAX_LEVELS} levels")));
    }
    for (i, level) in levels.iter().enumerate() {
        let here = |field: &str| format!("{at}.levels[{i}].{field}");
        if level.name.trim().is_empty() || level.name.len() > 64 {
            return Err(InputError::new(here("name"), "must be 1 to 64 characters"));
        }
        if levels[..i].iter().any(|l| l.name == level.name) {
            return Err(InputError::new(here("name"), format!("{:?} is listed twice", level.name)));
        }
        if !level.at.is_finite() {
            return Err(InputError::new(here("at"), "must be a number"));
        }
        if let Some(prev) = i.checked_sub(1).map(|p| levels[p].at) {
            let ordered = match direction {
                Direction::Above => level.at > prev,
                Direction::Below => level.at < prev,
            };
            if !ordered {
                let way = if direction == Direction::Above { "above" } else { "below" };
                return Err(InputError::new(
                    here("at"),
                    format!("levels are listed least severe first: each `at` must lie {way} the one before"),
                ));
            }
        }
    }
    Ok(())
}

impl AlarmRule {
    /// The sensor the rule reads, if it reads one.
    pub fn sensor(&self) -> Option<&str> {
        match &self.kind {
            RuleKind::Level(r) => Some(&r.sensor),
            RuleKind::Rate(r) => Some(&r.sensor),
            RuleKind::Silence(r) => r.sensor.as_deref(),
        }
    }

    /// The name of level `idx` (level rules).
    pub fn level_name(&self, idx: usize) -> Option<&str> {
        match &self.kind {
            RuleKind::Level(r) => r.levels.get(idx).map(|l| l.name.as_str()),
            _ => None,
        }
    }

    /// The rule as written, normalised (what `alarm list` and the API show).
    pub fn spec(&self) -> RuleSpec {
        let name = self.name.clone();
        match &self.kind {
            RuleKind::Level(r) => RuleSpec {
                name,
                sensor: Some(r.sensor.clone()),
                direction: Some(r.direction),
                levels: Some(r.levels.clone()),
                deadband: Some(r.deadband),
                hold: Some(format_duration(r.hold_seconds)),
                ..RuleSpec::default()
            },
            RuleKind::Rate(r) => RuleSpec {
                name,
                sensor: Some(r.sensor.clone()),
                rise: Some(r.rise),
                within: Some(format_duration(r.within_seconds)),
                ..RuleSpec::default()
            },
            RuleKind::Silence(r) => RuleSpec {
                name,
                sensor: r.sensor.clone(),
                no_data_for: Some(format_duration(r.no_data_for_seconds)),
                ..RuleSpec::default()
            },
        }
    }
}

/// Checks a device's alarm rules: each on its own, names unique. Whether a
/// rule's sensor is one of the device's is checked where the device's
/// stored sensors are known.
pub fn check_rules(rules: &[RuleSpec], at: &str) -> Result<Vec<AlarmRule>, InputError> {
    if rules.len() > MAX_RULES {
        return Err(InputError::new(format!("{at}.alarms"), format!("a device has at most {} alarm rules", MAX_RULES)));
    }
    let mut names = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(rules.len());
    for (k, r) in rules.iter().enumerate() {
        let rat = format!("{at}.alarms[{k}]");
        let rule = r.check(&rat)?;
        if !names.insert(rule.name.clone()) {
            return Err(InputError::new(format!("{rat}.name"), format!("duplicate rule name {:?}", rule.name)));
        }
        out.push(rule);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> RuleSpec {
        serde_json::from_str(json).expect("a rule spec")
    }

    #[test]
    fn the_issues_three_rules_parse_and_print_back() {
        let siaga = spec(
            r#"{"name": "siaga", "sensor": "AWLR1-wl", "direction": "above", "levels": [{"name": "Siaga 4", "at": 60},
                {"name": "Siaga 3", "at": 90}, {"name": "Siaga 2", "at": 160}, {"name": "Siaga 1", "at": 210}],
                "deadband": 5, "for": "0s"}"#,
        );
        let rule = siaga.check("devices[0].alarms[0]").expect("valid");
        assert!(matches!(&rule.kind, RuleKind::Level(l) if l.levels.len() == 4 && l.deadband == 5.0));
        assert_eq!(rule.spec(), siaga);
        let rising = spec(r#"{"name": "rising", "sensor": "AWLR1-wl", "rise": 20, "within": "30m"}"#);
        assert!(matches!(
            rising.check("a").expect("valid").kind,
            RuleKind::Rate(RateRule { within_seconds: 1800, .. })
        ));
        let silent = spec(r#"{"name": "silent", "no_data_for": "30m"}"#);
        let rule = silent.check("a").expect("valid");
        assert_eq!(rule.spec(), silent);
        assert!(matches!(rule.kind, RuleKind::Silence(SilenceRule { sensor: None, no_data_for_seconds: 1800 })));
    }

    #[test]
    fn each_problem_is_named_by_its_field() {
        let cases = [
            (r#"{"name": "x", "sensor": "s", "levels": []}"#, "a.levels"),
            (
                r#"{"name": "x", "sensor": "s", "levels": [{"name": "A", "at": 5}, {"name": "B", "at": 5}]}"#,
                "a.levels[1].at",
            ),
            (
                r#"{"name": "x", "sensor": "s", "direction": "below", "levels": [{"name": "A", "at": 5}, {"name": "B", "at": 6}]}"#,
                "a.levels[1].at",
            ),
            (
                r#"{"name": "x", "sensor": "s", "levels": [{"name": "A", "at": 5}, {"name": "A", "at": 6}]}"#,
                "a.levels[1].name",
            ),
            (r#"{"name": "x", "levels": [{"name": "A", "at": 5}]}"#, "a.sensor"),
            (r#"{"name": "x", "sensor": "s", "levels": [{"name": "A", "at": 5}], "deadband": -1}"#, "a.deadband"),
            (r#"{"name": "x", "sensor": "s", "levels": [{"name": "A", "at": 5}], "for": "5 minutes"}"#, "a.for"),
            (r#"{"name": "x", "sensor": "s", "rise": 0, "within": "1m"}"#, "a.rise"),
            (r#"{"name": "x", "sensor": "s", "rise": 3}"#, "a.within"),
            (r#"{"name": "x", "no_data_for": "0s"}"#, "a.no_data_for"),
            (r#"{"name": "x", "no_data_for": "8d"}"#, "a.no_data_for"),
            (r#"{"name": "x", "no_data_for": "1h", "deadband": 2}"#, "a.deadband"),
            (r#"{"name": "x", "sensor": "s"}"#, "a"),
            (r#"{"name": "x", "rise": 1, "within": "1m", "no_data_for": "1m"}"#, "a"),
            (r#"{"name": "with space", "no_data_for": "1m"}"#, "a.name"),
        ];
        for (json, position) in cases {
            let e = spec(json).check("a").expect_err(json);
            assert_eq!(e.position, position, "{json}: {}", e.message);
        }
        assert!(serde_json::from_str::<RuleSpec>(r#"{"name": "x", "when": 1}"#).is_err(), "unknown fields");
    }

    #[test]
    fn durations_read_and_print() {
        for (text, secs) in [("0s", 0), ("90s", 90), ("30m", 1800), ("2h", 7200), ("1d", 86_400)] {
            assert_eq!(parse_duration(text), Ok(secs));
        }
        assert_eq!(format_duration(5400), "90m");
        assert_eq!(format_duration(90), "90s");
        assert!(parse_duration("m").is_err() && parse_duration("5y").is_err() && parse_duration("-5m").is_err());
    }
}
