//! Aggregation's calendar: the `interval` and `agg` parameters, and which
//! bucket a second falls in, in the caller's time zone. Minute and hour
//! buckets start where the local clock shows a multiple of the interval
//! counted from local midnight (so a `+05:30` zone gets its own buckets, and
//! a DST day has 23 or 25 hourly ones); day, week and month buckets start at
//! local midnight, on Mondays and on the 1st.

use jiff::civil::{Date, DateTime, Time};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{SignedDuration, Timestamp, ToSpan};

/// The most buckets one request may ask for.
pub const MAX_BUCKETS: u64 = 100_000;

/// Longest range, in days, of a request whose interval is a day or longer
/// (ten years, leap days included).
pub const LONG_RANGE_DAYS: u32 = 3_660;

/// Why `interval` or `agg` was refused; rendered as the `detail` of a 400.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BucketError {
    /// `interval` is not a positive count followed by a unit.
    #[error(
        "interval {0:?} is not an interval: use a positive whole number followed by m, h, d, w or mo (15m, 1h, 1d, 1w, 1mo)"
    )]
    BadInterval(String),
    /// `agg` names no aggregate.
    #[error("agg {0:?} is not one of mean, min, max, sum, count, first, last")]
    BadAgg(String),
    /// `agg` without `interval`.
    #[error("agg needs an interval (such as interval=1h) to aggregate over")]
    AggWithoutInterval,
    /// The range holds too many buckets.
    #[error(
        "the range holds {count} buckets of {interval}, more than the maximum of {MAX_BUCKETS}: use a longer interval or a shorter range"
    )]
    TooManyBuckets {
        /// Buckets the range holds (the range's length divided by the interval).
        count: u64,
        /// The interval, as given.
        interval: String,
    },
}

/// The unit of an [`Interval`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// `m`
    Minute,
    /// `h`
    Hour,
    /// `d`
    Day,
    /// `w`: weeks start on Monday.
    Week,
    /// `mo`: months start on the 1st.
    Month,
}

/// The length of one bucket: `15m`, `1h`, `1d`, `1w`, `1mo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    /// How many units (at least 1).
    pub count: u32,
    /// The unit.
    pub unit: Unit,
}

impl Interval {
    /// Parses `15m`, `6h`, `1d`, `2w`, `1mo`; zero, signs, spaces and other
    /// units are refused. Minute and hour intervals may not exceed a day
    /// (they restart at local midnight): longer ones are written in days.
    pub fn parse(raw: &str) -> Result<Interval, BucketError> {
        let bad = || BucketError::BadInterval(raw.to_owned());
        let digits = raw.bytes().take_while(u8::is_ascii_digit).count();
        let count: u32 = raw[..digits].parse().map_err(|_| bad())?;
        let unit = match &raw[digits..] {
            "m" => Unit::Minute,
            "h" => Unit::Hour,
            "d" => Unit::Day,
            "w" => Unit::Week,
            "mo" => Unit::Month,
            _ => return Err(bad()),
        };
        let too_long = match unit {
            Unit::Minute => count > 1440,
            Unit::Hour => count > 24,
            // Ten years of days, weeks or months is one bucket already.
            Unit::Day => count > LONG_RANGE_DAYS,
            Unit::Week => count > 530,
            Unit::Month => count > 120,
        };
        if count == 0 || too_long {
            return Err(bad());
        }
        Ok(Interval { count, unit })
    }

    /// Whether the interval is a day or longer (such requests may span
    /// [`LONG_RANGE_DAYS`]).
    pub fn is_daily_or_longer(self) -> bool {
        matches!(self.unit, Unit::Day | Unit::Week | Unit::Month)
    }

    /// Seconds of a bucket on a day without a clock change; `None` for months.
    fn seconds(self) -> Option<i64> {
        let unit = match self.unit {
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 604_800,
            Unit::Month => return None,
        };
        Some(unit * i64::from(self.count))
    }

    /// How many buckets the inclusive range `start..=end` (seconds) holds,
    /// counted as its length divided by the interval, rounded up (calendar
    /// months for `mo`), and refused above [`MAX_BUCKETS`]. `raw` is the
    /// interval as given, for the message.
    pub fn check_buckets(self, start: i64, end: i64, tz: &TimeZone, raw: &str) -> Result<u64, BucketError> {
        let count = match self.seconds() {
            Some(len) => ((end - start + 1).max(1) as u64).div_ceil(len as u64),
            None => {
                let month = |s: i64| {
                    let d = Timestamp::from_second(s).map(|t| tz.to_datetime(t)).unwrap_or_default();
                    i64::from(d.year()) * 12 + i64::from(d.month())
                };
                ((month(end) - month(start) + 1).max(1) as u64).div_ceil(u64::from(self.count))
            }
        };
        if count > MAX_BUCKETS {
            return Err(BucketError::TooManyBuckets { count, interval: raw.to_owned() });
        }
        Ok(count)
    }
}

/// What a bucket's value is, per sensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Agg {
    /// The arithmetic mean (the default).
    #[default]
    Mean,
    /// The smallest value.
    Min,
    /// The largest value.
    Max,
    /// The sum.
    Sum,
    /// How many values (an integer).
    Count,
    /// The value of the earliest reading.
    First,
    /// The value of the latest reading.
    Last,
}

impl Agg {
    /// Parses `mean`, `min`, `max`, `sum`, `count`, `first` or `last`.
    pub fn parse(raw: &str) -> Result<Agg, BucketError> {
        Ok(match raw {
            "mean" => Agg::Mean,
            "min" => Agg::Min,
            "max" => Agg::Max,
            "sum" => Agg::Sum,
            "count" => Agg::Count,
            "first" => Agg::First,
            "last" => Agg::Last,
            _ => return Err(BucketError::BadAgg(raw.to_owned())),
        })
    }
}

/// An aggregation asked for: the interval and the aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aggregation {
    /// The bucket length.
    pub interval: Interval,
    /// The aggregate.
    pub agg: Agg,
}

impl Aggregation {
    /// The aggregation of a request's `interval` and `agg` (empty counts as
    /// missing): `None` when neither is given; `agg` alone is refused.
    pub fn from_params(interval: Option<&str>, agg: Option<&str>) -> Result<Option<Aggregation>, BucketError> {
        let (interval, agg) = (interval.filter(|s| !s.is_empty()), agg.filter(|s| !s.is_empty()));
        let agg = agg.map(Agg::parse).transpose()?;
        match interval {
            None if agg.is_some() => Err(BucketError::AggWithoutInterval),
            None => Ok(None),
            Some(raw) => Ok(Some(Aggregation { interval: Interval::parse(raw)?, agg: agg.unwrap_or_default() })),
        }
    }
}

/// Finds the bucket of each second, in a time zone; fastest when asked in
/// ascending order (a bucket is computed once, then reused until the next
/// boundary or clock change).
#[derive(Debug, Clone)]
pub struct Buckets {
    interval: Interval,
    zone: TimeZone,
    /// The last bucket's start and the first second it is not known to cover.
    cached: Option<(i64, i64)>,
}

impl Buckets {
    /// Buckets of `interval` in `zone`.
    pub fn new(interval: Interval, zone: TimeZone) -> Self {
        Self { interval, zone, cached: None }
    }

    /// The first second of the bucket holding `second`.
    pub fn start_of(&mut self, second: i64) -> i64 {
        if let Some((start, until)) = self.cached
            && (start..until).contains(&second)
        {
            return start;
        }
        let (start, until) = self.compute(second).unwrap_or((second, second + 1));
        self.cached = Some((start, until));
        start
    }

    /// The bucket of `second`: its start, and a second up to which (not
    /// included) it certainly lasts: the next boundary, or the zone's next
    /// clock change, whichever comes first.
    fn compute(&self, second: i64) -> Option<(i64, i64)> {
        let ts = Timestamp::from_second(second).ok()?;
        let local = self.zone.to_datetime(ts);
        let (first, next) = self.civil_bounds(local)?;
        let start = self.instant_of(first, second)?;
        // Until the next clock change the local clock runs with this
        // instant's offset: the next boundary is when it shows `next`.
        let offset = i64::from(self.zone.to_offset(ts).seconds());
        let mut until = Offset0::to_second(next)? - offset;
        if let Some(change) = self.zone.following(ts).next() {
            until = until.min(change.timestamp().as_second());
        }
        Some((start, until.max(second + 1)))
    }

    /// The local date-times at which the bucket holding `local` starts and
    /// the next one starts.
    fn civil_bounds(&self, local: DateTime) -> Option<(DateTime, DateTime)> {
        let n = i64::from(self.interval.count);
        let date = local.date();
        let midnight = date.to_datetime(Time::midnight());
        Some(match self.interval.unit {
            Unit::Minute | Unit::Hour => {
                let step = self.interval.seconds()?;
                let of_day =
                    i64::from(local.hour()) * 3600 + i64::from(local.minute()) * 60 + i64::from(local.second());
                let first = midnight.checked_add(SignedDuration::from_secs(of_day - of_day % step)).ok()?;
                let next_midnight = date.tomorrow().ok()?.to_datetime(Time::midnight());
                let next = first.checked_add(SignedDuration::from_secs(step)).ok()?.min(next_midnight);
                (first, next)
            }
            Unit::Day | Unit::Week => {
                // Days since 1970-01-01, or since Monday 1970-01-05 for weeks.
                let (epoch, len) = if self.interval.unit == Unit::Day { (0, n) } else { (4, 7 * n) };
                let day = Offset0::to_second(midnight)?.div_euclid(86_400);
                let first_day = day - (day - epoch).rem_euclid(len);
                let first = date.checked_sub((day - first_day).days()).ok()?.to_datetime(Time::midnight());
                (first, first.checked_add(len.days()).ok()?)
            }
            Unit::Month => {
                let index = i64::from(date.year()) * 12 + i64::from(date.month()) - 1;
                let first_index = index - index.rem_euclid(n);
                let year = i16::try_from(first_index.div_euclid(12)).ok()?;
                let month = i8::try_from(first_index.rem_euclid(12) + 1).ok()?;
                let first = Date::new(year, month, 1).ok()?.to_datetime(Time::midnight());
                (first, first.checked_add(n.months()).ok()?)
            }
        })
    }

    /// The instant a bucket whose local start is `first` starts, for a
    /// bucket holding `second`: where the clock shows `first` twice (a
    /// clock set back), the later time if `second` is past it; where it
    /// never shows it (a clock set forward), the instant of the change.
    fn instant_of(&self, first: DateTime, second: i64) -> Option<i64> {
        let ambiguous = self.zone.to_ambiguous_timestamp(first);
        let at = match ambiguous.offset() {
            AmbiguousOffset::Unambiguous { .. } => ambiguous.compatible().ok()?,
            AmbiguousOffset::Gap { .. } => ambiguous.later().ok()?,
            AmbiguousOffset::Fold { .. } => {
                let later = ambiguous.later().ok()?;
                if later.as_second() <= second { later } else { ambiguous.earlier().ok()? }
            }
        };
        Some(at.as_second())
    }
}

/// Civil date-times read as UTC, for day arithmetic.
struct Offset0;

impl Offset0 {
    fn to_second(dt: DateTime) -> Option<i64> {
        jiff::tz::Offset::UTC.to_timestamp(dt).ok().map(Timestamp::as_second)
    }
}

#[cfg(test)]
mod tests;
