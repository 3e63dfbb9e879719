//! Where a delivery may go: the rules a subscription's URL must meet when
//! it is made (`https://` unless allowed otherwise, a host, no credentials).
//! The addresses it resolves to are checked again at each delivery.

use axum::http::Uri;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A subscription URL that breaks the rules, with the reason.
#[derive(Debug, thiserror::Error)]
#[error("webhook URL {url:?} {reason}")]
pub struct BadUrl {
    url: String,
    reason: &'static str,
}

/// Checks `url` for a subscription: absolute, `https://` (or `http://`
/// when `allow_http`), with a host and no user or password in it.
pub fn check_url(url: &str, allow_http: bool) -> Result<Uri, BadUrl> {
    let bad = |reason| BadUrl { url: url.to_owned(), reason };
    let uri: Uri = url.parse().map_err(|_| bad("is not a URL"))?;
    match uri.scheme_str() {
        Some("https") => {}
        Some("http") if allow_http => {}
        Some("http") => return Err(bad("must be https:// (or the subscription allows http with --allow-http)")),
        _ => return Err(bad("must be an https:// URL")),
    }
    let authority = uri.authority().ok_or_else(|| bad("has no host"))?;
    if authority.as_str().contains('@') {
        return Err(bad("must not hold a user or password"));
    }
    if authority.host().is_empty() {
        return Err(bad("has no host"));
    }
    Ok(uri)
}

/// Whether a delivery may not go to `ip` unless the operator allows
/// private targets: loopback, private, shared (CGNAT), link-local (with the
/// cloud metadata address 169.254.169.254), unique-local (with AWS's
/// fd00:ec2::254), multicast, unspecified, documentation and reserved
/// addresses, IPv6 forms that embed a forbidden IPv4 address, and the
/// tunnels that reach any IPv4 address (6to4, Teredo, NAT64 local use).
pub fn is_forbidden(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || a >= 240 // reserved
}

fn forbidden_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return forbidden_v4(v4);
    }
    let s = ip.segments();
    // NAT64 (64:ff9b::/96) and IPv4-compatible (::a.b.c.d) forms embed an IPv4 address.
    if (s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0; 4]) || s[..6] == [0; 6] {
        let v4 = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
        return ip.is_loopback() || ip.is_unspecified() || forbidden_v4(v4);
    }
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (s[0] & 0xfe00) == 0xfc00 // unique local, fc00::/7
        || (s[0] & 0xffc0) == 0xfe80 // link local, fe80::/10
        || (s[0] & 0xffc0) == 0xfec0 // site local (deprecated), fec0::/10
        || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        || s[0] == 0x2002 // 6to4, 2002::/16: relays reach any IPv4 address
        || (s[0] == 0x2001 && s[1] == 0) // Teredo, 2001::/32: likewise
        || (s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1) // NAT64 local use, 64:ff9b:1::/48
}

/// Whether `ip` is one of this host's own addresses (a public address of
/// the machine reaches its own services as loopback would): the kernel
/// lets a socket bind only to an address the host holds.
pub fn is_own(ip: IpAddr) -> bool {
    std::net::UdpSocket::bind((ip, 0)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::{check_url, is_forbidden, is_own};

    #[test]
    fn private_and_metadata_addresses_are_forbidden_public_ones_are_not() {
        let forbidden = [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fd00:ec2::254",
            "fc00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a00:1",
            "::127.0.0.1",
            "ff02::1",
            "2002:7f00:1::1",
            "2002:0808:0808::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "64:ff9b:1::a00:1",
        ];
        for ip in forbidden {
            assert!(is_forbidden(ip.parse().expect("ip")), "{ip}");
        }
        for ip in ["93.184.215.14", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"] {
            assert!(!is_forbidden(ip.parse().expect("ip")), "{ip}");
        }
    }

    #[test]
    fn the_hosts_own_addresses_are_its_own_and_public_ones_are_not() {
        // Every host holds 127.0.0.1; no host holds a documentation address.
        assert!(is_own("127.0.0.1".parse().expect("ip")));
        assert!(!is_own("192.0.2.77".parse().expect("ip")));
        assert!(!is_own("93.184.215.14".parse().expect("ip")));
    }

    #[test]
    fn urls_must_be_https_with_a_host_unless_http_is_allowed() {
        assert!(check_url("https://partner.example/hook", false).is_ok());
        assert!(check_url("https://[2001:db8::1]:8443/h?x=1", false).is_ok());
        assert!(check_url("http://partner.example/hook", false).is_err());
        assert!(check_url("http://127.0.0.1:9/hook", true).is_ok());
        for bad in ["", "partner.example/hook", "ftp://x/y", "https:///x", "https://u:p@partner.example/"] {
            assert!(check_url(bad, true).is_err(), "{bad}");
        }
    }
}
