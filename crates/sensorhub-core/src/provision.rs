//! The declarative provisioning document (`sensorhub apply FILE`): parsing
//! with the position of every error, and the checks that need no database.
//! References to devices and sensors already stored are checked by the store
//! inside the same transaction that writes the document.

pub use crate::input::InputError;
use crate::input::is_valid_identifier;
use crate::model::{DeviceSpec, MAX_SENSORS_PER_DEVICE, Origin, ReadingInput, ValueInput};
use crate::secret::{RECOMMENDED_KEY_LENGTH, check_password_hash};
use crate::time::parse_reading_timestamp;
use serde::Deserialize;
use std::collections::{HashMap, HashSet};

mod subscriptions;
pub use subscriptions::{
    DEFAULT_BATCH, DEFAULT_EVENTS, EVENTS, HeaderValueSpec, MAX_BATCH, SecretRef, SubscriptionSpec,
};

/// The whole provisioning document; every key is optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provision {
    /// Accounts to create or update.
    #[serde(default)]
    pub accounts: Vec<AccountSpec>,
    /// Devices (with sensors) to create or update.
    #[serde(default)]
    pub devices: Vec<DeviceSpec>,
    /// Readings to store; a value at an existing device, second and sensor is replaced.
    #[serde(default)]
    pub readings: Vec<ReadingSpec>,
}

/// An account to create or update.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountSpec {
    /// Login name for HTTP Basic.
    pub username: String,
    /// Plain password; hashed with Argon2id, rehashed only when it changed.
    #[serde(default)]
    pub password: Option<String>,
    /// An Argon2 PHC string, for files that must not hold plain passwords.
    #[serde(default)]
    pub password_hash: Option<String>,
    /// Whether the account is disabled; omitted leaves it as it is (new: enabled).
    #[serde(default)]
    pub disabled: Option<bool>,
    /// The devices the account may see; when given, exactly these (and
    /// the devices it owns).
    #[serde(default)]
    pub devices: Option<Vec<String>>,
    /// Devices, besides those it owns, whose readings the account may write
    /// (webhook ingest); each must be one it sees. When given, exactly these
    /// grants; omitted leaves them as they are (new: none).
    #[serde(default)]
    pub write: Option<Vec<String>>,
    /// API keys (public access); keys not listed are left alone.
    #[serde(default)]
    pub api_keys: Vec<ApiKeySpec>,
    /// Webhook keys (`X-API-KEY`); keys not listed are left alone.
    #[serde(default)]
    pub webhook_keys: Vec<WebhookKeySpec>,
    /// How long the readings of the devices the account owns are kept
    /// (`90d`, `forever`, or `inherit`: the server's `--retention`), unless
    /// a device says otherwise. Omitted leaves it as it is.
    #[serde(default)]
    pub retention: Option<crate::retention::Retention>,
    /// Outgoing webhook subscriptions, known by their `name`; subscriptions
    /// of the account not listed are left alone.
    #[serde(default)]
    pub subscriptions: Vec<SubscriptionSpec>,
}

/// An API key of an account.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKeySpec {
    /// The key id as it appears in public paths; stored only as a digest.
    pub id: String,
    /// A list: the key sees only these of the account's devices; `"all"`:
    /// every device of its account. Omitted leaves a stored key's scope as
    /// it is (a new key: all), as `revoked` does: re-applying a file that
    /// does not mention the scope never widens a scoped key.
    #[serde(default)]
    pub devices: Option<KeyDevices>,
    /// A revoked key is refused with 403; omitted leaves it as it is (new: active).
    #[serde(default)]
    pub revoked: Option<bool>,
}

/// The devices an API key may see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyDevices {
    /// Every device of the key's account (`"all"`).
    All,
    /// Only these of the account's devices (a list of device ids).
    Only(Vec<String>),
}

impl<'de> Deserialize<'de> for KeyDevices {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            List(Vec<String>),
            Word(String),
        }
        match Raw::deserialize(d) {
            Ok(Raw::List(list)) => Ok(KeyDevices::Only(list)),
            Ok(Raw::Word(w)) if w == "all" => Ok(KeyDevices::All),
            _ => Err(serde::de::Error::custom("expected a list of device ids, or \"all\"")),
        }
    }
}

impl KeyDevices {
    /// The listed devices, if the key is scoped.
    pub fn list(&self) -> Option<&[String]> {
        match self {
            KeyDevices::All => None,
            KeyDevices::Only(list) => Some(list),
        }
    }
}

/// A webhook key of an account.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookKeySpec {
    /// The key as sent in `X-API-KEY`; stored only as a digest.
    pub key: String,
    /// A revoked key is refused; omitted leaves it as it is (new: active).
    #[serde(default)]
    pub revoked: Option<bool>,
}

/// A reading in a provisioning file or an NDJSON import line.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadingSpec {
    /// Device identifier.
    pub device_id: String,
    /// RFC 3339 date-time with `Z` or an offset, whole seconds.
    pub timestamp: String,
    /// Values measured at that instant.
    pub sensors: Vec<SensorValueSpec>,
}

/// One value of a [`ReadingSpec`].
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SensorValueSpec {
    /// Sensor identifier.
    pub id: String,
    /// The value.
    pub value: f64,
    /// Optional unit; must equal the sensor's.
    #[serde(default)]
    pub unit: Option<String>,
}

/// Parses JSON text into `T`, naming the path and line of the first error.
pub fn parse_json<T: for<'de> Deserialize<'de>>(text: &str) -> Result<T, InputError> {
    parse_json_at(text, 1)
}

/// Like [`parse_json`] for text that starts on line `first_line` of a file
/// (an NDJSON line), so that errors name the file's line.
pub fn parse_json_at<T: for<'de> Deserialize<'de>>(text: &str, first_line: usize) -> Result<T, InputError> {
    let at = |e: &serde_json::Error| format!("line {} column {}", e.line() + first_line - 1, e.column());
    let mut de = serde_json::Deserializer::from_str(text);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let position =
            if matches!(path.as_str(), "." | "?" | "") { at(&inner) } else { format!("{path} ({})", at(&inner)) };
        InputError::new(position, strip_location(&inner.to_string()))
    })?;
    de.end().map_err(|e| InputError::new(at(&e), strip_location(&e.to_string())))?;
    Ok(value)
}

/// serde_json appends " at line L column C"; the position already says so.
fn strip_location(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_owned(),
        None => msg.to_owned(),
    }
}

impl ReadingSpec {
    /// Checks the reading and converts it for the store; `position` names it
    /// in errors.
    pub fn into_input(self, position: &str) -> Result<ReadingInput, InputError> {
        if !is_valid_identifier(&self.device_id) {
            return Err(InputError::new(format!("{position}.device_id"), "must be a non-empty identifier"));
        }
        let ts = parse_reading_timestamp(&self.timestamp)
            .map_err(|e| InputError::new(format!("{position}.timestamp"), e.to_string()))?;
        if self.sensors.is_empty() {
            return Err(InputError::new(format!("{position}.sensors"), "a reading needs at least one value"));
        }
        let mut seen = HashSet::new();
        let mut values = Vec::with_capacity(self.sensors.len());
        for (i, v) in self.sensors.into_iter().enumerate() {
            let at = format!("{position}.sensors[{i}]");
            if !seen.insert(v.id.clone()) {
                return Err(InputError::new(at, format!("duplicate sensor id {:?} in one reading", v.id)));
            }
            if !v.value.is_finite() {
                return Err(InputError::new(at, "value must be a finite number"));
            }
            values.push(ValueInput { sensor_id: v.id.into(), value: v.value, unit: v.unit });
        }
        Ok(ReadingInput {
            device_id: self.device_id,
            timestamp: ts.as_second(),
            values,
            origin: Origin::Item(position.to_owned()),
        })
    }
}

/// Checks a device definition on its own.
pub fn check_device(d: &DeviceSpec, at: &str) -> Result<(), InputError> {
    let err = |field: &str, msg: &str| Err(InputError::new(format!("{at}.{field}"), msg));
    if !is_valid_identifier(&d.device_id) {
        return err("device_id", "must be a non-empty identifier without spaces or '/'");
    }
    if d.name.trim().is_empty() {
        return err("name", "must not be empty");
    }
    if d.kind.trim().is_empty() {
        return err("type", "must not be empty");
    }
    if let Some((field, _)) = [("name", &d.name), ("type", &d.kind)].iter().find(|(_, v)| v.contains('\0')) {
        return err(field, "must not hold a NUL character"); // which PostgreSQL's text cannot hold
    }
    if !(d.lat.is_finite() && (-90.0..=90.0).contains(&d.lat)) {
        return err("lat", "must be between -90 and 90");
    }
    if !(d.long.is_finite() && (-180.0..=180.0).contains(&d.long)) {
        return err("long", "must be between -180 and 180");
    }
    if d.interval_seconds < 1 {
        return err("interval_seconds", "must be at least 1");
    }
    if d.owner.as_deref().is_some_and(|o| !is_valid_identifier(o)) {
        return err("owner", "must be the username of an account");
    }
    if d.sensors.len() > MAX_SENSORS_PER_DEVICE {
        return err("sensors", "a device has at most 64 sensors");
    }
    let mut ids = HashSet::new();
    for (j, s) in d.sensors.iter().enumerate() {
        let sat = format!("{at}.sensors[{j}]");
        if !is_valid_identifier(&s.sensor_id) {
            return Err(InputError::new(format!("{sat}.sensor_id"), "must be a non-empty identifier"));
        }
        if !ids.insert(s.sensor_id.as_str()) {
            return Err(InputError::new(sat, format!("duplicate sensor_id {:?}", s.sensor_id)));
        }
        if s.name.trim().is_empty() || s.kind.trim().is_empty() || s.unit.is_empty() {
            return Err(InputError::new(sat, "name, type and unit must not be empty (use \".\" for no unit)"));
        }
        if [&s.name, &s.kind, &s.unit].iter().any(|f| f.contains('\0')) {
            return Err(InputError::new(sat, "name, type and unit must not hold a NUL character"));
        }
    }
    crate::alarm::check_rules(d.alarms.as_deref().unwrap_or_default(), at)?;
    Ok(())
}

impl Provision {
    /// Checks everything that needs no database: identifiers, duplicates,
    /// ranges, timestamps and passwords. Returns the readings converted for
    /// the store.
    pub fn check(&mut self) -> Result<Vec<ReadingInput>, InputError> {
        let mut usernames = HashSet::new();
        let mut key_ids = HashSet::new();
        let mut webhook_keys = HashSet::new();
        for (i, a) in self.accounts.iter().enumerate() {
            let at = format!("accounts[{i}]");
            if !is_valid_identifier(&a.username) || a.username.contains(':') {
                return Err(InputError::new(
                    format!("{at}.username"),
                    "must be a non-empty name without spaces, ':' or '/'",
                ));
            }
            if !usernames.insert(a.username.as_str()) {
                return Err(InputError::new(at, format!("duplicate username {:?}", a.username)));
            }
            match (&a.password, &a.password_hash) {
                (Some(_), Some(_)) => return Err(InputError::new(at, "give password or password_hash, not both")),
                (Some(p), None) if p.is_empty() => {
                    return Err(InputError::new(format!("{at}.password"), "must not be empty"));
                }
                (None, Some(h)) => {
                    check_password_hash(h).map_err(|e| InputError::new(format!("{at}.password_hash"), e))?;
                }
                _ => {}
            }
            check_unique_list(a.devices.as_deref(), &format!("{at}.devices"))?;
            check_unique_list(a.write.as_deref(), &format!("{at}.write"))?;
            for (k, key) in a.api_keys.iter().enumerate() {
                let kat = format!("{at}.api_keys[{k}]");
                if !is_valid_identifier(&key.id) {
                    return Err(InputError::new(
                        format!("{kat}.id"),
                        "must be a non-empty identifier without spaces or '/'",
                    ));
                }
                if !key_ids.insert(key.id.as_str()) {
                    return Err(InputError::new(kat, "duplicate api key id"));
                }
                check_unique_list(key.devices.as_ref().and_then(KeyDevices::list), &format!("{kat}.devices"))?;
            }
            for (k, key) in a.webhook_keys.iter().enumerate() {
                let kat = format!("{at}.webhook_keys[{k}]");
                if !is_valid_identifier(&key.key) {
                    return Err(InputError::new(format!("{kat}.key"), "must be a non-empty key without spaces"));
                }
                if !webhook_keys.insert(key.key.as_str()) {
                    return Err(InputError::new(kat, "duplicate webhook key"));
                }
            }
            subscriptions::check(&a.subscriptions, &at)?;
        }
        let mut device_ids = HashSet::new();
        for (i, d) in self.devices.iter().enumerate() {
            let at = format!("devices[{i}]");
            check_device(d, &at)?;
            if !device_ids.insert(d.device_id.as_str()) {
                return Err(InputError::new(at, format!("duplicate device_id {:?}", d.device_id)));
            }
        }
        let readings: Vec<ReadingInput> = std::mem::take(&mut self.readings)
            .into_iter()
            .enumerate()
            .map(|(i, r)| r.into_input(&format!("readings[{i}]")))
            .collect::<Result<_, _>>()?;
        // A document states facts: two values for one sensor and second contradict.
        let mut seen: HashMap<(&str, i64, &str), usize> = HashMap::new();
        for (i, r) in readings.iter().enumerate() {
            for (j, v) in r.values.iter().enumerate() {
                if let Some(k) = seen.insert((&r.device_id, r.timestamp, &v.sensor_id), i) {
                    return Err(InputError::new(
                        format!("readings[{i}].sensors[{j}]"),
                        format!(
                            "sensor {:?} of device {:?} at this time is already given in readings[{k}]",
                            v.sensor_id, r.device_id
                        ),
                    ));
                }
            }
        }
        Ok(readings)
    }

    /// Advice that does not stop the document: keys short enough to guess.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (i, a) in self.accounts.iter().enumerate() {
            let keys =
                a.api_keys.iter().enumerate().map(|(k, key)| (format!("accounts[{i}].api_keys[{k}].id"), &key.id));
            let hooks = a
                .webhook_keys
                .iter()
                .enumerate()
                .map(|(k, key)| (format!("accounts[{i}].webhook_keys[{k}].key"), &key.key));
            for (at, key) in keys.chain(hooks) {
                if key.chars().count() < RECOMMENDED_KEY_LENGTH {
                    out.push(format!(
                        "{at} is shorter than {RECOMMENDED_KEY_LENGTH} characters and could be guessed; \
                         `sensorhub key add` makes random 160-bit ids"
                    ));
                }
            }
        }
        out
    }
}

fn check_unique_list(list: Option<&[String]>, at: &str) -> Result<(), InputError> {
    let mut seen = HashSet::new();
    for (i, d) in list.unwrap_or_default().iter().enumerate() {
        if !seen.insert(d.as_str()) {
            return Err(InputError::new(format!("{at}[{i}]"), format!("duplicate device {d:?}")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> Result<Vec<ReadingInput>, InputError> {
        parse_json::<Provision>(text)?.check()
    }

    #[test]
    fn empty_document_is_valid() {
        assert_eq!(check("{}"), Ok(vec![]));
    }

    #[test]
    fn malformed_json_names_line_and_column() {
        let e = check("{\n  \"accounts\": [\n  {\"username\": 5}]}").expect_err("bad");
        assert!(e.position.starts_with("accounts[0].username (line 3"), "{e}");
        let e = check("{\"devices\": [}").expect_err("bad");
        assert!(e.position.contains("line 1 column 14"), "{e}");
        let e = check("{} x").expect_err("trailing");
        assert!(e.position.starts_with("line 1 column"), "{e}");
        let e = check("{\"device\": []}").expect_err("bad");
        assert!(e.message.contains("unknown field"), "{e}");
    }

    #[test]
    fn duplicates_are_named() {
        let e = check(r#"{"accounts":[{"username":"a","password":"p","api_keys":[{"id":"k"},{"id":"k"}]}]}"#)
            .expect_err("dup");
        assert_eq!(e.position, "accounts[0].api_keys[1]");
        let e = check(
            r#"{"devices":[
            {"device_id":"D","name":"n","type":"AWS","lat":0,"long":0,"interval_seconds":60},
            {"device_id":"D","name":"n","type":"AWS","lat":0,"long":0,"interval_seconds":60}]}"#,
        )
        .expect_err("dup");
        assert_eq!(e.position, "devices[1]");
    }

    #[test]
    fn nul_in_a_name_or_unit_is_refused_on_every_backend() {
        const DEVICE: &str = r#"{"devices":[{"device_id":"D","name":"NAME","type":"AWS","lat":0,"long":0,
            "interval_seconds":60,"sensors":[{"sensor_id":"s","name":"n","type":"T","unit":"UNIT"}]}]}"#;
        let device = |name: &str, unit: &str| DEVICE.replace("NAME", name).replace("UNIT", unit);
        assert_eq!(check(&device("a\\u0000b", "%")).expect_err("NUL").position, "devices[0].name");
        assert_eq!(check(&device("a", "\\u0000")).expect_err("NUL").position, "devices[0].sensors[0]");
        assert_eq!(check(&device("a\\tb", "%")), Ok(vec![]), "other characters as before");
    }

    #[test]
    fn readings_need_rfc3339_and_finite_values() {
        let e = check(
            r#"{"readings":[{"device_id":"D","timestamp":"2026-05-05 07:00","sensors":[{"id":"s","value":1}]}]}"#,
        )
        .expect_err("bad ts");
        assert_eq!(e.position, "readings[0].timestamp");
        let ok = check(r#"{"readings":[{"device_id":"D","timestamp":"2026-05-05T07:00:00+07:00","sensors":[{"id":"s","value":1.5,"unit":"%"}]}]}"#)
            .expect("valid");
        assert_eq!(ok[0].timestamp, 1_777_939_200);
        assert_eq!(ok[0].values[0].unit.as_deref(), Some("%"));
    }

    #[test]
    fn a_value_given_twice_is_a_contradiction() {
        let e = check(r#"{"readings":[
            {"device_id":"D","timestamp":"2026-05-05T07:00:00+07:00","sensors":[{"id":"s","value":1}]},
            {"device_id":"D","timestamp":"2026-05-05T00:00:00Z","sensors":[{"id":"t","value":1},{"id":"s","value":2}]}]}"#)
        .expect_err("duplicate");
        assert_eq!(e.position, "readings[1].sensors[1]");
        assert!(e.message.contains("readings[0]"), "{e}");
    }

    #[test]
    fn short_keys_are_warned_about() {
        let doc: Provision = parse_json(
            r#"{"accounts":[{"username":"a","api_keys":[{"id":"pk-short"},{"id":"pk_0123456789abcdef0123456789"}]}]}"#,
        )
        .expect("valid");
        let w = doc.warnings();
        assert_eq!(w.len(), 1);
        assert!(w[0].starts_with("accounts[0].api_keys[0].id"), "{w:?}");
    }

    #[test]
    fn a_key_scope_is_a_list_or_all() {
        let doc: Provision = parse_json(
            r#"{"accounts":[{"username":"a","api_keys":[{"id":"k1","devices":["D"]},{"id":"k2","devices":"all"},{"id":"k3"}]}]}"#,
        )
        .expect("valid");
        let scopes: Vec<_> = doc.accounts[0].api_keys.iter().map(|k| k.devices.clone()).collect();
        assert_eq!(scopes, [Some(KeyDevices::Only(vec!["D".into()])), Some(KeyDevices::All), None]);
        let e = check(r#"{"accounts":[{"username":"a","api_keys":[{"id":"k","devices":"some"}]}]}"#)
            .expect_err("not a scope");
        assert!(e.position.starts_with("accounts[0].api_keys[0].devices"), "{e}");
        assert!(e.message.contains("\"all\""), "{e}");
    }

    #[test]
    fn device_ranges_are_checked() {
        let e =
            check(r#"{"devices":[{"device_id":"D","name":"n","type":"AWS","lat":91,"long":0,"interval_seconds":60}]}"#)
                .expect_err("lat");
        assert_eq!(e.position, "devices[0].lat");
    }
}
