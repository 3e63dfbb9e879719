//! The access generation: every change that may take access away moves it,
//! on every backend, whichever way it is made; re-applying the same file
//! does not.

use super::{apply, backends};
use sensorhub_store::Store;

async fn generation(s: &dyn Store) -> i64 {
    s.access_generation().await.expect("generation")
}

/// Runs `change` and says whether it moved the generation.
async fn moves(s: &dyn Store, change: &str) -> bool {
    let before = generation(s).await;
    apply(s, change).await.unwrap_or_else(|e| panic!("{change}: {e}"));
    generation(s).await > before
}

#[tokio::test]
async fn every_change_that_takes_access_away_moves_the_generation() {
    for b in backends().await {
        let s = &*b.store;
        assert!(!moves(s, super::BASE).await, "re-applying the same file takes nothing away");
        let wider = r#"{"accounts":[{"username":"alice","devices":["D1","D2"]}]}"#;
        apply(s, wider).await.expect("widen");
        for (what, change) in [
            ("a device taken from the account", r#"{"accounts":[{"username":"alice","devices":["D1"]}]}"#),
            (
                "a key's scope narrowed",
                r#"{"accounts":[{"username":"alice","api_keys":[{"id":"k-all","devices":["D1"]}]}]}"#,
            ),
            ("a password changed", r#"{"accounts":[{"username":"alice","password":"new"}]}"#),
            ("an account disabled", r#"{"accounts":[{"username":"alice","disabled":true}]}"#),
        ] {
            assert!(moves(s, change).await, "{what}");
        }
        let before = generation(s).await;
        s.revoke_api_key("k-d1").await.expect("revoke");
        assert!(generation(s).await > before, "a key revoked");
        let id = s.installation_id().await.expect("installation id");
        assert!(id.len() == 32 && id.bytes().all(|c| c.is_ascii_hexdigit()), "{id}");
        assert_eq!(s.installation_id().await.expect("again"), id, "made once");
    }
}
