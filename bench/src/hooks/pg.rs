//! The `hooks` scenario's questions to its PostgreSQL database: the WAL
//! written, and the outbox's dead rows vacuumed between rounds on a cluster
//! whose autovacuum is off.

/// Connects to `url` and runs `f` on the client.
async fn with_client<T>(
    url: &str,
    f: impl AsyncFnOnce(&tokio_postgres::Client) -> Result<T, tokio_postgres::Error>,
) -> Result<T, String> {
    let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.map_err(|e| e.to_string())?;
    let conn = tokio::spawn(conn);
    let out = f(&c).await.map_err(|e| e.to_string());
    drop(c);
    let _ = conn.await;
    out
}

/// The bytes of WAL the PostgreSQL cluster of `url` has written so far.
pub(super) async fn wal_bytes(url: &str) -> Result<f64, String> {
    let sql = "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::float8";
    with_client(url, async |c| Ok(c.query_one(sql, &[]).await?.get(0))).await
}

/// Vacuums the outbox's tables of the database at `url` if its cluster's
/// autovacuum is off (this project's CI machine turns it off); returns
/// whether it did. A round's three subscriptions are removed with what
/// they still owe, some 300,000 rows spread into `outbox` and deleted: a
/// cluster with autovacuum reclaims them. The server vacuums its own
/// tables where it is off (since the forty-eighth step in
/// bench/RESULTS.md), but its first pass comes 10 s after it starts and
/// each phase's server lives about six seconds. Before the bench did it
/// each round's claims stepped over more dead rows than the last (2.5
/// million after ten rounds, the forty-seventh step, where deliveries
/// while ingesting fell from 536 to 153 a second over fifteen rounds).
/// Vacuumed here, between rounds, the rounds stay alike.
pub(super) async fn vacuum_if_autovacuum_is_off(url: &str) -> Result<bool, String> {
    with_client(url, async |c| {
        let on: String = c.query_one("SHOW autovacuum", &[]).await?.get(0);
        if on == "on" {
            return Ok(false);
        }
        c.batch_execute("VACUUM (ANALYZE) outbox, outbox_log").await?;
        Ok(true)
    })
    .await
}
