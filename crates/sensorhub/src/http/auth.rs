//! Authentication as extractors: HTTP Basic for the authenticated reads, the
//! API key id in the path for the public reads. Both produce a [`Caller`]
//! whose scope says which devices it may see.

use super::AppState;
use super::error::ApiError;
use super::kept_keys::KeptKey;
use super::ratelimit::{Detached, Guard, Spent};
use crate::live::access::Credential;
use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use base64::Engine;
use sensorhub_core::secret::{KeyDigest, digest_parts, key_digest, verify_dummy, verify_password};
use sensorhub_store::Scope;

/// Who is asking, and what they may see.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The devices visible to this caller.
    pub scope: Scope,
    /// What the caller proved, for whatever outlives the request (a
    /// stream) to check again.
    pub credential: Credential,
}

impl Caller {
    /// The digest that names this caller's credential (for per-caller caps).
    pub fn key(&self) -> [u8; 32] {
        match &self.credential {
            Credential::Account { account_id, .. } => digest_parts(&[b"account", &account_id.to_be_bytes()]),
            Credential::Key(digest) => digest_parts(&[b"key", digest]),
        }
    }
}

/// A caller authenticated with HTTP Basic.
pub struct BasicCaller(pub Caller);

/// A caller identified by the API key id in the path.
pub struct PublicCaller(pub Caller);

impl From<BasicCaller> for Caller {
    fn from(c: BasicCaller) -> Self {
        c.0
    }
}

impl From<PublicCaller> for Caller {
    fn from(c: PublicCaller) -> Self {
        c.0
    }
}

/// The value of path parameter `name`, percent-decoded.
pub async fn path_param<S: Send + Sync>(parts: &mut Parts, state: &S, name: &str) -> Option<String> {
    let params = RawPathParams::from_request_parts(parts, state).await.ok()?;
    params.iter().find_map(|(n, value)| (n == name).then(|| value.to_owned()))
}

/// Standard base64, with or without padding.
const BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

/// Splits an `Authorization: Basic …` header into user and password. The
/// scheme is case-insensitive; the password may contain `:`.
pub fn parse_basic(header: &str) -> Option<(String, String)> {
    let (scheme, encoded) = header.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = BASE64.decode(encoded.trim()).ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| ApiError::Internal(format!("password check failed: {e}")))
}

impl FromRequestParts<AppState> for BasicCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let guard = Guard::new(parts, state, "basic");
        let mut headers = parts.headers.get_all(AUTHORIZATION).iter();
        let credentials = match (headers.next(), headers.next()) {
            (Some(value), None) => value.to_str().ok().and_then(parse_basic),
            _ => None, // none, or several: ambiguous
        };
        let Some((user, password)) = credentials else {
            return Err(guard.failed(ApiError::Unauthorized).await);
        };
        let account = state.store.account_auth(&user).await?;
        let logins = &state.logins;
        let cache_key =
            account.as_ref().map(|a| digest_parts(&[user.as_bytes(), password.as_bytes(), a.password_hash.as_bytes()]));
        let account = match account {
            Some(account) if cache_key.as_ref().is_some_and(|k| logins.credentials.contains(k)) => account,
            account => {
                // An Argon2 check: paid for by the address, refused while the
                // name is over its failure quota (unless from a known address),
                // and waited for a bounded time.
                guard.spend_attempt().await?;
                guard.user_not_over(&user).await?;
                let _slot = logins.slot().await?;
                let Some(account) = account else {
                    // Same work as for a known user, so timing does not tell names apart.
                    blocking(move || verify_dummy(&password)).await?;
                    guard.user_failed(&user).await;
                    return Err(ApiError::Unauthorized);
                };
                // Another request with the same credentials may have verified them meanwhile.
                let key = cache_key.unwrap_or_default();
                if !logins.credentials.contains(&key) {
                    let phc = account.password_hash.clone();
                    if !blocking(move || verify_password(&password, &phc)).await? {
                        guard.user_failed(&user).await;
                        return Err(ApiError::Unauthorized);
                    }
                    logins.credentials.insert(key);
                }
                guard.user_succeeded(&user);
                account
            }
        };
        guard.caller(b"user", user.as_bytes()).await?;
        if account.disabled {
            return Err(ApiError::Forbidden);
        }
        let scope = Scope::Account { account_id: account.account_id, key: None };
        let credential = Credential::Account {
            account_id: account.account_id,
            username: user,
            password_hash: account.password_hash,
        };
        Ok(BasicCaller(Caller { scope, credential }))
    }
}

impl FromRequestParts<AppState> for PublicCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let (guard, digest) = key_in_path(parts, state).await?;
        check_key(&guard, state, digest, None).await.map(PublicCaller)
    }
}

/// The guard of a public request and the digest of the API key id in its
/// path; 403 without one.
async fn key_in_path<'a>(parts: &mut Parts, state: &'a AppState) -> Result<(Guard<'a>, KeyDigest), ApiError> {
    let guard = Guard::new(parts, state, "public");
    match path_param(parts, state, "api_key_id").await {
        Some(key_id) => Ok((guard, key_digest(&key_id))),
        None => Err(guard.failed(ApiError::Forbidden).await),
    }
}

/// Looks up the API key with `digest` and answers as the public endpoints
/// do: its caller, keeping the answer for public raw windows
/// ([`KeptKeys`](super::kept_keys::KeptKeys)); 403 (or 429) when it is
/// unknown, revoked or its account disabled. `spent` is the key's request
/// quota when it was spent already: it answers (with its headers) only for
/// a valid key, as if spent now.
async fn check_key(
    guard: &Guard<'_>,
    state: &AppState,
    digest: KeyDigest,
    spent: Option<Spent>,
) -> Result<Caller, ApiError> {
    match state.store.api_key_auth(&digest).await? {
        Some(key) if !key.revoked && !key.account_disabled => {
            state.kept_keys.keep(digest, KeptKey { scope: key.scope(), access: key.access });
            guard.admit(b"key", &digest, spent).await?;
            Ok(Caller { scope: key.scope(), credential: Credential::Key(digest) })
        }
        _ => {
            state.kept_keys.forget(&digest);
            Err(guard.refused(ApiError::Forbidden).await)
        }
    }
}

/// A caller of the public raw window: an API key's answer kept from an
/// earlier request, which the window's own statement must confirm, or the
/// key checked now as [`PublicCaller`] does.
pub enum PublicReader {
    /// Checked by this request.
    Checked(Caller),
    /// Kept: to be confirmed, else checked with [`KeptReader::check`].
    Kept(KeptReader),
}

/// An API key's answer kept from an earlier request. Its quota for this
/// request is spent (and allowed) but not yet answered: a confirmed answer
/// records it ([`KeptReader::confirmed`]), a lookup answers with it only if
/// the key is still valid ([`KeptReader::check`]), so a key refused since
/// gets the 403 and headers of a fresh lookup.
pub struct KeptReader {
    /// The caller as the key was found to give.
    pub caller: Caller,
    /// The access generation it was found at: the answer holds only while
    /// the store's is this one.
    pub access: i64,
    digest: KeyDigest,
    guard: Detached,
    spent: Spent,
}

impl KeptReader {
    /// The kept answer held (the store read its generation): the request's
    /// spent quota is recorded for its headers.
    pub fn confirmed(&self, state: &AppState) -> Result<(), ApiError> {
        self.guard.attach(state).settle(self.spent)
    }

    /// The key looked up again, as [`PublicCaller`] does, for when the kept
    /// answer was not confirmed.
    pub async fn check(self, state: &AppState) -> Result<Caller, ApiError> {
        check_key(&self.guard.attach(state), state, self.digest, Some(self.spent)).await
    }
}

impl FromRequestParts<AppState> for PublicReader {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let (guard, digest) = key_in_path(parts, state).await?;
        let Some(kept) = state.kept_keys.get(&digest) else {
            return check_key(&guard, state, digest, None).await.map(PublicReader::Checked);
        };
        let spent = guard.spend(b"key", &digest).await;
        if !spent.allowed() {
            // Refused on a kept answer: the key is looked up, so that a
            // revoked one is still a 403.
            return check_key(&guard, state, digest, Some(spent)).await.map(PublicReader::Checked);
        }
        let caller = Caller { scope: kept.scope, credential: Credential::Key(digest) };
        let guard = guard.detach();
        Ok(PublicReader::Kept(KeptReader { caller, access: kept.access, digest, guard, spent }))
    }
}

/// Compares two digests in time independent of where they differ.
pub fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Any header value parses or is refused, never panics; valid ones round-trip.
        #[test]
        fn fuzz_basic_header_never_panics(header in "\\PC{0,64}", user in "[^:]{0,16}", password in "\\PC{0,16}") {
            let _ = parse_basic(&header);
            let _ = parse_basic(&format!("Basic {header}"));
            let valid = format!("Basic {}", b64(&format!("{user}:{password}")));
            proptest::prop_assert_eq!(parse_basic(&valid), Some((user.clone(), password.clone())));
        }
    }

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn basic_parsing() {
        assert_eq!(parse_basic(&format!("Basic {}", b64("a:b:c"))), Some(("a".into(), "b:c".into())));
        assert_eq!(parse_basic(&format!("bAsIc {}", b64("a:"))), Some(("a".into(), String::new())));
        assert_eq!(parse_basic(&format!("Bearer {}", b64("a:b"))), None);
        assert_eq!(parse_basic(&format!("Basic {}", b64("nocolon"))), None);
        assert_eq!(parse_basic("Basic YTpi"), Some(("a".into(), "b".into())));
        assert_eq!(parse_basic("Basic YTpiYw"), Some(("a".into(), "bc".into())), "padding is optional");
        assert_eq!(parse_basic("Basic !!!"), None);
        assert_eq!(parse_basic("Basic"), None);
    }
}
