//! Time rules of the read API: the `tz` offset or zone, `start`/`end`
//! bounds, the default range and its limits, and allocation-free RFC 3339
//! rendering.

use jiff::civil::{DateTime, Time};
use jiff::tz::{Offset, TimeZone};
use jiff::{SignedDuration, Timestamp};

/// Why a time parameter was refused; rendered as the `detail` of a 400.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    /// `tz` is neither whole hours nor `±HH:MM`.
    #[error("tz {0:?} is not a UTC offset: use whole hours (-12 to 14) or ±HH:MM")]
    BadTz(String),
    /// `tz` looks like a zone name (it has a `/`) that the time-zone
    /// database does not hold.
    #[error(
        "tz {0:?} is not a time zone: use an IANA name such as Asia/Jakarta or Europe/Berlin, whole hours (-12 to 14) or ±HH:MM"
    )]
    UnknownZone(String),
    /// `tz` parsed but lies outside -12:00..=+14:00.
    #[error("tz {0:?} is out of range: the offset must lie between -12 and +14 hours")]
    TzOutOfRange(String),
    /// A bound is not an RFC 3339 date-time (offset optional for query bounds).
    #[error("{name} {value:?} is not a date-time like 2026-05-05T07:00:00Z or 2026-05-05T07:00:00+07:00")]
    BadTimestamp {
        /// The parameter name (`start`, `end`, `timestamp`).
        name: &'static str,
        /// The value as received.
        value: String,
    },
    /// A reading's timestamp has a fraction of a second.
    #[error("timestamp {0:?} has a fraction of a second: readings are stored to the second")]
    Fraction(String),
    /// A date-time outside the range readings are kept in.
    #[error("{name} {value:?} is outside the range of stored times: {FIRST_TIME} to {LAST_TIME}")]
    OutOfRange {
        /// The parameter name (`start`, `end`, `timestamp`).
        name: &'static str,
        /// The value as received.
        value: String,
    },
    /// A reading's timestamp lies further ahead of the server's clock than allowed.
    #[error(
        "timestamp {value} is {ahead} seconds ahead of the server's clock ({now}); readings more than {max_skew} seconds in the future are refused"
    )]
    InFuture {
        /// The timestamp, UTC.
        value: Timestamp,
        /// The server's time, to the second.
        now: Timestamp,
        /// Seconds `value` is ahead of `now`.
        ahead: i64,
        /// The allowed skew, in seconds.
        max_skew: i64,
    },
    /// `start` is later than `end`.
    #[error("start ({start}) is after end ({end}): start must be at or before end")]
    StartAfterEnd {
        /// Resolved start, UTC.
        start: Timestamp,
        /// Resolved end, UTC.
        end: Timestamp,
    },
    /// The range exceeds the configured maximum.
    #[error("the range from start to end is longer than the maximum of {max_days} days")]
    RangeTooLong {
        /// Configured maximum in days.
        max_days: u32,
    },
}

/// The first second a reading may have, and what it renders as.
const FIRST_SECOND: i64 = 0;
const FIRST_TIME: &str = "1970-01-01T00:00:00Z";
/// The last second a reading may have: the end of 9999-12-29, within
/// jiff's range (which ends at 9999-12-30T22:00:00Z so that any offset
/// keeps a time's rendering within year 9999).
const LAST_SECOND: i64 = 253_402_127_999;
const LAST_TIME: &str = "9999-12-29T23:59:59Z";

/// Refuses `ts` outside [`FIRST_TIME`]..=[`LAST_TIME`], naming `name` and `raw`.
fn in_stored_range(name: &'static str, raw: &str, ts: Timestamp) -> Result<Timestamp, TimeError> {
    if (FIRST_SECOND..=LAST_SECOND).contains(&(ts.as_second() - i64::from(ts.subsec_nanosecond() < 0))) {
        Ok(ts)
    } else {
        Err(TimeError::OutOfRange { name, value: raw.to_owned() })
    }
}

/// Bounds of `tz`: -12:00 to +14:00, as in the IANA zones in use.
const MIN_OFFSET_SECONDS: i32 = -12 * 3600;
const MAX_OFFSET_SECONDS: i32 = 14 * 3600;

/// Parses a `tz` value: whole hours (`7`, `-3`, `+14`) or `±HH:MM` / `±HHMM`.
///
/// A leading space is read as `+`, because a raw `+` in a query string
/// decodes to a space. `Z` and `UTC` mean offset zero.
pub fn parse_tz(raw: &str) -> Result<Offset, TimeError> {
    let bad = || TimeError::BadTz(raw.to_owned());
    let s = raw.trim_end();
    if s.eq_ignore_ascii_case("z") || s.eq_ignore_ascii_case("utc") {
        return Ok(Offset::UTC);
    }
    let (sign, rest) = match s.as_bytes().first() {
        Some(b'-') => (-1, &s[1..]),
        Some(b'+') | Some(b' ') => (1, &s[1..]),
        Some(_) => (1, s),
        None => return Err(bad()),
    };
    let all_digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let (hours, minutes): (i32, i32) = match rest.len() {
        1 | 2 if all_digits(rest) => (rest.parse().map_err(|_| bad())?, 0),
        4 if all_digits(rest) => (rest[..2].parse().map_err(|_| bad())?, rest[2..].parse().map_err(|_| bad())?),
        5 if rest.as_bytes()[2] == b':' && all_digits(&rest[..2]) && all_digits(&rest[3..]) => {
            (rest[..2].parse().map_err(|_| bad())?, rest[3..].parse().map_err(|_| bad())?)
        }
        _ => return Err(bad()),
    };
    if minutes > 59 {
        return Err(bad());
    }
    let seconds = sign * (hours * 3600 + minutes * 60);
    if !(MIN_OFFSET_SECONDS..=MAX_OFFSET_SECONDS).contains(&seconds) {
        return Err(TimeError::TzOutOfRange(raw.to_owned()));
    }
    Offset::from_seconds(seconds).map_err(|_| bad())
}

/// What a `tz` names: a fixed offset, or a zone whose offset follows its
/// rules (daylight saving time), from the bundled IANA time-zone database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Zone {
    /// Whole hours or `±HH:MM`.
    Fixed(Offset),
    /// An IANA name such as `Europe/Berlin`.
    Named(TimeZone),
}

impl Zone {
    /// The zone as jiff's time zone.
    pub fn time_zone(&self) -> TimeZone {
        match self {
            Zone::Fixed(offset) => TimeZone::fixed(*offset),
            Zone::Named(tz) => tz.clone(),
        }
    }
}

/// Parses a `tz` value: what [`parse_tz`] takes, or an IANA time-zone name
/// (`Asia/Jakarta`, `America/New_York`). The messages of malformed offsets
/// are those of [`parse_tz`]; a name the database lacks says so.
pub fn parse_zone(raw: &str) -> Result<Zone, TimeError> {
    match parse_tz(raw) {
        Ok(offset) => Ok(Zone::Fixed(offset)),
        Err(e) => match jiff::tz::db().get(raw.trim()) {
            Ok(tz) => Ok(Zone::Named(tz)),
            Err(_) if raw.contains('/') => Err(TimeError::UnknownZone(raw.to_owned())),
            Err(_) => Err(e),
        },
    }
}

/// The shape of an RFC 3339 date-time, checked byte by byte before jiff
/// parses it, so that looser ISO 8601 forms (basic format, missing seconds)
/// are refused. Returns the index where the offset part starts.
fn rfc3339_offset_start(b: &[u8]) -> Option<usize> {
    const DIGITS: [usize; 14] = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18];
    if b.len() < 19 || !DIGITS.iter().all(|&i| b[i].is_ascii_digit()) {
        return None;
    }
    if b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') || b[13] != b':' || b[16] != b':' {
        return None;
    }
    // No leap second: jiff would fold 60 into 59 and overwrite that second.
    if b[17] > b'5' {
        return None;
    }
    let mut i = 19;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let digits = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 || digits > 9 {
            return None;
        }
        i += digits;
    }
    Some(i)
}

/// Whether `rest` (what follows the seconds) is a valid offset; `None` means
/// no offset was given.
fn offset_kind(rest: &[u8]) -> Result<Option<()>, ()> {
    match rest {
        [] => Ok(None),
        [b'Z' | b'z'] => Ok(Some(())),
        // RFC 3339 offsets: hours 00-23, minutes 00-59.
        [b'+' | b'-' | b' ', h1, h2, b':', m1, m2]
            if [h1, h2, m1, m2].iter().all(|c| c.is_ascii_digit()) && [*h1, *h2] <= *b"23" && *m1 <= b'5' =>
        {
            Ok(Some(()))
        }
        _ => Err(()),
    }
}

/// Parses a query bound (`start`, `end`): RFC 3339 with `Z` or an offset,
/// or without an offset, in which case it is read in `tz`. A space where the
/// offset sign belongs is read as `+`.
pub fn parse_bound(name: &'static str, raw: &str, tz: &TimeZone) -> Result<Timestamp, TimeError> {
    let bad = || TimeError::BadTimestamp { name, value: raw.to_owned() };
    let out_of_range = || TimeError::OutOfRange { name, value: raw.to_owned() };
    let bytes = raw.as_bytes();
    let at = rfc3339_offset_start(bytes).ok_or_else(bad)?;
    let ts = match offset_kind(&bytes[at..]).map_err(|()| bad())? {
        None => {
            let dt: DateTime = raw.parse().map_err(|_| bad())?;
            tz.to_timestamp(dt).map_err(|_| out_of_range())?
        }
        Some(()) => {
            let mut fixed = raw.to_owned();
            if bytes[at] == b' ' {
                fixed.replace_range(at..=at, "+");
            }
            fixed.parse::<Timestamp>().map_err(|_| civil_or(raw, at, bad(), out_of_range()))?
        }
    };
    in_stored_range(name, raw, ts)
}

/// For a date-time that did not parse with its offset: out of range when
/// its civil part (before byte `at`) is a valid date-time, else malformed.
fn civil_or(raw: &str, at: usize, bad: TimeError, out_of_range: TimeError) -> TimeError {
    match raw.get(..at).map(str::parse::<DateTime>) {
        Some(Ok(_)) => out_of_range,
        _ => bad,
    }
}

/// Parses a strict RFC 3339 date-time with `Z` or an offset; fractions of
/// a second are allowed.
pub fn parse_rfc3339(name: &'static str, raw: &str) -> Result<Timestamp, TimeError> {
    let bad = || TimeError::BadTimestamp { name, value: raw.to_owned() };
    let bytes = raw.as_bytes();
    let at = rfc3339_offset_start(bytes).ok_or_else(bad)?;
    if !matches!(bytes.get(at), Some(b'Z' | b'z' | b'+' | b'-')) || offset_kind(&bytes[at..]).is_err() {
        return Err(bad());
    }
    let out_of_range = || TimeError::OutOfRange { name, value: raw.to_owned() };
    raw.parse::<Timestamp>().map_err(|_| civil_or(raw, at, bad(), out_of_range()))
}

/// Parses the timestamp of a stored reading: strict RFC 3339 with `Z` or an
/// offset, in whole seconds (readings are kept at one-second resolution, so a
/// fraction would be lost and is refused instead).
pub fn parse_reading_timestamp(raw: &str) -> Result<Timestamp, TimeError> {
    let ts = parse_rfc3339("timestamp", raw)?;
    if ts.subsec_nanosecond() != 0 {
        return Err(TimeError::Fraction(raw.to_owned()));
    }
    in_stored_range("timestamp", raw, ts)
}

/// Readings before 1970 or after 9999-12-29 are refused: they are typos (a
/// year 0000), not data.
pub fn check_reading_time(ts: Timestamp) -> Result<(), TimeError> {
    in_stored_range("timestamp", &ts.to_string(), ts).map(|_| ())
}

/// Refuses a reading more than `max_skew` seconds after `now`: it is a
/// clock error, not a measurement, and it would stand as the device's last
/// update until it came true.
pub fn check_not_future(ts: Timestamp, now: Timestamp, max_skew: SignedDuration) -> Result<(), TimeError> {
    let ahead = ts.duration_since(now);
    if ahead <= max_skew {
        return Ok(());
    }
    let now = Timestamp::from_second(now.as_second()).unwrap_or(now);
    let value = Timestamp::from_second(ts.as_second()).unwrap_or(ts);
    Err(TimeError::InFuture { value, now, ahead: ahead.as_secs(), max_skew: max_skew.as_secs() })
}

/// An inclusive range of whole seconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeRange {
    /// First second included.
    pub start: i64,
    /// Last second included.
    pub end: i64,
}

/// The raw query of a readings request, before validation.
#[derive(Debug, Default, Clone, Copy)]
pub struct RangeQuery<'a> {
    /// `start`, as received (empty means omitted).
    pub start: Option<&'a str>,
    /// `end`, as received (empty means omitted).
    pub end: Option<&'a str>,
    /// `tz`, as received (empty means omitted).
    pub tz: Option<&'a str>,
}

/// The limits and defaults a server applies to every readings request.
#[derive(Debug, Clone)]
pub struct RangeRules {
    /// The zone used when `tz` is omitted: an offset or a named zone.
    pub default_tz: Zone,
    /// Longest allowed range, in days.
    pub max_range_days: u32,
}

/// A validated request: the range to read and the offset to render in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedRange {
    /// Inclusive range of seconds.
    pub range: TimeRange,
    /// Offset of the rendered timestamps (for a named zone, its offset at
    /// the start of the range).
    pub offset: Offset,
    /// A named zone: each timestamp is rendered in its offset at that instant.
    pub zone: Option<TimeZone>,
}

fn non_empty(v: Option<&str>) -> Option<&str> {
    v.filter(|s| !s.is_empty())
}

impl RangeRules {
    /// The zone a request's `tz` names (empty counts as missing), else the
    /// default.
    pub fn zone(&self, tz: Option<&str>) -> Result<Zone, TimeError> {
        match non_empty(tz) {
            Some(tz) => parse_zone(tz),
            None => Ok(self.default_tz.clone()),
        }
    }

    /// Applies the API's rules: defaults (today 00:00:00 in the offset, and
    /// now), inclusive bounds rounded inward to whole seconds, `start <= end`
    /// and the maximum length.
    pub fn resolve(&self, q: RangeQuery<'_>, now: Timestamp) -> Result<ResolvedRange, TimeError> {
        self.resolve_within(q, now, self.max_range_days)
    }

    /// [`RangeRules::resolve`] with a longest range of `max_range_days`
    /// (an aggregated request may span more than a raw one).
    pub fn resolve_within(
        &self,
        q: RangeQuery<'_>,
        now: Timestamp,
        max_range_days: u32,
    ) -> Result<ResolvedRange, TimeError> {
        let zone = self.zone(q.tz)?;
        let tz = zone.time_zone();
        let start = match non_empty(q.start) {
            Some(s) => parse_bound("start", s, &tz)?,
            None => start_of_day(now, &tz),
        };
        let end = match non_empty(q.end) {
            Some(s) => parse_bound("end", s, &tz)?,
            None => now,
        };
        if start > end {
            return Err(TimeError::StartAfterEnd { start, end });
        }
        let max = SignedDuration::from_hours(24 * i64::from(max_range_days));
        if end.duration_since(start) > max {
            return Err(TimeError::RangeTooLong { max_days: max_range_days });
        }
        // Readings are whole seconds: round the start up and the end down.
        let ceil = |t: Timestamp| t.as_second() + i64::from(t.subsec_nanosecond() > 0);
        let range = TimeRange { start: ceil(start), end: end.as_second() };
        let (offset, zone) = match zone {
            Zone::Fixed(offset) => (offset, None),
            Zone::Named(tz) => (tz.to_offset(start), Some(tz)),
        };
        Ok(ResolvedRange { range, offset, zone })
    }
}

/// The start of `now`'s calendar day in `tz`: midnight, or the first
/// instant of the day where a zone skips midnight (a DST change at 00:00).
fn start_of_day(now: Timestamp, tz: &TimeZone) -> Timestamp {
    let day = tz.to_datetime(now).date();
    // Cannot fail for dates of stored times; fall back to `now` rather than panic.
    tz.to_ambiguous_timestamp(day.to_datetime(Time::midnight())).compatible().unwrap_or(now)
}

/// Appends `second` rendered as RFC 3339 in `offset` (`Z` for offset zero),
/// without allocating: `2026-05-05T07:00:00+07:00`.
pub fn write_rfc3339(out: &mut Vec<u8>, second: i64, offset: Offset) {
    let offset = whole_minutes(offset);
    let Ok(ts) = Timestamp::from_second(second) else {
        out.extend_from_slice(b"1970-01-01T00:00:00Z");
        return;
    };
    let dt = offset.to_datetime(ts);
    let two = |out: &mut Vec<u8>, v: i8| out.extend_from_slice(&[b'0' + (v / 10) as u8, b'0' + (v % 10) as u8]);
    let year = dt.year().clamp(0, 9999) as u16;
    out.extend_from_slice(&[
        b'0' + (year / 1000) as u8,
        b'0' + (year / 100 % 10) as u8,
        b'0' + (year / 10 % 10) as u8,
        b'0' + (year % 10) as u8,
        b'-',
    ]);
    two(out, dt.month());
    out.push(b'-');
    two(out, dt.day());
    out.push(b'T');
    two(out, dt.hour());
    out.push(b':');
    two(out, dt.minute());
    out.push(b':');
    two(out, dt.second());
    write_offset(out, offset);
}

/// `offset` to the nearest minute (RFC 3339's unit; Monrovia ran at -00:44:30), for clock and suffix alike.
fn whole_minutes(offset: Offset) -> Offset {
    let minutes = (f64::from(offset.seconds()) / 60.0).round() as i32;
    Offset::from_seconds(minutes * 60).unwrap_or(offset)
}

fn write_offset(out: &mut Vec<u8>, offset: Offset) {
    let secs = offset.seconds();
    if secs == 0 {
        out.push(b'Z');
        return;
    }
    out.push(if secs < 0 { b'-' } else { b'+' });
    let abs = secs.unsigned_abs();
    let (h, m) = ((abs / 3600) as u8, (abs % 3600 / 60) as u8);
    out.extend_from_slice(&[b'0' + h / 10, b'0' + h % 10, b':', b'0' + m / 10, b'0' + m % 10]);
}

/// Renders many timestamps in one offset, in any order but fastest in time
/// order: the date part is computed once per calendar day.
#[derive(Debug, Clone)]
pub struct Rfc3339Writer {
    offset_secs: i64,
    suffix: Vec<u8>,
    day: i64,
    date: [u8; 11],
    /// A named zone: the offset is looked up for every timestamp.
    zone: Option<TimeZone>,
}

impl Rfc3339Writer {
    /// A writer for `offset` (`Z` for zero).
    pub fn new(offset: Offset) -> Self {
        let offset = whole_minutes(offset);
        let mut suffix = Vec::with_capacity(6);
        write_offset(&mut suffix, offset);
        Self { offset_secs: i64::from(offset.seconds()), suffix, day: i64::MIN, date: [0; 11], zone: None }
    }

    /// A writer for a named zone: each timestamp carries the zone's offset
    /// at that instant (so the offset changes across a DST change).
    pub fn in_zone(zone: TimeZone) -> Self {
        Self { zone: Some(zone), ..Self::new(Offset::UTC) }
    }

    /// Appends `second` as [`write_rfc3339`] would.
    pub fn write(&mut self, out: &mut Vec<u8>, second: i64) {
        if let Some(zone) = &self.zone {
            let offset = whole_minutes(Timestamp::from_second(second).map_or(Offset::UTC, |t| zone.to_offset(t)));
            if i64::from(offset.seconds()) != self.offset_secs {
                self.offset_secs = i64::from(offset.seconds());
                self.suffix.clear();
                write_offset(&mut self.suffix, offset);
                self.day = i64::MIN;
            }
        }
        let local = second + self.offset_secs;
        let day = local.div_euclid(86_400);
        if day != self.day {
            let mut full = Vec::with_capacity(25);
            write_rfc3339(&mut full, second, Offset::from_seconds(self.offset_secs as i32).unwrap_or(Offset::UTC));
            self.date.copy_from_slice(&full[..11]);
            self.day = day;
        }
        let tod = local.rem_euclid(86_400);
        let (h, m, s) = ((tod / 3600) as u8, (tod / 60 % 60) as u8, (tod % 60) as u8);
        out.extend_from_slice(&self.date);
        out.extend_from_slice(&[b'0' + h / 10, b'0' + h % 10, b':', b'0' + m / 10, b'0' + m % 10, b':']);
        out.extend_from_slice(&[b'0' + s / 10, b'0' + s % 10]);
        out.extend_from_slice(&self.suffix);
    }
}

/// `second` rendered as RFC 3339 in `offset`, as an owned string.
pub fn format_rfc3339(second: i64, offset: Offset) -> String {
    let mut buf = Vec::with_capacity(25);
    write_rfc3339(&mut buf, second, offset);
    String::from_utf8(buf).unwrap_or_default()
}

#[cfg(test)]
mod tests;
