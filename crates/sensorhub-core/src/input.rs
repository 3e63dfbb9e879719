//! What every kind of input shares: the error that names where an input is
//! wrong, and what an identifier may be. Below both the domain types and
//! the checks of provisioning and alarm rules, so each can use it.

/// An error in a provisioning document or an import, naming where it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{position}: {message}")]
pub struct InputError {
    /// Where: `accounts[0].api_keys[1].id`, `line 12`, …
    pub position: String,
    /// What is wrong.
    pub message: String,
}

impl InputError {
    /// An error at `position`.
    pub fn new(position: impl Into<String>, message: impl Into<String>) -> Self {
        Self { position: position.into(), message: message.into() }
    }
}

/// Whether `s` may serve as an identifier (device, sensor, key, user):
/// non-empty, at most 128 bytes, no whitespace, control characters or `/`.
pub fn is_valid_identifier(s: &str) -> bool {
    !s.is_empty() && s.len() <= 128 && !s.chars().any(|c| c.is_whitespace() || c.is_control() || c == '/')
}
