//! A reading written at the generations its webhook key's answer was kept
//! at (`ingest_at`): stored while they hold, refused as stale, with nothing
//! written, once any change of the key, its account, the device's access
//! or the device moved them, however the change was made.

use super::access::outside;
use super::{apply, backends, read_all, reading};
use sensorhub_core::secret::key_digest;
use sensorhub_store::{Generations, Store, StoreError};

const HOOK: &str = r#"{"accounts":[{"username":"alice","write":["D1"],"webhook_keys":[{"key":"hook-a"}]}]}"#;

/// The generations the webhook reads with key `hook-a`.
async fn looked_up(s: &dyn Store) -> Generations {
    s.webhook_key_auth(&key_digest("hook-a")).await.expect("key").expect("exists").generations
}

/// Writes a reading at second `at` with `kept` and says whether it was stored.
async fn stored_at(s: &dyn Store, at: i64, kept: Generations) -> bool {
    let written = s.ingest_at(reading("D1", at, &[("a", at as f64)]), kept).await;
    assert!(matches!(written, Ok(()) | Err(StoreError::Stale)), "{written:?}");
    let stored = read_all(s, "D1", at, at).await.iter().map(|b| b.timestamps.len()).sum::<usize>() == 1;
    assert_eq!(written.is_ok(), stored, "stored exactly when accepted");
    stored
}

#[tokio::test]
async fn a_reading_at_kept_generations_is_refused_once_they_moved() {
    for b in backends().await {
        let s = &*b.store;
        apply(s, HOOK).await.expect("hook");
        let kept = looked_up(s).await;
        assert!(stored_at(s, 1_000, kept).await, "nothing moved");
        assert!(stored_at(s, 1_060, kept).await, "still nothing moved");

        let changes: &[(&str, &str)] = &[
            (
                "the key revoked",
                r#"{"accounts":[{"username":"alice","webhook_keys":[{"key":"hook-a","revoked":true}]}]}"#,
            ),
            (
                "the key active again",
                r#"{"accounts":[{"username":"alice","webhook_keys":[{"key":"hook-a","revoked":false}]}]}"#,
            ),
            ("the account disabled", r#"{"accounts":[{"username":"alice","disabled":true}]}"#),
            ("the account enabled", r#"{"accounts":[{"username":"alice","disabled":false}]}"#),
            ("the grant taken away", r#"{"accounts":[{"username":"alice","write":[]}]}"#),
        ];
        let mut kept = kept;
        for (i, (what, change)) in changes.iter().enumerate() {
            apply(s, change).await.unwrap_or_else(|e| panic!("{what}: {e}"));
            let at = 2_000 + 60 * i as i64;
            assert!(!stored_at(s, at, kept).await, "{what}");
            kept = looked_up(s).await;
        }
        apply(s, HOOK).await.expect("granted again");
        kept = looked_up(s).await;
        assert!(stored_at(s, 3_000, kept).await, "read again: written");

        // Made by SQL, from outside the store: the triggers move them all the same.
        let zero = if b.pg.is_some() { "decode(repeat('00', 32), 'hex')" } else { "zeroblob(32)" };
        // SQLite's REPLACE fires no update or delete trigger; PostgreSQL's upsert fires the update's.
        let (replace, conflict) = match b.pg {
            Some(_) => (
                "INSERT INTO webhook_keys (id, digest, prefix, account_id, revoked, created_at)
                         SELECT id, digest, prefix, account_id,",
                " , created_at FROM webhook_keys
                         ON CONFLICT (id) DO UPDATE SET revoked = EXCLUDED.revoked",
            ),
            None => (
                "INSERT OR REPLACE INTO webhook_keys (id, digest, prefix, account_id, revoked, created_at)
                      SELECT id, digest, prefix, account_id,",
                ", created_at FROM webhook_keys",
            ),
        };
        let by_sql = [
            ("the key revoked by SQL", "UPDATE webhook_keys SET revoked = TRUE".to_owned()),
            ("the key restored by SQL", "UPDATE webhook_keys SET revoked = FALSE".into()),
            ("a sensor renamed by SQL", "UPDATE sensors SET name = 'renamed' WHERE sensor_id = 'b'".into()),
            ("the key replaced by a revoked one by SQL", format!("{replace} TRUE{conflict}")),
            ("the key restored again by SQL", "UPDATE webhook_keys SET revoked = FALSE".into()),
            ("the key's digest changed by SQL", format!("UPDATE webhook_keys SET digest = {zero}")),
            ("the key removed by SQL", "DELETE FROM webhook_keys".into()),
        ];
        for (i, (what, sql)) in by_sql.iter().enumerate() {
            outside(&b, sql).await;
            let at = 4_000 + 60 * i as i64;
            assert!(!stored_at(s, at, kept).await, "{what}");
            kept = match s.webhook_key_auth(&key_digest("hook-a")).await.expect("key") {
                Some(key) => key.generations,
                // Not found by its digest any more: only the access generation moved.
                None => Generations { access: s.access_generation().await.expect("generation"), ..kept },
            };
        }
        if b.pg.is_some() {
            apply(s, HOOK).await.expect("the key again");
            kept = looked_up(s).await;
            outside(&b, "TRUNCATE webhook_keys").await;
            assert!(!stored_at(s, 5_000, kept).await, "every key emptied at once");
        }
        // A reading not asked at generations is written as before.
        s.ingest(reading("D1", 6_000, &[("a", 1.0)])).await.expect("unconditional");
    }
}
