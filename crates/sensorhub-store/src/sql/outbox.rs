//! The outbox as the admin commands see it, written once for both
//! backends: a subscription's deliveries listed and replayed, old failures
//! pruned. Claims, outcomes and the backlog (each backend's outbox log
//! counts), where each backend batches in its own way, stay with the
//! backends.

use super::Sql;
use crate::delivery::{DeliveryRecord, Replay, no_such_subscription};
use crate::{StoreError, StoreResult};

/// Refuses an unknown subscription.
async fn require(c: &impl Sql, id: &str) -> StoreResult<()> {
    let found = c.query_opt("SELECT 1 FROM subscriptions WHERE id = $1", &[id.into()]).await?;
    found.map(|_| ()).ok_or_else(|| no_such_subscription(id))
}

/// Subscription `id`'s pending and failed deliveries (the failed ones only with `failed_only`), oldest first.
pub(crate) async fn list(c: &impl Sql, id: &str, failed_only: bool) -> StoreResult<Vec<DeliveryRecord>> {
    require(c, id).await?;
    // A delivery in flight is next tried when its lease ends, if it fails.
    let sql = "SELECT id, message_id, state, attempts, created_at,
                      CASE WHEN leased_until > next_attempt THEN leased_until ELSE next_attempt END,
                      last_status, last_error FROM outbox
               WHERE subscription_id = $1 AND (NOT $2 OR state = 'failed') ORDER BY id";
    let rows = c.query(sql, &[id.into(), failed_only.into()]).await?;
    rows.iter()
        .map(|r| {
            Ok(DeliveryRecord {
                id: r.get(0)?,
                message_id: r.get(1)?,
                state: r.get(2)?,
                attempts: r.get(3)?,
                created_at: r.get(4)?,
                next_attempt: r.get(5)?,
                last_status: r.get(6)?,
                last_error: r.get(7)?,
            })
        })
        .collect()
}

/// Makes subscription `id`'s failed deliveries (or one of them) due at `now` (ms) again, attempts reset.
pub(crate) async fn replay(c: &impl Sql, id: &str, which: Replay, now: i64) -> StoreResult<u64> {
    require(c, id).await?;
    let n = match which {
        Replay::Failed => {
            let sql = "UPDATE outbox SET state = 'pending', attempts = 0, next_attempt = $2, leased_until = NULL
                       WHERE subscription_id = $1 AND state = 'failed'";
            c.execute(sql, &[id.into(), now.into()]).await?
        }
        Replay::One(row) => {
            let sql = "UPDATE outbox SET state = 'pending', attempts = 0, next_attempt = $3, leased_until = NULL
                       WHERE subscription_id = $1 AND id = $2";
            c.execute(sql, &[id.into(), row.into(), now.into()]).await?
        }
    };
    if let (Replay::One(row), 0) = (which, n) {
        return Err(StoreError::NotFound(format!("subscription {id:?} has no delivery {row}")));
    }
    Ok(n)
}

/// Removes failed and dropped deliveries whose reading was stored before `before` (ms).
pub(crate) async fn prune_failed(c: &impl Sql, before: i64) -> StoreResult<u64> {
    let sql = "DELETE FROM outbox WHERE state IN ('failed', 'dropped') AND created_at < $1";
    c.execute(sql, &[before.into()]).await
}
