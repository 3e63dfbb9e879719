//! InfluxDB line protocol, as Telegraf, Node-RED and dataloggers write it:
//! `measurement[,tag=value…] field=value[,field=value…] [timestamp]`, one
//! point per line, with InfluxDB's escapes (`\,` `\ ` and, in tags and
//! field keys, `\=`; in string fields `\"` and `\\`). Pure: the HTTP
//! endpoints map points onto readings.

/// One field's value.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    /// `1.5`, `1e3`, `-2`.
    Float(f64),
    /// `12i`.
    Integer(i64),
    /// `12u`.
    Unsigned(u64),
    /// `t`, `true`, `F`, …
    Boolean(bool),
    /// `"text"`.
    String(String),
}

impl FieldValue {
    /// The value as a finite number, or what kind of value it is.
    pub fn number(&self) -> Result<f64, &'static str> {
        match self {
            Self::Float(v) => Ok(*v),
            Self::Integer(v) => Ok(*v as f64),
            Self::Unsigned(v) => Ok(*v as f64),
            Self::Boolean(_) => Err("a boolean"),
            Self::String(_) => Err("a string"),
        }
    }
}

/// One point.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// The measurement.
    pub measurement: String,
    /// Tags, in the order given.
    pub tags: Vec<(String, String)>,
    /// Fields, in the order given (at least one).
    pub fields: Vec<(String, FieldValue)>,
    /// The timestamp as written, in the request's precision.
    pub timestamp: Option<i64>,
}

impl Point {
    /// The value of tag `key`, if given.
    pub fn tag(&self, key: &str) -> Option<&str> {
        self.tags.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

/// A timestamp precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    Nanoseconds,
    Microseconds,
    Milliseconds,
    Seconds,
    Minutes,
    Hours,
}

impl Precision {
    /// The precision named `name` (`ns`, `us`, `ms`, `s`; v1 also `n`,
    /// `u`, `m`, `h`); none given is nanoseconds.
    pub fn parse(name: Option<&str>) -> Result<Self, String> {
        Ok(match name.unwrap_or("ns") {
            "ns" | "n" => Self::Nanoseconds,
            "us" | "u" | "µ" => Self::Microseconds,
            "ms" => Self::Milliseconds,
            "s" => Self::Seconds,
            "m" => Self::Minutes,
            "h" => Self::Hours,
            other => return Err(format!("precision {other:?} is not one of ns, us, ms, s")),
        })
    }

    /// `t` in this precision as whole seconds since the epoch (a fraction
    /// of a second is dropped: readings are kept to the second).
    pub fn seconds(self, t: i64) -> i64 {
        match self {
            Self::Nanoseconds => t.div_euclid(1_000_000_000),
            Self::Microseconds => t.div_euclid(1_000_000),
            Self::Milliseconds => t.div_euclid(1_000),
            Self::Seconds => t,
            Self::Minutes => t.saturating_mul(60),
            Self::Hours => t.saturating_mul(3600),
        }
    }
}

/// Parses one line: `Ok(None)` for a blank line or a `#` comment.
pub fn parse_line(line: &str) -> Result<Option<Point>, String> {
    // Whitespace around a line and between its sections is not part of it
    // (InfluxDB skips it too; the `influx` CLI sends some).
    let line = line.trim_matches([' ', '\t', '\r']);
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    // Quotes delimit string field values only: in the measurement and tags
    // (before the first unescaped space) a `"` is a character like another.
    let series_end = split_unescaped(line, ' ', false).first().map_or(0, |s| s.len());
    let mut sections = vec![&line[..series_end]];
    sections.extend(split_unescaped(&line[series_end..], ' ', true));
    sections.retain(|s| !s.is_empty());
    let (series, fields, timestamp) = match sections.as_slice() {
        [s, f] => (*s, *f, None),
        [s, f, t] => (*s, *f, Some(*t)),
        [_] => return Err("a point needs at least one field after the measurement".into()),
        _ => return Err("too many spaces: escape spaces in names with \\".into()),
    };
    let mut parts = split_unescaped(series, ',', false).into_iter();
    let measurement = unescape(parts.next().unwrap_or_default(), &[',', ' ']);
    if measurement.is_empty() {
        return Err("the measurement is empty".into());
    }
    let mut tags = Vec::new();
    for tag in parts {
        let (k, v) = key_value(tag).ok_or_else(|| format!("tag {tag:?} is not key=value"))?;
        if k.is_empty() || v.is_empty() {
            return Err(format!("tag {tag:?} has an empty key or value"));
        }
        tags.push((unescape(k, &[',', '=', ' ']), unescape(v, &[',', '=', ' '])));
    }
    let mut out = Vec::new();
    for field in split_unescaped(fields, ',', true) {
        let (k, v) = key_value(field).ok_or_else(|| format!("field {field:?} is not key=value"))?;
        if k.is_empty() {
            return Err(format!("field {field:?} has an empty key"));
        }
        let key = unescape(k, &[',', '=', ' ']);
        out.push((key.clone(), field_value(v).map_err(|e| format!("field {key:?}: {e}"))?));
    }
    let timestamp = match timestamp {
        None => None,
        Some(t) => Some(t.parse::<i64>().map_err(|_| format!("timestamp {t:?} is not an integer"))?),
    };
    Ok(Some(Point { measurement, tags, fields: out, timestamp }))
}

/// Splits `s` at each `sep` that is neither escaped nor (when `quotes`)
/// inside a double-quoted string.
fn split_unescaped(s: &str, sep: char, quotes: bool) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut escaped, mut quoted) = (0, false, false);
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if quotes && c == '"' {
            quoted = !quoted;
        } else if c == sep && !quoted {
            out.push(&s[start..i]);
            start = i + c.len_utf8();
        }
    }
    out.push(&s[start..]);
    out
}

/// `key=value` at the first unescaped `=`.
fn key_value(s: &str) -> Option<(&str, &str)> {
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == '=' {
            return Some((&s[..i], &s[i + 1..]));
        }
    }
    None
}

/// `s` with a backslash before any of `chars` removed.
fn unescape(s: &str, chars: &[char]) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\\'
            && let Some(next) = it.peek().copied().filter(|n| chars.contains(n))
        {
            out.push(next);
            it.next();
            continue;
        }
        out.push(c);
    }
    out
}

fn field_value(v: &str) -> Result<FieldValue, String> {
    if let Some(inner) = v.strip_prefix('"') {
        let inner = inner.strip_suffix('"').ok_or("a string value has no closing quote")?;
        return Ok(FieldValue::String(unescape(inner, &['"', '\\'])));
    }
    match v {
        "t" | "T" | "true" | "True" | "TRUE" => return Ok(FieldValue::Boolean(true)),
        "f" | "F" | "false" | "False" | "FALSE" => return Ok(FieldValue::Boolean(false)),
        _ => {}
    }
    if let Some(n) = v.strip_suffix('i') {
        return n.parse().map(FieldValue::Integer).map_err(|_| format!("{v:?} is not an integer"));
    }
    if let Some(n) = v.strip_suffix('u') {
        return n.parse().map(FieldValue::Unsigned).map_err(|_| format!("{v:?} is not an unsigned integer"));
    }
    match v.parse::<f64>() {
        Ok(f) if f.is_finite() => Ok(FieldValue::Float(f)),
        _ => Err(format!("{v:?} is not a number")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(line: &str) -> Point {
        parse_line(line).expect("parses").expect("a point")
    }

    #[test]
    fn a_telegraf_line_parses_with_tags_fields_and_time() {
        let p = point("AWLR-001,device=AWLR-001,site=Katulampa AWLR1-wl=123.5,AWLR1-batt=91i,ok=t 1777964400000000000");
        assert_eq!(p.measurement, "AWLR-001");
        assert_eq!(p.tag("site"), Some("Katulampa"));
        assert_eq!(p.fields[0], ("AWLR1-wl".to_owned(), FieldValue::Float(123.5)));
        assert_eq!(p.fields[1].1, FieldValue::Integer(91));
        assert_eq!(p.fields[2].1, FieldValue::Boolean(true));
        assert_eq!(p.timestamp, Some(1_777_964_400_000_000_000));
        assert_eq!(Precision::parse(None).map(|p| p.seconds(1_777_964_400_999_999_999)), Ok(1_777_964_400));
    }

    #[test]
    fn escapes_and_quoted_strings_are_read_as_influxdb_reads_them() {
        let p = point(r#"my\ station,loc\,x=a\=b\ c note="he said \"hi\", ok",v=1u"#);
        assert_eq!(p.measurement, "my station");
        assert_eq!(p.tags, [("loc,x".to_owned(), "a=b c".to_owned())]);
        assert_eq!(p.fields[0].1, FieldValue::String(r#"he said "hi", ok"#.into()));
        assert_eq!(p.fields[1].1, FieldValue::Unsigned(1));
        assert_eq!(p.timestamp, None);
        // A quote in the measurement or a tag is a character, not a string.
        let p = point(r#"AWLR-001,pipe=2" AWLR1-wl=1 1700000000"#);
        assert_eq!((p.tags[0].1.as_str(), p.timestamp), (r#"2""#, Some(1_700_000_000)));
        assert_eq!(point(r#"m"x f="a b" 3"#).measurement, r#"m"x"#);
    }

    #[test]
    fn bad_lines_say_what_is_wrong_and_blank_ones_are_nothing() {
        assert_eq!(parse_line("  "), Ok(None));
        assert_eq!(point("  m  v=1   2 \t").timestamp, Some(2), "whitespace around and between sections");
        assert_eq!(parse_line("# a comment"), Ok(None));
        for (line, says) in [
            ("m", "at least one field"),
            ("m v=abc", "not a number"),
            ("m v=1 12x", "not an integer"),
            ("m,t v=1", "not key=value"),
            ("m v=\"open", "closing quote"),
            ("m v=1 1 2", "too many spaces"),
            ("m v=1 1 \\ ", "too many spaces"),
            ("m v=NaN", "not a number"),
        ] {
            let err = parse_line(line).expect_err(line);
            assert!(err.contains(says), "{line}: {err}");
        }
        assert!(Precision::parse(Some("d")).is_err());
    }

    proptest::proptest! {
        #[test]
        fn any_line_parses_or_is_refused_never_panics(line in "\\PC{0,80}") {
            let _ = parse_line(&line);
        }
    }
}
