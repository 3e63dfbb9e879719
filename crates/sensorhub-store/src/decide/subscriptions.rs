//! What a provisioning document's subscription changes, shared by every
//! backend: a subscription is found by its account and name; the secret
//! and headers are compared opened (sealed bytes differ at each sealing),
//! so re-applying the same file changes nothing and keeps the sealed bytes.

use super::invalid;
use crate::StoreResult;
use crate::delivery::{ProvisionedHooks, ProvisionedSubscription, Sealer, join_events};
use sensorhub_core::provision::AccountSpec;
use sensorhub_core::secret::generate_key;
use std::collections::BTreeSet;

/// The resolved subscriptions of account item `a` (at `at`), each with the
/// sealer; refuses a document that lists subscriptions but came without
/// them resolved (only `sensorhub apply` reads references and holds the key).
pub(crate) fn provisioned_of<'h>(
    hooks: Option<&'h ProvisionedHooks>,
    a: &AccountSpec,
    at: &str,
) -> StoreResult<Vec<(&'h ProvisionedSubscription, &'h dyn Sealer)>> {
    let Some(hooks) = hooks else {
        if a.subscriptions.is_empty() {
            return Ok(Vec::new());
        }
        return Err(invalid(
            format!("{at}.subscriptions"),
            "webhook subscriptions are applied by `sensorhub apply`, which reads their secrets and seals them",
        ));
    };
    let subs = hooks.subscriptions.iter().filter(|p| p.username == a.username);
    Ok(subs.map(|p| (p, &*hooks.sealer)).collect())
}

/// A subscription's row as stored or to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SubscriptionRow {
    pub id: String,
    pub url: String,
    /// `None`: all of the account's devices.
    pub devices: Option<BTreeSet<i64>>,
    pub events: String,
    pub enabled: bool,
    pub batch: bool,
    pub batch_max: i64,
    pub allow_http: bool,
    pub secret: Vec<u8>,
    pub headers: Option<Vec<u8>>,
}

/// What to write for one provisioned subscription.
pub(crate) enum SubscriptionWrite {
    Insert(SubscriptionRow),
    Update(SubscriptionRow),
    Unchanged,
}

/// The write that makes `p` true over `stored` (the account's subscription
/// of that name), with `devices` its device list resolved and checked.
pub(crate) fn subscription_write(
    p: &ProvisionedSubscription,
    devices: Option<BTreeSet<i64>>,
    stored: Option<SubscriptionRow>,
    sealer: &dyn Sealer,
) -> StoreResult<SubscriptionWrite> {
    let seal_err = |e: String| invalid(format!("{}.secret", p.at), e);
    let Some(stored) = stored else {
        let id = generate_key("sub_").map_err(|e| seal_err(e.to_string()))?;
        let secret = sealer.seal_secret(&id, &p.secret).map_err(seal_err)?;
        let headers = seal_headers(sealer, &id, &p.headers).map_err(seal_err)?;
        return Ok(SubscriptionWrite::Insert(SubscriptionRow {
            id,
            url: p.url.clone(),
            devices,
            events: join_events(&p.events),
            enabled: p.enabled.unwrap_or(true),
            batch: p.batch,
            batch_max: i64::from(p.batch_max),
            allow_http: p.allow_http,
            secret,
            headers,
        }));
    };
    let id = stored.id.clone();
    // A secret that does not open (another key) is replaced like a changed one.
    let secret = match sealer.open_secret(&id, &stored.secret) {
        Ok(open) if open == p.secret => stored.secret.clone(),
        _ => sealer.seal_secret(&id, &p.secret).map_err(seal_err)?,
    };
    let stored_headers = match &stored.headers {
        None => Ok(Vec::new()),
        Some(sealed) => sealer.open_headers(&id, sealed),
    };
    let headers = match stored_headers {
        Ok(open) if open == p.headers => stored.headers.clone(),
        _ => seal_headers(sealer, &id, &p.headers).map_err(seal_err)?,
    };
    let wanted = SubscriptionRow {
        id,
        url: p.url.clone(),
        devices,
        events: join_events(&p.events),
        enabled: p.enabled.unwrap_or(stored.enabled),
        batch: p.batch,
        batch_max: i64::from(p.batch_max),
        allow_http: p.allow_http,
        secret,
        headers,
    };
    Ok(if wanted == stored { SubscriptionWrite::Unchanged } else { SubscriptionWrite::Update(wanted) })
}

/// `headers` sealed, or `None` for none.
fn seal_headers(sealer: &dyn Sealer, id: &str, headers: &[(String, String)]) -> Result<Option<Vec<u8>>, String> {
    if headers.is_empty() { Ok(None) } else { sealer.seal_headers(id, headers).map(Some) }
}

/// Checks that the account sees every listed device (`pks`, in the
/// document's order) and returns them as a set.
pub(crate) fn subscription_devices(
    pks: Option<&[i64]>,
    visible: &BTreeSet<i64>,
    at: &str,
) -> StoreResult<Option<BTreeSet<i64>>> {
    pks.map(|pks| super::key_scope(pks, visible, at)).transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sealer that "seals" by prefixing a counter, so that each sealing differs.
    struct Counting(std::sync::atomic::AtomicU8);

    impl Sealer for Counting {
        fn seal_secret(&self, _: &str, secret: &[u8]) -> Result<Vec<u8>, String> {
            let n = self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok([&[n], secret].concat())
        }
        fn open_secret(&self, _: &str, sealed: &[u8]) -> Result<Vec<u8>, String> {
            sealed.get(1..).map(<[u8]>::to_vec).ok_or_else(|| "short".to_owned())
        }
        fn seal_headers(&self, id: &str, headers: &[(String, String)]) -> Result<Vec<u8>, String> {
            self.seal_secret(id, serde_json::to_string(headers).map_err(|e| e.to_string())?.as_bytes())
        }
        fn open_headers(&self, id: &str, sealed: &[u8]) -> Result<Vec<(String, String)>, String> {
            serde_json::from_slice(&self.open_secret(id, sealed)?).map_err(|e| e.to_string())
        }
    }

    fn spec() -> ProvisionedSubscription {
        ProvisionedSubscription {
            username: "alice".into(),
            at: "accounts[0].subscriptions[0]".into(),
            name: "p".into(),
            url: "https://p.example/".into(),
            devices: None,
            events: vec!["sensor-data".into()],
            enabled: None,
            headers: vec![("X-Key".into(), "k".into())],
            batch: false,
            batch_max: 100,
            allow_http: false,
            secret: vec![7; 32],
        }
    }

    #[test]
    fn the_same_subscription_again_changes_nothing_and_keeps_its_sealed_secret() {
        let sealer = Counting(Default::default());
        let SubscriptionWrite::Insert(row) = subscription_write(&spec(), None, None, &sealer).expect("write") else {
            panic!("a new subscription is inserted");
        };
        assert!(row.enabled && row.id.starts_with("sub_"));
        let again = subscription_write(&spec(), None, Some(row.clone()), &sealer).expect("write");
        assert!(matches!(again, SubscriptionWrite::Unchanged));

        let disabled = SubscriptionRow { enabled: false, ..row.clone() };
        let kept = subscription_write(&spec(), None, Some(disabled.clone()), &sealer).expect("write");
        assert!(matches!(kept, SubscriptionWrite::Unchanged), "an omitted `enabled` leaves it off");
        let on = ProvisionedSubscription { enabled: Some(true), ..spec() };
        assert!(matches!(subscription_write(&on, None, Some(disabled), &sealer), Ok(SubscriptionWrite::Update(_))));

        let rotated = ProvisionedSubscription { secret: vec![8; 32], ..spec() };
        let Ok(SubscriptionWrite::Update(new)) = subscription_write(&rotated, None, Some(row.clone()), &sealer) else {
            panic!("a changed secret is an update");
        };
        assert_eq!((new.id.as_str(), sealer.open_secret("", &new.secret)), (row.id.as_str(), Ok(vec![8; 32])));
        assert_eq!(new.headers, row.headers, "unchanged headers keep their sealed bytes");
    }
}
