//! Standard Webhooks signatures: `webhook-signature: v1,<base64 of
//! HMAC-SHA256(secret, "id.timestamp.body")>`, with secrets written
//! `whsec_<base64>`. HMAC comes from `ring`, which rustls already links:
//! no new crate, and its tag comparison is constant time.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use sensorhub_core::secret::{RandomError, fill_random, generate_key};

/// The prefix of a written secret.
pub const SECRET_PREFIX: &str = "whsec_";

/// Bytes of a newly generated secret (the scheme asks for 24 to 64).
const SECRET_BYTES: usize = 32;

/// A subscription's signing secret. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningSecret(Vec<u8>);

impl std::fmt::Debug for SigningSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningSecret(***)")
    }
}

/// A secret that is not `whsec_` followed by base64 of 24 to 64 bytes.
#[derive(Debug, thiserror::Error)]
#[error("a webhook secret must be whsec_ followed by the base64 of 24 to 64 bytes")]
pub struct BadSecret;

impl SigningSecret {
    /// A new random secret, from the system's generator.
    pub fn generate() -> Result<Self, RandomError> {
        let mut bytes = vec![0u8; SECRET_BYTES];
        fill_random(&mut bytes)?;
        Ok(Self(bytes))
    }

    /// The secret of its raw bytes (as unsealed from the store).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, BadSecret> {
        if (24..=64).contains(&bytes.len()) { Ok(Self(bytes)) } else { Err(BadSecret) }
    }

    /// Parses the written form `whsec_<base64>`.
    pub fn parse(text: &str) -> Result<Self, BadSecret> {
        let b64 = text.trim().strip_prefix(SECRET_PREFIX).ok_or(BadSecret)?;
        Self::from_bytes(STANDARD.decode(b64).map_err(|_| BadSecret)?)
    }

    /// The written form, `whsec_<base64>`, to show a partner once.
    pub fn reveal(&self) -> String {
        format!("{SECRET_PREFIX}{}", STANDARD.encode(&self.0))
    }

    /// The raw bytes (to seal for storage).
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The `webhook-signature` header value of message `id` sent at
    /// `timestamp` (seconds since the epoch) with `body`.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &self.0);
        let mut ctx = ring::hmac::Context::with_key(&key);
        ctx.update(id.as_bytes());
        ctx.update(b".");
        ctx.update(timestamp.to_string().as_bytes());
        ctx.update(b".");
        ctx.update(body);
        format!("v1,{}", STANDARD.encode(ctx.sign().as_ref()))
    }

    /// The three Standard Webhooks headers of message `id` sent at
    /// `timestamp` with `body`: `webhook-id`, `webhook-timestamp`,
    /// `webhook-signature`.
    pub fn headers(&self, id: &str, timestamp: i64, body: &[u8]) -> [(&'static str, String); 3] {
        [
            ("webhook-id", id.to_owned()),
            ("webhook-timestamp", timestamp.to_string()),
            ("webhook-signature", self.sign(id, timestamp, body)),
        ]
    }
}

/// A message id for `webhook-id`: `msg_` and 160 random bits in hex,
/// the same for every attempt of one delivery.
pub fn message_id() -> Result<String, RandomError> {
    generate_key("msg_")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification (its test vector).
    #[test]
    fn signs_the_specifications_example() -> Result<(), BadSecret> {
        let secret = SigningSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")?;
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            secret.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        Ok(())
    }

    /// The Standard Webhooks reference library accepts what we send, and
    /// refuses it once the body changes.
    #[test]
    fn the_reference_library_verifies_our_headers() -> Result<(), Box<dyn std::error::Error>> {
        let secret = SigningSecret::generate()?;
        let body = br#"{"event":"sensor-data","device_id":"AWLR-1"}"#;
        let now = jiff::Timestamp::now().as_second();
        let mut headers = axum::http::HeaderMap::new();
        for (name, value) in secret.headers(&message_id()?, now, body) {
            headers.insert(name, value.parse()?);
        }
        let reference = standardwebhooks::Webhook::new(&secret.reveal())?;
        reference.verify(body, &headers)?;
        assert!(reference.verify(br#"{"event":"sensor-data","device_id":"AWLR-2"}"#, &headers).is_err());
        Ok(())
    }

    #[test]
    fn secrets_round_trip_and_stay_out_of_debug() -> Result<(), Box<dyn std::error::Error>> {
        let secret = SigningSecret::generate()?;
        let written = secret.reveal();
        assert!(written.starts_with("whsec_"));
        assert_eq!(SigningSecret::parse(&written)?, secret);
        assert!(!format!("{secret:?}").contains(&written[6..]));
        for bad in ["", "whsec_", "whsec_!!", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_c2hvcnQ="] {
            assert!(SigningSecret::parse(bad).is_err(), "{bad}");
        }
        Ok(())
    }

    #[test]
    fn message_ids_differ() -> Result<(), RandomError> {
        let (a, b) = (message_id()?, message_id()?);
        assert_ne!(a, b);
        assert!(a.starts_with("msg_"));
        Ok(())
    }
}
