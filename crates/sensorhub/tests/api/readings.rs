//! The readings endpoints (spec 4.2, 4.4): grouping, order, bounds, tz,
//! defaults, errors and streaming.

use crate::harness::{TestApp, assert_error, reading, secs};
use jiff::tz::Offset;
use sensorhub_core::time::RangeRules;
use serde_json::json;

const WINDOW: &str = "start=2026-05-05T00:00:00Z&end=2026-05-05T00:30:00Z";

on_each_backend! {
    async fn readings_are_grouped_ascending_with_only_measured_sensors() {
        let app = TestApp::start().await;
        let a = app.alice(&format!("/devices/AWLR-001/data?{WINDOW}")).await;
        assert_eq!(a.status, 200, "{}", a.text);
        assert_eq!(a.headers["content-type"], "application/json");
        assert_eq!(
            a.body,
            json!({"message": "Success", "data": [
                {"timestamp": "2026-05-05T00:00:00Z", "sensors": [
                    {"id": "AWLR1-batt", "value": 92.5, "unit": "%"},
                    {"id": "AWLR1-wl", "value": 120.0, "unit": "cm"},
                    {"id": "AWLR1-sig", "value": -71.0, "unit": "dBm"},
                    {"id": "AWLR1-status", "value": 0.0, "unit": "."}]},
                {"timestamp": "2026-05-05T00:15:00Z", "sensors": [
                    {"id": "AWLR1-batt", "value": 92.4, "unit": "%"},
                    {"id": "AWLR1-wl", "value": 121.5, "unit": "cm"}]},
                {"timestamp": "2026-05-05T00:30:00Z", "sensors": [
                    {"id": "AWLR1-batt", "value": 92.3, "unit": "%"},
                    {"id": "AWLR1-wl", "value": 123.0, "unit": "cm"},
                    {"id": "AWLR1-sig", "value": -73.0, "unit": "dBm"},
                    {"id": "AWLR1-status", "value": 1.0, "unit": "."}]}
            ]})
        );
        let public = app.get(&format!("/pk-alice-all/devices/AWLR-001/data?{WINDOW}")).await;
        assert_eq!(public.text, a.text, "public and Basic answers are the same bytes");
    }
}

on_each_backend! {
    async fn bounds_are_inclusive_to_the_second() {
        let app = TestApp::start().await;
        let count = |a: &crate::harness::Answer| a.data().as_array().map(Vec::len);
        let a = app.alice("/devices/AWLR-001/data?start=2026-05-05T00:00:01Z&end=2026-05-05T00:29:59Z").await;
        assert_eq!(count(&a), Some(1));
        let a = app.alice("/devices/AWLR-001/data?start=2026-05-05T00:15:00Z&end=2026-05-05T00:15:00Z").await;
        assert_eq!(count(&a), Some(1));
        let a = app.alice("/devices/AWLR-001/data?start=2026-05-06T00:00:00Z&end=2026-05-07T00:00:00Z").await;
        assert_eq!(a.text, r#"{"message":"Success","data":[]}"#);
    }
}

on_each_backend! {
    async fn tz_renders_in_the_offset_and_reads_local_bounds_in_it() {
        let app = TestApp::start().await;
        let a = app.alice("/devices/AWLR-001/data?start=2026-05-05T07:00:00&end=2026-05-05T07:15:00&tz=7").await;
        let stamps: Vec<_> = a.data().as_array().expect("array").iter().map(|r| r["timestamp"].clone()).collect();
        assert_eq!(stamps, vec![json!("2026-05-05T07:00:00+07:00"), json!("2026-05-05T07:15:00+07:00")]);

        // `+07:00` sent raw decodes to a space; sent encoded it is a plus.
        for start in ["2026-05-05T07:00:00+07:00", "2026-05-05T07:00:00%2B07:00"] {
            let a = app.alice(&format!("/devices/AWLR-001/data?start={start}&end=2026-05-05T00:00:00Z")).await;
            assert_eq!(a.status, 200, "{start}: {}", a.text);
            assert_eq!(a.data()[0]["timestamp"], "2026-05-05T00:00:00Z");
        }
        let a = app.alice(&format!("/devices/AWLR-001/data?{WINDOW}&tz=%2B05:30")).await;
        assert_eq!(a.data()[0]["timestamp"], "2026-05-05T05:30:00+05:30");
        let a = app.alice(&format!("/devices/AWLR-001/data?{WINDOW}&tz=-3")).await;
        assert_eq!(a.data()[0]["timestamp"], "2026-05-04T21:00:00-03:00");
        let a = app.alice(&format!("/devices/AWLR-001/data?{WINDOW}&tz=0")).await;
        assert_eq!(a.data()[0]["timestamp"], "2026-05-05T00:00:00Z");
        let a = app.get(&format!("/pk-alice-awlr/devices/AWLR-001/data?{WINDOW}&tz=14")).await;
        assert_eq!(a.data()[0]["timestamp"], "2026-05-05T14:00:00+14:00");
    }
}

on_each_backend! {
    async fn the_configured_default_tz_applies_without_tz() {
        let app = TestApp::with_rules(RangeRules { default_tz: sensorhub_core::time::Zone::Fixed(Offset::constant(7)), max_range_days: 366 }).await;
        let a = app.alice(&format!("/devices/AWLR-001/data?{WINDOW}")).await;
        assert_eq!(a.data()[0]["timestamp"], "2026-05-05T07:00:00+07:00");
        let a = app.alice(&format!("/devices/AWLR-001/data?{WINDOW}&tz=0")).await;
        assert_eq!(a.data()[0]["timestamp"], "2026-05-05T00:00:00Z");
        // last_update_at stays in UTC whatever the default.
        let a = app.alice("/devices").await;
        assert_eq!(a.data()[0]["last_update_at"], "2026-05-05T00:30:00Z");
    }
}

on_each_backend! {
    async fn a_named_default_tz_applies_without_tz() {
        let zone = sensorhub_core::time::parse_zone("Europe/Berlin").expect("zone");
        let app = TestApp::with_rules(RangeRules { default_tz: zone, max_range_days: 366 }).await;
        let a = app.alice(&format!("/devices/AWLR-001/data?{WINDOW}")).await;
        assert_eq!(a.data()[0]["timestamp"], "2026-05-05T02:00:00+02:00", "summer time in Berlin");
        let a = app.alice("/devices/AWLR-001/data?start=2026-05-05T02:15:00&end=2026-05-05T02:15:00").await;
        assert_eq!(a.data()[0]["timestamp"], "2026-05-05T02:15:00+02:00", "bounds without an offset are Berlin's");
    }
}

on_each_backend! {
    async fn without_bounds_the_range_is_today_in_the_offset_until_now() {
        let app = TestApp::start().await;
        let now = jiff::Timestamp::now();
        for hours in [0i8, 7, -12, 14] {
            let offset = Offset::constant(hours);
            let midnight = offset
                .to_timestamp(offset.to_datetime(now).date().to_datetime(jiff::civil::Time::midnight()))
                .expect("midnight")
                .as_second();
            app.add_readings(vec![
                reading("AWLR-001", midnight - 1, "AWLR1-batt", 1.0),
                reading("AWLR-001", midnight, "AWLR1-batt", 2.0),
                reading("AWLR-001", now.as_second() + 3600, "AWLR1-batt", 3.0),
            ])
            .await;
            let a = app.alice(&format!("/devices/AWLR-001/data?tz={hours}")).await;
            let first = &a.data()[0];
            assert_eq!(first["sensors"][0]["value"], 2.0, "tz {hours}: {}", a.text);
            assert!(
                a.data().as_array().expect("array").iter().all(|r| r["sensors"][0]["value"] != 3.0),
                "a reading after now is outside the default range"
            );
        }
    }
}

on_each_backend! {
    async fn only_end_before_today_is_a_bad_request() {
        let app = TestApp::start().await;
        let a = app.alice("/devices/AWLR-001/data?end=2026-05-05T00:30:00Z").await;
        assert_error(&a, 400, "Bad Request");
    }
}

on_each_backend! {
    async fn bad_parameters_are_400_with_a_detail() {
        let app = TestApp::start().await;
        let bad = [
            "start=yesterday",
            "end=2026-05-05",
            "start=2026-05-05T00:00:00Z&end=2026-05-04T00:00:00Z",
            "tz=abc",
            "tz=15",
            "tz=-13",
            "tz=7.5",
            "start=2025-01-01T00:00:00Z&end=2026-01-03T00:00:00Z",
            "start=2026-05-05T25:00:00Z",
            "start=%FF",
            "tz=1&tz=2",
        ];
        for q in bad {
            for path in ["/devices/AWLR-001/data", "/pk-alice-all/devices/AWLR-001/data"] {
                let a = if path.starts_with("/pk") {
                    app.get(&format!("{path}?{q}")).await
                } else {
                    app.alice(&format!("{path}?{q}")).await
                };
                assert_error(&a, 400, "Bad Request");
                assert!(a.body["detail"].as_str().is_some_and(|d| !d.is_empty()), "{q}: {}", a.text);
            }
        }
        let a = app.alice("/devices/AWLR-001/data?start=2025-01-01T00:00:00Z&end=2026-01-02T00:00:00Z").await;
        assert_eq!(a.status, 200, "exactly 366 days is allowed: {}", a.text);
    }
}

on_each_backend! {
    async fn max_range_days_is_configurable() {
        let app = TestApp::with_rules(RangeRules { default_tz: sensorhub_core::time::Zone::Fixed(Offset::UTC), max_range_days: 1 }).await;
        let a = app.alice("/devices/AWLR-001/data?start=2026-05-01T00:00:00Z&end=2026-05-05T00:00:00Z").await;
        assert_error(&a, 400, "Bad Request");
        assert!(a.body["detail"].as_str().is_some_and(|d| d.contains("1 days")), "{}", a.text);
    }
}

on_each_backend! {
    async fn devices_the_caller_cannot_see_are_not_found() {
        let app = TestApp::start().await;
        assert_error(&app.alice(&format!("/devices/SECRET-9/data?{WINDOW}")).await, 404, "Device not found");
        assert_error(&app.alice(&format!("/devices/NOPE/data?{WINDOW}")).await, 404, "Device not found");
        assert_error(&app.get(&format!("/pk-alice-awlr/devices/AWS-002/data?{WINDOW}")).await, 404, "Device not found");
        assert_error(&app.get(&format!("/pk-carol/devices/AWLR-001/data?{WINDOW}")).await, 404, "Device not found");
        let a = app.get("/pk-alice-all/devices/AWS-002/data?start=2026-05-04T00:00:00Z&end=2026-05-05T00:00:00Z").await;
        assert_eq!(a.status, 200);
        assert_eq!(a.data()[0]["sensors"][0], json!({"id": "AWS2-temp", "value": 24.1, "unit": "°C"}));
    }
}

on_each_backend! {
    async fn long_ranges_stream_every_reading_in_order() {
        let app = TestApp::start().await;
        let start = secs("2026-01-01T00:00:00Z");
        let n = 5000;
        app.add_readings((0..n).map(|i| reading("AWS-002", start + i * 60, "AWS2-batt", i as f64 / 4.0)).collect()).await;
        let a = app.alice("/devices/AWS-002/data?start=2026-01-01T00:00:00Z&end=2026-01-10T00:00:00Z").await;
        assert_eq!(a.status, 200);
        let data = a.data().as_array().expect("array");
        assert_eq!(data.len(), n as usize);
        for (i, r) in data.iter().enumerate() {
            assert_eq!(r["sensors"][0]["value"], i as f64 / 4.0);
        }
        assert_eq!(data[4999]["timestamp"], "2026-01-04T11:19:00Z");
    }
}

on_each_backend! {
    async fn named_zones_render_each_time_in_its_offset() {
        let app = TestApp::start().await;
        // Around the start of summer time in Berlin (2026-03-29, 01:00Z).
        app.add_readings(vec![
            crate::harness::reading("AWLR-001", crate::harness::secs("2026-03-29T00:30:00Z"), "AWLR1-wl", 101.5),
            crate::harness::reading("AWLR-001", crate::harness::secs("2026-03-29T01:30:00Z"), "AWLR1-wl", 102.5),
        ])
        .await;
        // Bounds without an offset are Berlin's local time: 01:00 (+01:00) to 04:00 (+02:00).
        let a = app.alice("/devices/AWLR-001/data?start=2026-03-29T01:00:00&end=2026-03-29T04:00:00&tz=Europe/Berlin").await;
        assert_eq!(
            a.text,
            concat!(
                r#"{"message":"Success","data":["#,
                r#"{"timestamp":"2026-03-29T01:30:00+01:00","sensors":[{"id":"AWLR1-wl","value":101.5,"unit":"cm"}]},"#,
                r#"{"timestamp":"2026-03-29T03:30:00+02:00","sensors":[{"id":"AWLR1-wl","value":102.5,"unit":"cm"}]}]}"#
            )
        );
        let key = app.get("/pk-alice-all/devices/AWLR-001/data?start=2026-03-29T01:00:00&end=2026-03-29T04:00:00&tz=Europe/Berlin").await;
        assert_eq!(key.text, a.text);
        // A named zone without DST and its fixed offset give the same answer.
        let jakarta = app.alice(&format!("/devices/AWLR-001/data?{WINDOW}&tz=Asia/Jakarta")).await;
        let seven = app.alice(&format!("/devices/AWLR-001/data?{WINDOW}&tz=7")).await;
        assert_eq!(jakarta.status, 200);
        assert_eq!(jakarta.text, seven.text);
        let a = app.alice(&format!("/devices/AWLR-001/data?{WINDOW}&tz=Mars/Olympus_Mons")).await;
        assert_error(&a, 400, "Bad Request");
        assert!(a.body["detail"].as_str().is_some_and(|d| d.starts_with("tz \"Mars/Olympus_Mons\" is not a time zone")), "{}", a.text);
    }
}

on_each_backend! {
    async fn csv_and_ndjson_answer_the_same_readings() {
        let app = TestApp::start().await;
        let csv = app.alice(&format!("/devices/AWLR-001/data?{WINDOW}&format=csv")).await;
        assert_eq!(csv.status, 200);
        assert_eq!(csv.headers["content-type"], "text/csv; charset=utf-8");
        assert_eq!(
            csv.text,
            concat!(
                "timestamp,AWLR1-batt,AWLR1-wl,AWLR1-sig,AWLR1-status\r\n",
                "2026-05-05T00:00:00Z,92.5,120.0,-71.0,0.0\r\n",
                "2026-05-05T00:15:00Z,92.4,121.5,,\r\n",
                "2026-05-05T00:30:00Z,92.3,123.0,-73.0,1.0\r\n"
            )
        );
        let accept = app
            .request(
                reqwest::Method::GET,
                &format!("{}/pk-alice-all/devices/AWLR-001/data?{WINDOW}", app.base),
                &[("Accept", "text/csv")],
                None,
            )
            .await;
        assert_eq!(accept.text, csv.text, "Accept: text/csv on the public path");
        let nd = app.alice(&format!("/devices/AWLR-001/data?{WINDOW}&format=ndjson&tz=7")).await;
        assert_eq!(nd.headers["content-type"], "application/x-ndjson");
        let json = app.alice(&format!("/devices/AWLR-001/data?{WINDOW}&tz=7")).await;
        let lines: Vec<serde_json::Value> =
            nd.text.lines().map(|l| serde_json::from_str(l).expect("one object per line")).collect();
        assert_eq!(serde_json::Value::Array(lines), json.body["data"], "the envelope's data, a line each");
        let empty = app.alice("/devices/AWLR-001/data?start=2026-05-06T00:00:00Z&end=2026-05-06T01:00:00Z&format=csv").await;
        assert_eq!(empty.text, "timestamp,AWLR1-batt,AWLR1-wl,AWLR1-sig,AWLR1-status\r\n");
        let bad = app.alice(&format!("/devices/AWLR-001/data?{WINDOW}&format=xml")).await;
        assert_error(&bad, 400, "Bad Request");
        assert!(bad.text.contains("format \\\"xml\\\" is not one of json, csv, ndjson"), "{}", bad.text);
        let missing = app.alice(&format!("/devices/NOPE/data?{WINDOW}&format=csv")).await;
        assert_error(&missing, 404, "Device not found");
    }
}

on_each_backend! {
    async fn a_long_csv_window_streams_every_row() {
        let app = TestApp::start().await;
        let start = secs("2026-06-01T00:00:00Z");
        app.add_readings((0..5000).map(|i| reading("AWLR-001", start + i * 60, "AWLR1-wl", f64::from(i as u32) / 10.0)).collect()).await;
        let csv = app.alice("/devices/AWLR-001/data?start=2026-06-01T00:00:00Z&end=2026-06-10T00:00:00Z&format=csv").await;
        assert_eq!(csv.status, 200);
        let rows: Vec<&str> = csv.text.split("\r\n").filter(|l| !l.is_empty()).collect();
        assert_eq!(rows.len(), 5001, "the header and one row per reading, across batches");
        assert_eq!(rows[1], "2026-06-01T00:00:00Z,,0.0,,");
        assert_eq!(rows[5000], "2026-06-04T11:19:00Z,,499.9,,");
    }
}

on_each_backend! {
    async fn whole_hours_read_again_show_what_was_written_between() {
        let app = TestApp::start().await;
        let day = "start=2026-05-05T00:00:00Z&end=2026-05-05T23:59:59Z";
        let variants = ["", "&format=csv", "&format=ndjson", "&tz=Asia/Jakarta", "&tz=7"];
        let mut before = Vec::new();
        for v in variants {
            let first = app.alice(&format!("/devices/AWLR-001/data?{day}{v}")).await;
            // The second read comes from the rendered hours.
            let again = app.alice(&format!("/devices/AWLR-001/data?{day}{v}")).await;
            assert_eq!(first.status, 200, "{v}");
            assert_eq!(first.text, again.text, "{v}");
            before.push(first.text);
        }
        // A reading into an hour already rendered, and one into a new hour.
        app.add_readings(vec![
            reading("AWLR-001", secs("2026-05-05T00:07:00Z"), "AWLR1-wl", 199.5),
            reading("AWLR-001", secs("2026-05-05T05:00:00Z"), "AWLR1-wl", 150.25),
        ])
        .await;
        for (v, old) in variants.iter().zip(&before) {
            let a = app.alice(&format!("/devices/AWLR-001/data?{day}{v}")).await;
            assert_ne!(&a.text, old, "{v}: the new readings show");
            assert!(a.text.contains("199.5") && a.text.contains("150.25"), "{v}: {}", a.text);
        }
        let a = app.alice(&format!("/devices/AWLR-001/data?{day}")).await;
        let stamps: Vec<_> = a.data().as_array().expect("array").iter().map(|r| r["timestamp"].clone()).collect();
        assert_eq!(stamps[..2], [json!("2026-05-05T00:00:00Z"), json!("2026-05-05T00:07:00Z")]);
        assert_eq!(stamps.last(), Some(&json!("2026-05-05T05:00:00Z")));
    }
}

on_each_backend! {
    async fn a_long_window_streamed_by_pages_is_its_days_joined() {
        let app = TestApp::start().await;
        // Four days, a reading every 20 minutes, with an hour left empty now and then.
        let start = secs("2026-06-01T00:00:00Z");
        let readings = (0..4 * 72)
            .filter(|i| i % 7 != 3)
            .map(|i| reading("AWLR-001", start + i * 1200, "AWLR1-wl", 100.0 + i as f64 / 8.0))
            .collect();
        app.add_readings(readings).await;
        for format in ["", "&format=csv", "&format=ndjson"] {
            let mut days = Vec::new();
            for day in 1..=4 {
                let q = format!("start=2026-06-0{day}T00:00:00Z&end=2026-06-0{day}T23:59:59Z{format}");
                days.push(app.alice(&format!("/devices/AWLR-001/data?{q}")).await);
            }
            // Read twice: the second from the rendered hours.
            for _ in 0..2 {
                let q = format!("start=2026-06-01T00:00:00Z&end=2026-06-04T23:59:59Z{format}");
                let all = app.alice(&format!("/devices/AWLR-001/data?{q}")).await;
                assert_eq!(all.status, 200);
                match format {
                    "" => {
                        let joined: Vec<_> = days.iter().flat_map(|d| d.data().as_array().cloned().unwrap_or_default()).collect();
                        assert_eq!(joined.len(), 4 * 72 - (4 * 72 + 3) / 7);
                        assert_eq!(all.data().as_array(), Some(&joined));
                    }
                    "&format=csv" => {
                        let header = days[0].text.split_inclusive("\r\n").next().expect("a header row");
                        let rows: String = days.iter().map(|d| d.text.strip_prefix(header).unwrap_or("?")).collect();
                        assert_eq!(all.text, format!("{header}{rows}"));
                    }
                    _ => assert_eq!(all.text, days.iter().map(|d| d.text.as_str()).collect::<String>()),
                }
            }
            let cut = app.alice(&format!("/devices/AWLR-001/data?start=2026-06-01T10:30:00Z&end=2026-06-03T17:10:00Z{format}")).await;
            assert_eq!(cut.status, 200);
            if format == "&format=ndjson" {
                let first = cut.text.lines().next().expect("a line");
                assert!(first.starts_with("{\"timestamp\":\"2026-06-01T10:40:00Z\""), "{first}");
                assert!(cut.text.lines().last().is_some_and(|l| l.starts_with("{\"timestamp\":\"2026-06-03T17:00:00Z\"")));
            }
        }
    }
}
