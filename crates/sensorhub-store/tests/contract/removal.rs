//! Readings removed, on every backend: a range deleted exactly, and
//! retention's expiry by whole hours with the nearest setting.

use super::{apply, backends, import, read_all, reading};
use sensorhub_core::time::TimeRange;
use sensorhub_store::{ReadingBatch, Scope, StoreError};

#[tokio::test]
async fn deleting_a_range_removes_exactly_it() {
    for b in backends().await {
        let s = &*b.store;
        // Every 10 minutes for 3 hours, two values each; D2 is left alone.
        import(s, (0..18).map(|i| Ok(reading("D1", 3_000 + i * 600, &[("a", 1.0), ("b", 2.0)]))).collect())
            .await
            .expect("import");
        import(s, vec![Ok(reading("D2", 3_600, &[("a", 5.0)]))]).await.expect("other");
        // From the middle of the first hour to the middle of the third.
        let report = s.delete_readings("D1", TimeRange { start: 3_600, end: 9_000 }).await.expect("delete");
        assert_eq!((report.readings, report.values, report.hours), (10, 20, 2), "{report:?}");
        let left: Vec<i64> = read_all(s, "D1", 0, 100_000).await.iter().flat_map(|b| b.timestamps.clone()).collect();
        assert_eq!(left, [3_000, 9_600, 10_200, 10_800, 11_400, 12_000, 12_600, 13_200]);
        assert_eq!(read_all(s, "D2", 0, 100_000).await.len(), 1);
        let again = s.delete_readings("D1", TimeRange { start: 3_600, end: 9_000 }).await.expect("again");
        assert_eq!(again.readings, 0);
        let all = s.delete_readings("D1", TimeRange { start: 0, end: 253_402_214_399 }).await.expect("all");
        assert_eq!(all.readings, 8);
        assert!(read_all(s, "D1", 0, 100_000).await.is_empty());
        assert_eq!(s.list_devices(Scope::All).await.expect("list")[0].last_update_at, None);
        let err = s.delete_readings("D9", TimeRange { start: 0, end: 1 }).await.expect_err("unknown");
        assert!(matches!(err, StoreError::NotFound(_)), "{err}");
    }
}

#[tokio::test]
async fn retention_drops_whole_hours_trims_the_boundary_and_takes_the_nearest_setting() {
    use sensorhub_core::retention::Retention;
    const T0: i64 = 1_699_999_200; // an hour's start
    for b in backends().await {
        let s = &*b.store;
        // D2 belongs to alice, who keeps 48 h; D1 keeps 100 h of its own.
        let settings = r#"{"accounts": [{"username": "alice", "retention": "48h"}],
            "devices": [
              {"device_id": "D1", "name": "one", "type": "AWS", "lat": 1, "long": 2, "interval_seconds": 60, "retention": "100h"},
              {"device_id": "D2", "name": "two", "type": "AWLR", "lat": 1, "long": 2, "interval_seconds": 60, "owner": "alice"}]}"#;
        let report = apply(s, settings).await.expect("settings");
        assert_eq!((report.accounts.updated, report.devices.updated), (1, 2), "{report:?}");
        assert!(apply(s, settings).await.expect("again").is_noop(), "settings are stored once");
        // Two readings an hour for 600 hours on each device.
        let readings = (0..1200).flat_map(|i| {
            [
                Ok(reading("D1", T0 + i * 1800, &[("a", 1.5), ("b", 2.0)])),
                Ok(reading("D2", T0 + i * 1800, &[("a", 0.25)])),
            ]
        });
        import(s, readings.collect()).await.expect("import");
        let now = T0 + 600 * 3600 + 900;

        let report = s.expire_readings(Retention::Forever, now).await.expect("expire");
        // D1: cutoff T0 + 500 h + 900 s; D2: T0 + 552 h + 900 s. Each loses its
        // whole hours before the cutoff's hour and one reading of that hour.
        assert_eq!(
            (report.devices, report.readings, report.hours_dropped, report.hours_trimmed),
            (2, 1001 + 1105, 500 + 552, 2),
            "{report:?}"
        );
        assert!(report.bytes > 0);
        let first = |d: &'static str| async move { read_all(s, d, 0, i64::MAX / 2).await[0].timestamps[0] };
        assert_eq!(first("D1").await, T0 + 1001 * 1800);
        assert_eq!(first("D2").await, T0 + 1105 * 1800);
        let count: usize = read_all(s, "D1", 0, i64::MAX / 2).await.iter().map(ReadingBatch::len).sum();
        assert_eq!(count, 199);
        assert!(s.expire_readings(Retention::Forever, now).await.expect("again").is_empty(), "nothing more to do");

        // A device kept forever keeps everything whatever its owner and the
        // server say; a device without settings follows the server's default.
        apply(
            s,
            r#"{"devices": [{"device_id": "D2", "name": "two", "type": "AWLR", "lat": 1, "long": 2,
                       "interval_seconds": 60, "retention": "forever"},
                      {"device_id": "D1", "name": "one", "type": "AWS", "lat": 1, "long": 2,
                       "interval_seconds": 60, "retention": "inherit"}]}"#,
        )
        .await
        .expect("forever");
        let report = s.expire_readings(Retention::Seconds(24 * 3600), now).await.expect("default");
        assert_eq!(report.devices, 1, "only D1, by the server's default: {report:?}");
        assert_eq!(first("D1").await, T0 + (576 * 2 + 1) * 1800);
        assert_eq!(first("D2").await, T0 + 1105 * 1800);
    }
}
