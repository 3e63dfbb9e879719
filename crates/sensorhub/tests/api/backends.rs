//! The same requests answered by a SQLite and a PostgreSQL server over the
//! same provisioning: the bodies must be equal byte for byte.

use crate::harness::{ALICE_PASSWORD, BACKEND, Backend, TestApp, basic};
use reqwest::Method;

const PATHS: &[(&str, bool)] = &[
    ("/devices", true),
    ("/pk-alice-all/devices", false),
    ("/pk-alice-awlr/devices", false),
    ("/devices/AWLR-001/data?start=2026-05-01T00:00:00Z&end=2026-05-06T00:00:00Z", true),
    ("/devices/AWS-002/data?start=2026-05-01T00:00:00&end=2026-05-06T00:00:00&tz=7", true),
    ("/pk-alice-all/devices/AWLR-001/data?start=2026-05-04T00:00:00&end=2026-05-05T12:00:00&tz=-03:30", false),
    ("/devices/NOPE/data?start=2026-05-01T00:00:00Z&end=2026-05-02T00:00:00Z", true),
    ("/devices/AWLR-001/data?start=2026-05-02&end=2026-05-01", true),
];

async fn answers() -> Vec<(u16, String)> {
    let app = TestApp::start().await;
    let auth = basic("alice", ALICE_PASSWORD);
    let mut out = Vec::new();
    for (path, with_basic) in PATHS {
        let a = app.send(Method::GET, path, with_basic.then_some(auth.as_str())).await;
        out.push((a.status.as_u16(), a.text));
    }
    out
}

#[tokio::test]
async fn both_backends_answer_byte_for_byte_the_same() {
    let sqlite = BACKEND.scope(Backend::Sqlite, answers()).await;
    let postgres = BACKEND.scope(Backend::Postgres, answers()).await;
    assert!(sqlite.iter().filter(|(s, _)| *s == 200).count() >= 5, "most paths succeed: {sqlite:?}");
    for ((path, _), (s, p)) in PATHS.iter().zip(sqlite.iter().zip(&postgres)) {
        assert_eq!(s, p, "{path}");
    }
}
