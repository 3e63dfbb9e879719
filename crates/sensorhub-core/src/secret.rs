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

/// Whether `password` matches the PHC string `phc`. A malformed stored hash,
/// or one whose parameters are outside [`check_password_hash`]'s bounds,
/// never matches (and costs nothing to refuse).
pub fn verify_password(password: &str, phc: &str) -> bool {
    match PasswordHash::new(phc) {
        Ok(parsed) if check_parsed(&parsed).is_ok() => {
            Argon2::default().verify_password(password.as_bytes(), &parsed).is_ok()
        }
        _ => false,
    }
}

/// Largest Argon2 memory cost accepted, in KiB (64 MiB; the default is 19 MiB).
pub const MAX_ARGON2_MEMORY_KIB: u32 = 65_536;
/// Largest Argon2 time cost (passes) accepted (the default is 2).
pub const MAX_ARGON2_PASSES: u32 = 8;
/// Largest Argon2 parallelism accepted (the default is 1).
pub const MAX_ARGON2_LANES: u32 = 4;

/// Checks that `phc` is an Argon2id PHC string (version 19) whose cost
/// parameters lie within bounds: memory at most [`MAX_ARGON2_MEMORY_KIB`],
/// passes 1 to [`MAX_ARGON2_PASSES`], lanes 1 to [`MAX_ARGON2_LANES`]. A
/// provisioned hash with a 4 GiB memory cost would make every guess at that
/// name cost 4 GiB; the error says which parameter is out of bounds.
pub fn check_password_hash(phc: &str) -> Result<(), String> {
    let parsed = PasswordHash::new(phc).map_err(|_| "is not an Argon2 PHC string".to_owned())?;
    check_parsed(&parsed)
}

fn check_parsed(h: &PasswordHash) -> Result<(), String> {
    if h.algorithm.as_str() != "argon2id" {
        return Err(format!("must be an argon2id hash, not {}", h.algorithm.as_str()));
    }
    if h.version.is_some_and(|v| v != 19) {
        return Err("must be an Argon2 version 19 (v=19) hash".into());
    }
    let param = |name: &str| h.params.get_decimal(name);
    let (Some(m), Some(t), Some(p)) = (param("m"), param("t"), param("p")) else {
        return Err("must give the parameters m, t and p".into());
    };
    if !(1..=MAX_ARGON2_LANES).contains(&p) {
        return Err(format!("p={p} is out of bounds: 1 to {MAX_ARGON2_LANES} lanes"));
    }
    if !(1..=MAX_ARGON2_PASSES).contains(&t) {
        return Err(format!("t={t} is out of bounds: 1 to {MAX_ARGON2_PASSES} passes"));
    }
    if !(8 * p..=MAX_ARGON2_MEMORY_KIB).contains(&m) {
        return Err(format!("m={m} is out of bounds: {} to {MAX_ARGON2_MEMORY_KIB} KiB", 8 * p));
    }
    if h.salt.is_none() || h.hash.is_none() {
        return Err("must hold a salt and a hash".into());
    }
    Ok(())
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

/// Fills `buf` from the operating system's random number generator.
pub fn fill_random(buf: &mut [u8]) -> Result<(), RandomError> {
    getrandom::fill(buf).map_err(|e| RandomError(e.to_string()))
}

/// Output of [`fill_unguessable`]'s generator after which it is seeded again
/// from the operating system (as rand's `ThreadRng` does, which panics when
/// that fails; this returns the error).
const RESEED_AFTER: usize = 64 * 1024;

/// Fills `buf` with bytes no one can guess, for identifiers (a delivery's
/// message id), not keys: a ChaCha12 generator (rand's `StdRng`) per
/// thread, seeded from the operating system and seeded again after
/// 64 KiB. A write of readings owed to subscriptions draws
/// from it on the store's one writer, where a system call each time was
/// up to 2 % of that thread's time (bench/RESULTS.md, the thirty-third step).
pub fn fill_unguessable(buf: &mut [u8]) -> Result<(), RandomError> {
    use rand::{Rng, SeedableRng, rngs::StdRng};
    use std::cell::RefCell;
    thread_local! {
        static GENERATOR: RefCell<Option<(StdRng, usize)>> = const { RefCell::new(None) };
    }
    GENERATOR.with_borrow_mut(|slot| {
        let (rng, drawn) = match slot {
            Some((rng, drawn)) if *drawn < RESEED_AFTER => (rng, drawn),
            _ => {
                let mut seed = [0u8; 32];
                fill_random(&mut seed)?;
                let (rng, drawn) = slot.insert((StdRng::from_seed(seed), 0));
                (rng, drawn)
            }
        };
        rng.fill_bytes(buf);
        *drawn += buf.len();
        Ok(())
    })
}

/// A new random key: `prefix` followed by 160 random bits in lowercase hex.
pub fn generate_key(prefix: &str) -> Result<String, RandomError> {
    let mut bytes = [0u8; 20];
    fill_random(&mut bytes)?;
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
    fn unguessable_bytes_differ_from_call_to_call_thread_to_thread_and_past_a_reseed() {
        let draw = || {
            let mut b = [0u8; 32];
            fill_unguessable(&mut b).expect("seeded from the system");
            b
        };
        let first = draw();
        assert_ne!(first, [0u8; 32]);
        assert_ne!(first, draw(), "each call draws anew");
        let other = std::thread::spawn(draw).join().expect("thread");
        assert_ne!(first, other, "each thread has its own seed");
        // Past the threshold it seeds again and goes on.
        let mut big = vec![0u8; RESEED_AFTER + 100];
        fill_unguessable(&mut big).expect("big");
        let after = draw();
        assert!(big.iter().any(|&b| b != 0));
        assert_ne!(after, first);
    }

    #[test]
    fn password_round_trip_and_mismatch() {
        let phc = hash_password("s3cret:with:colons").expect("hash");
        assert!(phc.starts_with("$argon2id$"));
        assert_eq!(check_password_hash(&phc), Ok(()));
        assert!(verify_password("s3cret:with:colons", &phc));
        assert!(!verify_password("s3cret", &phc));
        assert!(!verify_password("x", "not a hash"));
        assert!(check_password_hash("plaintext").is_err());
    }

    #[test]
    fn hashes_outside_the_cost_bounds_are_refused_and_never_verified() {
        // A real argon2id hash of "pw" with m=19456,t=2,p=1, then the same with
        // its parameters changed: the parameters are checked before any work.
        let phc = hash_password("pw").expect("hash");
        let with = |params: &str| phc.replacen("m=19456,t=2,p=1", params, 1);
        for (params, named) in
            [("m=4194304,t=2,p=1", "m=4194304"), ("m=19456,t=100,p=1", "t=100"), ("m=19456,t=2,p=64", "p=64")]
        {
            let e = check_password_hash(&with(params)).expect_err(params);
            assert!(e.contains(named), "{e}");
            assert!(!verify_password("pw", &with(params)), "{params} is never verified");
        }
        let argon2i = phc.replacen("$argon2id$", "$argon2i$", 1);
        assert!(check_password_hash(&argon2i).expect_err("argon2i").contains("argon2id"));
        assert!(verify_password("pw", &with("m=19456,t=2,p=1")));
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
