//! Outgoing webhooks (issue 15): subscriptions managed by command, their
//! secrets shown once and sealed at rest; deliveries (delivery.rs) to a
//! local receiver (receiver.rs), batched (batch.rs), each endpoint within
//! its share (share.rs); subscriptions in
//! provisioning files (provision.rs).

mod alarms;
mod batch;
mod delivery;
mod provision;
pub(crate) mod receiver;
mod share;
mod waiting;

use crate::cli::{failed, ok};
use crate::harness::TestApp;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_sensorhub");

/// The sealing key the tests give sensorhub (32 bytes, base64).
pub const SECRET_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// Runs `sensorhub subscription ARGS --database DB`, with the sealing key
/// when `key` is given.
pub(crate) fn subscription(db: &str, key: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.arg("subscription").args(args).arg("--database").arg(db).env("SENSORHUB_LOG", "warn");
    cmd.env_remove("SENSORHUB_SECRET_KEY");
    if let Some(key) = key {
        cmd.env("SENSORHUB_SECRET_KEY", key);
    }
    cmd.output().expect("run sensorhub")
}

/// The id and secret `subscription add` (or `rotate-secret`) printed.
pub(crate) fn id_and_secret(out: &str) -> (String, String) {
    let word =
        |prefix: &str| out.split_whitespace().find(|w| w.starts_with(prefix)).map(str::to_owned).expect("printed");
    (word("sub_"), word("whsec_"))
}

on_each_backend! {
    async fn subscriptions_are_managed_by_command_with_sealed_secrets() {
        let app = TestApp::start().await;
        let add = ["add", "--account", "alice", "--url", "https://partner.example/hook", "--device", "AWLR-001"];
        if crate::harness::BACKEND.get() == crate::harness::Backend::Postgres {
            // On SQLite a key is made beside the database (key_file_*, below).
            let refused = failed(&subscription(&app.db, None, &add));
            assert!(refused.contains("SENSORHUB_SECRET_KEY is not set"), "{refused}");
            assert!(refused.contains("head -c 32 /dev/urandom | base64"), "says how to make one: {refused}");
        }
        let http = failed(&subscription(&app.db, Some(SECRET_KEY), &["add", "--account", "alice", "--url", "http://p.example/"]));
        assert!(http.contains("must be https://"), "{http}");
        let unseen = failed(&subscription(&app.db, Some(SECRET_KEY), &[&add[..5], &["--device", "SECRET-9"]].concat()));
        assert!(unseen.contains("SECRET-9"), "{unseen}");

        let (id, secret) = id_and_secret(&ok(&subscription(&app.db, Some(SECRET_KEY), &add)));
        let listed = ok(&subscription(&app.db, None, &["list"]));
        assert!(listed.contains(&id) && listed.contains("AWLR-001") && listed.contains("enabled"), "{listed}");
        assert!(!listed.contains(&secret[6..]), "the secret is shown once, not listed");

        // What the database holds is sealed: it does not contain the secret and opens only with the key.
        let stored = app.store.subscriptions().await.expect("list");
        let raw = sensorhub::delivery::sign::SigningSecret::parse(&secret).expect("whsec");
        assert!(!stored[0].sealed_secret.windows(raw.as_bytes().len()).any(|w| w == raw.as_bytes()));
        let key = sensorhub::delivery::seal::SealingKey::from_base64(SECRET_KEY).expect("key");
        assert_eq!(key.open(&id, &stored[0].sealed_secret).expect("opens"), raw.as_bytes());

        let (same, rotated) = id_and_secret(&ok(&subscription(&app.db, Some(SECRET_KEY), &["rotate-secret", &id])));
        assert_eq!(same, id);
        assert_ne!(rotated, secret);
        ok(&subscription(&app.db, None, &["disable", &id]));
        assert!(ok(&subscription(&app.db, None, &["list"])).contains("disabled"));
        ok(&subscription(&app.db, None, &["remove", &id]));
        assert!(failed(&subscription(&app.db, None, &["remove", &id])).contains("no webhook subscription"));
        assert_eq!(ok(&subscription(&app.db, None, &["list"])).trim(), "no webhook subscriptions");
    }
}

#[tokio::test]
async fn key_file_a_sqlite_database_makes_its_own_secret_key_once_and_the_variable_wins() {
    use std::os::unix::fs::PermissionsExt;
    let app = TestApp::start().await;
    let add = ["add", "--account", "alice", "--url", "https://partner.example/hook"];
    let first = subscription(&app.db, None, &add);
    let said = String::from_utf8_lossy(&first.stderr).into_owned();
    let (id, _) = id_and_secret(&ok(&first));
    let file = format!("{}.secret-key", app.db);
    assert!(said.contains(&file), "the key file is named when it is made: {said}");
    assert_eq!(std::fs::metadata(&file).expect("key file").permissions().mode() & 0o777, 0o600);
    let second = subscription(&app.db, None, &["rotate-secret", &id]);
    assert!(!String::from_utf8_lossy(&second.stderr).contains(&file), "named once");
    let (_, secret) = id_and_secret(&ok(&second));
    let from_file = sensorhub::delivery::seal::SealingKey::from_base64(&std::fs::read_to_string(&file).expect("read"))
        .expect("a key");
    let raw = sensorhub::delivery::sign::SigningSecret::parse(&secret).expect("whsec");
    let sealed = |subs: &[sensorhub_store::delivery::Subscription], id: &str| {
        subs.iter().find(|s| s.id == id).expect("stored").sealed_secret.clone()
    };
    let subs = app.store.subscriptions().await.expect("list");
    let opened = from_file.open(&id, &sealed(&subs, &id)).expect("the file's key");
    assert_eq!(opened, raw.as_bytes(), "both commands used one key");
    let (with_var, _) = id_and_secret(&ok(&subscription(&app.db, Some(SECRET_KEY), &add)));
    let var_key = sensorhub::delivery::seal::SealingKey::from_base64(SECRET_KEY).expect("key");
    let subs = app.store.subscriptions().await.expect("list");
    assert!(var_key.open(&with_var, &sealed(&subs, &with_var)).is_ok(), "the variable wins over the file");
}
