//! A subscription's extra request headers (e.g. the `X-API-KEY` a
//! receiver asks for): given as `Name: value`, checked, and sealed like
//! the secret, since they often hold credentials.

use super::seal::{SealError, SealingKey};

/// Headers sensorhub sets itself, which a subscription may not replace.
const RESERVED: &[&str] =
    &["host", "content-type", "content-length", "transfer-encoding", "connection", "user-agent", "te", "upgrade"];

/// Parses `Name: value`; refuses an invalid name or value and the headers
/// sensorhub sets (the `webhook-*` ones among them).
pub fn parse_header(text: &str) -> Result<(String, String), String> {
    let (name, value) = text.split_once(':').ok_or_else(|| format!("header {text:?} must be `Name: value`"))?;
    let (name, value) = (name.trim(), value.trim());
    let lower = name.to_ascii_lowercase();
    if RESERVED.contains(&lower.as_str()) || lower.starts_with("webhook-") {
        return Err(format!("header {name:?} is set by sensorhub and cannot be replaced"));
    }
    axum::http::HeaderName::from_bytes(name.as_bytes()).map_err(|_| format!("{name:?} is not a header name"))?;
    axum::http::HeaderValue::from_str(value).map_err(|_| format!("the value of header {name:?} is not valid"))?;
    Ok((name.to_owned(), value.to_owned()))
}

/// The associated data of subscription `id`'s sealed headers (distinct
/// from its secret's, so neither opens as the other).
fn aad(id: &str) -> String {
    format!("{id}#headers")
}

/// `headers` sealed for subscription `id`.
pub fn seal_headers(key: &SealingKey, id: &str, headers: &[(String, String)]) -> Result<Vec<u8>, SealError> {
    let json = serde_json::to_vec(headers).map_err(|e| SealError::Random(e.to_string()))?;
    key.seal(&aad(id), &json)
}

/// The headers [`seal_headers`] sealed for subscription `id`.
pub fn open_headers(key: &SealingKey, id: &str, sealed: &[u8]) -> Result<Vec<(String, String)>, SealError> {
    let json = key.open(&aad(id), sealed)?;
    serde_json::from_slice(&json).map_err(|_| SealError::Unopenable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_checked_and_round_trip_sealed() -> Result<(), SealError> {
        assert_eq!(parse_header("X-API-KEY: wh-1"), Ok(("X-API-KEY".into(), "wh-1".into())));
        for bad in ["X-API-KEY", "Host: x", "webhook-id: x", "Content-Type: text/plain", "bad name: x", "X: a\nb"] {
            assert!(parse_header(bad).is_err(), "{bad}");
        }
        let key = SealingKey::from_base64("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=")?;
        let headers = vec![("X-API-KEY".to_owned(), "wh-1".to_owned())];
        let sealed = seal_headers(&key, "sub_1", &headers)?;
        assert_eq!(open_headers(&key, "sub_1", &sealed)?, headers);
        assert!(key.open("sub_1", &sealed).is_err(), "headers do not open as a secret");
        Ok(())
    }
}
