//! GET /devices (Basic) and GET /{api_key_id}/devices (public): the devices
//! a caller may see, ordered by `device_id`.

use super::AppState;
use super::auth::Caller;
#[cfg(doc)]
use super::auth::{BasicCaller, PublicCaller};
use super::error::{ApiError, success};
use axum::extract::State;
use axum::response::Response;

/// Spec 4.1 (with [`BasicCaller`]) and 4.3 (with [`PublicCaller`]).
pub async fn list<C: Into<Caller>>(State(state): State<AppState>, caller: C) -> Result<Response, ApiError> {
    let devices = state.store.list_devices(caller.into().scope).await?;
    Ok(success(devices))
}
