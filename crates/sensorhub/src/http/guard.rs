//! A long answer's caller, checked again while it is sent: a window that
//! streams page after page (a slow reader may take days over a year's
//! range) stops at its next page once its caller would be refused a new
//! request, as an open stream does (stream.rs).

use super::AppState;
use super::auth::Caller;
use crate::live::access::still_allowed;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use sensorhub_store::Store;
use std::sync::Arc;
use tokio::sync::watch;

/// The access generation as it stood before the request was authenticated
/// (listed before the caller among a handler's extractors): an answer whose
/// store read finds a later one was checked against an older state, since a
/// login (an Argon2 check) takes a while, and checks its caller again
/// before its next page, as a stream does at once.
pub struct AccessSeen(pub i64);

impl FromRequestParts<AppState> for AccessSeen {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(_: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        Ok(AccessSeen(*state.access.borrow()))
    }
}

/// Why an answer under way was cut.
#[derive(Debug)]
pub enum Cut {
    /// The store failed.
    Store(sensorhub_store::StoreError),
    /// The caller lost access to the device (or could not be checked).
    Refused,
}

impl Cut {
    /// The error that ends the response (the client sees the body cut
    /// short, never a complete-looking one), logged by what caused it.
    pub fn ended(self) -> std::io::Error {
        match self {
            Cut::Store(e) => {
                tracing::error!(error = %e, "reading stream failed; closing the response");
                std::io::Error::other(e.to_string())
            }
            Cut::Refused => {
                tracing::info!("a caller lost access to the device it was reading; closing the response");
                std::io::Error::other("the caller lost access to the device")
            }
        }
    }
}

impl From<sensorhub_store::StoreError> for Cut {
    fn from(e: sensorhub_store::StoreError) -> Self {
        Cut::Store(e)
    }
}

/// A caller's access to one device, as an answer's later pages check it.
pub struct Guard {
    access: watch::Receiver<i64>,
    /// The access generation the caller was last found allowed at.
    seen: i64,
    /// A generation the store is known to have reached (read with the
    /// answer's first page), before the watch may show it.
    known: i64,
    caller: Caller,
    device_id: String,
    store: Arc<dyn Store>,
}

impl Guard {
    /// The guard of `caller` reading `device_id`, allowed as of access
    /// generation `seen`.
    pub fn new(state: &AppState, caller: &Caller, device_id: &str, seen: i64) -> Self {
        let (access, store) = (state.access.clone(), state.store.clone());
        Self { access, seen, known: seen, caller: caller.clone(), device_id: device_id.to_owned(), store }
    }

    /// This guard, knowing that the store has reached generation `known`.
    pub fn knowing(self, known: i64) -> Self {
        Self { known, ..self }
    }

    /// Whether the answer may go on: the store is asked again only when the
    /// access generation (read every second) moved since the caller was
    /// last found allowed; a store that cannot answer ends it too.
    pub async fn holds(&mut self) -> bool {
        let now = (*self.access.borrow()).max(self.known);
        if now <= self.seen {
            return true;
        }
        let (credential, scope) = (&self.caller.credential, self.caller.scope);
        match still_allowed(&*self.store, credential, scope, &self.device_id).await {
            Ok(true) => {
                self.seen = now;
                true
            }
            Ok(false) => false,
            Err(e) => {
                tracing::warn!(error = %e, "cannot check a reading answer's caller again; it ends");
                false
            }
        }
    }
}
