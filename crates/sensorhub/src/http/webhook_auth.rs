//! The webhook's caller: a sender of envelopes identified by its
//! `X-API-KEY` (spec 4.5), also the line protocol's way in.

use super::AppState;
use super::auth::constant_time_eq;
use super::error::{ApiError, WebhookError};
use super::ratelimit::Guard;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use sensorhub_core::secret::key_digest;

/// A sender of webhook envelopes, identified by `X-API-KEY`.
#[derive(Debug, Clone, Copy)]
pub struct WebhookCaller {
    /// The key's account.
    pub account_id: i64,
    /// The generations read with the key.
    generations: sensorhub_store::Generations,
    /// When the key was looked up.
    looked_up: std::time::Instant,
}

/// How long after its key's lookup a request may still take a device's
/// write permission kept at the generations read with the key: a request
/// whose body took longer (a slow sender) asks again, so that a grant
/// narrowed meanwhile holds for it within this long, as it does for open
/// streams (which look once a second).
const KEPT_ANSWER_AGE: std::time::Duration = std::time::Duration::from_secs(1);

impl FromRequestParts<AppState> for WebhookCaller {
    type Rejection = WebhookError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, WebhookError> {
        let caller = Self::authenticate(parts, state).await;
        if caller.is_err() && parts.method == axum::http::Method::POST {
            state.metrics.webhook(false);
        }
        caller
    }
}

impl WebhookCaller {
    /// The generations read with the key, while it was looked up less
    /// than a second (`KEPT_ANSWER_AGE`) ago: a device's write permission kept at
    /// exactly those is used without asking again
    /// ([`sensorhub_store::Access::writable_device`]).
    pub fn generations(&self) -> Option<sensorhub_store::Generations> {
        (self.looked_up.elapsed() < KEPT_ANSWER_AGE).then_some(self.generations)
    }

    async fn authenticate(parts: &mut Parts, state: &AppState) -> Result<Self, WebhookError> {
        let guard = Guard::new(parts, state, "webhook");
        let mut values = parts.headers.get_all("x-api-key").iter();
        let key = match (values.next(), values.next()) {
            (Some(v), None) => v.to_str().ok().map(str::trim).filter(|k| !k.is_empty()),
            _ => None,
        };
        Ok(Self::by_key(&guard, state, key).await?)
    }

    /// The caller whose webhook key is `key` (none given: 401), within
    /// `guard`'s limits: the webhook's and the line protocol's way in.
    pub(crate) async fn by_key(guard: &Guard<'_>, state: &AppState, key: Option<&str>) -> Result<Self, ApiError> {
        let Some(key) = key else {
            return Err(guard.failed(ApiError::Unauthorized).await);
        };
        let digest = key_digest(key);
        let looked_up = std::time::Instant::now();
        match state.store.webhook_key_auth(&digest).await? {
            Some(k) if constant_time_eq(&k.digest, &digest) && !k.revoked && !k.account_disabled => {
                guard.caller(b"hook", &digest).await?;
                Ok(WebhookCaller { account_id: k.account_id, generations: k.generations, looked_up })
            }
            _ => {
                guard.before_verify().await?;
                Err(guard.failed(ApiError::Unauthorized).await)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_write_permission_is_offered_only_soon_after_the_key() {
        let generations = sensorhub_store::Generations { access: 3, devices: 4 };
        let caller = |age| WebhookCaller {
            account_id: 1,
            generations,
            looked_up: std::time::Instant::now().checked_sub(age).expect("the clock has run that long"),
        };
        assert_eq!(caller(std::time::Duration::ZERO).generations(), Some(generations));
        assert_eq!(caller(KEPT_ANSWER_AGE).generations(), None, "a slow body: ask again");
    }
}
