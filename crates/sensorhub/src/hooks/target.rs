//! Where a delivery may go: the rules a subscription's URL must meet when
//! it is made (`https://` unless allowed otherwise, a host, no credentials).
//! The addresses it resolves to are checked again at each delivery.

use axum::http::Uri;

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

#[cfg(test)]
mod tests {
    use super::check_url;

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
