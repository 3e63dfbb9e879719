//! Aggregated reads (`interval`, `agg`) on both data endpoints: values
//! computed by hand over a fixture, buckets in half-hour zones, DST days,
//! months, formats and refusals.

use crate::harness::{TestApp, assert_error, reading, secs};

/// Water level and battery of AWLR-001 on 2026-06-10 (UTC):
/// wl 00:00 10.5, 00:20 11.25, 00:40 12.0, 01:10 20.1, 01:50 19.9, 02:30 30.0;
/// batt 00:20 90.0, 01:50 89.5.
async fn june_fixture(app: &TestApp) {
    let at = |t: &str| secs(&format!("2026-06-10T{t}Z"));
    let mut readings: Vec<_> = [("00:00:00", 10.5), ("00:20:00", 11.25), ("00:40:00", 12.0), ("01:10:00", 20.1)]
        .into_iter()
        .chain([("01:50:00", 19.9), ("02:30:00", 30.0)])
        .map(|(t, v)| reading("AWLR-001", at(t), "AWLR1-wl", v))
        .collect();
    readings.push(reading("AWLR-001", at("00:20:00"), "AWLR1-batt", 90.0));
    readings.push(reading("AWLR-001", at("01:50:00"), "AWLR1-batt", 89.5));
    app.add_readings(readings).await;
}

/// A two-bucket answer (00:00 and 01:00) with batt and wl values.
fn two_hours(batt: [&str; 2], wl: [&str; 2]) -> String {
    format!(
        concat!(
            r#"{{"message":"Success","data":["#,
            r#"{{"timestamp":"2026-06-10T00:00:00Z","sensors":[{{"id":"AWLR1-batt","value":{},"unit":"%"}},{{"id":"AWLR1-wl","value":{},"unit":"cm"}}]}},"#,
            r#"{{"timestamp":"2026-06-10T01:00:00Z","sensors":[{{"id":"AWLR1-batt","value":{},"unit":"%"}},{{"id":"AWLR1-wl","value":{},"unit":"cm"}}]}}"#,
            "]}}"
        ),
        batt[0], wl[0], batt[1], wl[1]
    )
}

const CUT: &str = "start=2026-06-10T00:10:00Z&end=2026-06-10T01:50:00Z&interval=1h";

on_each_backend! {
    async fn each_aggregate_over_buckets_cut_by_the_range() {
        let app = TestApp::start().await;
        june_fixture(&app).await;
        // 00:00 is cut by start (10.5 at 00:00 is out), 02:30 by end.
        for (agg, batt, wl) in [
            ("mean", ["90.0", "89.5"], ["11.625", "20.0"]),
            ("min", ["90.0", "89.5"], ["11.25", "19.9"]),
            ("max", ["90.0", "89.5"], ["12.0", "20.1"]),
            ("sum", ["90.0", "89.5"], ["23.25", "40.0"]),
            ("count", ["1", "1"], ["2", "2"]),
            ("first", ["90.0", "89.5"], ["11.25", "20.1"]),
            ("last", ["90.0", "89.5"], ["12.0", "19.9"]),
        ] {
            let a = app.alice(&format!("/devices/AWLR-001/data?{CUT}&agg={agg}")).await;
            assert_eq!(a.status, 200, "{agg}: {}", a.text);
            assert_eq!(a.text, two_hours(batt, wl), "{agg}");
            let public = app.get(&format!("/pk-alice-all/devices/AWLR-001/data?{CUT}&agg={agg}")).await;
            assert_eq!(public.text, a.text, "{agg}: the public path answers the same bytes");
        }
        let default = app.alice(&format!("/devices/AWLR-001/data?{CUT}")).await;
        assert_eq!(default.text, two_hours(["90.0", "89.5"], ["11.625", "20.0"]), "mean is the default");
    }
}

on_each_backend! {
    async fn hours_of_a_half_hour_zone_start_at_its_local_hours() {
        let app = TestApp::start().await;
        june_fixture(&app).await;
        let a = app
            .alice("/devices/AWLR-001/data?start=2026-06-10T00:00:00Z&end=2026-06-10T03:00:00Z&interval=1h&agg=count&tz=%2B05:30")
            .await;
        let got: Vec<(String, Vec<i64>)> = a.data().as_array().expect("array").iter().map(|b| {
            let counts = b["sensors"].as_array().expect("sensors").iter().map(|s| s["value"].as_i64().expect("an integer")).collect();
            (b["timestamp"].as_str().expect("timestamp").to_owned(), counts)
        }).collect();
        let want = [
            ("2026-06-10T05:00:00+05:30", vec![1, 2]),
            ("2026-06-10T06:00:00+05:30", vec![2]),
            ("2026-06-10T07:00:00+05:30", vec![1, 1]),
            ("2026-06-10T08:00:00+05:30", vec![1]),
        ];
        assert_eq!(got, want.map(|(t, c)| (t.to_owned(), c)).to_vec(), "{}", a.text);
    }
}

/// Water level every 30 minutes through Berlin's local day `date`.
async fn half_hourly_berlin_day(app: &TestApp, from_utc: &str, readings: i64) {
    let start = secs(from_utc);
    app.add_readings(
        (0..readings).map(|i| reading("AWLR-001", start + i * 1800, "AWLR1-wl", 100.0 + i as f64)).collect(),
    )
    .await;
}

on_each_backend! {
    async fn a_dst_day_has_23_or_25_hourly_buckets_and_one_daily() {
        let app = TestApp::start().await;
        half_hourly_berlin_day(&app, "2026-03-28T23:00:00Z", 46).await;
        half_hourly_berlin_day(&app, "2026-10-24T22:00:00Z", 50).await;
        for (day, hours) in [("2026-03-29", 23), ("2026-10-25", 25)] {
            let range = format!("start={day}T00:00:00&end={day}T23:59:59&tz=Europe/Berlin");
            let a = app.alice(&format!("/devices/AWLR-001/data?{range}&interval=1h&agg=count")).await;
            let buckets = a.data().as_array().expect("array").clone();
            assert_eq!(buckets.len(), hours, "{day}: {}", a.text);
            assert!(buckets.iter().all(|b| b["sensors"][0]["value"] == 2), "two readings an hour: {}", a.text);
            let d = app.alice(&format!("/devices/AWLR-001/data?{range}&interval=1d&agg=count")).await;
            let offset = if day == "2026-03-29" { "+01:00" } else { "+02:00" };
            assert_eq!(
                d.text,
                format!(
                    r#"{{"message":"Success","data":[{{"timestamp":"{day}T00:00:00{offset}","sensors":[{{"id":"AWLR1-wl","value":{},"unit":"cm"}}]}}]}}"#,
                    hours * 2
                )
            );
        }
        let a = app.alice("/devices/AWLR-001/data?start=2026-10-25T00:00:00&end=2026-10-25T23:59:59&tz=Europe/Berlin&interval=1h&agg=first").await;
        let stamps: Vec<&str> = a.data().as_array().expect("array").iter().map(|b| b["timestamp"].as_str().expect("ts")).collect();
        assert_eq!(&stamps[1..5], ["2026-10-25T01:00:00+02:00", "2026-10-25T02:00:00+02:00", "2026-10-25T02:00:00+01:00", "2026-10-25T03:00:00+01:00"]);
        // The repeated 02:00: its first pass holds readings 4 and 5, its second 6 and 7.
        assert_eq!(a.data()[2]["sensors"][0]["value"], 104.0);
        assert_eq!(a.data()[3]["sensors"][0]["value"], 106.0);
    }
}

on_each_backend! {
    async fn months_follow_the_calendar_in_the_zone() {
        let app = TestApp::start().await;
        app.add_readings(vec![
            reading("AWLR-001", secs("2026-01-31T12:00:00Z"), "AWLR1-wl", 1.0),
            reading("AWLR-001", secs("2026-02-01T00:00:00Z"), "AWLR1-wl", 2.0),
            reading("AWLR-001", secs("2026-02-28T23:59:59Z"), "AWLR1-wl", 3.0),
            reading("AWLR-001", secs("2026-03-01T00:00:00Z"), "AWLR1-wl", 4.0),
        ])
        .await;
        let sums = |a: &crate::harness::Answer| -> Vec<(String, f64)> {
            a.data().as_array().expect("array").iter()
                .map(|b| (b["timestamp"].as_str().expect("ts").to_owned(), b["sensors"][0]["value"].as_f64().expect("value")))
                .collect()
        };
        let range = "start=2026-01-01T00:00:00&end=2026-03-31T00:00:00&interval=1mo&agg=sum";
        let utc = app.alice(&format!("/devices/AWLR-001/data?{range}&tz=0")).await;
        assert_eq!(sums(&utc), vec![
            ("2026-01-01T00:00:00Z".into(), 1.0), ("2026-02-01T00:00:00Z".into(), 5.0), ("2026-03-01T00:00:00Z".into(), 4.0)
        ]);
        let wib = app.alice(&format!("/devices/AWLR-001/data?{range}&tz=7")).await;
        assert_eq!(sums(&wib), vec![
            ("2026-01-01T00:00:00+07:00".into(), 1.0), ("2026-02-01T00:00:00+07:00".into(), 2.0), ("2026-03-01T00:00:00+07:00".into(), 7.0)
        ]);
        let jakarta = app.alice(&format!("/devices/AWLR-001/data?{range}&tz=Asia/Jakarta")).await;
        assert_eq!(jakarta.text, wib.text, "an IANA zone and its offset give the same instants");
        let week = app.alice("/devices/AWLR-001/data?start=2026-01-01T00:00:00Z&end=2026-03-31T00:00:00Z&interval=1w&agg=count").await;
        assert_eq!(week.data()[0]["timestamp"], "2026-01-26T00:00:00Z", "the Monday of 2026-01-31");
    }
}

on_each_backend! {
    async fn aggregates_come_as_csv_and_ndjson() {
        let app = TestApp::start().await;
        june_fixture(&app).await;
        let csv = app.alice(&format!("/devices/AWLR-001/data?{CUT}&agg=count&format=csv")).await;
        assert_eq!(csv.headers["content-type"], "text/csv; charset=utf-8");
        assert_eq!(
            csv.text,
            concat!(
                "timestamp,AWLR1-batt,AWLR1-wl,AWLR1-sig,AWLR1-status\r\n",
                "2026-06-10T00:00:00Z,1,2,,\r\n",
                "2026-06-10T01:00:00Z,1,2,,\r\n"
            )
        );
        let nd = app.alice(&format!("/devices/AWLR-001/data?{CUT}&agg=max&format=ndjson")).await;
        assert_eq!(
            nd.text,
            concat!(
                r#"{"timestamp":"2026-06-10T00:00:00Z","sensors":[{"id":"AWLR1-batt","value":90.0,"unit":"%"},{"id":"AWLR1-wl","value":12.0,"unit":"cm"}]}"#, "\n",
                r#"{"timestamp":"2026-06-10T01:00:00Z","sensors":[{"id":"AWLR1-batt","value":89.5,"unit":"%"},{"id":"AWLR1-wl","value":20.1,"unit":"cm"}]}"#, "\n"
            )
        );
    }
}

on_each_backend! {
    async fn a_long_aggregated_window_streams_every_bucket() {
        let app = TestApp::start().await;
        let start = secs("2026-06-01T00:00:00Z");
        app.add_readings((0..5000).map(|i| reading("AWLR-001", start + i * 60, "AWLR1-wl", 0.1)).collect()).await;
        let a = app.alice("/devices/AWLR-001/data?start=2026-06-01T00:00:00Z&end=2026-06-10T00:00:00Z&interval=1h&agg=count").await;
        let counts: Vec<i64> = a.data().as_array().expect("array").iter().map(|b| b["sensors"][0]["value"].as_i64().expect("count")).collect();
        assert_eq!(counts.len(), 84, "5,000 minutes are 83 full hours and 20 minutes");
        assert!(counts[..83].iter().all(|c| *c == 60) && counts[83] == 20, "{counts:?}");
        let sum = app.alice("/devices/AWLR-001/data?start=2026-06-01T00:00:00Z&end=2026-06-10T00:00:00Z&interval=1d&agg=sum").await;
        let sums: Vec<f64> = sum.data().as_array().expect("array").iter().map(|b| b["sensors"][0]["value"].as_f64().expect("sum")).collect();
        assert_eq!(sums, vec![144.0, 144.0, 144.0, 68.0], "exact decimal sums: 1,440 x 0.1 is 144.0");
    }
}

on_each_backend! {
    async fn bad_aggregations_are_refused_with_a_detail() {
        let app = TestApp::start().await;
        let range = "start=2026-05-05T00:00:00Z&end=2026-05-05T00:30:00Z";
        for (query, detail) in [
            ("interval=0h", r#"interval \"0h\" is not an interval"#),
            ("interval=1x", r#"interval \"1x\" is not an interval"#),
            ("interval=1h&agg=median", r#"agg \"median\" is not one of mean, min, max, sum, count, first, last"#),
            ("agg=max", "agg needs an interval"),
        ] {
            let a = app.alice(&format!("/devices/AWLR-001/data?{range}&{query}")).await;
            assert_error(&a, 400, "Bad Request");
            assert!(a.text.contains(detail), "{query}: {}", a.text);
        }
        let many = app.alice("/devices/AWLR-001/data?start=2026-01-01T00:00:00Z&end=2026-05-01T00:00:00Z&interval=1m").await;
        assert_error(&many, 400, "Bad Request");
        assert!(many.text.contains("more than the maximum of 100000"), "{}", many.text);
        // A day or longer may span ten years; shorter intervals keep the raw limit.
        let long = "start=2017-01-01T00:00:00Z&end=2026-06-01T00:00:00Z";
        let daily = app.alice(&format!("/devices/AWLR-001/data?{long}&interval=1d")).await;
        assert_eq!(daily.status, 200, "{}", daily.text);
        let hourly = app.alice(&format!("/devices/AWLR-001/data?{long}&interval=1h")).await;
        assert_error(&hourly, 400, "Bad Request");
        assert!(hourly.text.contains("longer than the maximum of 366 days"), "{}", hourly.text);
        // The query is checked before the device.
        assert_error(&app.alice(&format!("/devices/NOPE/data?{range}&interval=1h")).await, 404, "Device not found");
        assert_error(&app.alice(&format!("/devices/NOPE/data?{range}&interval=0h")).await, 400, "Bad Request");
    }
}

on_each_backend! {
    async fn a_mean_of_values_near_the_largest_double_is_a_number() {
        let app = TestApp::start().await;
        // Hour 00 of readings 1.7e308 one a minute (enough for the hour's
        // stored summary, whose sum overflows), hour 01 of two that do.
        let at = |h: i64, m: i64| secs("2026-06-10T00:00:00Z") + h * 3600 + m * 60;
        let mut readings: Vec<_> = (0..20).map(|m| reading("AWLR-001", at(0, m), "AWLR1-wl", 1.7e308)).collect();
        readings.push(reading("AWLR-001", at(1, 0), "AWLR1-wl", 1.5e308));
        readings.push(reading("AWLR-001", at(1, 1), "AWLR1-wl", 1.3e308));
        app.add_readings(readings).await;
        let range = "start=2026-06-10T00:00:00Z&end=2026-06-10T01:59:59Z";
        let values = |text: &str| -> Vec<String> {
            let body: serde_json::Value = serde_json::from_str(text).expect("json");
            body["data"].as_array().expect("data").iter().map(|b| b["sensors"][0]["value"].to_string()).collect()
        };
        let hourly = app.alice(&format!("/devices/AWLR-001/data?{range}&interval=1h&agg=mean")).await;
        assert_eq!(hourly.status, 200, "{}", hourly.text);
        assert_eq!(values(&hourly.text), ["1.7e+308", "1.4e+308"], "{}", hourly.text);
        let daily = app.alice(&format!("/devices/AWLR-001/data?{range}&interval=1d&agg=mean")).await;
        let mean: f64 = values(&daily.text)[0].parse().expect("a number");
        let expected = 1.7e308 / 22.0 * 20.0 + 1.5e308 / 22.0 + 1.3e308 / 22.0;
        assert!((mean / expected - 1.0).abs() < 1e-12, "{}", daily.text);
        let sum = app.alice(&format!("/devices/AWLR-001/data?{range}&interval=1h&agg=sum")).await;
        assert_eq!(values(&sum.text), ["null", "null"], "a sum beyond a double: {}", sum.text);
    }
}
