//! sensorhub's own vacuum: on a PostgreSQL cluster whose autovacuum is off
//! it vacuums and analyzes its tables past autovacuum's thresholds, and no
//! table of anyone else, nor one of its own that its role may not vacuum;
//! a table another session holds it names busy, and leaves for a later pass;
//! where the database reclaims its space itself (SQLite; PostgreSQL with
//! autovacuum on) it does nothing.

use super::{BASE, apply, postgres_url, reading, session};
use sensorhub_store::Store;
use sensorhub_testing::TempDatabase;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// Statistics reach `pg_stat_user_tables` within about ten seconds of a
/// session going idle; a look waits at most this long.
const STATS_LAG: Duration = Duration::from_secs(30);

/// `table`'s dead rows, and whether it was vacuumed and analyzed by hand.
async fn stats(admin: &tokio_postgres::Client, table: &str) -> (i64, bool, bool) {
    let row = admin
        .query_one(
            "SELECT n_dead_tup, last_vacuum IS NOT NULL, last_analyze IS NOT NULL
             FROM pg_stat_user_tables WHERE relid = $1::text::regclass",
            &[&table],
        )
        .await
        .expect("stats");
    (row.get(0), row.get(1), row.get(2))
}

/// A store on a new PostgreSQL database with the base applied, and an
/// admin session on that database.
async fn postgres_store() -> (TempDatabase, Arc<dyn Store>, tokio_postgres::Client, JoinHandle<()>) {
    let pg = TempDatabase::create(&postgres_url()).await.expect("database");
    let store = sensorhub_store::open(pg.url()).await.expect("open");
    apply(&*store, BASE).await.expect("base");
    let (admin, connection) = session(pg.url()).await;
    (pg, store, admin, connection)
}

/// Whether the cluster's autovacuum is on (sensorhub then vacuums nothing).
async fn autovacuum_on(admin: &tokio_postgres::Client) -> bool {
    let autovacuum: String = admin.query_one("SHOW autovacuum", &[]).await.expect("show").get(0);
    autovacuum == "on"
}

#[tokio::test]
async fn sqlite_reclaims_its_space_itself() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("v.db");
    let store = sensorhub_store::open(path.to_str().expect("utf-8")).await.expect("open");
    apply(&*store, BASE).await.expect("base");
    assert_eq!(store.vacuum_when_autovacuum_is_off().await.expect("pass"), None);
}

#[tokio::test]
async fn postgres_without_autovacuum_has_sensorhub_vacuum_its_own_tables() {
    let (_pg, store, admin, connection) = postgres_store().await;
    if autovacuum_on(&admin).await {
        // PostgreSQL keeps the tables: sensorhub leaves them alone.
        assert_eq!(store.vacuum_when_autovacuum_is_off().await.expect("pass"), None);
        eprintln!("this cluster's autovacuum is on: only that sensorhub then leaves vacuuming to it was checked");
        return;
    }
    // Someone else's table in the same schema, with dead rows.
    admin
        .batch_execute(
            "CREATE TABLE bystander (n int); INSERT INTO bystander SELECT generate_series(1, 1000);
             DELETE FROM bystander",
        )
        .await
        .expect("bystander");
    // Each reading stored on its own updates D1's two latest values.
    for ts in 1..=100 {
        store.ingest(reading("D1", ts * 60, &[("a", 1.0), ("b", 2.0)])).await.expect("ingest");
    }
    let since = Instant::now();
    while stats(&admin, "bystander").await.0 < 1000 {
        assert!(since.elapsed() < STATS_LAG, "the bystander's dead rows never reached the statistics");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let vacuumed = loop {
        let pass = store.vacuum_when_autovacuum_is_off().await.expect("pass").expect("autovacuum is off");
        assert!(pass.not_permitted.is_empty(), "the store's role owns its tables: {pass:?}");
        if let Some(latest) = pass.vacuumed.iter().find(|t| t.table == "latest") {
            break latest.clone();
        }
        assert!(since.elapsed() < STATS_LAG, "latest's dead rows never made it due: {pass:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(vacuumed.dead_rows > 50, "latest was due by its dead rows: {vacuumed:?}");
    let (dead, was_vacuumed, was_analyzed) = stats(&admin, "latest").await;
    assert!(was_vacuumed && was_analyzed, "latest vacuumed and analyzed");
    assert!(dead < 50, "latest's dead rows were reclaimed: {dead} left");
    let (dead, was_vacuumed, _) = stats(&admin, "bystander").await;
    assert!(
        !was_vacuumed && dead >= 1000,
        "the bystander is not sensorhub's: {dead} dead rows, vacuumed {was_vacuumed}"
    );
    // Vacuumed, latest is not due again.
    let again = store.vacuum_when_autovacuum_is_off().await.expect("pass").expect("autovacuum is off");
    assert!(again.vacuumed.iter().all(|t| t.table != "latest"), "latest vacuumed twice: {again:?}");
    // It vacuums on a connection of its own (not one of the requests'),
    // which it leaves idle.
    let own = admin
        .query(
            "SELECT state FROM pg_stat_activity
             WHERE datname = current_database() AND application_name = 'sensorhub (vacuum)'",
            &[],
        )
        .await
        .expect("activity");
    let states: Vec<String> = own.iter().map(|r| r.get(0)).collect();
    assert_eq!(states, ["idle"], "one connection of the vacuum's own, idle between passes");
    drop(admin);
    let _ = connection.await;
}

#[tokio::test]
async fn postgres_names_a_table_another_session_holds_busy_and_vacuums_it_later() {
    let (pg, store, admin, connection) = postgres_store().await;
    if autovacuum_on(&admin).await {
        eprintln!("this cluster's autovacuum is on: sensorhub vacuums nothing, busy or not");
        return;
    }
    for ts in 1..=100 {
        store.ingest(reading("D1", ts * 60, &[("a", 1.0), ("b", 2.0)])).await.expect("ingest");
    }
    // Another instance's vacuum holds `latest` (the lock a VACUUM takes).
    let (other, other_connection) = session(pg.url()).await;
    other.batch_execute("BEGIN; LOCK TABLE latest IN SHARE UPDATE EXCLUSIVE MODE").await.expect("lock");
    let since = Instant::now();
    let pass = loop {
        let pass = store.vacuum_when_autovacuum_is_off().await.expect("pass").expect("autovacuum is off");
        assert!(pass.vacuumed.iter().all(|t| t.table != "latest"), "latest is held, not vacuumed: {pass:?}");
        if pass.busy.iter().any(|t| t == "latest") {
            break pass;
        }
        assert!(since.elapsed() < STATS_LAG, "latest's dead rows never made it due: {pass:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(pass.busy, ["latest"], "only the held table is busy");
    let (dead, was_vacuumed, _) = stats(&admin, "latest").await;
    // Not its dead rows: PostgreSQL's pruning of a full page lowers that
    // count without a vacuum (seen at 30 in a full run of these tests).
    assert!(!was_vacuumed, "latest left as it was: {dead} dead rows, vacuumed {was_vacuumed}");
    // Let go, it is vacuumed at the next pass.
    other.batch_execute("COMMIT").await.expect("unlock");
    let pass = store.vacuum_when_autovacuum_is_off().await.expect("pass").expect("autovacuum is off");
    assert!(pass.busy.is_empty(), "nothing held now: {pass:?}");
    assert!(pass.vacuumed.iter().any(|t| t.table == "latest"), "latest vacuumed once free: {pass:?}");
    let (_, was_vacuumed, _) = stats(&admin, "latest").await;
    assert!(was_vacuumed, "latest vacuumed by hand");
    drop((other, admin));
    let _ = other_connection.await;
    let _ = connection.await;
}

/// `url` with `role` (password `pw`) as its user.
fn as_role(url: &str, role: &str, pw: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let host = rest.split_once('@').map_or(rest, |(_, host)| host);
    format!("{scheme}://{role}:{pw}@{host}")
}

#[tokio::test]
async fn postgres_leaves_a_table_its_role_may_not_vacuum_to_its_owner() {
    let (admin, connection) = session(&postgres_url()).await;
    if autovacuum_on(&admin).await {
        eprintln!("this cluster's autovacuum is on: sensorhub vacuums nothing, whoever owns its tables");
        return;
    }
    // Roles are the cluster's: named for this run, dropped at the end.
    let pg = TempDatabase::create(&postgres_url()).await.expect("database");
    let suffix = pg.url().rsplit('_').next().expect("a random suffix").to_owned();
    let (role, owner) = (format!("sh_vacuum_{suffix}"), format!("sh_vacuum_owner_{suffix}"));
    admin
        .batch_execute(&format!("CREATE ROLE {role} LOGIN PASSWORD 'vacuum'; CREATE ROLE {owner}"))
        .await
        .expect("roles");
    let (db_admin, db_connection) = session(pg.url()).await;
    db_admin.batch_execute(&format!("GRANT CREATE ON SCHEMA public TO {role}")).await.expect("grant");
    let store = sensorhub_store::open(&as_role(pg.url(), &role, "vacuum")).await.expect("open as the role");
    apply(&*store, BASE).await.expect("base");
    // `latest` handed to another role, which lets sensorhub's write it.
    db_admin
        .batch_execute(&format!("ALTER TABLE latest OWNER TO {owner}; GRANT ALL ON latest TO {role}"))
        .await
        .expect("another owner");
    for ts in 1..=100 {
        store.ingest(reading("D1", ts * 60, &[("a", 1.0), ("b", 2.0)])).await.expect("ingest");
    }
    let since = Instant::now();
    let pass = loop {
        let pass = store.vacuum_when_autovacuum_is_off().await.expect("pass").expect("autovacuum is off");
        if pass.not_permitted.iter().any(|t| t == "latest") {
            break pass;
        }
        assert!(since.elapsed() < STATS_LAG, "latest's dead rows never made it due: {pass:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(pass.not_permitted, ["latest"], "only the table another role owns is refused");
    assert!(pass.vacuumed.iter().all(|t| t.table != "latest"), "latest was not tried: {pass:?}");
    let (dead, was_vacuumed, _) = stats(&db_admin, "latest").await;
    // Not its dead rows: pruning lowers that count without a vacuum.
    assert!(!was_vacuumed, "latest left to its owner: {dead} dead rows, vacuumed {was_vacuumed}");
    drop(store);
    drop(db_admin);
    let _ = db_connection.await;
    drop(pg);
    admin.batch_execute(&format!("DROP ROLE {role}; DROP ROLE {owner}")).await.expect("roles dropped");
    drop(admin);
    let _ = connection.await;
}
