//! Outgoing webhook subscriptions as the store keeps them: who subscribed,
//! to what, where deliveries go, and the sealed signing secret (the store
//! never sees it in clear).

/// The one event kind so far: a stored reading.
pub const SENSOR_DATA: &str = "sensor-data";

/// A subscription to create.
#[derive(Debug, Clone)]
pub struct NewSubscription {
    /// Its id (`sub_…`), chosen by the caller: the sealed secret is bound to it.
    pub id: String,
    /// The owning account.
    pub username: String,
    /// Where deliveries are POSTed.
    pub url: String,
    /// The devices it covers; `None` for all that the account sees.
    pub devices: Option<Vec<String>>,
    /// Event kinds, e.g. [`SENSOR_DATA`].
    pub events: Vec<String>,
    /// The signing secret, sealed (see `sensorhub::hooks::seal`).
    pub sealed_secret: Vec<u8>,
    /// Whether readings that arrive together go out in one delivery.
    pub batch: bool,
    /// Whether a plain `http://` URL is allowed.
    pub allow_http: bool,
}

/// A stored subscription.
#[derive(Clone, PartialEq, Eq)]
pub struct Subscription {
    /// Its id.
    pub id: String,
    /// The owning account.
    pub username: String,
    /// Where deliveries are POSTed.
    pub url: String,
    /// The devices it covers; `None` for all that the account sees.
    pub devices: Option<Vec<String>>,
    /// Event kinds.
    pub events: Vec<String>,
    /// The signing secret, sealed.
    pub sealed_secret: Vec<u8>,
    /// Whether deliveries are made (an operator, or a failing endpoint, turns it off).
    pub enabled: bool,
    /// Whether readings that arrive together go out in one delivery.
    pub batch: bool,
    /// Whether a plain `http://` URL is allowed.
    pub allow_http: bool,
    /// When it was created (seconds since the epoch).
    pub created_at: i64,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("id", &self.id)
            .field("username", &self.username)
            .field("url", &self.url)
            .field("devices", &self.devices)
            .field("enabled", &self.enabled)
            .finish_non_exhaustive()
    }
}

/// Joins event kinds for storage.
pub(crate) fn join_events(events: &[String]) -> String {
    events.join(",")
}

/// Splits stored event kinds.
pub(crate) fn split_events(stored: &str) -> Vec<String> {
    stored.split(',').filter(|e| !e.is_empty()).map(str::to_owned).collect()
}

/// The error for a subscription id that matches nothing.
pub(crate) fn no_such_subscription(id: &str) -> crate::StoreError {
    crate::StoreError::NotFound(format!("no webhook subscription {id:?}"))
}

/// The error for a device the subscribing account does not see.
pub(crate) fn unseen_device(username: &str, device_id: &str) -> crate::StoreError {
    crate::StoreError::NotFound(format!("account {username:?} does not see a device {device_id:?}"))
}
