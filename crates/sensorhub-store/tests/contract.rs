//! The store contract: behaviour every backend must share. Each check is a
//! function over `Arc<dyn Store>`; `backends()` lists the stores to run it on
//! (SQLite, and PostgreSQL in a database of its own, made for the run and
//! dropped after it). PostgreSQL is found at `SENSORHUB_TEST_POSTGRES`
//! (default `postgres://postgres@127.0.0.1:5432/test`); a test fails, never
//! skips, when it is not there.

#[path = "contract/access.rs"]
mod access;
#[path = "contract/alarm_loads.rs"]
mod alarm_loads;
#[path = "contract/alarms.rs"]
mod alarms;
#[path = "contract/checkpoints.rs"]
mod checkpoints;
#[path = "contract/devices.rs"]
mod devices;
#[path = "contract/dropped.rs"]
mod dropped;
#[path = "contract/hooks.rs"]
mod hooks;
#[path = "contract/kept_hooks.rs"]
mod kept_hooks;
#[path = "contract/latest.rs"]
mod latest;
#[path = "contract/pg_groups.rs"]
mod pg_groups;
#[path = "contract/removal.rs"]
mod removal;
#[path = "contract/summaries.rs"]
mod summaries;
#[path = "contract/vacuum.rs"]
mod vacuum;

use futures_util::StreamExt;
use sensorhub_core::model::{Origin, ReadingInput, ValueInput};
use sensorhub_core::provision::{InputError, Provision, parse_json};
use sensorhub_core::secret::key_digest;
use sensorhub_core::time::TimeRange;
use sensorhub_store::delivery::Outbox;
use sensorhub_store::{ReadingBatch, Scope, Store, StoreError, StoredValue};
use sensorhub_testing::TempDatabase;
use std::sync::Arc;

const BASE: &str = r#"{
  "accounts": [{"username": "alice", "password": "pw", "devices": ["D1"],
                "api_keys": [{"id": "k-all"}, {"id": "k-d1", "devices": ["D1"]}]}],
  "devices": [
    {"device_id": "D1", "name": "one", "type": "AWS", "lat": 1, "long": 2, "interval_seconds": 60,
     "sensors": [{"sensor_id": "a", "name": "A", "type": "T", "unit": "%"},
                 {"sensor_id": "b", "name": "B", "type": "T", "unit": "."}]},
    {"device_id": "D2", "name": "two", "type": "AWLR", "lat": 1, "long": 2, "interval_seconds": 60,
     "sensors": [{"sensor_id": "a", "name": "A", "type": "T", "unit": "cm"}]}
  ]
}"#;

/// A store under test and what keeps its database alive (declared after it: its connections close first).
struct Backend {
    store: Arc<dyn Store>,
    _dir: tempfile::TempDir,
    /// The PostgreSQL database, dropped with the backend.
    pg: Option<TempDatabase>,
    /// Where the store is, for a second instance.
    url: String,
    _name: Named,
}

/// Names the backend a failing check ran on: a check's panic drops the
/// backend it was looking at first (then the ones it had not reached), and
/// the first one dropped while panicking says so.
struct Named(&'static str);

thread_local! {
    static NAMED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl Drop for Named {
    fn drop(&mut self) {
        if std::thread::panicking() && !NAMED.with(|n| n.replace(true)) {
            eprintln!("the failing check ran on the {} backend", self.0);
        }
    }
}

fn postgres_url() -> String {
    std::env::var("SENSORHUB_TEST_POSTGRES").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A session of its own on `url`, beside the store's.
async fn session(url: &str) -> (tokio_postgres::Client, tokio::task::JoinHandle<()>) {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connect");
    (client, tokio::spawn(async move { connection.await.expect("connection") }))
}

async fn backends() -> Vec<Backend> {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("contract.db");
    let sqlite_url = format!("sqlite://{}", path.display());
    let sqlite = sensorhub_store::open(&sqlite_url).await.expect("open");
    let pg = TempDatabase::create(&postgres_url()).await.expect("a PostgreSQL test database");
    let postgres = sensorhub_store::open(pg.url()).await.expect("open postgres");
    let mut out = vec![
        Backend { store: sqlite, _dir: dir, pg: None, url: sqlite_url, _name: Named("SQLite") },
        Backend {
            store: postgres,
            _dir: tempfile::tempdir().expect("dir"),
            url: pg.url().to_owned(),
            pg: Some(pg),
            _name: Named("PostgreSQL"),
        },
    ];
    for b in &mut out {
        apply(&*b.store, BASE).await.expect("base applies");
    }
    out
}

/// D1 (alice's, sensors `a` and `b`) with the alarm rules `alarms` (a JSON list).
pub(crate) fn d1_with(alarms: &str) -> String {
    format!(
        r#"{{
  "accounts": [{{"username": "alice", "password": "pw", "devices": ["D1"]}}],
  "devices": [
    {{"device_id": "D1", "name": "one", "type": "AWLR", "lat": 1, "long": 2, "interval_seconds": 60,
     "sensors": [{{"sensor_id": "a", "name": "A", "type": "T", "unit": "cm"}},
                 {{"sensor_id": "b", "name": "B", "type": "T", "unit": "."}}],
     "alarms": {alarms}}}
  ]
}}"#
    )
}

async fn apply(store: &dyn Store, text: &str) -> Result<sensorhub_store::ApplyReport, StoreError> {
    let mut doc: Provision = parse_json(text)?;
    let readings = doc.check()?;
    store.apply(doc, readings).await
}

fn reading(device: &str, ts: i64, values: &[(&str, f64)]) -> ReadingInput {
    ReadingInput {
        device_id: device.into(),
        timestamp: ts,
        values: values.iter().map(|(s, v)| ValueInput { sensor_id: (*s).into(), value: *v, unit: None }).collect(),
        origin: Origin::Item(format!("reading at {ts}")),
    }
}

async fn import(store: &dyn Store, readings: Vec<Result<ReadingInput, InputError>>) -> Result<(), StoreError> {
    store.import(Box::new(readings.into_iter()), Outbox::Deliver).await.map(|_| ())
}

async fn read_all(store: &dyn Store, device: &str, start: i64, end: i64) -> Vec<ReadingBatch> {
    let handle = store.find_device(Scope::All, device).await.expect("find").expect("exists");
    store.read_readings(&handle, TimeRange { start, end }).map(|b| b.expect("batch")).collect().await
}

#[tokio::test]
async fn values_at_one_second_merge_per_sensor() {
    for b in backends().await {
        let s = &*b.store;
        import(s, vec![Ok(reading("D1", 100, &[("a", 1.0)]))]).await.expect("import");
        import(s, vec![Ok(reading("D1", 100, &[("b", 2.0)]))]).await.expect("import");
        import(s, vec![Ok(reading("D1", 100, &[("a", 3.0)]))]).await.expect("import");
        let batches = read_all(s, "D1", 0, 1000).await;
        assert_eq!(
            batches,
            vec![ReadingBatch {
                timestamps: vec![100],
                masks: vec![0b11],
                values: vec![StoredValue::Decimal { n: 3, k: 0 }, StoredValue::Decimal { n: 2, k: 0 }]
            }]
        );
    }
}

#[tokio::test]
async fn ranges_are_inclusive_ordered_and_batched() {
    for b in backends().await {
        let s = &*b.store;
        // Inserted newest first: the store orders them.
        let n = 5000i64;
        import(s, (0..n).rev().map(|i| Ok(reading("D1", i * 10, &[("a", i as f64)]))).collect()).await.expect("import");
        import(s, vec![Ok(reading("D2", 50, &[("a", -1.0)]))]).await.expect("other device");
        let batches = read_all(s, "D1", 10, 49_980).await;
        assert!(batches.len() >= 2, "a long range comes in several batches");
        let ts: Vec<i64> = batches.iter().flat_map(|b| b.timestamps.clone()).collect();
        assert_eq!(ts.first(), Some(&10));
        assert_eq!(ts.last(), Some(&49_980));
        assert_eq!(ts.len(), 4998);
        assert!(ts.windows(2).all(|w| w[0] < w[1]));
        assert!(read_all(s, "D1", 50_000, 60_000).await.is_empty());
    }
}

#[tokio::test]
async fn a_failing_import_stores_nothing() {
    for b in backends().await {
        let s = &*b.store;
        let err = import(
            s,
            vec![
                Ok(reading("D1", 1, &[("a", 1.0)])),
                Ok(reading("D1", 2, &[("a", 1.0)])),
                Err(InputError::new("line 3", "broken")),
            ],
        )
        .await
        .expect_err("fails");
        assert_eq!(err.to_string(), "line 3: broken");
        let err = import(s, vec![Ok(reading("D1", 3, &[("a", 1.0)])), Ok(reading("D1", 4, &[("zz", 1.0)]))])
            .await
            .expect_err("unknown sensor");
        assert!(err.to_string().contains("unknown sensor \"zz\""), "{err}");
        assert!(read_all(s, "D1", 0, 10).await.is_empty());
    }
}

#[tokio::test]
async fn scopes_select_devices_and_keys_resolve_by_digest() {
    for b in backends().await {
        let s = &*b.store;
        let all: Vec<_> = s.list_devices(Scope::All).await.expect("list").into_iter().map(|d| d.device_id).collect();
        assert_eq!(all, ["D1", "D2"]);
        let key = s.api_key_auth(&key_digest("k-d1")).await.expect("lookup").expect("exists");
        assert!(key.scoped && !key.revoked && !key.account_disabled);
        let seen: Vec<_> = s.list_devices(key.scope()).await.expect("list").into_iter().map(|d| d.device_id).collect();
        assert_eq!(seen, ["D1"]);
        assert!(s.find_device(key.scope(), "D2").await.expect("find").is_none());
        assert!(s.api_key_auth(&key_digest("k-none")).await.expect("lookup").is_none());
        let auth = s.account_auth("alice").await.expect("lookup").expect("exists");
        assert!(auth.password_hash.starts_with("$argon2id$") && !auth.disabled);
        assert!(s.account_auth("nobody").await.expect("lookup").is_none());
    }
}

#[tokio::test]
async fn apply_twice_changes_nothing_and_a_bad_document_writes_nothing() {
    for b in backends().await {
        let s = &*b.store;
        assert!(apply(s, BASE).await.expect("again").is_noop());
        let before =
            format!("{:?}{:?}", s.list_devices(Scope::All).await.expect("list"), s.accounts().await.expect("acc"));
        let bad = r#"{"devices":[{"device_id":"D3","name":"n","type":"T","lat":0,"long":0,"interval_seconds":1}],
                      "accounts":[{"username":"alice","devices":["D1","D9"]}]}"#;
        let err = apply(s, bad).await.expect_err("unknown device");
        assert!(err.to_string().starts_with("accounts[0].devices[1]"), "{err}");
        let after =
            format!("{:?}{:?}", s.list_devices(Scope::All).await.expect("list"), s.accounts().await.expect("acc"));
        assert_eq!(before, after);
        assert!(!s.is_empty().await.expect("empty?"));
    }
}

#[tokio::test]
async fn revoking_by_prefix_needs_one_match() {
    for b in backends().await {
        let s = &*b.store;
        // Short ids show at most a third of themselves: "k-d1" and "k-all" both show "k".
        let err = s.revoke_api_key("k").await.expect_err("ambiguous");
        assert!(matches!(err, StoreError::Conflict(_)), "{err}");
        let err = s.revoke_api_key("k-").await.expect_err("not a shown prefix");
        assert!(matches!(err, StoreError::NotFound(_)), "{err}");
        assert!(matches!(s.revoke_api_key("").await, Err(StoreError::NotFound(_))));
        assert_eq!(s.revoke_api_key("k-d1").await.expect("by id"), "k");
        assert!(s.api_key_auth(&key_digest("k-d1")).await.expect("lookup").expect("exists").revoked);
        assert!(!s.api_key_auth(&key_digest("k-all")).await.expect("lookup").expect("exists").revoked);
    }
}

#[tokio::test]
async fn windows_know_when_the_first_batch_is_everything() {
    for b in backends().await {
        let s = &*b.store;
        // 2,048 readings a minute apart, starting mid-hour.
        let start = 1_800;
        import(s, (0..2048).map(|i| Ok(reading("D1", start + i * 60, &[("a", i as f64)]))).collect())
            .await
            .expect("import");
        let all = TimeRange { start: 0, end: 10_000_000 };
        let w = s.read_window(Scope::All, "D1", all).await.expect("read").expect("visible");
        let rest: Vec<_> = w.rest.map(|b| b.expect("batch")).collect().await;
        assert_eq!(w.first.len() + rest.iter().map(ReadingBatch::len).sum::<usize>(), 2048);
        let part = TimeRange { start: start + 60, end: start + 60 * 100 };
        let w = s.read_window(Scope::All, "D1", part).await.expect("read").expect("visible");
        assert!(w.complete, "100 readings fit in the first batch");
        assert_eq!(w.first.timestamps.first(), Some(&(start + 60)));
        assert_eq!(w.first.len(), 100);
        let devices = s.list_devices(Scope::All).await.expect("list");
        assert_eq!(devices[0].last_update_at, Some(start + 2047 * 60), "the last second across hours");
        assert_eq!(devices[1].last_update_at, None);
    }
}

#[tokio::test]
async fn interleaved_devices_and_repeats_are_stored_and_counted_exactly() {
    for b in backends().await {
        let s = &*b.store;
        // Time-ordered across two devices, as a fleet export would be.
        let rows: Vec<_> = (0..600)
            .flat_map(|i| [Ok(reading("D1", i * 30, &[("a", 1.0)])), Ok(reading("D2", i * 30, &[("a", 2.0)]))])
            .collect();
        import(s, rows).await.expect("import");
        assert_eq!(read_all(s, "D2", 0, 100_000).await.iter().map(ReadingBatch::len).sum::<usize>(), 600);
        // Re-applying 60 stored readings and one new one reports one change.
        let mut doc = String::from(r#"{"readings":["#);
        for i in 0..60 {
            doc += &format!(
                r#"{{"device_id":"D1","timestamp":"{}","sensors":[{{"id":"a","value":1}}]}},"#,
                jiff::Timestamp::from_second(i * 30).expect("ts")
            );
        }
        doc += r#"{"device_id":"D1","timestamp":"1970-01-01T00:00:05Z","sensors":[{"id":"b","value":7}]}]}"#;
        let report = apply(s, &doc).await.expect("apply");
        assert_eq!(report.readings.updated, 1, "{report:?}");
        assert_eq!(apply(s, &doc).await.expect("again").readings.updated, 0);
    }
}

#[tokio::test]
async fn reapplying_a_key_without_devices_keeps_its_scope() {
    for b in backends().await {
        let s = &*b.store;
        let seen = |key: sensorhub_store::ApiKeyAuth| async move {
            let devices = s.list_devices(key.scope()).await.expect("list");
            devices.into_iter().map(|d| d.device_id).collect::<Vec<_>>()
        };
        apply(s, r#"{"accounts":[{"username":"alice","devices":["D1","D2"]}]}"#).await.expect("see both");
        let k = || async { s.api_key_auth(&key_digest("k-d1")).await.expect("lookup").expect("exists") };
        assert_eq!(seen(k().await).await, ["D1"]);
        // The key listed again without `devices` (as a file that only revokes
        // or re-lists keys would): its scope is kept, not widened.
        let report = apply(s, r#"{"accounts":[{"username":"alice","api_keys":[{"id":"k-d1"}]}]}"#).await.expect("a");
        assert!(report.is_noop(), "{report:?}");
        assert_eq!(seen(k().await).await, ["D1"]);
        // Widening is said in so many words.
        let widen = r#"{"accounts":[{"username":"alice","api_keys":[{"id":"k-d1","devices":"all"}]}]}"#;
        assert_eq!(apply(s, widen).await.expect("all").api_keys.updated, 1);
        assert_eq!(seen(k().await).await, ["D1", "D2"]);
        // A new key without `devices` sees all of its account's devices.
        apply(s, r#"{"accounts":[{"username":"alice","api_keys":[{"id":"k-new"}]}]}"#).await.expect("new");
        let new = s.api_key_auth(&key_digest("k-new")).await.expect("lookup").expect("exists");
        assert_eq!(seen(new).await, ["D1", "D2"]);
    }
}

#[tokio::test]
async fn seeing_a_device_is_not_writing_it() {
    for b in backends().await {
        let s = &*b.store;
        let alice = s.account_auth("alice").await.expect("lookup").expect("exists").account_id;
        let d1 = s.find_device(Scope::All, "D1").await.expect("find").expect("exists").pk;
        assert!(!s.may_write(alice, d1).await.expect("may"), "alice sees D1 but has no grant");
        // The same two answers in one round trip.
        let writable = |account, id: &'static str| async move {
            s.writable_device(account, id, None).await.expect("writable").map(|(d, may)| (d.pk, d.sensors.len(), may))
        };
        let sensors = s.find_device(Scope::All, "D1").await.expect("find").expect("exists").sensors.len();
        assert_eq!(writable(alice, "D1").await, Some((d1, sensors, false)));
        assert_eq!(writable(alice, "D9").await, None, "no such device");
        // An owner writes; the owner sees its device even when its list omits it.
        apply(
            s,
            r#"{"accounts":[{"username":"bob","password":"pw","devices":[]}],
                     "devices":[{"device_id":"D1","name":"one","type":"AWS","lat":1,"long":2,"interval_seconds":60,
                                 "owner":"bob"}]}"#,
        )
        .await
        .expect("owner");
        let bob = s.account_auth("bob").await.expect("lookup").expect("exists").account_id;
        assert!(s.may_write(bob, d1).await.expect("may"));
        assert!(!s.may_write(alice, d1).await.expect("may"));
        let bob_sees = s.list_devices(Scope::Account { account_id: bob, key: None }).await.expect("list");
        assert_eq!(bob_sees.len(), 1);
        apply(s, r#"{"accounts":[{"username":"bob","devices":[]}]}"#).await.expect("relist");
        assert!(s.find_device(Scope::Account { account_id: bob, key: None }, "D1").await.expect("f").is_some());
        assert_eq!(writable(bob, "D1").await, Some((d1, sensors, true)), "the owner, unlisted");
        assert_eq!(writable(bob, "D2").await, None, "a device bob neither sees nor owns");
        // A write grant must name a device the account sees.
        let err = apply(s, r#"{"accounts":[{"username":"alice","write":["D2"]}]}"#).await.expect_err("unseen");
        assert!(err.to_string().starts_with("accounts[0].write[0]"), "{err}");
        let unknown = r#"{"devices":[{"device_id":"D2","name":"two","type":"AWLR","lat":1,"long":2,"interval_seconds":60,
                          "owner":"nobody"}]}"#;
        let err = apply(s, unknown).await.expect_err("unknown owner");
        assert!(err.to_string().starts_with("devices[0].owner"), "{err}");
        // A grant, listed in the account summary; re-applying without `write` keeps it.
        apply(s, r#"{"accounts":[{"username":"alice","write":["D1"]}]}"#).await.expect("grant");
        assert!(s.may_write(alice, d1).await.expect("may"));
        assert_eq!(writable(alice, "D1").await, Some((d1, sensors, true)), "a write grant");
        assert!(apply(s, r#"{"accounts":[{"username":"alice","devices":["D1"]}]}"#).await.expect("again").is_noop());
        assert!(s.may_write(alice, d1).await.expect("may"));
        let summary = s.accounts().await.expect("accounts");
        assert_eq!(summary.iter().find(|a| a.username == "alice").map(|a| a.writes.clone()), Some(vec!["D1".into()]));
        apply(s, r#"{"accounts":[{"username":"alice","write":[]}]}"#).await.expect("revoke");
        assert!(!s.may_write(alice, d1).await.expect("may"));
        // The upgrade choice: every account may write what it sees.
        assert_eq!(s.grant_write_to_viewers().await.expect("grant all"), 1, "alice's link: bob owns D1");
        assert!(s.may_write(alice, d1).await.expect("may"));
        assert_eq!(s.grant_write_to_viewers().await.expect("again"), 0);
    }
}

#[tokio::test]
async fn a_batched_import_keeps_what_it_committed_before_an_error() {
    for b in backends().await {
        let s = &*b.store;
        // 5,000 readings, the 1,024th taking long enough to end a transaction,
        // then an error: the transactions before it stay.
        let source = (0..5001i64).map(|i| {
            if i == 1023 {
                std::thread::sleep(sensorhub_store::IMPORT_COMMIT_EVERY + std::time::Duration::from_millis(100));
            }
            if i == 5000 {
                Err(InputError::new("line 5001", "broken"))
            } else {
                Ok(reading("D1", i * 60, &[("a", 1.0)]))
            }
        });
        let partial = s.import_batched(Box::new(source), Outbox::Skip).await.expect_err("stops at the error");
        assert_eq!(partial.error.to_string(), "line 5001: broken");
        let kept = partial.committed.readings;
        assert!((1024..5000).contains(&kept), "{kept} readings committed");
        let stored: usize = read_all(s, "D1", 0, 10_000_000).await.iter().map(ReadingBatch::len).sum();
        assert_eq!(stored as u64, kept, "exactly the committed transactions are stored");
        // Without an error, everything, however many transactions it takes.
        let all =
            s.import_batched(Box::new((0..3000).map(|i| Ok(reading("D2", i * 60, &[("a", 2.0)])))), Outbox::Skip).await;
        assert_eq!(all.expect("imports").readings, 3000);
    }
}

#[tokio::test]
async fn readings_ingested_together_are_each_answered_on_their_own() {
    for b in backends().await {
        let s = b.store.clone();
        // 200 single readings at once (a group commit may take many in one
        // transaction); one names an unknown sensor and is refused alone.
        let writes: Vec<_> = (0..200i64)
            .map(|i| {
                let s = s.clone();
                let sensor = if i == 77 { "zz" } else { "a" };
                tokio::spawn(async move { s.ingest(reading("D1", i * 60, &[(sensor, i as f64)])).await })
            })
            .collect();
        // Each write is counted while it waits for its group, on either
        // backend (the delivery worker gives way to it): the tasks have
        // run to their wait, and none was polled since to count itself out.
        tokio::task::yield_now().await;
        assert!(s.ingest_waiting() > 0, "writes waiting for their group are counted");
        let mut refused = Vec::new();
        for (i, w) in writes.into_iter().enumerate() {
            if let Err(e) = w.await.expect("task") {
                refused.push((i, e.to_string()));
            }
        }
        assert_eq!(s.ingest_waiting(), 0, "every write, refused or not, is counted out of the writer's queue");
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert_eq!(refused[0].0, 77);
        assert!(refused[0].1.contains("unknown sensor \"zz\""), "{refused:?}");
        let stored: usize = read_all(&*s, "D1", 0, 1_000_000).await.iter().map(ReadingBatch::len).sum();
        assert_eq!(stored, 199);
    }
}

#[tokio::test]
async fn sparse_and_dense_windows_come_whole_and_in_order() {
    for b in backends().await {
        let s = &*b.store;
        // D1: one reading an hour for 3,000 hours (a row per reading);
        // D2: one every 10 s for 20 hours (360 per row).
        import(s, (0..3000i64).map(|i| Ok(reading("D1", i * 3600 + 7, &[("a", i as f64)]))).collect())
            .await
            .expect("sparse");
        import(s, (0..7200i64).map(|i| Ok(reading("D2", 1_000_000 + i * 10, &[("a", 1.0)]))).collect())
            .await
            .expect("dense");
        for (device, n, step, first) in [("D1", 3000, 3600, 7), ("D2", 7200, 10, 1_000_000)] {
            let all = TimeRange { start: 0, end: 100_000_000 };
            let w = s.read_window(Scope::All, device, all).await.expect("read").expect("visible");
            assert_eq!(w.first.len(), 2048, "{device}: the first batch is full however many rows it spans");
            assert!(!w.complete);
            let rest: Vec<_> = w.rest.map(|b| b.expect("batch")).collect().await;
            let ts: Vec<i64> = std::iter::once(w.first).chain(rest).flat_map(|b| b.timestamps).collect();
            assert_eq!(ts.len(), n, "{device}");
            assert!(
                ts.iter().enumerate().all(|(i, t)| *t == first + i as i64 * step),
                "{device}: every reading, in order"
            );
        }
    }
}

#[tokio::test]
#[should_panic(expected = "fails on PostgreSQL only")]
async fn a_failing_check_names_its_backend() {
    for b in backends().await {
        // PostgreSQL's pool holds 16 connections by default, SQLite's 4 + 1.
        let on_pg = b.store.pool_status().max > 8;
        assert!(!on_pg, "fails on PostgreSQL only");
    }
}
