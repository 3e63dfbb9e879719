//! Database and cache URLs with their passwords hidden, for messages and
//! logs.

/// `url` with any password replaced by `***`, for messages and logs.
///
/// The credentials are everything after `://` up to the first `@`, as
/// tokio-postgres reads them (so a password may hold `/` or `?`); a user
/// name that could be anything else (it holds `/`, `?`, `#`, `&` or `=`,
/// when the first `@` is past the authority) is hidden too. A Redis URL
/// is read as the `url` crate reads it for the redis client: up to the
/// last `@` of the authority (so a password may hold `@`). Query
/// parameters whose name holds `pass` lose their value.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let first = rest.find('@');
    let at = if scheme.starts_with("redis") {
        let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
        authority.rfind('@').max(first)
    } else {
        first
    };
    let (mut out, tail) = match at.map(|at| (&rest[..at], &rest[at + 1..])) {
        Some((userinfo, tail)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            let user = if user.contains(['/', '?', '#', '&', '=']) { "***" } else { user };
            (format!("{scheme}://{user}:***@"), tail)
        }
        None => (format!("{scheme}://"), rest),
    };
    let (authority_path, query) = match tail.split_once('?') {
        Some((a, q)) => (a, Some(q)),
        None => (tail, None),
    };
    out.push_str(authority_path);
    if let Some(q) = query {
        // `?password=…` (libpq, Redis) and its kin: the value is a secret.
        let params: Vec<String> = q
            .split('&')
            .map(|p| match p.split_once('=') {
                Some((k, _)) if k.to_ascii_lowercase().contains("pass") => format!("{k}=***"),
                _ => p.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn urls_lose_their_password() {
        assert_eq!(redact_url("postgres://u:secret@h:5432/db"), "postgres://u:***@h:5432/db");
        assert_eq!(redact_url("sqlite://./a.db"), "sqlite://./a.db");
        assert_eq!(redact_url("./a.db"), "./a.db");
        assert_eq!(
            redact_url("postgres://u@h/db?password=hunter2&pool_max_size=4"),
            "postgres://u:***@h/db?password=***&pool_max_size=4"
        );
        assert_eq!(redact_url("postgres://u:a@h/db?sslpassword=x"), "postgres://u:***@h/db?sslpassword=***");
        assert_eq!(redact_url("redis://h:6379/0?password=hunter2"), "redis://h:6379/0?password=***");
        // tokio-postgres takes everything up to the first `@` as the
        // credentials, so these connect, and their passwords must not show.
        assert_eq!(redact_url("postgres://app:pa/ss@db/x"), "postgres://app:***@db/x");
        assert_eq!(redact_url("postgres://app:pa?ss@db/x?sslmode=disable"), "postgres://app:***@db/x?sslmode=disable");
        assert_eq!(redact_url("postgres://app:p@ss@db/x"), "postgres://app:***@ss@db/x");
        // The redis client reads the credentials up to the authority's last `@`.
        assert_eq!(redact_url("redis://:p@ss@cache:6379/0"), "redis://:***@cache:6379/0");
        assert_eq!(redact_url("rediss://u:a@b@c@cache/0?x=1"), "rediss://u:***@cache/0?x=1");
        assert_eq!(redact_url("redis://:pa/ss@cache"), "redis://:***@cache");
        for url in ["postgres://app:pa/ss@db/x", "postgres://app:pa?ss@db/x", "postgres://h/db?password=x@y"] {
            let shown = redact_url(url);
            assert!(!shown.contains("pa/ss") && !shown.contains("pa?ss") && !shown.contains("=x"), "{url} -> {shown}");
        }
    }
}
