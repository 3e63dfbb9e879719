//! Signing secrets at rest: sealed with ChaCha20-Poly1305 under a key from
//! the environment (`SENSORHUB_SECRET_KEY`, 32 bytes in base64) or, on
//! SQLite, from a file beside the database ([`super::key_file`]), so that a
//! database dump alone cannot sign. Each sealed secret is bound to its
//! subscription's id (the AEAD's associated data): a secret copied to
//! another row does not open. AEAD comes from `ring`, already linked by
//! rustls.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};

/// The environment variable holding the sealing key.
pub const KEY_VAR: &str = crate::config::env::SECRET_KEY_VAR;

/// Why secrets cannot be sealed or opened.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    /// No key in the environment, and none beside the SQLite database yet.
    #[error(
        "{KEY_VAR} is not set and there is no key file beside the database yet (a command that adds a \
         subscription makes one)"
    )]
    NoKey,
    /// No key in the environment, on PostgreSQL (several instances share no file).
    #[error(
        "{KEY_VAR} is not set: on PostgreSQL webhook subscription secrets are sealed under a key every command \
         and instance must share; make one with `head -c 32 /dev/urandom | base64` (or `openssl rand -base64 32`) \
         and set it for each"
    )]
    NoKeyPostgres,
    /// The key file beside the database cannot be read or made.
    #[error("the secret key file {0}: {1}")]
    KeyFile(std::path::PathBuf, String),
    /// The key file does not hold 32 bytes of base64.
    #[error("the secret key file {0} does not hold 32 bytes in base64")]
    BadKeyFile(std::path::PathBuf),
    /// The key is not 32 bytes of base64.
    #[error("{KEY_VAR} must be 32 bytes in base64 (e.g. `openssl rand -base64 32`)")]
    BadKey,
    /// The sealed secret does not open under this key (another key, or
    /// tampered with).
    #[error("a subscription's secret does not open with this {KEY_VAR} (another key, or altered)")]
    Unopenable,
    /// The system's random generator failed.
    #[error("no random numbers: {0}")]
    Random(String),
}

/// The key that seals and opens subscription secrets. `Debug` never shows it.
pub struct SealingKey(LessSafeKey);

impl std::fmt::Debug for SealingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealingKey(***)")
    }
}

impl SealingKey {
    /// The key written as base64 of 32 bytes.
    pub fn from_base64(text: &str) -> Result<Self, SealError> {
        let bytes = STANDARD.decode(text.trim()).map_err(|_| SealError::BadKey)?;
        let key = UnboundKey::new(&CHACHA20_POLY1305, &bytes).map_err(|_| SealError::BadKey)?;
        Ok(Self(LessSafeKey::new(key)))
    }

    /// `secret` sealed for subscription `id`: a random nonce, then the
    /// ciphertext and its tag.
    pub fn seal(&self, id: &str, secret: &[u8]) -> Result<Vec<u8>, SealError> {
        let mut nonce = [0u8; NONCE_LEN];
        sensorhub_core::secret::fill_random(&mut nonce).map_err(|e| SealError::Random(e.to_string()))?;
        let mut out = secret.to_vec();
        self.0
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(id.as_bytes()), &mut out)
            .map_err(|_| SealError::Unopenable)?;
        let mut sealed = nonce.to_vec();
        sealed.append(&mut out);
        Ok(sealed)
    }

    /// The secret of subscription `id` that [`SealingKey::seal`] sealed.
    pub fn open(&self, id: &str, sealed: &[u8]) -> Result<Vec<u8>, SealError> {
        let (nonce, data) = sealed.split_at_checked(NONCE_LEN).ok_or(SealError::Unopenable)?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::Unopenable)?;
        let mut data = data.to_vec();
        let plain =
            self.0.open_in_place(nonce, Aad::from(id.as_bytes()), &mut data).map_err(|_| SealError::Unopenable)?;
        Ok(plain.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

    #[test]
    fn sealed_secrets_open_only_with_their_key_and_id() -> Result<(), SealError> {
        let key = SealingKey::from_base64(KEY)?;
        let sealed = key.seal("sub_1", b"partner secret bytes")?;
        assert!(!sealed.windows(7).any(|w| w == b"partner"), "the secret is not in clear");
        assert_eq!(key.open("sub_1", &sealed)?, b"partner secret bytes");
        assert!(key.open("sub_2", &sealed).is_err(), "bound to its subscription");
        let other = SealingKey::from_base64("HxwdHhscGRoXGBUWExQREg8QDQ4LDAkKBwgFBgMEAQI=")?;
        assert!(other.open("sub_1", &sealed).is_err(), "another key does not open it");
        let mut tampered = sealed.clone();
        tampered[NONCE_LEN] ^= 1;
        assert!(key.open("sub_1", &tampered).is_err());
        Ok(())
    }

    #[test]
    fn keys_must_be_32_bytes_of_base64() {
        for bad in ["", "not base64!", "c2hvcnQ="] {
            assert!(matches!(SealingKey::from_base64(bad), Err(SealError::BadKey)), "{bad}");
        }
        assert!(!format!("{:?}", SealingKey::from_base64(KEY)).contains(KEY));
    }
}
