//! The client's address: the peer's, or, when the peer is one of the
//! operator's trusted reverse proxies, the address they forwarded in the
//! configured header. A header sent by a client that reaches the service
//! directly is ignored: anyone can write `X-Forwarded-For`.

use axum::extract::ConnectInfo;
use axum::http::{Extensions, HeaderMap, HeaderName};
use ipnet::IpNet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// The header a trusted proxy puts the client's address in, and the
/// networks those proxies are in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardedFor {
    /// The header, e.g. `X-Forwarded-For`.
    pub header: HeaderName,
    /// Peers whose header is believed; every address in them is a proxy.
    pub trusted: Vec<IpNet>,
}

impl ForwardedFor {
    fn trusts(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.trusted.iter().any(|n| n.contains(&ip))
    }

    /// The client behind the proxies: the header's entries read from the
    /// right (the nearest proxy's), skipping trusted proxies; the first one
    /// that is not a proxy is the client. `None` when an entry does not parse.
    fn forwarded(&self, headers: &HeaderMap) -> Option<IpAddr> {
        let mut nearest = None;
        for value in headers.get_all(&self.header).iter().rev() {
            for entry in value.to_str().ok()?.rsplit(',') {
                let ip = parse_entry(entry.trim())?;
                if !self.trusts(ip) {
                    return Some(ip);
                }
                nearest = Some(ip);
            }
        }
        nearest
    }
}

/// A bare address, or one with a port (`10.0.0.1:5555`, `[2001:db8::1]:443`).
fn parse_entry(entry: &str) -> Option<IpAddr> {
    entry.parse().ok().or_else(|| entry.parse::<SocketAddr>().ok().map(|a| a.ip()))
}

/// The client address of a request, canonical (an IPv4-mapped IPv6
/// address is its IPv4 address).
pub fn client_ip(headers: &HeaderMap, extensions: &Extensions, forwarded: Option<&ForwardedFor>) -> IpAddr {
    let peer = extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |ConnectInfo(addr)| addr.ip())
        .to_canonical();
    match forwarded {
        Some(f) if f.trusts(peer) => f.forwarded(headers).unwrap_or(peer).to_canonical(),
        _ => peer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::server::parse_networks;
    use axum::http::HeaderValue;

    fn request_from(peer: &str, xff: &[&str]) -> (HeaderMap, Extensions) {
        let mut h = HeaderMap::new();
        for v in xff {
            h.append("x-forwarded-for", HeaderValue::from_str(v).expect("value"));
        }
        let mut e = Extensions::new();
        e.insert(ConnectInfo(peer.parse::<SocketAddr>().expect("peer")));
        (h, e)
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn the_header_counts_only_from_trusted_proxies() {
        let f = ForwardedFor {
            header: HeaderName::from_static("x-forwarded-for"),
            trusted: parse_networks("10.0.0.0/8, 192.0.2.7").expect("networks"),
        };
        let at = |peer: &str, xff: &[&str]| {
            let (h, e) = request_from(peer, xff);
            client_ip(&h, &e, Some(&f))
        };
        // From the proxy: the client it forwarded (the last entry).
        assert_eq!(at("10.1.2.3:5000", &["198.51.100.1, 203.0.113.7"]), ip("203.0.113.7"));
        // A client reaching the service directly cannot choose its address.
        assert_eq!(at("203.0.113.9:5000", &["198.51.100.1"]), ip("203.0.113.9"));
        // Through two proxies: trusted entries are skipped from the right.
        assert_eq!(at("192.0.2.7:1", &["203.0.113.7, 10.0.0.5"]), ip("203.0.113.7"));
        assert_eq!(at("192.0.2.7:1", &["203.0.113.7", "10.0.0.5"]), ip("203.0.113.7"), "several header lines");
        // Ports, IPv6 and IPv4-mapped entries; garbage leaves the peer.
        assert_eq!(at("10.0.0.1:1", &["[2001:db8::1]:443"]), ip("2001:db8::1"));
        assert_eq!(at("10.0.0.1:1", &["::ffff:203.0.113.7"]), ip("203.0.113.7"));
        assert_eq!(at("[::ffff:10.0.0.1]:1", &["203.0.113.8"]), ip("203.0.113.8"), "a mapped peer is trusted too");
        assert_eq!(at("10.0.0.1:1", &["garbage"]), ip("10.0.0.1"));
        // No header configured: the peer.
        let (h, e) = request_from("10.1.2.3:5000", &["203.0.113.7"]);
        assert_eq!(client_ip(&h, &e, None), ip("10.1.2.3"));
        assert!(parse_networks("10.0.0.0/33").is_err());
        assert!(parse_networks("nonsense").is_err());
    }
}
