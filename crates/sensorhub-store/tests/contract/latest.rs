//! The `latest` index: each sensor's newest reading, kept by every write
//! and recomputed when readings are removed, on every backend.

use super::{backends, import, reading};
use sensorhub_core::time::TimeRange;
use sensorhub_store::{Scope, Store, StoredValue};

/// A device's entries as (sensor id, second, value as the API prints it).
async fn latest(store: &dyn Store, device: &str) -> Vec<(String, i64, String)> {
    let (handle, values) = store.latest(Scope::All, device).await.expect("latest").expect("visible");
    values.iter().map(|v| (handle.sensors[v.idx].sensor_id.clone(), v.timestamp, printed(v.value))).collect()
}

fn printed(v: StoredValue) -> String {
    let mut out = Vec::new();
    v.write_json(&mut out);
    String::from_utf8(out).expect("utf-8")
}

fn entry(id: &str, second: i64, value: &str) -> (String, i64, String) {
    (id.to_owned(), second, value.to_owned())
}

const T: i64 = 1_777_964_400; // 2026-05-05T07:00:00Z, an hour's start

#[tokio::test]
async fn latest_follows_writes_and_keeps_each_sensors_own_time() {
    for b in backends().await {
        let s = &*b.store;
        assert_eq!(latest(s, "D1").await, [], "no readings: no entries");
        let alice = Scope::Account { account_id: 1, key: None };
        assert!(s.latest(alice, "D2").await.expect("latest").is_none(), "alice cannot see D2");
        assert!(s.latest(Scope::All, "D9").await.expect("latest").is_none(), "unknown device");

        // b stopped reporting 30 days before a's newest reading.
        let old = T - 30 * 86_400;
        let readings = vec![Ok(reading("D1", old, &[("a", 1.0), ("b", 2.5)])), Ok(reading("D1", T, &[("a", 120.0)]))];
        import(s, readings).await.expect("import");
        assert_eq!(latest(s, "D1").await, [entry("a", T, "120.0"), entry("b", old, "2.5")]);

        // A late reading of an older second does not replace a newer entry.
        import(s, vec![Ok(reading("D1", T - 60, &[("a", 7.0), ("b", 3.0)]))]).await.expect("late");
        assert_eq!(latest(s, "D1").await, [entry("a", T, "120.0"), entry("b", T - 60, "3.0")]);
        s.ingest(reading("D1", T - 120, &[("a", 8.0)])).await.expect("late ingest");
        assert_eq!(latest(s, "D1").await[0], entry("a", T, "120.0"), "an ingested late reading neither");

        // A rewrite of the same second replaces the value.
        s.ingest(reading("D1", T, &[("a", 120.4)])).await.expect("rewrite");
        assert_eq!(latest(s, "D1").await[0], entry("a", T, "120.4"));

        // Many readings in one transaction: the newest of each sensor wins.
        let many = (1..=5000).map(|i| Ok(reading("D1", T + i * 7, &[("a", i as f64 / 10.0)]))).collect();
        import(s, many).await.expect("many");
        assert_eq!(latest(s, "D1").await[0], entry("a", T + 35_000, "500.0"));
        assert_eq!(latest(s, "D2").await, [], "the other device is untouched");
    }
}

#[tokio::test]
async fn values_come_back_bit_for_bit_and_print_as_the_data_endpoint() {
    for b in backends().await {
        let s = &*b.store;
        for (i, v) in [-0.0, 0.1 + 0.2, 1e-7, 120.0, -78.0, 1e300, 5e-324, 123456789.12].into_iter().enumerate() {
            let ts = T + i as i64;
            import(s, vec![Ok(reading("D2", ts, &[("a", v)]))]).await.expect("import");
            let (_, values) = s.latest(Scope::All, "D2").await.expect("latest").expect("visible");
            assert_eq!(values[0].value.to_f64().to_bits(), v.to_bits(), "{v}");
            let stored = super::read_all(s, "D2", ts, ts).await[0].values[0];
            assert_eq!(printed(values[0].value), printed(stored), "{v}");
        }
    }
}

#[tokio::test]
async fn deleting_the_newest_readings_falls_back_to_older_ones() {
    for b in backends().await {
        let s = &*b.store;
        // a every hour for 300 hours (more than one search batch of hours);
        // b only in the two hours before.
        let mut readings = vec![Ok(reading("D1", T - 7200, &[("b", 8.5)])), Ok(reading("D1", T - 3600, &[("b", 9.5)]))];
        readings.extend((0..300).map(|h| Ok(reading("D1", T + h * 3600 + 5, &[("a", h as f64)]))));
        import(s, readings).await.expect("import");
        assert_eq!(latest(s, "D1").await, [entry("a", T + 299 * 3600 + 5, "299.0"), entry("b", T - 3600, "9.5")]);

        // Removing a range that holds neither entry changes nothing.
        s.delete_readings("D1", TimeRange { start: T, end: T + 3600 }).await.expect("middle");
        assert_eq!(latest(s, "D1").await[0], entry("a", T + 299 * 3600 + 5, "299.0"));

        // Removing the newest 250 hours: a falls back across many hours.
        s.delete_readings("D1", TimeRange { start: T + 50 * 3600, end: T + 400 * 3600 }).await.expect("newest");
        assert_eq!(latest(s, "D1").await, [entry("a", T + 49 * 3600 + 5, "49.0"), entry("b", T - 3600, "9.5")]);

        // An older range that holds b's newest reading: b falls back, a stays.
        s.delete_readings("D1", TimeRange { start: T - 3600, end: T - 3600 }).await.expect("b");
        assert_eq!(latest(s, "D1").await, [entry("a", T + 49 * 3600 + 5, "49.0"), entry("b", T - 7200, "8.5")]);
        // Removing b's last reading removes its entry; then everything.
        s.delete_readings("D1", TimeRange { start: T - 7200, end: T - 7200 }).await.expect("b again");
        assert_eq!(latest(s, "D1").await, [entry("a", T + 49 * 3600 + 5, "49.0")]);
        s.delete_readings("D1", TimeRange { start: 0, end: 253_402_214_399 }).await.expect("all");
        assert_eq!(latest(s, "D1").await, [], "no readings left: no entries");
    }
}

#[tokio::test]
async fn retention_removes_the_entries_of_sensors_with_nothing_left() {
    use sensorhub_core::retention::Retention;
    for b in backends().await {
        let s = &*b.store;
        let readings = vec![
            Ok(reading("D1", T - 10 * 86_400, &[("a", 1.0), ("b", 2.0)])),
            Ok(reading("D1", T - 3600, &[("a", 3.0)])),
            Ok(reading("D2", T - 10 * 86_400, &[("a", 4.0)])),
        ];
        import(s, readings).await.expect("import");
        let report = s.expire_readings(Retention::Seconds(86_400), T).await.expect("expire");
        assert_eq!(report.readings, 2, "{report:?}");
        assert_eq!(latest(s, "D1").await, [entry("a", T - 3600, "3.0")], "b's only reading expired");
        assert_eq!(latest(s, "D2").await, [], "all of D2 expired");
    }
}

/// Opens a schema-4 database again: the migration to version 5 fills the
/// index from the stored hours.
#[tokio::test]
async fn the_migration_fills_the_index_from_stored_hours() {
    let readings = || {
        vec![
            Ok(reading("D1", T - 7200, &[("b", 2.0)])),
            Ok(reading("D1", T, &[("a", 1.5)])),
            Ok(reading("D2", T, &[("a", 9.0)])),
        ]
    };
    let want = [entry("a", T, "1.5"), entry("b", T - 7200, "2.0")];

    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("v4.db");
    let url = format!("sqlite://{}", path.display());
    let store = sensorhub_store::open(&url).await.expect("open");
    super::apply(&*store, super::BASE).await.expect("base");
    import(&*store, readings()).await.expect("import");
    drop(store);
    let conn = rusqlite::Connection::open(&path).expect("open file");
    conn.execute_batch(
        "DROP TABLE alarm_events; DROP TABLE alarm_states; DROP TABLE alarm_rules; DROP TABLE alarm_generation;
         DROP TABLE outbox; DROP TABLE outbox_log; DROP TABLE outbox_owed; ALTER TABLE hours DROP COLUMN pad;
         DROP TABLE subscription_devices; DROP TABLE subscriptions; DROP TABLE latest;
         DROP TABLE access_generation; DROP TABLE installation; DROP TABLE device_generation;
         DROP TRIGGER device_generation_device_added; DROP TRIGGER device_generation_device_changed;
         DROP TRIGGER device_generation_device_removed; DROP TRIGGER device_generation_sensor_added;
         DROP TRIGGER device_generation_sensor_changed; DROP TRIGGER device_generation_sensor_removed;
         DROP TRIGGER access_account_changed; DROP TRIGGER access_account_removed; DROP TRIGGER access_key_changed;
         DROP TRIGGER access_key_removed; DROP TRIGGER access_account_device_removed;
         DROP TRIGGER access_key_device_removed; DROP TRIGGER access_device_removed;
         DROP TRIGGER access_device_owner_changed; DROP TRIGGER access_grant_changed; DROP TRIGGER access_grant_added;
         DROP TRIGGER access_key_device_changed; DROP TRIGGER access_webhook_key_changed;
         DROP TRIGGER access_webhook_key_removed; DROP TRIGGER access_webhook_key_added; DROP TRIGGER access_key_added;
         DROP TABLE subscription_generation; DROP TRIGGER subscription_generation_granted;
         DROP TRIGGER subscription_generation_grant_changed; DROP TRIGGER subscription_generation_taken;
         DROP TRIGGER subscription_generation_account_changed; DROP TRIGGER subscription_generation_account_removed;
         DROP TRIGGER subscription_generation_device_changed; DROP TRIGGER subscription_generation_device_removed;
         PRAGMA user_version = 4",
    )
    .expect("back to version 4");
    drop(conn);
    let store = sensorhub_store::open(&url).await.expect("migrate");
    assert_eq!(latest(&*store, "D1").await, want, "SQLite");
    assert_eq!(latest(&*store, "D2").await, [entry("a", T, "9.0")], "SQLite");

    let pg = sensorhub_testing::TempDatabase::create(&super::postgres_url()).await.expect("database");
    let store = sensorhub_store::open(pg.url()).await.expect("open");
    super::apply(&*store, super::BASE).await.expect("base");
    import(&*store, readings()).await.expect("import");
    drop(store);
    let (client, connection) = tokio_postgres::connect(pg.url(), tokio_postgres::NoTls).await.expect("connect");
    let connection = tokio::spawn(connection);
    client
        .batch_execute(
            "DROP TABLE alarm_events, alarm_states, alarm_rules, alarm_generation;
             DROP FUNCTION sensorhub_alarm_rules_changed();
             DROP TABLE outbox, outbox_log, subscription_devices, subscriptions, latest, access_generation, installation;
             DROP FUNCTION sensorhub_access_changed() CASCADE;
             DROP TABLE device_generation; DROP FUNCTION sensorhub_devices_changed() CASCADE;
             DROP TABLE subscription_generation; DROP FUNCTION sensorhub_subscriptions_changed() CASCADE;
             DELETE FROM sensorhub_schema WHERE version >= 5",
        )
        .await
        .expect("back");
    drop(client);
    let _ = connection.await;
    let store = sensorhub_store::open(pg.url()).await.expect("migrate");
    assert_eq!(latest(&*store, "D1").await, want, "PostgreSQL");
    assert_eq!(latest(&*store, "D2").await, [entry("a", T, "9.0")], "PostgreSQL");
    drop(store);
}
