//! Subscriptions in the provisioning file `apply` reads: secrets are
//! references (an environment variable, a file) and never literals; a bad
//! reference or a missing sealing key writes nothing; re-applying changes
//! nothing; deliveries verify with the referenced secret.

use super::SECRET_KEY;
use super::delivery::{verify, worker};
use super::receiver::Receiver;
use crate::cli::{failed, ok};
use crate::harness::TestApp;
use sensorhub::delivery::sign::SigningSecret;
use sensorhub_store::delivery::Outbox;
use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_sensorhub");

/// Runs `sensorhub apply FILE --database DB` with exactly the given
/// variables among the ones the documents reference.
fn apply(db: &str, file: &Path, envs: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.arg("apply").arg(file).arg("--database").arg(db).env("SENSORHUB_LOG", "warn");
    for var in
        ["SENSORHUB_SECRET_KEY", "PARTNER_SECRET", "PARTNER_DASHBOARD_WEBHOOK_SECRET", "FLOOD_WARNING_WEBHOOK_SECRET"]
    {
        cmd.env_remove(var);
    }
    cmd.envs(envs.iter().copied());
    cmd.output().expect("run sensorhub")
}

/// A document subscribing alice's AWLR-001 to `url` with `secret` as its
/// secret and two extra headers, one read from `key_file`.
fn document(url: &str, secret: &str, key_file: &Path) -> String {
    serde_json::json!({"accounts": [{"username": "alice", "subscriptions": [{
        "name": "partner", "url": url, "allow_http": true, "devices": ["AWLR-001"], "secret": serde_json::from_str::<serde_json::Value>(secret).expect("JSON"),
        "headers": {"X-Tenant": "bantul", "X-API-KEY": {"file": key_file}}}]}]})
    .to_string()
}

on_each_backend! {
    async fn subscriptions_are_provisioned_with_referenced_secrets_idempotently() {
        let app = TestApp::start().await;
        let dir = tempfile::tempdir().expect("dir");
        let key_file = dir.path().join("partner-api-key");
        std::fs::write(&key_file, "partner-key-1\n").expect("write");
        let mut rx = Receiver::start(vec![]).await;
        let secret = SigningSecret::generate().expect("secret").reveal();
        let file = dir.path().join("subs.json");
        let write = |text: &str| std::fs::write(&file, text).expect("write");
        let with_key = [("SENSORHUB_SECRET_KEY", SECRET_KEY), ("PARTNER_SECRET", secret.as_str())];

        // Refused, each naming its place, with nothing written.
        write(&document(&rx.url, &format!("{secret:?}"), &key_file));
        let literal = failed(&apply(&app.db, &file, &with_key));
        assert!(literal.contains("accounts[0].subscriptions[0].secret") && literal.contains("never written in the file"), "{literal}");
        write(&document(&rx.url, r#"{"env": "PARTNER_SECRET"}"#, &key_file));
        let unset = failed(&apply(&app.db, &file, &with_key[..1]));
        assert!(unset.contains("accounts[0].subscriptions[0].secret: environment variable PARTNER_SECRET is not set"), "{unset}");
        // Without the variable: refused on PostgreSQL; SQLite would make a key beside the database.
        let no_key = if crate::harness::BACKEND.get() == crate::harness::Backend::Postgres {
            let no_key = failed(&apply(&app.db, &file, &with_key[1..]));
            assert!(no_key.contains("SENSORHUB_SECRET_KEY is not set"), "{no_key}");
            no_key
        } else {
            "nothing was written".to_owned()
        };
        let not_whsec = failed(&apply(&app.db, &file, &[with_key[0], ("PARTNER_SECRET", "hunter2")]));
        assert!(not_whsec.contains("is not a webhook secret") && !not_whsec.contains("hunter2"), "{not_whsec}");
        let gone = dir.path().join("missing");
        write(&document(&rx.url, &serde_json::json!({"file": gone}).to_string(), &key_file));
        let unreadable = failed(&apply(&app.db, &file, &with_key));
        assert!(unreadable.contains("accounts[0].subscriptions[0].secret: cannot read file"), "{unreadable}");
        for err in [&literal, &unset, &no_key, &not_whsec, &unreadable] {
            assert!(err.contains("nothing was written"), "{err}");
        }
        assert!(app.store.subscriptions().await.expect("list").is_empty(), "a refused document wrote nothing");

        // Applied, then again: nothing changes, the sealed secret included.
        write(&document(&rx.url, r#"{"env": "PARTNER_SECRET"}"#, &key_file));
        let first = ok(&apply(&app.db, &file, &with_key));
        assert!(first.contains("webhook subscriptions: 1 created, 0 updated"), "{first}");
        let stored = app.store.subscriptions().await.expect("list");
        let again = ok(&apply(&app.db, &file, &with_key));
        assert_eq!(again.trim(), "nothing changed: the database already matches");
        assert_eq!(app.store.subscriptions().await.expect("list"), stored);
        assert_eq!((stored.len(), stored[0].name.as_deref()), (1, Some("partner")));
        let listed = ok(&crate::hooks::subscription(&app.db, None, &["list"]));
        assert!(listed.contains("partner") && listed.contains("AWLR-001"), "{listed}");

        // A delivery verifies with the secret the variable holds and carries the headers.
        let (worker, _clock) = worker(app.store.clone(), true);
        let readings = [crate::harness::reading("AWLR-001", 1_777_964_400, "AWLR1-wl", 1.5)];
        app.store.import(Box::new(readings.into_iter().map(Ok)), Outbox::Deliver).await.expect("import");
        worker.wake();
        let got = rx.next().await;
        verify(&SigningSecret::parse(&secret).expect("whsec"), &got);
        assert_eq!((&got.headers["x-api-key"], &got.headers["x-tenant"]), (&"partner-key-1".parse().expect("v"), &"bantul".parse().expect("v")));

        // A new secret in the variable replaces the stored one in place.
        let rotated = SigningSecret::generate().expect("secret").reveal();
        let out = ok(&apply(&app.db, &file, &[with_key[0], ("PARTNER_SECRET", &rotated)]));
        assert!(out.contains("webhook subscriptions: 0 created, 1 updated"), "{out}");
        let now = app.store.subscriptions().await.expect("list");
        assert_eq!(now[0].id, stored[0].id);
        assert_ne!(now[0].sealed_secret, stored[0].sealed_secret);
    }

    async fn the_example_file_applies_with_its_variables() {
        let app = TestApp::start().await;
        let file = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/subscriptions.json"));
        let (one, two) = (SigningSecret::generate().expect("s").reveal(), SigningSecret::generate().expect("s").reveal());
        let envs = [
            ("SENSORHUB_SECRET_KEY", SECRET_KEY),
            ("PARTNER_DASHBOARD_WEBHOOK_SECRET", one.as_str()),
            ("PARTNER_DASHBOARD_API_KEY", "k"),
            ("FLOOD_WARNING_WEBHOOK_SECRET", two.as_str()),
        ];
        let out = ok(&apply(&app.db, file, &envs));
        assert!(out.contains("webhook subscriptions: 2 created"), "{out}");
        let subs = app.store.subscriptions().await.expect("list");
        let flood = subs.iter().find(|s| s.name.as_deref() == Some("flood-warning")).expect("provisioned");
        assert_eq!((flood.batch, flood.batch_max, flood.devices.clone()), (true, 50, None));
        assert_eq!(ok(&apply(&app.db, file, &envs)).trim(), "nothing changed: the database already matches");
    }
}
