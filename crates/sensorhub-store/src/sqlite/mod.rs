//! The SQLite backend: one file, WAL mode, migrations from
//! `migrations/sqlite/` applied on open.

mod alarms;
mod copy;
mod latest;
mod outbox;
mod outbox_log;
mod outbox_walk;
mod pool;
mod read;
mod retention;
mod tx;
mod upgrade;
mod write;

use crate::sql::access;
use crate::write::Kept;
use crate::write::readings::ingest_group;
use crate::{PoolStatus, StoreError, StoreResult, fact_key};
use async_trait::async_trait;
use pool::{Pool, Role};
use std::path::Path;
use std::sync::Mutex;

/// Migrations in order; `PRAGMA user_version` records how many ran.
const MIGRATIONS: &[&str] = &[
    include_str!("../../migrations/sqlite/0001_init.sql"),
    include_str!("../../migrations/sqlite/0002_write_grants.sql"),
    include_str!("../../migrations/sqlite/0003_column_hours.sql"),
    include_str!("../../migrations/sqlite/0004_retention.sql"),
    include_str!("../../migrations/sqlite/0005_latest.sql"),
    include_str!("../../migrations/sqlite/0006_subscriptions.sql"),
    include_str!("../../migrations/sqlite/0007_subscription_names.sql"),
    include_str!("../../migrations/sqlite/0008_access.sql"),
    include_str!("../../migrations/sqlite/0009_alarms.sql"),
    include_str!("../../migrations/sqlite/0010_alarm_state_writes.sql"),
    include_str!("../../migrations/sqlite/0011_device_generation.sql"),
    include_str!("../../migrations/sqlite/0012_alarm_checkpoints.sql"),
    include_str!("../../migrations/sqlite/0013_write_generation.sql"),
    include_str!("../../migrations/sqlite/0014_outbox_log.sql"),
    include_str!("../../migrations/sqlite/0015_key_list_changed.sql"),
    include_str!("../../migrations/sqlite/0016_webhook_key_changed.sql"),
    include_str!("../../migrations/sqlite/0017_outbox_owed.sql"),
    include_str!("../../migrations/sqlite/0018_hours_pad.sql"),
    include_str!("../../migrations/sqlite/0019_outbox_pending.sql"),
    include_str!("../../migrations/sqlite/0020_outbox_leased_until.sql"),
    include_str!("../../migrations/sqlite/0021_outbox_log_first_attempts.sql"),
    include_str!("../../migrations/sqlite/0022_subscription_generation.sql"),
];

/// Offset added to an hour number in a key, so that every hour since
/// jiff's earliest timestamp is a non-negative 32-bit number.
pub(super) const HOUR_BIAS: i64 = 1 << 31;

/// The key (rowid) of device `pk`'s hour `chunk` in `hours`: a device's
/// hours are one range of keys, in time order. An hour beyond the keys
/// (only a range bound can be) is taken as the nearest one that fits.
pub(super) fn hour_key(pk: i64, chunk: i64) -> i64 {
    (pk << 32) | (chunk.clamp(-HOUR_BIAS, HOUR_BIAS - 1) + HOUR_BIAS)
}

/// [`hour_key`] for a write: refuses a device number or hour that would
/// not fit (no device table reaches 2^31 rows; no timestamp is that far).
pub(super) fn checked_hour_key(pk: i64, chunk: i64) -> StoreResult<i64> {
    if (0..HOUR_BIAS).contains(&pk) && (-HOUR_BIAS..HOUR_BIAS).contains(&chunk) {
        Ok(hour_key(pk, chunk))
    } else {
        Err(StoreError::Backend(format!("device #{pk}, hour {chunk}: outside the keys of the hours table").into()))
    }
}

/// The hour number of a key of `hours`.
pub(super) fn key_chunk(key: i64) -> i64 {
    (key & 0xffff_ffff) - HOUR_BIAS
}

/// Read connections kept open at most: readers run side by side in WAL
/// mode, and each query is short (a batch), so a few per core keep the
/// cores busy.
const READ_POOL_SIZE: usize = 4;

/// How an acknowledged write reaches the disk: SQLite's `synchronous`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous = FULL`: every commit is on disk before it is
    /// acknowledged; it survives power loss and an OS crash.
    #[default]
    Full,
    /// `synchronous = NORMAL` (WAL): commits survive a crash of the process
    /// but the last ones may roll back on power loss or an OS crash.
    Normal,
}

impl Durability {
    fn pragma(self) -> &'static str {
        match self {
            Durability::Full => "FULL",
            Durability::Normal => "NORMAL",
        }
    }
}

/// A SQLite database file.
pub struct SqliteStore {
    /// Connections for reads: never wait on writers.
    reads: Pool,
    /// The one connection for writes, which wait their turn a bounded time.
    writes: Pool,
    /// A connection of its own for readiness checks, so that `/readyz`
    /// answers while every read and write connection is busy.
    ping: Mutex<Option<rusqlite::Connection>>,
    /// Single readings, committed in groups.
    group: crate::group::GroupCommit,
    /// Writes of readings under way (see [`Store::ingest_waiting`]).
    ingest_waiting: crate::group::IngestWaiting,
    /// Told of committed readings.
    observers: std::sync::Arc<crate::observe::Observers>,
    /// The devices and their alarm rules and states, kept between write transactions.
    kept: std::sync::Arc<Kept>,
    /// Webhook callers' devices and write permissions, kept between requests.
    write_targets: crate::access_cache::WriteTargets,
    /// Raw windows' devices, kept between requests.
    visible: std::sync::Arc<crate::access_cache::VisibleDevices>,
    /// The installation's key for the message ids of deliveries made from
    /// the outbox log (`outbox_log::message_id`).
    message_id_key: std::sync::Arc<str>,
    path: std::path::PathBuf,
}

impl SqliteStore {
    /// Opens (creating and migrating when needed) the database at `path`.
    pub async fn open(path: &str, durability: Durability) -> StoreResult<Self> {
        Self::open_with(path, durability, crate::OpenOptions::default()).await
    }

    /// [`SqliteStore::open`] with options; readings stored by an older
    /// schema are upgraded before it returns.
    pub async fn open_with(path: &str, durability: Durability, options: crate::OpenOptions) -> StoreResult<Self> {
        let path = Path::new(path);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
            return Err(StoreError::NotFound(format!(
                "the directory {} of the database does not exist",
                dir.display()
            )));
        }
        let sync = durability.pragma();
        let writes = Pool::new(path, 1, Role::Write, sync);
        writes.run(migrate).await?;
        writes.run(move |c| upgrade::run(c, options.upgrade_batch_hours)).await?;
        let message_id_key = writes.run(|c| outbox_log::message_id_key(c)).await?.into();
        let reads = Pool::new(path, READ_POOL_SIZE, Role::Read, sync);
        let observers = std::sync::Arc::new(crate::observe::Observers::default());
        let kept = std::sync::Arc::new(Kept::default());
        let (group_writes, group_kept) = (writes.clone(), kept.clone());
        let group = crate::group::GroupCommit::start("sensorhub-sqlite-group", false, observers.clone(), move || {
            Ok(async move |group: &mut crate::group::Gather<'_>| {
                let (kept, mut readings) = (&group_kept, group.first());
                // Without filling this is what came meanwhile: no wait.
                readings.extend(group.rest().await);
                let none = std::future::ready(Vec::new());
                group_writes.run_here(|c| tx::in_tx(c, async |tx| ingest_group(tx, readings, none, kept).await)).await
            })
        })?;
        Ok(Self {
            reads,
            writes,
            ping: Mutex::new(None),
            group,
            ingest_waiting: Default::default(),
            observers,
            kept,
            write_targets: Default::default(),
            visible: Default::default(),
            message_id_key,
            path: path.to_owned(),
        })
    }

    /// Checks that the file answers a read, on the readiness connection.
    fn ping_now(&self) -> StoreResult<()> {
        let mut slot = self.ping.lock().map_err(|_| StoreError::Backend("readiness lock poisoned".into()))?;
        if slot.is_none() {
            *slot = Some(pool::open_connection(&self.path, Role::Read, Durability::Full.pragma())?);
        }
        let conn = slot.as_mut().ok_or_else(|| StoreError::Backend("no readiness connection".into()))?;
        // Reads the schema: touches the file, never waits on writers (WAL).
        let result = conn.query_row("SELECT count(*) FROM sqlite_schema", [], |_| Ok(()));
        if result.is_err() {
            *slot = None;
        }
        Ok(result?)
    }
}

/// Applies the migrations the database has not seen yet, in one
/// `IMMEDIATE` transaction that also reads the version, so that several
/// processes opening a new file at once migrate it exactly once.
fn migrate(conn: &mut rusqlite::Connection) -> StoreResult<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    tx::ready(crate::write::migrate::migrate(&tx::SqliteTx(&tx), MIGRATIONS))?;
    tx.commit()?;
    Ok(())
}

#[async_trait]
impl crate::store::Health for SqliteStore {
    async fn ping(&self) -> StoreResult<()> {
        self.ping_now()
    }

    fn pool_status(&self) -> PoolStatus {
        let (r, w) = (self.reads.status(), self.writes.status());
        PoolStatus { max: r.max + w.max, in_use: r.in_use + w.in_use, idle: r.idle + w.idle }
    }

    fn kept_bytes(&self) -> usize {
        self.kept.hours.held()
    }

    async fn installation_id(&self) -> StoreResult<String> {
        self.reads.run_short(|c| tx::on(c, async |c| access::installation_id(c).await)).await
    }

    async fn installation_fact(&self, key: &str) -> StoreResult<Option<String>> {
        let key = key.to_owned();
        self.reads.run_short(move |c| tx::on(c, async |c| access::installation_fact(c, &key).await)).await
    }

    async fn record_installation_fact(&self, key: &str, value: &str) -> StoreResult<()> {
        let (key, value) = (fact_key(key)?, value.to_owned());
        self.writes
            .run(move |c| tx::in_tx(c, async |tx| access::record_installation_fact(tx, &key, &value).await))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Scope;
    use crate::prelude::*;

    #[tokio::test]
    async fn opening_creates_and_migrates_and_refuses_a_newer_schema() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("m.db");
        let path = path.to_str().expect("utf-8");
        let store = SqliteStore::open(path, Durability::Full).await.expect("create");
        assert!(store.is_empty().await.expect("empty"));
        drop(store);
        SqliteStore::open(path, Durability::Full).await.expect("reopen is a no-op");
        let conn = rusqlite::Connection::open(path).expect("open");
        let auto_vacuum: i64 = conn.query_row("PRAGMA auto_vacuum", [], |r| r.get(0)).expect("pragma");
        assert_eq!(auto_vacuum, 2, "a new file returns freed pages on incremental_vacuum");
        conn.pragma_update(None, "user_version", 99i64).expect("bump");
        drop(conn);
        let err = SqliteStore::open(path, Durability::Full).await.err().expect("refused");
        assert!(err.to_string().contains("newer than this sensorhub knows"), "{err}");
        let missing = dir.path().join("no/such/dir/x.db");
        assert!(SqliteStore::open(missing.to_str().expect("utf-8"), Durability::Full).await.is_err());
    }

    #[tokio::test]
    async fn commits_are_durable_unless_the_url_says_otherwise() {
        let dir = tempfile::tempdir().expect("dir");
        let synchronous = |store: &SqliteStore| {
            let (reads, writes) = (store.reads.clone(), store.writes.clone());
            async move {
                let get = |c: &mut rusqlite::Connection| Ok(c.query_row("PRAGMA synchronous", [], |r| r.get(0))?);
                (reads.run(get).await.expect("read"), writes.run(get).await.expect("write"))
            }
        };
        let path = dir.path().join("d.db");
        let full = SqliteStore::open(path.to_str().expect("utf-8"), Durability::Full).await.expect("open");
        assert_eq!(synchronous(&full).await, (2i64, 2i64), "FULL on every connection");
        let normal = SqliteStore::open(dir.path().join("n.db").to_str().expect("utf-8"), Durability::Normal).await;
        assert_eq!(synchronous(&normal.expect("open")).await, (1, 1), "NORMAL when asked");
    }

    #[tokio::test]
    async fn a_version_16_outbox_log_is_spread_by_the_upgrade_with_its_message_ids() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("v16.db");
        let conn = rusqlite::Connection::open(&path).expect("open");
        for sql in &MIGRATIONS[..16] {
            conn.execute_batch(sql).expect("migration");
        }
        conn.execute_batch(
            r#"PRAGMA user_version = 16;
             INSERT INTO accounts (id, username, password_hash, created_at) VALUES (1, 'a', 'x', 0);
             INSERT INTO devices (id, device_id, name, type, lat, long, interval_seconds) VALUES (7, 'D', 'n', 'T', 0, 0, 60);
             INSERT INTO subscriptions (id, account_id, url, all_devices, events, secret, created_at, enabled)
             VALUES ('sub_a', 1, 'http://a', 1, 'sensor-data', x'00', 0, 1);
             INSERT INTO outbox_log (device_pk, n, cum, created_at, owed, body)
             VALUES (7, 2, 2, 5, '[["sub_a","msg_old_1"],["sub_gone","msg_old_2"]]', '{"b":1}');"#,
        )
        .expect("rows");
        drop(conn);
        let store = SqliteStore::open(path.to_str().expect("utf-8"), Durability::Full).await.expect("upgrade");
        drop(store);
        let conn = rusqlite::Connection::open(&path).expect("open");
        let moved: Vec<(String, String, String, i64)> = conn
            .prepare("SELECT subscription_id, message_id, body, next_attempt FROM outbox")
            .expect("sql")
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .expect("sql")
            .map(|r| r.expect("row"))
            .collect();
        assert_eq!(moved, [("sub_a".into(), "msg_old_1".into(), r#"{"b":1}"#.into(), 5)], "owed once, id kept");
        // Version 21 keeps one row all done, above every delivery's number.
        let sql = "SELECT count(*) FROM outbox_log WHERE done != (1 << n) - 1";
        let left: i64 = conn.query_row(sql, [], |r| r.get(0)).expect("count");
        assert_eq!(left, 0);
        conn.execute("INSERT INTO outbox_owed (subs) VALUES ('[]')", []).expect("the new shape is in");
    }

    #[tokio::test]
    async fn a_version_20_outbox_log_is_spread_by_the_upgrade_with_its_message_ids_and_numbers_go_on_above() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("v20.db");
        let conn = rusqlite::Connection::open(&path).expect("open");
        for sql in &MIGRATIONS[..20] {
            conn.execute_batch(sql).expect("migration");
        }
        // As version 20 logged a reading owed to two subscriptions, with
        // its random bytes, and an alarm's, with its ids; and held a retry.
        let nonce: Vec<u8> = (0..32).collect();
        conn.execute_batch(
            r#"PRAGMA user_version = 20;
             INSERT INTO accounts (id, username, password_hash, created_at) VALUES (1, 'a', 'x', 0);
             INSERT INTO devices (id, device_id, name, type, lat, long, interval_seconds) VALUES (7, 'D', 'n', 'T', 0, 0, 60);
             INSERT INTO subscriptions (id, account_id, url, all_devices, events, secret, created_at, enabled)
             VALUES ('sub_a', 1, 'http://a', 1, 'sensor-data', x'00', 0, 1),
                    ('sub_b', 1, 'http://b', 1, 'sensor-data', x'00', 0, 1);
             INSERT INTO outbox (id, subscription_id, device_pk, message_id, body, created_at, next_attempt)
             VALUES (200, 'sub_a', 7, 'msg_retry', '{"r":0}', 1, 2);
             INSERT INTO outbox_owed (id, subs) VALUES (1, '["sub_a","sub_b"]');"#,
        )
        .expect("rows");
        conn.execute(
            "INSERT INTO outbox_log (device_pk, n, cum, created_at, owed, nonce, ids, body)
             VALUES (7, 2, 2, 5, 1, ?1, NULL, '{\"r\":1}'), (7, 2, 4, 6, 1, x'', '[\"msg_x\",\"msg_y\"]', '{\"r\":2}')",
            [&nonce],
        )
        .expect("log rows");
        drop(conn);
        let store = SqliteStore::open(path.to_str().expect("utf-8"), Durability::Full).await.expect("upgrade");
        drop(store);
        let conn = rusqlite::Connection::open(&path).expect("open");
        let moved: Vec<(i64, String, String)> = conn
            .prepare("SELECT id, subscription_id, message_id FROM outbox ORDER BY id")
            .expect("sql")
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .expect("sql")
            .map(|r| r.expect("row"))
            .collect();
        let hex = |b: &[u8]| crate::decide::outbox::id_text(b);
        let row = |id: i64, s: &str, m: &str| (id, s.to_owned(), m.to_owned());
        assert_eq!(
            moved,
            [
                row(200, "sub_a", "msg_retry"),
                row(201, "sub_a", &hex(&nonce[..16])),
                row(202, "sub_b", &hex(&nonce[16..])),
                row(203, "sub_a", "msg_x"),
                row(204, "sub_b", "msg_y")
            ],
            "owed once each, with the ids they had"
        );
        let kept: (i64, i64, i64) = conn
            .query_row("SELECT id, n, done FROM outbox_log", [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .expect("one row");
        assert_eq!(kept, (204 / 64 + 1, 0, 0), "one row all done, whose numbers are above every one in outbox");
        let key: String = conn
            .query_row("SELECT value FROM installation WHERE key = 'message_id_key'", [], |r| r.get(0))
            .expect("a key");
        assert_eq!(key.len(), 64);
    }

    #[tokio::test]
    async fn a_group_writes_the_readings_that_came_after_its_first_reads_and_answers_each_in_order() {
        use crate::group::Single;
        use futures_util::StreamExt;
        use sensorhub_core::model::{Origin, ReadingInput, ValueInput};
        let dir = tempfile::tempdir().expect("dir");
        let store = SqliteStore::open(dir.path().join("g.db").to_str().expect("utf-8"), Durability::Full).await;
        let store = store.expect("open");
        let doc = r#"{"devices": [
            {"device_id": "D1", "name": "one", "type": "AWS", "lat": 1, "long": 2, "interval_seconds": 60,
             "sensors": [{"sensor_id": "a", "name": "A", "type": "T", "unit": "%"}]},
            {"device_id": "D2", "name": "two", "type": "AWLR", "lat": 1, "long": 2, "interval_seconds": 60,
             "sensors": [{"sensor_id": "a", "name": "A", "type": "T", "unit": "cm"}]}]}"#;
        let mut doc: sensorhub_core::provision::Provision = sensorhub_core::provision::parse_json(doc).expect("doc");
        let readings = doc.check().expect("valid");
        store.apply(doc, readings).await.expect("apply");
        let single = |device: &str, ts: i64, sensor: &str, at| {
            let values = vec![ValueInput { sensor_id: sensor.into(), value: ts as f64, unit: None }];
            let reading =
                ReadingInput { device_id: device.into(), timestamp: ts, values, origin: Origin::Item("t".into()) };
            Single { reading, at }
        };
        // D1 and its hour are kept: the first reads read that hour ahead.
        store.ingest(single("D1", 60, "a", None).reading).await.expect("kept");
        let stale = crate::Generations { access: -1, devices: -1 };
        let first = vec![single("D1", 120, "a", None)];
        let rest = vec![
            single("D2", 180, "a", None),        // a device the first reads did not look up
            single("D1", 7_260, "a", None),      // an hour they did not read
            single("D1", 240, "zz", None),       // refused alone
            single("D1", 300, "a", Some(stale)), // written only at generations that are not these
            single("D1", 360, "a", None),
        ];
        let kept = &store.kept;
        let (each, events) = store
            .writes
            .run_here(|c| tx::in_tx(c, async |tx| ingest_group(tx, first, async { rest }, kept).await))
            .await
            .expect("written");
        assert!(events.is_empty());
        let each: Vec<String> =
            each.iter().map(|o| o.as_ref().map_or_else(|e| e.to_string(), |()| "ok".into())).collect();
        assert_eq!(each[..3], ["ok", "ok", "ok"]);
        assert!(each[3].contains("unknown sensor"), "{each:?}");
        assert_eq!(each[4], crate::StoreError::Stale.to_string());
        assert_eq!(each[5], "ok");
        let seconds = async |device: &str| -> Vec<i64> {
            let handle = store.find_device(Scope::All, device).await.expect("find").expect("exists");
            let range = sensorhub_core::time::TimeRange { start: 0, end: 100_000 };
            let batches: Vec<_> = store.read_readings(&handle, range).map(|b| b.expect("batch")).collect().await;
            batches.into_iter().flat_map(|b| b.timestamps).collect()
        };
        assert_eq!(seconds("D1").await, [60, 120, 360, 7_260]);
        assert_eq!(seconds("D2").await, [180]);
    }

    #[tokio::test]
    async fn an_open_hour_past_a_page_keeps_its_size_while_it_grows_and_loses_its_room_when_the_next_begins() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("pad.db");
        drop(SqliteStore::open(path.to_str().expect("utf-8"), Durability::Full).await.expect("create"));
        let c = rusqlite::Connection::open(&path).expect("open");
        let now = 500_000;
        let put_as = |open: bool, chunk: i64, len: usize| {
            let row = crate::decide::HourRow { device_pk: 7, chunk, data: vec![1; len] };
            tx::put_hours(&c, &[row], open).expect("put");
        };
        let put = |chunk: i64, len: usize| put_as(true, chunk, len);
        let sizes = |chunk: i64| -> (i64, Option<i64>) {
            c.query_row("SELECT length(data), length(pad) FROM hours WHERE key = ?1", [hour_key(7, chunk)], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .expect("row")
        };
        put(now, 100);
        assert_eq!(sizes(now), (100, None), "a row that fits in a page has no room");
        put(now, 5_000);
        assert_eq!(sizes(now), (5_000, Some(1_144)), "room up to the next 2 KB");
        put(now, 5_100);
        assert_eq!(sizes(now), (5_100, Some(1_044)), "the same size while it grows");
        put(now, 6_200);
        assert_eq!(sizes(now), (6_200, Some(1_992)), "past it, the next step");
        put_as(false, now - 3, 9_000);
        assert_eq!(sizes(now - 3), (9_000, None), "history (an import, a removal) is stored as it is");
        put(now + 1, 4_500);
        assert_eq!(sizes(now), (6_200, None), "the next hour began: the room goes");
        assert_eq!(sizes(now + 1), (4_500, Some(1_644)));
        let data: Vec<u8> =
            c.query_row("SELECT data FROM hours WHERE key = ?1", [hour_key(7, now)], |r| r.get(0)).expect("data");
        assert_eq!(data, vec![1; 6_200], "readers read the hour's bytes alone");
    }

    #[tokio::test]
    async fn a_version_1_database_upgrades_without_write_grants_unless_asked() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("v1.db");
        let conn = rusqlite::Connection::open(&path).expect("open");
        conn.execute_batch(MIGRATIONS[0]).expect("version 1");
        conn.execute_batch(
            "PRAGMA user_version = 1;
             INSERT INTO accounts (id, username, password_hash, created_at) VALUES (1, 'a', 'x', 0);
             INSERT INTO devices (id, device_id, name, type, lat, long, interval_seconds) VALUES (7, 'D', 'n', 'T', 0, 0, 60);
             INSERT INTO account_devices (account_id, device_pk) VALUES (1, 7);",
        )
        .expect("rows");
        drop(conn);
        let store = SqliteStore::open(path.to_str().expect("utf-8"), Durability::Full).await.expect("upgrade");
        assert!(store.find_device(Scope::Account { account_id: 1, key: None }, "D").await.expect("f").is_some());
        assert!(!store.may_write(1, 7).await.expect("may"), "seeing is not writing after the upgrade");
        assert_eq!(store.grant_write_to_viewers().await.expect("grant"), 1);
        assert!(store.may_write(1, 7).await.expect("may"), "the operator kept the old behaviour");
    }
}
