//! PostgreSQL only: a group of webhook readings sends its writes ahead of
//! their answers and its `BEGIN` and write lock with its first reads
//! (issue 27). A failure anywhere in it is reported as itself, not as the
//! aborted transaction it leaves; nothing of the group stays; and the
//! writer's connection goes on to the next group.

use super::{BASE, apply, postgres_url, read_all, reading, session};
use sensorhub_store::{Scope, Store, StoreError};
use sensorhub_testing::TempDatabase;

/// The advisory lock every writing transaction takes ("writes").
const WRITE_LOCK: i64 = 0x7772_6974_6573;

/// The seconds of `device`'s stored readings.
async fn seconds(store: &dyn Store, device: &str) -> Vec<i64> {
    read_all(store, device, 0, 1_000_000).await.into_iter().flat_map(|b| b.timestamps).collect()
}

/// The seconds of `device`'s latest values.
async fn latest(store: &dyn Store, device: &str) -> Vec<i64> {
    let (_, values) = store.latest(Scope::All, device).await.expect("latest").expect("visible");
    values.iter().map(|v| v.timestamp).collect()
}

/// A store in a database of its own, D1's reading at 60 written: its
/// statements are prepared and the device kept.
async fn with_a_first_group() -> (TempDatabase, std::sync::Arc<dyn Store>) {
    let pg = TempDatabase::create(&postgres_url()).await.expect("database");
    let store = sensorhub_store::open(pg.url()).await.expect("open");
    apply(&*store, BASE).await.expect("base");
    store.ingest(reading("D1", 60, &[("a", 1.0)])).await.expect("first");
    (pg, store)
}

#[tokio::test]
async fn a_group_whose_write_fails_reports_that_and_leaves_nothing() {
    let (pg, store) = with_a_first_group().await;
    let (admin, connection) = session(pg.url()).await;
    admin
        .batch_execute(
            "CREATE FUNCTION refuse_latest() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               IF NEW.device_pk = (SELECT id FROM devices WHERE device_id = 'D1') THEN
                 RAISE EXCEPTION 'latest refused by the test';
               END IF;
               RETURN NEW;
             END $$;
             CREATE TRIGGER refuse_latest BEFORE INSERT OR UPDATE ON latest FOR EACH ROW EXECUTE FUNCTION refuse_latest()",
        )
        .await
        .expect("trigger");
    // The index's write goes ahead of the hour's, which then fails as its echo.
    let refused = store.ingest(reading("D1", 120, &[("a", 2.0)])).await.expect_err("the index's write fails");
    let said = refused.to_string();
    assert!(said.contains("latest refused by the test"), "the cause, not its echo: {said}");
    assert!(matches!(refused, StoreError::Backend(_)), "{refused:?}");
    assert_eq!(seconds(&*store, "D1").await, [60], "the hour written after the failure was not kept");
    assert_eq!(latest(&*store, "D1").await, [60]);
    // The writer's connection is not left in the failed transaction.
    store.ingest(reading("D2", 120, &[("a", 3.0)])).await.expect("another device's group");
    assert_eq!(seconds(&*store, "D2").await, [120]);
    admin.batch_execute("DROP TRIGGER refuse_latest ON latest").await.expect("drop trigger");
    store.ingest(reading("D1", 180, &[("a", 4.0)])).await.expect("after the trigger");
    assert_eq!(seconds(&*store, "D1").await, [60, 180], "nothing of the failed group");
    assert_eq!(latest(&*store, "D1").await, [180]);
    drop((admin, store));
    connection.await.expect("session ends");
}

#[tokio::test]
async fn a_group_kept_from_the_write_lock_is_busy_and_the_next_goes_in() {
    let (pg, store) = with_a_first_group().await;
    // Another instance's long write holds the lock past a writer's 5 s.
    let (other, connection) = session(pg.url()).await;
    other.execute("SELECT pg_advisory_lock($1)", &[&WRITE_LOCK]).await.expect("lock");
    let busy = store.ingest(reading("D1", 120, &[("a", 2.0)])).await.expect_err("waits too long");
    assert!(matches!(busy, StoreError::Busy(_)), "the lock's wait, not the statements after it: {busy:?}");
    other.execute("SELECT pg_advisory_unlock($1)", &[&WRITE_LOCK]).await.expect("unlock");
    store.ingest(reading("D1", 180, &[("a", 3.0)])).await.expect("after the lock is free");
    assert_eq!(seconds(&*store, "D1").await, [60, 180]);
    assert_eq!(latest(&*store, "D1").await, [180]);
    drop((other, store));
    connection.await.expect("session ends");
}
