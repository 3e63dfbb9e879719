//! Each client address's share of the connection slots: one address (an
//! IPv4 address or an IPv6 /64) may hold at most `--max-connections-per-address`
//! of them, so that one client (a pool opened in a loop, a thousand slow
//! downloads) cannot take every connection the server has. The trusted
//! reverse proxies (`--trusted-proxies`, loopback by default) are exempt:
//! their connections carry many clients.
//!
//! A connection past its address's share is answered at once and closed:
//! on plain HTTP with a 429 in the form of the path it asked for, over TLS
//! without a word (a handshake for a refusal would cost more than the
//! refusal saves). At most [`REFUSING`] refusals run at once; past that a
//! connection is closed unanswered.
//!
//! Each address's entry also holds its answer bytes not yet sent
//! (answer_bytes.rs), which its requests are admitted by.

use super::answer_bytes::{AddressBytes, AnswerBytes};
use super::refusal::refusal;
use axum::extract::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use ipnet::IpNet;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

/// Refusals answered at once.
pub const REFUSING: usize = 64;

/// Time a refused connection has to send its request head and take the answer.
const REFUSAL_TIME: Duration = Duration::from_secs(2);

/// The connections each client address holds, against its share.
#[derive(Debug)]
pub struct PeerShares {
    per_address: usize,
    /// Answer bytes an address may have unsent before its requests wait.
    answer_bytes: usize,
    exempt: Vec<IpNet>,
    held: Mutex<HashMap<u128, Held>>,
    refusing: Arc<Semaphore>,
}

/// What one address holds: connections, and their answers' bytes.
#[derive(Debug)]
struct Held {
    connections: usize,
    bytes: Arc<AddressBytes>,
}

impl PeerShares {
    /// No connection held yet; `exempt` addresses are never counted.
    pub fn new(per_address: usize, answer_bytes: usize, exempt: Vec<IpNet>) -> Arc<Self> {
        Arc::new(Self {
            per_address: per_address.max(1),
            answer_bytes,
            exempt,
            held: Mutex::default(),
            refusing: Arc::new(Semaphore::new(REFUSING)),
        })
    }

    fn held(&self) -> MutexGuard<'_, HashMap<u128, Held>> {
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A place for a connection from `ip`, or `None` when its address
    /// holds its share already.
    pub fn take(self: &Arc<Self>, ip: IpAddr) -> Option<PeerSlot> {
        let ip = ip.to_canonical();
        if self.exempt.iter().any(|n| n.contains(&ip)) {
            return Some(PeerSlot { shares: None, key: 0, bytes: None });
        }
        let key = address_key(ip);
        let mut held = self.held();
        let entry =
            held.entry(key).or_insert_with(|| Held { connections: 0, bytes: AddressBytes::new(self.answer_bytes) });
        if entry.connections >= self.per_address {
            return None;
        }
        entry.connections += 1;
        let bytes = Some(AnswerBytes::new(entry.bytes.clone()));
        Some(PeerSlot { shares: Some(self.clone()), key, bytes })
    }

    /// Addresses holding a connection now (exempt ones not counted).
    #[cfg(test)]
    pub fn addresses(&self) -> usize {
        self.held().len()
    }

    /// Answers a refused connection with a 429 and closes it (plain HTTP),
    /// or closes it at once (TLS, or [`REFUSING`] refusals already running).
    pub fn refuse(&self, stream: TcpStream, tls: bool) {
        let Ok(permit) = self.refusing.clone().try_acquire_owned() else { return };
        if tls {
            return;
        }
        tokio::spawn(async move {
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new()).header_read_timeout(REFUSAL_TIME).keep_alive(false);
            let service = hyper::service::service_fn(|req: Request<Incoming>| async move {
                Ok::<_, std::convert::Infallible>(refusal(req.uri().path()))
            });
            let conn = http.serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(REFUSAL_TIME, conn).await;
            drop(permit);
        });
    }
}

/// The address as the share counts it: an IPv4 address, or an IPv6 /64.
fn address_key(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => u128::from(v6) & !((1u128 << 64) - 1),
    }
}

/// One connection's place in its address's share; dropping it frees it.
#[derive(Debug)]
pub struct PeerSlot {
    shares: Option<Arc<PeerShares>>,
    key: u128,
    bytes: Option<AnswerBytes>,
}

impl PeerSlot {
    /// The address's answer bytes, for its requests (none when exempt).
    pub fn answer_bytes(&self) -> Option<AnswerBytes> {
        self.bytes.clone()
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let Some(shares) = &self.shares else { return };
        let mut held = shares.held();
        if let Some(entry) = held.get_mut(&self.key) {
            entry.connections -= 1;
            if entry.connections == 0 {
                held.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::server::parse_networks;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn an_address_holds_its_share_and_gets_it_back() {
        let shares = PeerShares::new(2, 1 << 20, parse_networks("10.0.0.0/8").expect("networks"));
        let a = shares.take(ip("203.0.113.7")).expect("first");
        let _b = shares.take(ip("::ffff:203.0.113.7")).expect("second, the same address mapped");
        assert!(shares.take(ip("203.0.113.7")).is_none(), "a third is refused");
        let (one, other) = (a.answer_bytes().expect("counted"), _b.answer_bytes().expect("counted"));
        assert!(Arc::ptr_eq(one.address(), other.address()), "an address's connections count their answers together");
        assert!(shares.take(ip("203.0.113.8")).is_some(), "another address has its own share");
        drop(a);
        let _c = shares.take(ip("203.0.113.7")).expect("a place freed is taken again");
        // One IPv6 client holds a /64.
        let _d = shares.take(ip("2001:db8::1")).expect("v6 first");
        let _e = shares.take(ip("2001:db8::ffff:2")).expect("v6 second, same /64");
        assert!(shares.take(ip("2001:db8::3")).is_none(), "the /64's share is spent");
        assert!(shares.take(ip("2001:db8:0:1::3")).is_some(), "the next /64 is another client");
        // Trusted proxies are never counted.
        let proxies: Vec<_> = (0..10).map(|_| shares.take(ip("10.1.2.3")).expect("a proxy")).collect();
        assert!(proxies.iter().all(|p| p.answer_bytes().is_none()), "nor its answers");
        assert_eq!(shares.addresses(), 2, "the proxy holds no count: {proxies:?}");
        drop((_b, _c, _d, _e));
        assert_eq!(shares.addresses(), 0, "every place given back");
    }
}
