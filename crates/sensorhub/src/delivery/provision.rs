//! The webhook subscriptions of a provisioning document (`sensorhub
//! apply`), made ready for the store: every secret and header reference
//! read (an environment variable or a file), each secret checked to be a
//! `whsec_…` one, URLs and headers checked, each error naming its place in
//! the document. It all happens before the store is touched, so a bad
//! reference writes nothing. The store seals with the operator's key
//! through [`Sealer`], inside the document's transaction.

use super::headers::{open_headers, parse_header, seal_headers};
use super::seal::SealingKey;
use super::sign::SigningSecret;
use super::target::check_url;
use sensorhub_core::provision::{HeaderValueSpec, InputError, KeyDevices, Provision, SecretRef, SubscriptionSpec};
use sensorhub_store::delivery::{ProvisionedHooks, ProvisionedSubscription, Sealer};
use std::sync::Arc;

impl Sealer for SealingKey {
    fn seal_secret(&self, id: &str, secret: &[u8]) -> Result<Vec<u8>, String> {
        self.seal(id, secret).map_err(|e| e.to_string())
    }

    fn open_secret(&self, id: &str, sealed: &[u8]) -> Result<Vec<u8>, String> {
        self.open(id, sealed).map_err(|e| e.to_string())
    }

    fn seal_headers(&self, id: &str, headers: &[(String, String)]) -> Result<Vec<u8>, String> {
        seal_headers(self, id, headers).map_err(|e| e.to_string())
    }

    fn open_headers(&self, id: &str, sealed: &[u8]) -> Result<Vec<(String, String)>, String> {
        open_headers(self, id, sealed).map_err(|e| e.to_string())
    }
}

/// The document's subscriptions resolved, to be sealed by the store under
/// the key `key` gives (asked only when the document lists subscriptions);
/// `None` when it lists none.
pub fn resolve(
    doc: &Provision,
    key: impl FnOnce() -> Result<SealingKey, super::seal::SealError>,
) -> Result<Option<ProvisionedHooks>, InputError> {
    let Some((i, _)) = doc.accounts.iter().enumerate().find(|(_, a)| !a.subscriptions.is_empty()) else {
        return Ok(None);
    };
    let key = key().map_err(|e| InputError::new(format!("accounts[{i}].subscriptions"), e.to_string()))?;
    let mut subscriptions = Vec::new();
    for (i, a) in doc.accounts.iter().enumerate() {
        for (k, s) in a.subscriptions.iter().enumerate() {
            subscriptions.push(resolve_one(&a.username, s, &format!("accounts[{i}].subscriptions[{k}]"))?);
        }
    }
    Ok(Some(ProvisionedHooks { subscriptions, sealer: Arc::new(key) }))
}

fn resolve_one(username: &str, s: &SubscriptionSpec, at: &str) -> Result<ProvisionedSubscription, InputError> {
    check_url(&s.url, s.allow_http).map_err(|e| InputError::new(format!("{at}.url"), e.to_string()))?;
    let secret_at = format!("{at}.secret");
    let text = read(&s.secret).map_err(|e| InputError::new(&secret_at, e))?;
    let secret = SigningSecret::parse(&text).map_err(|e| {
        InputError::new(&secret_at, format!("the value of {} is not a webhook secret: {e}", describe(&s.secret)))
    })?;
    let mut headers = Vec::with_capacity(s.headers.len());
    for (name, value) in &s.headers {
        let hat = format!("{at}.headers.{name}");
        let value = match value {
            HeaderValueSpec::Value(v) => v.clone(),
            HeaderValueSpec::Ref(r) => read(r).map_err(|e| InputError::new(&hat, e))?,
        };
        headers.push(parse_header(&format!("{name}: {value}")).map_err(|e| InputError::new(&hat, e))?);
    }
    Ok(ProvisionedSubscription {
        username: username.to_owned(),
        at: at.to_owned(),
        name: s.name.clone(),
        url: s.url.clone(),
        devices: s.devices.as_ref().and_then(KeyDevices::list).map(<[String]>::to_vec),
        events: s.events(),
        enabled: s.enabled,
        headers,
        batch: s.batch,
        batch_max: s.batch_max.unwrap_or(sensorhub_core::provision::DEFAULT_BATCH),
        allow_http: s.allow_http,
        secret: secret.as_bytes().to_vec(),
    })
}

/// What a reference points at, for messages (never the value).
fn describe(r: &SecretRef) -> String {
    match r {
        SecretRef::Env(name) => format!("environment variable {name}"),
        SecretRef::File(path) => format!("file {}", path.display()),
    }
}

/// The value a reference points at, white space trimmed; an unset, empty
/// or unreadable one is an error.
fn read(r: &SecretRef) -> Result<String, String> {
    let value = match r {
        SecretRef::Env(name) => std::env::var(name).map_err(|e| match e {
            std::env::VarError::NotPresent => format!("environment variable {name} is not set"),
            std::env::VarError::NotUnicode(_) => format!("environment variable {name} is not UTF-8"),
        })?,
        SecretRef::File(path) => {
            std::fs::read_to_string(path).map_err(|e| format!("cannot read file {}: {e}", path.display()))?
        }
    };
    let value = value.trim();
    if value.is_empty() {
        return Err(format!("{} is empty", describe(r)));
    }
    Ok(value.to_owned())
}
