//! Tests of the aggregation calendar.

use super::*;

fn at(s: &str) -> i64 {
    s.parse::<Timestamp>().map(Timestamp::as_second).unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn zone(name: &str) -> TimeZone {
    crate::time::parse_zone(name).map(|z| z.time_zone()).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn buckets(interval: &str, tz: &str) -> Buckets {
    Buckets::new(Interval::parse(interval).unwrap_or_else(|e| panic!("{e}")), zone(tz))
}

/// The distinct bucket starts of every minute in `from..to`.
fn starts(b: &mut Buckets, from: i64, to: i64) -> Vec<i64> {
    let mut out: Vec<i64> = Vec::new();
    for s in (from..to).step_by(60) {
        let start = b.start_of(s);
        assert!(start <= s, "bucket {start} starts after {s}");
        if out.last() != Some(&start) {
            out.push(start);
        }
    }
    out
}

#[test]
fn intervals_parse_strictly() {
    for (raw, count, unit) in [
        ("15m", 15, Unit::Minute),
        ("1h", 1, Unit::Hour),
        ("6h", 6, Unit::Hour),
        ("1d", 1, Unit::Day),
        ("2w", 2, Unit::Week),
        ("1mo", 1, Unit::Month),
        ("24h", 24, Unit::Hour),
    ] {
        assert_eq!(Interval::parse(raw), Ok(Interval { count, unit }), "{raw}");
    }
    for bad in ["0h", "h", "1", "1x", "-1h", "+1h", "1.5h", " 1h", "1h ", "25h", "1H", "1M", "", "99999999999m"] {
        assert!(Interval::parse(bad).is_err(), "{bad}");
    }
    assert!(Interval::parse("1d").is_ok_and(Interval::is_daily_or_longer));
    assert!(!Interval::parse("24h").is_ok_and(Interval::is_daily_or_longer));
}

#[test]
fn aggregation_needs_an_interval() {
    assert_eq!(Aggregation::from_params(None, None), Ok(None));
    assert_eq!(Aggregation::from_params(Some(""), Some("")), Ok(None));
    assert_eq!(Aggregation::from_params(None, Some("max")), Err(BucketError::AggWithoutInterval));
    assert_eq!(
        Aggregation::from_params(Some("1h"), None),
        Ok(Some(Aggregation { interval: Interval { count: 1, unit: Unit::Hour }, agg: Agg::Mean }))
    );
    assert_eq!(Aggregation::from_params(Some("1h"), Some("median")), Err(BucketError::BadAgg("median".into())));
}

#[test]
fn bucket_counts_are_limited() {
    let utc = zone("0");
    let i = |s: &str| Interval::parse(s).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(i("1h").check_buckets(0, 3599, &utc, "1h"), Ok(1));
    assert_eq!(i("1h").check_buckets(0, 3600, &utc, "1h"), Ok(2));
    assert_eq!(i("1m").check_buckets(0, 100_000 * 60 - 1, &utc, "1m"), Ok(100_000));
    assert_eq!(
        i("1m").check_buckets(0, 100_000 * 60, &utc, "1m"),
        Err(BucketError::TooManyBuckets { count: 100_001, interval: "1m".into() })
    );
    let (jan, mar) = (at("2026-01-31T23:00:00Z"), at("2026-03-01T00:00:00Z"));
    assert_eq!(i("1mo").check_buckets(jan, mar, &utc, "1mo"), Ok(3));
    assert_eq!(i("2mo").check_buckets(jan, mar, &utc, "2mo"), Ok(2));
}

#[test]
fn hours_follow_a_half_hour_zone() {
    let mut b = buckets("1h", "+05:30");
    // 05:40+05:30 lies in the bucket of 05:00+05:30.
    assert_eq!(b.start_of(at("2026-05-05T00:10:00Z")), at("2026-05-04T23:30:00Z"));
    assert_eq!(b.start_of(at("2026-05-05T00:29:59Z")), at("2026-05-04T23:30:00Z"));
    assert_eq!(b.start_of(at("2026-05-05T00:30:00Z")), at("2026-05-05T00:30:00Z"));
    let mut q = buckets("15m", "+05:45");
    assert_eq!(q.start_of(at("2026-05-05T00:14:59Z")), at("2026-05-05T00:00:00Z"));
    assert_eq!(q.start_of(at("2026-05-05T00:15:00Z")), at("2026-05-05T00:15:00Z"));
    // Minutes restart at local midnight: 7-minute buckets of a +05:45 day.
    let mut s = buckets("7m", "+05:45");
    assert_eq!(
        s.start_of(at("2026-05-05T18:14:59Z")),
        at("2026-05-05T18:10:00Z"),
        "23:59:59 local: the day's last bucket, 23:55"
    );
    assert_eq!(s.start_of(at("2026-05-05T18:15:00Z")), at("2026-05-05T18:15:00Z"), "local midnight");
}

#[test]
fn a_dst_day_has_23_or_25_hours_and_one_day() {
    // Europe/Berlin: 2026-03-29 02:00 -> 03:00; 2026-10-25 03:00 -> 02:00.
    let spring = (at("2026-03-28T23:00:00Z"), at("2026-03-29T22:00:00Z"));
    let autumn = (at("2026-10-24T22:00:00Z"), at("2026-10-25T23:00:00Z"));
    assert_eq!(starts(&mut buckets("1h", "Europe/Berlin"), spring.0, spring.1).len(), 23);
    assert_eq!(starts(&mut buckets("1h", "Europe/Berlin"), autumn.0, autumn.1).len(), 25);
    assert_eq!(starts(&mut buckets("1d", "Europe/Berlin"), spring.0, spring.1), vec![spring.0]);
    assert_eq!(starts(&mut buckets("1d", "Europe/Berlin"), autumn.0, autumn.1), vec![autumn.0]);
    // Six-hour buckets keep the local clock's 00, 06, 12, 18.
    let six = starts(&mut buckets("6h", "Europe/Berlin"), autumn.0, autumn.1);
    let expected: Vec<i64> =
        ["2026-10-24T22:00:00Z", "2026-10-25T05:00:00Z", "2026-10-25T11:00:00Z", "2026-10-25T17:00:00Z"]
            .iter()
            .map(|s| at(s))
            .collect();
    assert_eq!(six, expected);
    // The repeated hour is two buckets: 02:00+02:00 and 02:00+01:00.
    let hours = starts(&mut buckets("1h", "Europe/Berlin"), autumn.0, autumn.1);
    assert!(hours.contains(&at("2026-10-25T00:00:00Z")) && hours.contains(&at("2026-10-25T01:00:00Z")));
    // A skipped 02:00 starts its two-hour bucket at the change, 03:00+02:00.
    assert_eq!(buckets("2h", "Europe/Berlin").start_of(at("2026-03-29T01:30:00Z")), at("2026-03-29T01:00:00Z"));
}

#[test]
fn weeks_start_on_monday_and_months_on_the_first() {
    let mut w = buckets("1w", "7");
    // Wednesday 2026-05-06 10:00+07:00 -> Monday 2026-05-04 00:00+07:00.
    assert_eq!(w.start_of(at("2026-05-06T03:00:00Z")), at("2026-05-03T17:00:00Z"));
    let mut m = buckets("1mo", "Asia/Jakarta");
    // 2026-01-31T23:00+07:00 is January's; February (28 days) starts at 2026-02-01T00:00+07:00.
    let feb = starts(&mut m, at("2026-01-31T16:00:00Z"), at("2026-03-01T00:00:00Z"));
    assert_eq!(feb, vec![at("2025-12-31T17:00:00Z"), at("2026-01-31T17:00:00Z"), at("2026-02-28T17:00:00Z")]);
    let mut q = buckets("3mo", "0");
    assert_eq!(q.start_of(at("2026-05-05T00:00:00Z")), at("2026-04-01T00:00:00Z"));
    let mut d2 = buckets("2d", "0");
    assert_eq!(d2.start_of(at("1970-01-02T12:00:00Z")), 0);
    assert_eq!(d2.start_of(at("1970-01-03T12:00:00Z")), at("1970-01-03T00:00:00Z"));
}

#[test]
fn a_named_zone_and_its_offset_give_the_same_buckets() {
    let (from, to) = (at("2026-05-01T00:00:00Z"), at("2026-05-09T00:00:00Z"));
    for interval in ["15m", "1h", "1d", "1w"] {
        let named = starts(&mut buckets(interval, "Asia/Jakarta"), from, to);
        assert_eq!(named, starts(&mut buckets(interval, "7"), from, to), "{interval}");
        assert_eq!(named, starts(&mut buckets(interval, "+07:00"), from, to), "{interval}");
    }
}

proptest::proptest! {
    /// In ascending order (cached) or one at a time (fresh), every second
    /// gets the same bucket, which starts at or before it and holds itself.
    #[test]
    fn cached_buckets_equal_fresh_ones(
        interval in proptest::sample::select(vec!["1m", "7m", "15m", "1h", "2h", "5h", "6h", "1d", "2d", "1w", "1mo", "3mo"]),
        tz in proptest::sample::select(vec!["0", "+05:30", "+05:45", "-03:00", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Jakarta"]),
        base in 0i64..2_000_000_000,
        mut steps in proptest::collection::vec(1i64..5_000, 1..300),
    ) {
        let mut cached = buckets(interval, tz);
        let mut s = base;
        for step in steps.drain(..) {
            s += step * 7;
            let start = cached.start_of(s);
            let fresh = buckets(interval, tz).start_of(s);
            proptest::prop_assert_eq!(start, fresh, "second {}", s);
            proptest::prop_assert!(start <= s);
            proptest::prop_assert_eq!(buckets(interval, tz).start_of(start), start, "a start is in its own bucket");
        }
    }
}
