//! Secrets: Argon2id password hashes, SHA-256 digests of high-entropy keys,
//! and generation of new random key ids. Nothing here logs or stores a
//! plaintext secret.

use argon2::Argon2;
use argon2::password_hash::phc::PasswordHash;
use argon2::password_hash::{PasswordHasher, PasswordVerifier};
use sha2::{Digest, Sha256};
use std::sync::OnceLock;

/// A SHA-256 digest of an API key id or a webhook key, as stored.
pub type KeyDigest = [u8; 32];

/// Failure to hash a password (only when the system RNG fails).
#[derive(Debug, thiserror::Error)]
#[error("could not hash the password: {0}")]
pub struct HashError(String);

/// Hashes `password` with Argon2id (default parameters) and a random salt,
/// as a PHC string.
pub fn hash_password(password: &str) -> Result<String, HashError> {
    Argon2::default().hash_password(password.as_bytes()).map(|h| h.to_string()).map_err(|e| HashError(e.to_string()))
}

/// Whether `password` matches the PHC string `phc`. A malformed stored hash
/// never matches.
pub fn verify_password(password: &str, phc: &str) -> bool {
    match PasswordHash::new(phc) {
        Ok(parsed) => Argon2::default().verify_password(password.as_bytes(), &parsed).is_ok(),
        Err(_) => false,
    }
}

/// Whether `phc` is a PHC string this service can verify.
pub fn is_valid_password_hash(phc: &str) -> bool {
    PasswordHash::new(phc).is_ok_and(|h| h.algorithm.as_str().starts_with("argon2"))
}

/// Spends the same work as [`verify_password`] on a known user, so that a
/// login for an unknown user takes as long as one for a known user.
pub fn verify_dummy(password: &str) {
    static DUMMY: OnceLock<String> = OnceLock::new();
    let phc = DUMMY.get_or_init(|| hash_password("sensorhub-dummy-password").unwrap_or_default());
    let _ = verify_password(password, phc);
}

/// SHA-256 of a key, the form in which API key ids and webhook keys are
/// stored and looked up.
pub fn key_digest(key: &str) -> KeyDigest {
    Sha256::digest(key.as_bytes()).into()
}

/// SHA-256 over several parts, each length-prefixed so that no two
/// different part lists collide.
pub fn digest_parts(parts: &[&[u8]]) -> KeyDigest {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    h.finalize().into()
}

/// Failure of the operating system's random number generator.
#[derive(Debug, thiserror::Error)]
#[error("the system random number generator failed: {0}")]
pub struct RandomError(String);

/// A new random key: `prefix` followed by 160 random bits in lowercase hex.
pub fn generate_key(prefix: &str) -> Result<String, RandomError> {
    let mut bytes = [0u8; 20];
    getrandom::fill(&mut bytes).map_err(|e| RandomError(e.to_string()))?;
    let mut out = String::with_capacity(prefix.len() + 40);
    out.push_str(prefix);
    for b in bytes {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 15)]));
    }
    Ok(out)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The part of a key that may be stored and shown to operators, to tell
/// keys apart: at most 8 characters and never more than a third of the key,
/// so that even a short, operator-chosen id is not given away.
pub fn key_prefix(key: &str) -> String {
    let n = key.chars().count();
    key.chars().take((n / 3).min(8)).collect()
}

/// Keys shorter than this are accepted (operators may choose their own ids)
/// but warned about: their SHA-256 digest can be guessed offline.
pub const RECOMMENDED_KEY_LENGTH: usize = 24;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_round_trip_and_mismatch() {
        let phc = hash_password("s3cret:with:colons").expect("hash");
        assert!(phc.starts_with("$argon2id$"));
        assert!(is_valid_password_hash(&phc));
        assert!(verify_password("s3cret:with:colons", &phc));
        assert!(!verify_password("s3cret", &phc));
        assert!(!verify_password("x", "not a hash"));
        assert!(!is_valid_password_hash("plaintext"));
    }

    #[test]
    fn generated_keys_are_long_random_and_distinct() {
        let a = generate_key("pk_").expect("rng");
        let b = generate_key("pk_").expect("rng");
        assert_eq!(a.len(), 43);
        assert!(a.starts_with("pk_"));
        assert_ne!(a, b);
        assert_eq!(key_prefix(&a), a[..8]);
        assert_eq!(key_prefix("pk-old"), "pk");
        assert_eq!(key_prefix("pk-alice-all"), "pk-a");
        assert_eq!(key_prefix("k"), "");
    }

    #[test]
    fn digest_parts_are_unambiguous() {
        assert_ne!(digest_parts(&[b"ab", b"c"]), digest_parts(&[b"a", b"bc"]));
        assert_eq!(key_digest("x"), key_digest("x"));
    }
}
