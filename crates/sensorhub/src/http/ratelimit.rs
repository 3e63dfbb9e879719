//! Rate limits in the request path. Authentication extractors use a
//! [`Guard`]: identified callers spend their own quota; failed
//! authentications spend the quota of the client address, and once that is
//! over, credentials not verified before get 429 without being checked. The
//! [`headers`] middleware writes `RateLimit-*` and `Retry-After`.

use super::AppState;
use super::error::ApiError;
use crate::ratelimit::Decision;
use axum::extract::{ConnectInfo, Request};
use axum::http::request::Parts;
use axum::http::{Extensions, HeaderMap, HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use sensorhub_core::secret::digest_parts;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
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

/// The client address: the peer, or the last entry of the configured header
/// (set by a trusted reverse proxy).
pub fn client_ip(headers: &HeaderMap, extensions: &Extensions, header: Option<&HeaderName>) -> IpAddr {
    let forwarded = header.and_then(|name| last_ip(headers, name));
    forwarded.unwrap_or_else(|| {
        extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |ConnectInfo(addr)| addr.ip())
    })
}

fn last_ip(headers: &HeaderMap, name: &HeaderName) -> Option<IpAddr> {
    let value = headers.get_all(name).iter().next_back()?.to_str().ok()?;
    let entry = value.rsplit(',').next()?.trim();
    // A bare address, or one with a port (`10.0.0.1:5555`, `[2001:db8::1]:443`).
    entry.parse().ok().or_else(|| entry.parse::<SocketAddr>().ok().map(|a| a.ip()))
}

/// The rate-limit side of authenticating one request.
pub struct Guard<'a> {
    state: &'a AppState,
    ip_key: [u8; 32],
    slot: Option<RateSlot>,
    /// Caller kind for metrics: `basic`, `public`, `webhook`.
    kind: &'static str,
}

impl<'a> Guard<'a> {
    /// A guard for the request in `parts`.
    pub fn new(parts: &Parts, state: &'a AppState, kind: &'static str) -> Self {
        // Canonical first: on a dual-stack listener an IPv4 client arrives as
        // `::ffff:a.b.c.d`, and cut to /64 every IPv4 client would share one key.
        let ip = client_ip(&parts.headers, &parts.extensions, state.client_ip_header.as_ref()).to_canonical();
        let ip_bytes = match ip {
            IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            // One IPv6 client usually holds a whole /64: count it as one.
            IpAddr::V6(v6) => (u128::from(v6) & !((1u128 << 64) - 1)).to_be_bytes(),
        };
        Self {
            state,
            ip_key: digest_parts(&[b"ip", &ip_bytes]),
            slot: parts.extensions.get::<RateSlot>().cloned(),
            kind,
        }
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

    /// An identified caller: spends one request of `caller`'s quota.
    pub async fn caller(&self, kind: &[u8], id: &[u8]) -> Result<(), ApiError> {
        let Some(limiter) = &self.state.limiter else { return Ok(()) };
        let d = limiter.check(&digest_parts(&[kind, id])).await;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forwarded_address_is_the_last_entry() {
        let mut h = HeaderMap::new();
        let name = HeaderName::from_static("x-forwarded-for");
        h.insert(&name, HeaderValue::from_static("10.0.0.1, 203.0.113.7"));
        assert_eq!(last_ip(&h, &name), Some("203.0.113.7".parse().expect("ip")));
        h.insert(&name, HeaderValue::from_static("10.0.0.1:5555"));
        assert_eq!(last_ip(&h, &name), Some("10.0.0.1".parse().expect("ip")));
        h.insert(&name, HeaderValue::from_static("[2001:db8::1]:443"));
        assert_eq!(last_ip(&h, &name), Some("2001:db8::1".parse().expect("ip")));
        h.insert(&name, HeaderValue::from_static("garbage"));
        assert_eq!(last_ip(&h, &name), None);
    }
}
