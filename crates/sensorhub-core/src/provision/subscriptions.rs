//! Outgoing webhook subscriptions in a provisioning document: their shape
//! and the checks that need neither the database nor the environment. A
//! subscription is known across re-applies by its account and `name`; its
//! secret is a reference (`{"env": "NAME"}` or `{"file": "/path"}`), never
//! the secret itself, and is resolved by `sensorhub apply`.

use super::{InputError, KeyDevices, check_unique_list};
use crate::input::is_valid_identifier;
use serde::Deserialize;
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

/// The event kinds a subscription may ask for: each stored reading
/// (`sensor-data`), and each alarm transition (`alarms`).
pub const EVENTS: &[&str] = &["sensor-data", "alarms"];

/// The event kinds of a subscription that names none: today's subscribers
/// see no new shapes.
pub const DEFAULT_EVENTS: &[&str] = &["sensor-data"];

/// The most readings one batched delivery carries, and the default.
pub const MAX_BATCH: u32 = 1000;
/// Readings per batched delivery when `batch_max` is omitted.
pub const DEFAULT_BATCH: u32 = 100;

/// A webhook subscription of an account.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionSpec {
    /// The operator's name for it, unique per account: what makes
    /// re-applying the same file update it rather than add another.
    pub name: String,
    /// Where deliveries are POSTed.
    pub url: String,
    /// A list: only these of the account's devices; `"all"` or omitted:
    /// every device the account sees.
    #[serde(default)]
    pub devices: Option<KeyDevices>,
    /// Event kinds; omitted: `["sensor-data"]`.
    #[serde(default)]
    pub events: Option<Vec<String>>,
    /// Whether deliveries are made; omitted leaves it as it is (new:
    /// enabled), so that re-applying does not turn on what an operator or a
    /// failing endpoint turned off.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Extra request headers: a value, or a reference like the secret's.
    #[serde(default)]
    pub headers: BTreeMap<String, HeaderValueSpec>,
    /// Whether readings that arrive together go out in one delivery.
    #[serde(default)]
    pub batch: bool,
    /// The most readings in one batched delivery (1 to 1000; default 100).
    #[serde(default)]
    pub batch_max: Option<u32>,
    /// Whether a plain `http://` URL is allowed.
    #[serde(default)]
    pub allow_http: bool,
    /// Where the signing secret (`whsec_…`) is found.
    pub secret: SecretRef,
}

/// Where a secret is read: never the secret itself, so that provisioning
/// files can be kept in version control.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretRef {
    /// The value of this environment variable.
    Env(String),
    /// The contents of this file (surrounding white space trimmed).
    File(PathBuf),
}

/// The value of an extra header: written out, or a reference for values
/// that are credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderValueSpec {
    /// The value as written.
    Value(String),
    /// The value found at a reference.
    Ref(SecretRef),
}

const REF_SHAPE: &str = r#"{"env": "NAME"} or {"file": "/path"}"#;

/// A reference from a JSON value, or why it is not one.
fn secret_ref(v: serde_json::Value) -> Result<SecretRef, String> {
    let serde_json::Value::Object(map) = v else {
        return Err(format!("must be a reference, {REF_SHAPE}"));
    };
    let mut entries = map.into_iter();
    match (entries.next(), entries.next()) {
        (Some((kind, serde_json::Value::String(s))), None) if !s.trim().is_empty() => match kind.as_str() {
            "env" => Ok(SecretRef::Env(s)),
            "file" => Ok(SecretRef::File(PathBuf::from(s))),
            _ => Err(format!("must be a reference, {REF_SHAPE}")),
        },
        _ => Err(format!("must be a reference, {REF_SHAPE}")),
    }
}

impl<'de> Deserialize<'de> for SecretRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(_) => Err(serde::de::Error::custom(format!(
                "a secret is never written in the file: give a reference, {REF_SHAPE}, whose value is the \
                 whsec_… secret"
            ))),
            v => secret_ref(v).map_err(serde::de::Error::custom),
        }
    }
}

impl<'de> Deserialize<'de> for HeaderValueSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(s) => Ok(HeaderValueSpec::Value(s)),
            v => secret_ref(v)
                .map(HeaderValueSpec::Ref)
                .map_err(|_| serde::de::Error::custom(format!("expected a string, or a reference {REF_SHAPE}"))),
        }
    }
}

impl SubscriptionSpec {
    /// The event kinds it asks for.
    pub fn events(&self) -> Vec<String> {
        self.events.clone().unwrap_or_else(|| DEFAULT_EVENTS.iter().map(|e| (*e).to_owned()).collect())
    }

    /// Readings per delivery: 1 unless it batches.
    pub fn batch_size(&self) -> u32 {
        if self.batch { self.batch_max.unwrap_or(DEFAULT_BATCH) } else { 1 }
    }
}

/// Checks the subscriptions of the account at `at`: names, events, device
/// lists and batch sizes. URLs, headers and secrets are checked where they
/// are resolved.
pub(super) fn check(subs: &[SubscriptionSpec], at: &str) -> Result<(), InputError> {
    let mut names = HashSet::new();
    for (k, s) in subs.iter().enumerate() {
        let sat = format!("{at}.subscriptions[{k}]");
        if !is_valid_identifier(&s.name) {
            return Err(InputError::new(format!("{sat}.name"), "must be a non-empty name without spaces or '/'"));
        }
        if !names.insert(s.name.as_str()) {
            return Err(InputError::new(sat, format!("duplicate subscription name {:?}", s.name)));
        }
        let events = s.events();
        if events.is_empty() {
            return Err(InputError::new(format!("{sat}.events"), "must name at least one event kind"));
        }
        if let Some((e, bad)) = events.iter().enumerate().find(|(_, e)| !EVENTS.contains(&e.as_str())) {
            return Err(InputError::new(
                format!("{sat}.events[{e}]"),
                format!("unknown event kind {bad:?} (known: {})", EVENTS.join(", ")),
            ));
        }
        check_unique_list(s.devices.as_ref().and_then(KeyDevices::list), &format!("{sat}.devices"))?;
        match s.batch_max {
            Some(n) if !(1..=MAX_BATCH).contains(&n) => {
                return Err(InputError::new(format!("{sat}.batch_max"), format!("must be 1 to {MAX_BATCH}")));
            }
            Some(_) if !s.batch => {
                return Err(InputError::new(format!("{sat}.batch_max"), "is only meaningful with \"batch\": true"));
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{Provision, parse_json};
    use super::*;

    fn check_doc(subs: &str) -> Result<Provision, InputError> {
        let mut doc: Provision = parse_json(&format!(r#"{{"accounts":[{{"username":"a","subscriptions":{subs}}}]}}"#))?;
        doc.check()?;
        Ok(doc)
    }

    #[test]
    fn a_secret_is_a_reference_never_a_literal() {
        let e = check_doc(r#"[{"name":"p","url":"https://p.example/","secret":{"env":"P"}},
                              {"name":"q","url":"https://q.example/","secret":"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}]"#)
        .expect_err("a literal secret");
        assert!(e.position.starts_with("accounts[0].subscriptions[1].secret"), "{e}");
        assert!(e.message.contains("never written in the file"), "{e}");
        let e = check_doc(r#"[{"name":"p","url":"https://p.example/","secret":{"vault":"x"}}]"#).expect_err("shape");
        assert!(e.position.starts_with("accounts[0].subscriptions[0].secret"), "{e}");
        let doc = check_doc(
            r#"[{"name":"p","url":"https://p.example/","secret":{"file":"/run/s"},
                 "headers":{"X-API-KEY":{"env":"K"},"X-Tenant":"t"}}]"#,
        )
        .expect("valid");
        let s = &doc.accounts[0].subscriptions[0];
        assert_eq!(s.secret, SecretRef::File("/run/s".into()));
        assert_eq!(s.headers["X-API-KEY"], HeaderValueSpec::Ref(SecretRef::Env("K".into())));
        assert_eq!(s.headers["X-Tenant"], HeaderValueSpec::Value("t".into()));
        assert_eq!((s.events(), s.batch_size(), s.enabled), (vec!["sensor-data".to_owned()], 1, None));
    }

    #[test]
    fn names_events_and_batch_sizes_are_checked() {
        let sub = |extra: &str, name: &str| {
            format!(r#"{{"name":"{name}","url":"https://p.example/","secret":{{"env":"P"}}{extra}}}"#)
        };
        let cases = [
            (format!("[{},{}]", sub("", "p"), sub("", "p")), "accounts[0].subscriptions[1]"),
            (format!("[{}]", sub("", "a b")), "accounts[0].subscriptions[0].name"),
            (format!("[{}]", sub(r#","events":["reading"]"#, "p")), "accounts[0].subscriptions[0].events[0]"),
            (format!("[{}]", sub(r#","events":[]"#, "p")), "accounts[0].subscriptions[0].events"),
            (format!("[{}]", sub(r#","batch":true,"batch_max":0"#, "p")), "accounts[0].subscriptions[0].batch_max"),
            (format!("[{}]", sub(r#","batch_max":5"#, "p")), "accounts[0].subscriptions[0].batch_max"),
            (format!("[{}]", sub(r#","devices":["D","D"]"#, "p")), "accounts[0].subscriptions[0].devices[1]"),
        ];
        for (text, position) in cases {
            assert_eq!(check_doc(&text).expect_err(&text).position, position, "{text}");
        }
        let doc = check_doc(&format!("[{}]", sub(r#","batch":true"#, "p"))).expect("valid");
        assert_eq!(doc.accounts[0].subscriptions[0].batch_size(), DEFAULT_BATCH);
    }
}
