//! Retention's one read, written once for both backends: every device's
//! own retention and its owner's (the expiry itself is a write step,
//! [`crate::write::remove`]).

use super::Sql;
use crate::StoreResult;
use crate::decide::RetentionSettings;

/// Every device with its own and its owner's retention columns.
pub(crate) async fn settings(c: &impl Sql) -> StoreResult<Vec<RetentionSettings>> {
    let sql = "SELECT d.id, d.retention_seconds, a.retention_seconds FROM devices d LEFT JOIN accounts a ON a.id = d.owner_id";
    c.query(sql, &[]).await?.iter().map(|r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).collect()
}
