//! Access that lasts: an open stream was allowed when it began, and must
//! end when its caller would be refused now. The store keeps an access
//! generation that every change which may take access away moves (a
//! trigger in the changing transaction, whichever process or instance made
//! it); [`watch()`] reads it every [`POLL`] and tells open streams when it
//! moved, and each checks its caller again with [`still_allowed`].

use sensorhub_core::secret::KeyDigest;
use sensorhub_store::{Scope, Store, StoreResult};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How often the access generation is read: a revocation reaches open
/// streams within about this, plus a re-check.
pub const POLL: Duration = Duration::from_secs(1);

/// What a caller proved when its request was accepted, kept to check it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// An account that logged in with HTTP Basic.
    Account {
        /// The account.
        account_id: i64,
        /// Its username.
        username: String,
        /// The password hash the login was checked against: another one
        /// now means the password was changed.
        password_hash: String,
    },
    /// An API key id in the path, by its digest.
    Key(KeyDigest),
}

/// Whether `credential` would still be let in with `scope` and still see
/// `device_id`: the account enabled with the same password, or the key
/// neither revoked, nor of a disabled account, nor narrowed.
pub async fn still_allowed(
    store: &dyn Store,
    credential: &Credential,
    scope: Scope,
    device_id: &str,
) -> StoreResult<bool> {
    let caller_ok = match credential {
        Credential::Account { account_id, username, password_hash } => store
            .account_auth(username)
            .await?
            .is_some_and(|a| a.account_id == *account_id && a.password_hash == *password_hash && !a.disabled),
        Credential::Key(digest) => {
            store.api_key_auth(digest).await?.is_some_and(|k| !k.revoked && !k.account_disabled && k.scope() == scope)
        }
    };
    Ok(caller_ok && store.find_device(scope, device_id).await?.is_some())
}

/// Reads the store's access generation every [`POLL`] and sends it when it
/// moves, for as long as anyone listens. A read that fails is logged and
/// tried again at the next tick.
pub fn watch(store: Arc<dyn Store>) -> watch::Receiver<i64> {
    let (tx, rx) = watch::channel(0);
    let Ok(rt) = tokio::runtime::Handle::try_current() else { return rx };
    rt.spawn(async move {
        let mut tick = tokio::time::interval(POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = tx.closed() => return,
            }
            match store.access_generation().await {
                Ok(generation) => {
                    failing = false;
                    tx.send_if_modified(|seen| std::mem::replace(seen, generation) != generation);
                }
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(error = %e, "cannot read the access generation: open streams are not checked again until it answers");
                }
                Err(_) => {}
            }
        }
    });
    rx
}
