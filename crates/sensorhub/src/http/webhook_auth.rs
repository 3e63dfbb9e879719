//! The webhook's caller: a sender of envelopes identified by its
//! `X-API-KEY` (spec 4.5), also the line protocol's way in. In webhook
//! ingest mode a key's answer is kept between requests and confirmed by
//! the store when it writes the reading ([`super::kept_keys`]).

use super::AppState;
use super::auth::constant_time_eq;
use super::error::{ApiError, WebhookError};
use super::kept_keys::KeptHook;
use super::ratelimit::{Detached, Guard, Spent};
use crate::config::server::WebhookMode;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use sensorhub_core::secret::{KeyDigest, key_digest};
use sensorhub_store::Generations;

/// A sender of webhook envelopes, identified by `X-API-KEY`.
pub struct WebhookCaller {
    /// The key's account.
    pub account_id: i64,
    /// The key's digest.
    digest: KeyDigest,
    /// The generations read with the key.
    generations: Generations,
    /// When the key was looked up.
    looked_up: std::time::Instant,
    /// Set when the answer was kept from an earlier request rather than
    /// looked up ([`KeptKeys`](super::kept_keys::KeptKeys)): to be
    /// confirmed by the store.
    kept: Option<Unconfirmed>,
}

/// A kept key's request: its quota spent (and allowed) but not answered
/// yet, and what looking the key up again needs.
struct Unconfirmed {
    guard: Detached,
    spent: Spent,
}

impl std::fmt::Debug for WebhookCaller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookCaller")
            .field("account_id", &self.account_id)
            .field("generations", &self.generations)
            .field("kept", &self.kept)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Unconfirmed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unconfirmed").field("spent", &self.spent).finish_non_exhaustive()
    }
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
    /// The generations the answers this request takes (its key's, a
    /// device's write permission) were read at: those of a kept key (the
    /// store confirms them when it writes, [`WebhookCaller::kept_at`]), or
    /// those read with the key while it was looked up less than a second
    /// (`KEPT_ANSWER_AGE`) ago. A device's write permission kept at exactly
    /// those is used without asking again
    /// ([`sensorhub_store::Access::writable_device`]).
    pub fn generations(&self) -> Option<Generations> {
        (self.kept.is_some() || self.looked_up.elapsed() < KEPT_ANSWER_AGE).then_some(self.generations)
    }

    /// For a caller whose key's answer was kept, not looked up: the
    /// generations its reading must be written at
    /// ([`sensorhub_store::ReadingWrites::ingest_at`]).
    pub fn kept_at(&self) -> Option<Generations> {
        self.kept.as_ref().map(|_| self.generations)
    }

    /// The request succeeded on what was decided for it: a kept key's spent
    /// quota is recorded for the answer's headers.
    pub fn confirmed(&self, state: &AppState) -> Result<(), ApiError> {
        match &self.kept {
            Some(kept) => kept.guard.attach(state).settle(kept.spent),
            None => Ok(()),
        }
    }

    /// The request failed with `failure`. For a kept key, the key is looked
    /// up now, as a fresh request's would be: a key refused since answers
    /// 401 (or 429) whatever the failure was, a valid one gives the caller
    /// to decide the request again with. For a key looked up by this
    /// request, `failure` is the answer.
    pub async fn again(&self, state: &AppState, failure: ApiError) -> Result<WebhookCaller, ApiError> {
        let Some(kept) = &self.kept else { return Err(failure) };
        Self::lookup(&kept.guard.attach(state), state, self.digest, Some(kept.spent)).await
    }

    /// The caller as its key stands once the request's body has come: a
    /// key looked up by this request more than `KEPT_ANSWER_AGE` ago (a
    /// slow body) is looked up again, so that a key revoked or an account
    /// disabled while the body came is refused (401) and nothing is
    /// written for it. A kept key's answer is confirmed by the store as it
    /// writes ([`WebhookCaller::kept_at`]); no quota is spent again.
    pub async fn refreshed(self, state: &AppState) -> Result<Self, ApiError> {
        if !self.stale_lookup() {
            return Ok(self);
        }
        let (account_id, generations) = self.recheck(state).await?;
        Ok(WebhookCaller { account_id, generations, looked_up: std::time::Instant::now(), ..self })
    }

    /// Whether this request looked its key up itself, more than
    /// `KEPT_ANSWER_AGE` ago (a slow body).
    fn stale_lookup(&self) -> bool {
        self.kept.is_none() && self.looked_up.elapsed() >= KEPT_ANSWER_AGE
    }

    /// The key looked up again, no quota spent: its account and
    /// generations, or 401 when it is refused now.
    async fn recheck(&self, state: &AppState) -> Result<(i64, Generations), ApiError> {
        match state.store.webhook_key_auth(&self.digest).await? {
            Some(k) if constant_time_eq(&k.digest, &self.digest) && !k.revoked && !k.account_disabled => {
                Ok((k.account_id, k.generations))
            }
            _ => {
                state.kept_hooks.forget(&self.digest);
                Err(ApiError::Unauthorized)
            }
        }
    }

    /// [`WebhookCaller::again`] for a failure that another decision would
    /// not change (a body that does not parse): the failure, unless the key
    /// is refused now (asked for a kept key, and for one this request
    /// looked up before a slow body, [`WebhookCaller::refreshed`]).
    pub async fn refusing(&self, state: &AppState, failure: ApiError) -> ApiError {
        match &self.kept {
            Some(_) => self.again(state, ApiError::Unauthorized).await.err().unwrap_or(failure),
            None if self.stale_lookup() => self.recheck(state).await.err().unwrap_or(failure),
            None => failure,
        }
    }

    async fn authenticate(parts: &mut Parts, state: &AppState) -> Result<Self, WebhookError> {
        let guard = Guard::new(parts, state, "webhook");
        let mut values = parts.headers.get_all("x-api-key").iter();
        let key = match (values.next(), values.next()) {
            (Some(v), None) => v.to_str().ok().map(str::trim).filter(|k| !k.is_empty()),
            _ => None,
        };
        // A kept answer only where the store confirms it: a reading
        // written in ingest mode.
        let confirmed = parts.method == axum::http::Method::POST && state.webhook.mode == WebhookMode::Ingest;
        if let Some(key) = key.filter(|_| confirmed) {
            let digest = key_digest(key);
            if let Some(kept) = state.kept_hooks.get(&digest) {
                let spent = guard.spend(b"hook", &digest).await;
                if !spent.allowed() {
                    // Refused on a kept answer: looked up, so that a revoked key is still a 401.
                    return Ok(Self::lookup(&guard, state, digest, Some(spent)).await?);
                }
                let kept_answer = Unconfirmed { guard: guard.detach(), spent };
                return Ok(WebhookCaller {
                    account_id: kept.account_id,
                    digest,
                    generations: kept.generations,
                    looked_up: std::time::Instant::now(),
                    kept: Some(kept_answer),
                });
            }
        }
        Ok(Self::by_key(&guard, state, key).await?)
    }

    /// The caller whose webhook key is `key` (none given: 401), within
    /// `guard`'s limits: the webhook's and the line protocol's way in.
    pub(crate) async fn by_key(guard: &Guard<'_>, state: &AppState, key: Option<&str>) -> Result<Self, ApiError> {
        let Some(key) = key else {
            return Err(guard.failed(ApiError::Unauthorized).await);
        };
        Self::lookup(guard, state, key_digest(key), None).await
    }

    /// Looks the webhook key of `digest` up, keeping a valid one's answer
    /// and forgetting a refused one's. `spent` is the key's request quota
    /// when it was spent already: it answers (with its headers) only for a
    /// valid key, as if spent now.
    async fn lookup(
        guard: &Guard<'_>,
        state: &AppState,
        digest: KeyDigest,
        spent: Option<Spent>,
    ) -> Result<Self, ApiError> {
        let found = state.store.webhook_key_auth(&digest).await?;
        // The generations were read just now: a slow pool or query does
        // not age the answer before it is used.
        let looked_up = std::time::Instant::now();
        match found {
            Some(k) if constant_time_eq(&k.digest, &digest) && !k.revoked && !k.account_disabled => {
                state.kept_hooks.keep(digest, KeptHook { account_id: k.account_id, generations: k.generations });
                guard.admit(b"hook", &digest, spent).await?;
                Ok(WebhookCaller {
                    account_id: k.account_id,
                    digest,
                    generations: k.generations,
                    looked_up,
                    kept: None,
                })
            }
            _ => {
                state.kept_hooks.forget(&digest);
                Err(guard.refused(ApiError::Unauthorized).await)
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
            digest: key_digest("wh-test"),
            generations,
            looked_up: std::time::Instant::now().checked_sub(age).expect("the clock has run that long"),
            kept: None,
        };
        assert_eq!(caller(std::time::Duration::ZERO).generations(), Some(generations));
        assert_eq!(caller(KEPT_ANSWER_AGE).generations(), None, "a slow body: ask again");
    }
}
