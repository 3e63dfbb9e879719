//! Unit and property tests of the time rules.

use super::*;
use proptest::prelude::*;

fn off(h: i8) -> Offset {
    Offset::constant(h)
}

fn ts(s: &str) -> Timestamp {
    s.parse().expect("valid test timestamp")
}

fn rules() -> RangeRules {
    RangeRules { default_tz: super::Zone::Fixed(Offset::UTC), max_range_days: 366 }
}

#[test]
fn tz_accepts_hours_and_offsets() {
    assert_eq!(parse_tz("7"), Ok(off(7)));
    assert_eq!(parse_tz("-3"), Ok(off(-3)));
    assert_eq!(parse_tz("+14"), Ok(off(14)));
    assert_eq!(parse_tz(" 7"), Ok(off(7)), "a decoded '+' is a space");
    assert_eq!(parse_tz("-12"), Ok(off(-12)));
    assert_eq!(parse_tz("0"), Ok(Offset::UTC));
    assert_eq!(parse_tz("Z"), Ok(Offset::UTC));
    assert_eq!(parse_tz("+05:30").map(|o| o.seconds()), Ok(19800));
    assert_eq!(parse_tz(" 05:30").map(|o| o.seconds()), Ok(19800));
    assert_eq!(parse_tz("-0930").map(|o| o.seconds()), Ok(-34200));
}

#[test]
fn tz_refuses_garbage_and_out_of_range() {
    for bad in ["", "abc", "7.5", "+", "1:00", "+05:60", "007", "+5:30", "--1"] {
        assert!(matches!(parse_tz(bad), Err(TimeError::BadTz(_))), "{bad:?}");
    }
    for far in ["15", "-13", "+14:30", "-12:01", "99"] {
        assert!(matches!(parse_tz(far), Err(TimeError::TzOutOfRange(_))), "{far:?}");
    }
}

#[test]
fn bounds_accept_z_offset_space_and_local() {
    let want = ts("2026-05-05T00:00:00Z");
    let (utc, plus9, plus7) = (TimeZone::UTC, TimeZone::fixed(off(9)), TimeZone::fixed(off(7)));
    assert_eq!(parse_bound("start", "2026-05-05T00:00:00Z", &plus9), Ok(want));
    assert_eq!(parse_bound("start", "2026-05-05T07:00:00+07:00", &utc), Ok(want));
    assert_eq!(parse_bound("start", "2026-05-05T07:00:00 07:00", &utc), Ok(want));
    assert_eq!(parse_bound("start", "2026-05-05T07:00:00", &plus7), Ok(want));
    assert_eq!(parse_bound("start", "2026-05-04T21:00:00-03:00", &plus7), Ok(want));
    assert_eq!(parse_bound("end", "2026-05-05T00:00:00.5Z", &utc).map(|t| t.subsec_nanosecond()), Ok(500_000_000));
}

#[test]
fn bounds_refuse_non_rfc3339() {
    for bad in [
        "2026-05-05",
        "2026-05-05T07:00Z",
        "20260505T070000Z",
        "2026-05-05 07:00:00Z",
        "2026-05-05T07:00:00+0700",
        "2026-05-05T07:00:00+07",
        "2026-13-05T07:00:00Z",
        "2026-02-30T07:00:00Z",
        "yesterday",
        "2026-05-05T07:00:00Z ",
        "2026-05-05T07:00:00+25:00",
        "2026-05-05T07:00:00+07:60",
        "2026-05-05T23:59:60Z",
    ] {
        assert!(parse_bound("start", bad, &TimeZone::UTC).is_err(), "{bad:?}");
    }
}

#[test]
fn reading_timestamps_need_an_offset_and_whole_seconds() {
    assert_eq!(parse_reading_timestamp("2026-05-05T07:00:00+07:00"), Ok(ts("2026-05-05T00:00:00Z")));
    assert!(parse_reading_timestamp("2026-05-05T07:00:00").is_err());
    assert!(matches!(parse_reading_timestamp("2026-05-05T07:00:00.250Z"), Err(TimeError::Fraction(_))));
    assert!(parse_rfc3339("timestamp", "2026-05-05T07:00:00.250Z").is_ok());
    assert!(parse_rfc3339("timestamp", "2026-05-05T07:00:00").is_err());
    assert!(matches!(parse_reading_timestamp("0000-01-01T00:00:00Z"), Err(TimeError::OutOfRange { .. })));
    assert!(parse_reading_timestamp("1970-01-01T00:00:00Z").is_ok());
}

#[test]
fn defaults_are_midnight_in_the_offset_and_now() {
    let now = ts("2026-05-05T20:30:00Z");
    let r = rules().resolve(RangeQuery { tz: Some("7"), ..Default::default() }, now).expect("valid");
    // 20:30Z is 03:30 on May 6th at +07:00, so "today" starts May 5th 17:00Z.
    assert_eq!(r.range.start, ts("2026-05-05T17:00:00Z").as_second());
    assert_eq!(r.range.end, now.as_second());
    assert_eq!(r.offset, off(7));
    let utc = rules().resolve(RangeQuery::default(), now).expect("valid");
    assert_eq!(utc.range.start, ts("2026-05-05T00:00:00Z").as_second());
    assert_eq!(utc.offset, Offset::UTC);
}

#[test]
fn zones_are_iana_names_with_their_rules() {
    let berlin = parse_zone("Europe/Berlin").expect("a known zone");
    assert!(matches!(berlin, Zone::Named(_)));
    assert_eq!(parse_zone("7"), Ok(Zone::Fixed(off(7))), "hours stay fixed offsets");
    assert_eq!(parse_zone("+05:30"), Ok(Zone::Fixed(Offset::from_seconds(19_800).expect("offset"))));
    assert!(matches!(parse_zone("Mars/Olympus_Mons"), Err(TimeError::UnknownZone(_))));
    assert_eq!(parse_zone("abc"), Err(TimeError::BadTz("abc".into())), "the seed's message stays");
    assert_eq!(parse_zone("99"), Err(TimeError::TzOutOfRange("99".into())));
    // Local bounds are read in the zone's offset of that date: +01:00 in
    // winter, +02:00 in summer; "today" starts at local midnight.
    let q = |start| RangeQuery { start: Some(start), end: Some("2026-07-01T12:00:00"), tz: Some("Europe/Berlin") };
    let now = ts("2026-07-01T12:00:00Z");
    let winter = rules().resolve(q("2026-01-15T00:00:00"), now).expect("valid");
    assert_eq!(winter.range.start, ts("2026-01-14T23:00:00Z").as_second());
    assert_eq!(winter.range.end, ts("2026-07-01T10:00:00Z").as_second());
    assert_eq!(winter.offset, off(1), "the offset at the start");
    let today = rules().resolve(RangeQuery { tz: Some("Europe/Berlin"), ..Default::default() }, now).expect("valid");
    assert_eq!(today.range.start, ts("2026-06-30T22:00:00Z").as_second());
    let jakarta = rules().resolve(RangeQuery { tz: Some("Asia/Jakarta"), ..Default::default() }, now).expect("valid");
    let seven = rules().resolve(RangeQuery { tz: Some("7"), ..Default::default() }, now).expect("valid");
    assert_eq!(jakarta.range, seven.range, "a named zone and its fixed offset give the same instants");
}

#[test]
fn a_named_zone_renders_each_time_in_its_offset_then() {
    let mut w = Rfc3339Writer::in_zone(jiff::tz::db().get("Europe/Berlin").expect("zone"));
    let mut out = Vec::new();
    // Summer time starts on 2026-03-29 at 01:00Z: 02:00 local becomes 03:00.
    for t in ["2026-03-29T00:30:00Z", "2026-03-29T01:30:00Z", "2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z"] {
        w.write(&mut out, ts(t).as_second());
        out.push(b' ');
    }
    assert_eq!(
        String::from_utf8(out).expect("utf-8"),
        "2026-03-29T01:30:00+01:00 2026-03-29T03:30:00+02:00 2026-10-25T02:30:00+02:00 2026-10-25T02:30:00+01:00 "
    );
}

#[test]
fn an_offset_of_whole_seconds_is_written_to_the_minute_and_names_the_same_instant() {
    // Africa/Monrovia ran at -00:44:30 until 1972.
    let mut w = Rfc3339Writer::in_zone(jiff::tz::db().get("Africa/Monrovia").expect("zone"));
    let second = ts("1971-01-01T00:00:00Z").as_second();
    let mut out = Vec::new();
    w.write(&mut out, second);
    let text = String::from_utf8(out).expect("utf-8");
    assert_eq!(text, "1970-12-31T23:15:00-00:45");
    assert_eq!(ts(&text).as_second(), second, "the same instant");
    let offset = Offset::from_seconds(-(44 * 60 + 30)).expect("offset");
    let text = format_rfc3339(second, offset);
    assert_eq!(ts(&text).as_second(), second, "{text}");
    let mut fixed = Vec::new();
    Rfc3339Writer::new(offset).write(&mut fixed, second);
    assert_eq!(String::from_utf8(fixed).expect("utf-8"), text);
}

#[test]
fn empty_parameters_mean_omitted() {
    let now = ts("2026-05-05T20:30:00Z");
    let q = RangeQuery { start: Some(""), end: Some(""), tz: Some("") };
    assert_eq!(rules().resolve(q, now), rules().resolve(RangeQuery::default(), now));
}

#[test]
fn start_after_end_and_too_long_are_refused() {
    let now = ts("2026-05-05T20:30:00Z");
    let q = RangeQuery { start: Some("2026-05-05T10:00:00Z"), end: Some("2026-05-05T09:59:59Z"), tz: None };
    assert!(matches!(rules().resolve(q, now), Err(TimeError::StartAfterEnd { .. })));
    let q = RangeQuery { start: Some("2025-01-01T00:00:00Z"), end: Some("2026-01-02T00:00:01Z"), tz: None };
    assert_eq!(rules().resolve(q, now), Err(TimeError::RangeTooLong { max_days: 366 }));
    let q = RangeQuery { start: Some("2025-01-01T00:00:00Z"), end: Some("2026-01-02T00:00:00Z"), tz: None };
    assert!(rules().resolve(q, now).is_ok(), "exactly 366 days is allowed");
}

#[test]
fn equal_bounds_form_a_one_second_range() {
    let now = ts("2026-05-05T20:30:00Z");
    let q = RangeQuery { start: Some("2026-05-05T10:00:00Z"), end: Some("2026-05-05T10:00:00Z"), tz: None };
    let r = rules().resolve(q, now).expect("valid");
    assert_eq!(r.range.start, r.range.end);
}

#[test]
fn rendering_uses_z_for_zero_and_the_offset_otherwise() {
    let s = ts("2026-05-05T00:00:00Z").as_second();
    assert_eq!(format_rfc3339(s, Offset::UTC), "2026-05-05T00:00:00Z");
    assert_eq!(format_rfc3339(s, off(7)), "2026-05-05T07:00:00+07:00");
    assert_eq!(format_rfc3339(s, off(-3)), "2026-05-04T21:00:00-03:00");
    let half = Offset::from_seconds(19800).expect("valid offset");
    assert_eq!(format_rfc3339(s, half), "2026-05-05T05:30:00+05:30");
}

proptest! {
    #[test]
    fn rendering_matches_jiff_and_parses_back(second in 0i64..=253_402_127_999, hours in -12i8..=14) {
        let offset = off(hours);
        let text = format_rfc3339(second, offset);
        let jiff_text = Timestamp::from_second(second)
            .expect("in range")
            .to_zoned(jiff::tz::TimeZone::fixed(offset))
            .strftime("%Y-%m-%dT%H:%M:%S%:z")
            .to_string();
        let jiff_text = if hours == 0 { jiff_text.replace("+00:00", "Z") } else { jiff_text };
        prop_assert_eq!(&text, &jiff_text);
        prop_assert_eq!(parse_bound("start", &text, &TimeZone::UTC).map(|t| t.as_second()), Ok(second));
        prop_assert_eq!(parse_reading_timestamp(&text).map(|t| t.as_second()), Ok(second));
    }

    #[test]
    fn local_bounds_read_in_the_tz(second in 0i64..4_000_000_000, hours in -12i8..=14) {
        let offset = off(hours);
        let mut text = format_rfc3339(second, offset);
        // Strip the offset: the bound is then read in `tz`.
        text.truncate(19);
        prop_assert_eq!(parse_bound("end", &text, &TimeZone::fixed(offset)).map(|t| t.as_second()), Ok(second));
    }

    #[test]
    fn resolve_never_panics_and_keeps_its_rules(
        start in proptest::option::of("[0-9T:+ Z-]{0,26}"),
        end in proptest::option::of("[0-9T:+ Z-]{0,26}"),
        tz in proptest::option::of("[+ -]?[0-9]{0,3}"),
    ) {
        let now = ts("2026-05-05T20:30:00Z");
        let q = RangeQuery { start: start.as_deref(), end: end.as_deref(), tz: tz.as_deref() };
        if let Ok(r) = rules().resolve(q, now) {
            prop_assert!(r.range.start <= r.range.end);
            prop_assert!(r.range.end - r.range.start <= 366 * 86_400);
            prop_assert!((-43_200..=50_400).contains(&r.offset.seconds()));
        }
    }

    #[test]
    fn the_day_cached_writer_matches(start in 0i64..4_000_000_000, steps in proptest::collection::vec(0i64..200_000, 1..50), minutes in -720i32..=840) {
        let offset = Offset::from_seconds(minutes * 60).expect("offset");
        let mut writer = Rfc3339Writer::new(offset);
        let mut ts = start;
        for step in steps {
            ts += step;
            let mut out = Vec::new();
            writer.write(&mut out, ts);
            prop_assert_eq!(String::from_utf8(out).expect("utf-8"), format_rfc3339(ts, offset));
        }
        let mut out = Vec::new();
        writer.write(&mut out, start);
        prop_assert_eq!(String::from_utf8(out).expect("utf-8"), format_rfc3339(start, offset), "going back in time");
    }

    #[test]
    fn tz_in_whole_hours_round_trips(hours in -12i32..=14) {
        prop_assert_eq!(parse_tz(&hours.to_string()).map(|o| o.seconds()), Ok(hours * 3600));
    }
}

#[test]
fn out_of_range_values_are_named_with_the_allowed_range() {
    let detail = |q: RangeQuery<'_>| rules().resolve(q, ts("2026-05-05T20:30:00Z")).expect_err("refused").to_string();
    let range = "1970-01-01T00:00:00Z to 9999-12-29T23:59:59Z";
    for (name, value) in [
        ("start", "0000-01-01T00:00:00Z"),
        ("start", "0000-01-01T00:00:00"),
        ("start", "1969-12-31T23:59:59Z"),
        ("start", "9999-12-30T00:00:00"),
        ("start", "9999-12-31T23:00:00+14:00"),
        ("end", "9999-12-31T23:59:59Z"),
        ("end", "0001-01-01T00:00:00-05:00"),
    ] {
        let q = if name == "start" {
            RangeQuery { start: Some(value), end: Some("2026-05-05T00:00:00Z"), ..Default::default() }
        } else {
            RangeQuery { start: Some("2026-05-05T00:00:00Z"), end: Some(value), ..Default::default() }
        };
        let d = detail(q);
        assert!(d.starts_with(&format!("{name} {value:?}")), "{d}");
        assert!(d.contains(range), "{d}");
    }
    let d = detail(RangeQuery { tz: Some("15"), ..Default::default() });
    assert!(d.contains("tz \"15\"") && d.contains("-12 and +14"), "{d}");
    let d = detail(RangeQuery { start: Some("2026-05-06T00:00:00Z"), end: Some("2026-05-05T00:00:00Z"), tz: None });
    assert_eq!(d, "start (2026-05-06T00:00:00Z) is after end (2026-05-05T00:00:00Z): start must be at or before end");
    assert!(matches!(parse_reading_timestamp("9999-12-30T00:00:00Z"), Err(TimeError::OutOfRange { .. })));
    assert!(parse_reading_timestamp("9999-12-29T23:59:59Z").is_ok());
}

#[test]
fn readings_from_the_future_are_refused_past_the_skew() {
    let now: Timestamp = "2026-05-05T00:00:00Z".parse().expect("now");
    let skew = SignedDuration::from_secs(600);
    let at = |s: &str| s.parse::<Timestamp>().expect("ts");
    assert_eq!(check_not_future(at("2026-05-05T00:10:00Z"), now, skew), Ok(()));
    assert_eq!(check_not_future(at("2026-05-04T00:00:00Z"), now, skew), Ok(()));
    let e = check_not_future(at("2026-05-05T00:10:01Z"), now, skew).expect_err("future");
    assert_eq!(
        e.to_string(),
        "timestamp 2026-05-05T00:10:01Z is 601 seconds ahead of the server's clock (2026-05-05T00:00:00Z); \
         readings more than 600 seconds in the future are refused"
    );
    assert!(check_not_future(at("9999-12-29T23:59:59Z"), now, skew).is_err());
}
