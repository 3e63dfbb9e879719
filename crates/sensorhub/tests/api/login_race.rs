//! A long answer whose account is disabled while its login is being
//! checked (an Argon2 check takes a while) stops at its next page, as one
//! disabled after its first page does: its first store read finds access
//! changed since the request was authenticated, so its caller is asked
//! again before the next page.

use crate::harness::{TestApp, basic};
use crate::slow::add_long_history;
use std::time::{Duration, Instant};

const SLOW_PASSWORD: &str = "slow-login-password";

/// Its hash at the largest cost `apply` accepts (64 MiB, 8 passes), so that
/// a login takes long enough to disable the account during one.
const SLOW_HASH: &str =
    "$argon2id$v=19$m=65536,t=8,p=1$9AxN3VUOnq14hDozKX+aSg$AmahjGQQNqCmOs9dgFLjeX/UhMyhyBdPsbIXq7JzMYM";

/// Disables alice a quarter of the way through the login of a request
/// for `query` on AWLR-001's long history; the answer's status (none if
/// the connection closed before the head), the bytes it got and whether it
/// ended whole.
async fn disabled_during_login(app: &TestApp, query: &str) -> (Option<u16>, usize, bool) {
    add_long_history(app).await;
    app.apply(&format!(r#"{{"accounts":[{{"username":"alice","password_hash":"{SLOW_HASH}"}}]}}"#)).await;
    // How long a login takes: a wrong password costs the same check.
    let started = Instant::now();
    assert_eq!(app.get_as("alice", "not-the-password", "/devices").await.status, 401);
    let login = started.elapsed();
    assert!(login >= Duration::from_millis(200), "a login took {login:?}: too quick to disable during one");

    let url = format!("{}/devices/AWLR-001/data?{query}", app.base);
    let request = reqwest::Client::new().get(url).header("Authorization", basic("alice", SLOW_PASSWORD)).send();
    let answer = tokio::spawn(async move {
        let Ok(mut response) = request.await else { return (None, 0, false) };
        let (status, mut got) = (Some(response.status().as_u16()), 0);
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => got += chunk.len(),
                Ok(None) => return (status, got, true),
                Err(_) => return (status, got, false),
            }
        }
    });
    // The account is read at once, then the password checked: disable it
    // a quarter of the way through the check.
    tokio::time::sleep(login / 4).await;
    app.apply(r#"{"accounts":[{"username":"alice","disabled":true}]}"#).await;
    let outcome = answer.await.expect("the request's task");
    assert_eq!(app.get_as("alice", SLOW_PASSWORD, "/devices").await.status, 403, "and is refused after");
    outcome
}

const RANGE: &str = "start=2026-01-01T00:00:00Z&end=2026-03-01T00:00:00Z";

on_each_backend! {
    async fn a_long_answer_whose_account_is_disabled_during_its_login_stops_at_its_next_page() {
        let app = TestApp::start().await;
        let (status, got, whole) = disabled_during_login(&app, RANGE).await;
        assert_eq!(status, Some(200), "authenticated before the account was disabled");
        assert!(!whole, "the answer went on whole ({got} bytes) for an account disabled during its login");
        // Its first page is a day and a little more (about 400 KB), of 16 MB.
        assert!(got < 1 << 20, "cut after {got} bytes: not at its second page");
    }
}

on_each_backend! {
    async fn a_long_aggregated_answer_whose_account_is_disabled_during_its_login_stops_too() {
        let app = TestApp::start().await;
        // 1,000 hourly buckets: two batches of hours (512 a fetch).
        let (status, got, whole) = disabled_during_login(&app, &format!("{RANGE}&interval=1h&agg=mean")).await;
        // Cut before its head was flushed, or after.
        assert!(matches!(status, None | Some(200)), "authenticated before the account was disabled: {status:?}");
        assert!(!whole, "the aggregated answer went on whole ({got} bytes) for an account disabled during its login");
    }
}
