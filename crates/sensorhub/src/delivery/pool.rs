//! Idle connections to endpoints, kept a few seconds for the next delivery
//! to the same endpoint: a new TCP connection (and TLS handshake) per
//! delivery costs more CPU than the delivery, and that CPU is taken from
//! ingest on the same cores. A connection is pooled only after a complete
//! answer; its peer address was checked when it was opened, so reuse
//! cannot reach an address the rules refuse.

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http1::SendRequest;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A connection: its request half and the task that drives it, ended
/// when the connection is dropped (so that a server that neither answers
/// nor closes holds nothing once the attempt is given up).
pub struct Conn {
    send: SendRequest<Full<Bytes>>,
    driver: tokio::task::AbortHandle,
}

impl Conn {
    /// The connection of `send`, driven by the task `driver`.
    pub fn new(send: SendRequest<Full<Bytes>>, driver: tokio::task::AbortHandle) -> Self {
        Self { send, driver }
    }

    /// Its request half.
    pub fn send(&mut self) -> &mut SendRequest<Full<Bytes>> {
        &mut self.send
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// How long an idle connection is kept: below the idle timeouts servers
/// commonly use (5 s and more), so that the server rarely closes it first.
pub const IDLE_FOR: Duration = Duration::from_secs(4);

/// The most idle connections kept per endpoint.
const MAX_IDLE: usize = 8;

/// Connections idle since when, by endpoint (`scheme://authority`).
type ByEndpoint = HashMap<String, Vec<(Conn, Instant)>>;

/// Idle connections, shared by the worker's attempts.
#[derive(Clone, Default)]
pub struct Idle(Arc<Mutex<ByEndpoint>>);

impl Idle {
    /// An open idle connection to `endpoint`, if there is one; drops the
    /// expired and closed ones of every endpoint on the way.
    pub fn take(&self, endpoint: &str) -> Option<Conn> {
        let mut idle = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        idle.retain(|_, conns| {
            conns.retain(|(c, since)| since.elapsed() < IDLE_FOR && !c.send.is_closed());
            !conns.is_empty()
        });
        idle.get_mut(endpoint).and_then(|conns| conns.pop()).map(|(c, _)| c)
    }

    /// Keeps `conn` to `endpoint` for the next delivery.
    pub fn put(&self, endpoint: &str, conn: Conn) {
        let mut idle = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let conns = idle.entry(endpoint.to_owned()).or_default();
        if conns.len() < MAX_IDLE {
            conns.push((conn, Instant::now()));
        }
    }
}
