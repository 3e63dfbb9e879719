//! Outgoing webhooks (issue 15): subscriptions managed by command, their
//! secrets shown once and sealed at rest; deliveries (delivery.rs) to a
//! local receiver (receiver.rs), batched (batch.rs); subscriptions in
//! provisioning files (provision.rs).

mod batch;
mod delivery;
mod provision;
mod receiver;

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
        let refused = failed(&subscription(&app.db, None, &add));
        assert!(refused.contains("SENSORHUB_SECRET_KEY is not set"), "{refused}");
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
        let raw = sensorhub::hooks::sign::SigningSecret::parse(&secret).expect("whsec");
        assert!(!stored[0].sealed_secret.windows(raw.as_bytes().len()).any(|w| w == raw.as_bytes()));
        let key = sensorhub::hooks::seal::SealingKey::from_base64(SECRET_KEY).expect("key");
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
