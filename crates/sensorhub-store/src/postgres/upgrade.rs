//! The upgrade of readings stored by schema version 2 (the `readings`
//! table, in the format of `legacy.rs`) to `hours` in the column format: a
//! batch of hours per transaction, each moved (deleted from the old table,
//! converted, inserted) atomically, so that a kill at any moment loses
//! nothing and the next start carries on where it stopped. It runs under
//! the migration lock, so one instance upgrades while the others wait. The
//! old table is dropped in the transaction that finds it empty.

use crate::StoreResult;
use crate::decide::latest::Newest;
use crate::decide::{UpgradeLog, upgrade_hour};
use deadpool_postgres::Client;

/// Moves every hour of `readings` to `hours`, `batch` hours per transaction.
pub(super) async fn run(client: &mut Client, batch: usize) -> StoreResult<()> {
    let exists = "SELECT to_regclass('readings') IS NOT NULL";
    if !client.query_one(exists, &[]).await?.get::<_, bool>(0) {
        return Ok(());
    }
    let total: i64 = client.query_one("SELECT count(*) FROM readings", &[]).await?.get(0);
    let mut log = UpgradeLog::start(u64::try_from(total).unwrap_or(0));
    loop {
        let tx = client.transaction().await?;
        let rows = tx
            .query(
                "DELETE FROM readings WHERE (device_pk, chunk) IN
                   (SELECT device_pk, chunk FROM readings ORDER BY device_pk, chunk LIMIT $1)
                 RETURNING device_pk, chunk, data",
                &[&(batch.max(1) as i64)],
            )
            .await?;
        if rows.is_empty() {
            tx.batch_execute("DROP TABLE readings").await?;
            tx.commit().await?;
            log.finish();
            return Ok(());
        }
        let (mut pks, mut chunks, mut datas) = (Vec::new(), Vec::new(), Vec::new());
        // Upgraded hours are readings written: the `latest` index learns them.
        let mut newest = Newest::default();
        for r in &rows {
            let (pk, chunk): (i64, i64) = (r.get(0), r.get(1));
            let data = upgrade_hour(pk, chunk, r.get(2))?;
            if !data.is_empty() {
                newest.add_hour(pk, chunk, &data)?;
                pks.push(pk);
                chunks.push(chunk);
                datas.push(data);
            }
        }
        tx.execute(
            "INSERT INTO hours (device_pk, chunk, data) SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bytea[])",
            &[&pks, &chunks, &datas],
        )
        .await?;
        crate::write::tx::Tx::upsert_latest(&super::tx::PgTx::new(&tx), &newest.take()).await?;
        tx.commit().await?;
        log.batch(rows.len() as u64);
    }
}
