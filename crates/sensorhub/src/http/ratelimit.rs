//! Rate limits in the request path. Authentication extractors use a
//! [`Guard`]: identified callers spend their own quota; failed
//! authentications spend the quota of the client address, and once that is
//! over, credentials not verified before get 429 without being checked. The
//! [`headers`] middleware writes `RateLimit-*` and `Retry-After`.

use super::AppState;
use super::client_ip::client_ip;
use super::error::ApiError;
use crate::limiter::Decision;
use axum::extract::{FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use sensorhub_core::secret::digest_parts;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

/// Where an extractor leaves the rate-limit decision for the response.
#[derive(Clone, Default)]
pub struct RateSlot(Arc<OnceLock<Decision>>);

/// Middleware adding `RateLimit-Limit`, `RateLimit-Remaining`,
/// `RateLimit-Reset` (and `Retry-After` on 429) to answers whose caller was
/// rate-limited.
pub async fn headers(mut req: Request, next: Next) -> Response {
    let slot = RateSlot::default();
    req.extensions_mut().insert(slot.clone());
    let mut res = next.run(req).await;
    if let Some(d) = slot.0.get() {
        let h = res.headers_mut();
        let mut set = |name: &'static str, v: u64| {
            h.insert(HeaderName::from_static(name), HeaderValue::from(v));
        };
        set("ratelimit-limit", u64::from(d.limit));
        set("ratelimit-remaining", u64::from(d.remaining));
        set("ratelimit-reset", d.reset_secs);
        if !d.allowed {
            set("retry-after", d.retry_after_secs);
        }
    }
    res
}

/// The digest that names the client address of the request in `parts`, as
/// limits count it: an IPv4 address, or an IPv6 /64.
pub fn address_key(parts: &Parts, state: &AppState) -> [u8; 32] {
    // Canonical first: on a dual-stack listener an IPv4 client arrives as
    // `::ffff:a.b.c.d`, and cut to /64 every IPv4 client would share one key.
    let ip = client_ip(&parts.headers, &parts.extensions, state.forwarded_for.as_ref());
    let ip_bytes = match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        // One IPv6 client usually holds a whole /64: count it as one.
        IpAddr::V6(v6) => (u128::from(v6) & !((1u128 << 64) - 1)).to_be_bytes(),
    };
    digest_parts(&[b"ip", &ip_bytes])
}

/// The digest of the client's address ([`address_key`]), for limits kept
/// by handlers (the stream caps, CSP reports).
pub struct ClientAddress(pub [u8; 32]);

impl FromRequestParts<AppState> for ClientAddress {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        Ok(ClientAddress(address_key(parts, state)))
    }
}

/// The rate-limit side of authenticating one request.
pub struct Guard<'a> {
    state: &'a AppState,
    ip_key: [u8; 32],
    slot: Option<RateSlot>,
    /// Caller kind for metrics: `basic`, `public`, `webhook`.
    kind: &'static str,
}

/// What a [`Guard`] takes from its request, kept for a check made after
/// the extractors (a kept API key found stale in the handler).
pub struct Detached {
    ip_key: [u8; 32],
    slot: Option<RateSlot>,
    kind: &'static str,
}

impl Detached {
    /// The guard again, over `state`.
    pub fn attach<'a>(&self, state: &'a AppState) -> Guard<'a> {
        Guard { state, ip_key: self.ip_key, slot: self.slot.clone(), kind: self.kind }
    }
}

impl<'a> Guard<'a> {
    /// A guard for the request in `parts`.
    pub fn new(parts: &Parts, state: &'a AppState, kind: &'static str) -> Self {
        Self { state, ip_key: address_key(parts, state), slot: parts.extensions.get::<RateSlot>().cloned(), kind }
    }

    /// What this guard took from its request.
    pub fn detach(&self) -> Detached {
        Detached { ip_key: self.ip_key, slot: self.slot.clone(), kind: self.kind }
    }

    fn record(&self, d: Decision) {
        if let Some(slot) = &self.slot {
            let _ = slot.0.set(d);
        }
    }

    /// Before looking at credentials that cost nothing to check (API keys):
    /// 429 when the client address is already over its quota.
    pub async fn before_verify(&self) -> Result<(), ApiError> {
        let Some(limiter) = &self.state.login_limiter else { return Ok(()) };
        if limiter.is_over(&self.ip_key).await {
            self.state.metrics.rate_limited("ip");
            // Spending on an exhausted key changes nothing but yields the times.
            self.record(limiter.check(&self.ip_key).await);
            return Err(ApiError::TooManyRequests);
        }
        Ok(())
    }

    /// Before an Argon2 check: spends one unit of the client address's
    /// quota up front, whatever the outcome, so that guesses sent all at once
    /// cannot each get a check; 429 when there is none left.
    pub async fn spend_attempt(&self) -> Result<(), ApiError> {
        let Some(limiter) = &self.state.login_limiter else { return Ok(()) };
        let d = limiter.check(&self.ip_key).await;
        if d.allowed {
            return Ok(());
        }
        self.state.metrics.rate_limited("ip");
        self.record(d);
        Err(ApiError::TooManyRequests)
    }

    /// A key that is unknown or refused (free to check): 429 when the
    /// address is already over its quota ([`Guard::before_verify`]), else
    /// `err`, spending the quota ([`Guard::failed`]).
    pub async fn refused(&self, err: ApiError) -> ApiError {
        match self.before_verify().await {
            Err(over) => over,
            Ok(()) => self.failed(err).await,
        }
    }

    /// A failed authentication: spends the address's quota and answers
    /// `err`, or 429 once the address is over.
    pub async fn failed(&self, err: ApiError) -> ApiError {
        let Some(limiter) = &self.state.login_limiter else { return err };
        let d = limiter.check(&self.ip_key).await;
        if d.allowed {
            return err;
        }
        self.state.metrics.rate_limited("ip");
        self.record(d);
        ApiError::TooManyRequests
    }

    /// The digest that keys `user`'s failed logins.
    fn user_key(user: &str) -> [u8; 32] {
        digest_parts(&[b"login-failures", user.as_bytes()])
    }

    /// The digest of `user` logging in from this client address.
    fn known_key(&self, user: &str) -> [u8; 32] {
        digest_parts(&[b"known-login", user.as_bytes(), &self.ip_key])
    }

    /// Before an Argon2 check for `user`: 429 when the name is over its
    /// failure quota and this address has not logged in as it before.
    pub async fn user_not_over(&self, user: &str) -> Result<(), ApiError> {
        let Some(failures) = &self.state.logins.failures else { return Ok(()) };
        let key = Self::user_key(user);
        if !failures.is_over(&key).await || self.state.logins.known.contains(&self.known_key(user)) {
            return Ok(());
        }
        self.state.metrics.rate_limited("user");
        // Spending on an exhausted key changes nothing but yields the times.
        self.record(failures.check(&key).await);
        Err(ApiError::TooManyRequests)
    }

    /// A failed Argon2 check for `user` (known or not): spends the name's failure quota.
    pub async fn user_failed(&self, user: &str) {
        if let Some(failures) = &self.state.logins.failures {
            failures.check(&Self::user_key(user)).await;
        }
    }

    /// `user` logged in from this address: it is exempt from the name's failure quota here.
    pub fn user_succeeded(&self, user: &str) {
        self.state.logins.known.insert(self.known_key(user));
    }

    /// An operations request (metrics, readiness, the OpenAPI document):
    /// spends one request of the client address's quota, kept in memory.
    pub async fn address(&self) -> Result<(), ApiError> {
        let Some(limiter) = &self.state.ops_limiter else { return Ok(()) };
        let d = limiter.check(&self.ip_key).await;
        self.record(d);
        if d.allowed {
            return Ok(());
        }
        self.state.metrics.rate_limited("ops");
        Err(ApiError::TooManyRequests)
    }

    /// An identified caller: spends one request of `caller`'s quota.
    pub async fn caller(&self, kind: &[u8], id: &[u8]) -> Result<(), ApiError> {
        let spent = self.spend(kind, id).await;
        self.settle(spent)
    }

    /// A caller found valid: its request's answer from the quota `spent`
    /// already (a kept answer's), else spent now as [`Guard::caller`].
    pub async fn admit(&self, kind: &[u8], id: &[u8], spent: Option<Spent>) -> Result<(), ApiError> {
        match spent {
            Some(spent) => self.settle(spent),
            None => self.caller(kind, id).await,
        }
    }

    /// Spends one request of `caller`'s quota, answering nothing yet: the
    /// answer (and its headers) is [`Guard::settle`]'s, for when whether
    /// the caller is who it claims is decided after.
    pub async fn spend(&self, kind: &[u8], id: &[u8]) -> Spent {
        match &self.state.limiter {
            Some(limiter) => Spent(Some(limiter.check(&digest_parts(&[kind, id])).await)),
            None => Spent(None),
        }
    }

    /// The answer to a spent request, as [`Guard::caller`] gives it.
    pub fn settle(&self, spent: Spent) -> Result<(), ApiError> {
        let Spent(Some(d)) = spent else { return Ok(()) };
        if d.unavailable {
            return Err(ApiError::Busy("the rate-limit store does not answer (--rate-limit-fail closed)".into()));
        }
        self.record(d);
        if d.allowed {
            Ok(())
        } else {
            self.state.metrics.rate_limited(self.kind);
            Err(ApiError::TooManyRequests)
        }
    }
}

/// A request spent from a caller's quota, not yet answered; `None` when
/// limits are off.
#[derive(Debug, Clone, Copy)]
pub struct Spent(Option<Decision>);

impl Spent {
    /// Whether the request may go on.
    pub fn allowed(&self) -> bool {
        self.0.is_none_or(|d| d.allowed && !d.unavailable)
    }
}
