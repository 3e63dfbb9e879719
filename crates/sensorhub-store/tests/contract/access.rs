//! The access generation: every change that may take access away moves it,
//! on every backend, whichever way it is made; re-applying the same file
//! does not.

use super::{apply, backends};
use sensorhub_core::secret::key_digest;
use sensorhub_store::Store;

async fn generation(s: &dyn Store) -> i64 {
    s.access_generation().await.expect("generation")
}

/// Runs `change` and says whether it moved the generation.
async fn moves(s: &dyn Store, change: &str) -> bool {
    let before = generation(s).await;
    apply(s, change).await.unwrap_or_else(|e| panic!("{change}: {e}"));
    generation(s).await > before
}

#[tokio::test]
async fn every_change_that_takes_access_away_moves_the_generation() {
    for b in backends().await {
        let s = &*b.store;
        assert!(!moves(s, super::BASE).await, "re-applying the same file takes nothing away");
        let wider = r#"{"accounts":[{"username":"alice","devices":["D1","D2"]}]}"#;
        apply(s, wider).await.expect("widen");
        for (what, change) in [
            ("a device taken from the account", r#"{"accounts":[{"username":"alice","devices":["D1"]}]}"#),
            (
                "a key's scope narrowed",
                r#"{"accounts":[{"username":"alice","api_keys":[{"id":"k-all","devices":["D1"]}]}]}"#,
            ),
            ("a password changed", r#"{"accounts":[{"username":"alice","password":"new"}]}"#),
            ("an account disabled", r#"{"accounts":[{"username":"alice","disabled":true}]}"#),
        ] {
            assert!(moves(s, change).await, "{what}");
        }
        let before = generation(s).await;
        s.revoke_api_key("k-d1").await.expect("revoke");
        assert!(generation(s).await > before, "a key revoked");
        if b.pg.is_some() {
            // TRUNCATE fires no delete trigger: it has triggers of its own.
            for table in ["api_key_devices", "account_devices"] {
                let before = generation(s).await;
                outside(&b, &format!("TRUNCATE {table}")).await;
                assert!(generation(s).await > before, "{table} emptied");
            }
        }
        let id = s.installation_id().await.expect("installation id");
        assert!(id.len() == 32 && id.bytes().all(|c| c.is_ascii_hexdigit()), "{id}");
        assert_eq!(s.installation_id().await.expect("again"), id, "made once");
    }
}

/// Runs `sql` on `b`'s database from a connection of its own, as an
/// operator or another program would.
pub(super) async fn outside(b: &super::Backend, sql: &str) {
    if let Some(path) = b.url.strip_prefix("sqlite://") {
        rusqlite::Connection::open(path).expect("open file").execute_batch(sql).expect(sql);
        return;
    }
    let (client, connection) = tokio_postgres::connect(&b.url, tokio_postgres::NoTls).await.expect("connect");
    let connection = tokio::spawn(connection);
    client.batch_execute(sql).await.expect(sql);
    drop(client);
    let _ = connection.await;
}

/// A device's write permission is kept between webhook requests, and
/// every change that could alter it reaches the next request, however it
/// is made: the generations read with the webhook key move, and the
/// answer is read again.
#[tokio::test]
async fn a_kept_write_permission_follows_every_change() {
    for b in backends().await {
        let s = &*b.store;
        let hook = r#"{"accounts":[{"username":"alice","write":["D1"],"webhook_keys":[{"key":"hook-a"}]}]}"#;
        apply(s, hook).await.expect("hook");
        // As the webhook asks: the key (with the generations), then the device.
        let ask = async |id: &str| {
            let key = s.webhook_key_auth(&key_digest("hook-a")).await.expect("key").expect("exists");
            let got = s.writable_device(key.account_id, id, Some(key.generations)).await.expect("writable");
            got.map(|(d, may)| (d.sensors.len(), may))
        };
        assert_eq!(ask("D1").await, Some((2, true)));
        assert_eq!(ask("D1").await, Some((2, true)), "asked again");
        assert_eq!(ask("D2").await, None, "not alice's");

        let three = r#"{"devices":[{"device_id":"D1","name":"one","type":"AWS","lat":1,"long":2,"interval_seconds":60,
            "sensors":[{"sensor_id":"a","name":"A","type":"T","unit":"%"},{"sensor_id":"b","name":"B","type":"T","unit":"."},
                       {"sensor_id":"c","name":"C","type":"T","unit":"mm"}]}]}"#;
        apply(s, three).await.expect("a sensor added");
        assert_eq!(ask("D1").await, Some((3, true)), "a sensor added");

        outside(&b, "UPDATE account_devices SET can_write = false WHERE device_pk = (SELECT id FROM devices WHERE device_id = 'D1')").await;
        assert_eq!(ask("D1").await, Some((3, false)), "a grant narrowed in place");
        apply(s, hook).await.expect("granted again");
        assert_eq!(ask("D1").await, Some((3, true)), "granted again");
        if b.pg.is_some() {
            outside(&b, "TRUNCATE account_devices").await;
            assert_eq!(ask("D1").await, None, "every grant emptied at once");
            apply(s, r#"{"accounts":[{"username":"alice","devices":["D1"]}]}"#).await.expect("shown again");
        } else {
            let narrowed = "INSERT OR REPLACE INTO account_devices (account_id, device_pk, can_write)
                            SELECT account_id, device_pk, 0 FROM account_devices";
            outside(&b, narrowed).await;
            assert_eq!(ask("D1").await, Some((3, false)), "a grant replaced by a narrower one");
        }

        let owns = r#"{"accounts":[{"username":"alice","write":[]},{"username":"bob","password":"pw","devices":[]}],
            "devices":[{"device_id":"D1","name":"one","type":"AWS","lat":1,"long":2,"interval_seconds":60,"owner":"alice"}]}"#;
        apply(s, owns).await.expect("alice owns D1");
        assert_eq!(ask("D1").await, Some((3, true)), "an owner writes");
        let moved = r#"{"devices":[{"device_id":"D1","name":"one","type":"AWS","lat":1,"long":2,"interval_seconds":60,"owner":"bob"}]}"#;
        apply(s, moved).await.expect("bob owns D1");
        assert_eq!(ask("D1").await, Some((3, false)), "the owner moved");
        assert!(!moves(s, moved).await, "re-applying an owner changes nothing");

        apply(s, r#"{"accounts":[{"username":"alice","devices":[]}]}"#).await.expect("taken away");
        assert_eq!(ask("D1").await, None, "the device taken from the account");
    }
}

/// An API key's lookup and a raw window's read both carry the access
/// generation (the window's read with the device's visibility), so that a
/// key's answer kept from its lookup is confirmed by the window alone, and a
/// change that takes it away, however it is made, shows in the window's.
#[tokio::test]
async fn a_window_reads_the_generation_a_key_is_checked_at() {
    for b in backends().await {
        let s = &*b.store;
        let looked_up = async || s.api_key_auth(&key_digest("k-d1")).await.expect("lookup").expect("known");
        let window = async |scope, id: &str| s.window_hours(scope, id, 0, 1 << 40, 26).await.expect("window");
        let key = looked_up().await;
        assert_eq!(key.access, generation(s).await);
        let head = window(key.scope(), "D1").await;
        assert_eq!(head.access, key.access, "nothing changed");
        assert_eq!(head.found.map(|(d, hours)| (d.sensors.len(), hours.len())), Some((2, 0)));
        let hidden = window(key.scope(), "D2").await;
        assert_eq!((hidden.access, hidden.found.is_none()), (key.access, true), "not in the key's list");

        outside(&b, "UPDATE api_keys SET revoked = TRUE").await;
        let head = window(key.scope(), "D1").await;
        assert!(head.access > key.access, "a key revoked by SQL from another connection");
        let key = looked_up().await;
        assert!(key.revoked);
        assert_eq!(key.access, head.access, "the lookup reads the generation the window does");
    }
}

/// A raw window's device is kept between requests (per scope, with the
/// generations it was read at), and every change that could alter it
/// reaches the next window, however it is made.
#[tokio::test]
async fn a_kept_window_device_follows_every_change() {
    for b in backends().await {
        let s = &*b.store;
        let key = s.api_key_auth(&key_digest("k-d1")).await.expect("lookup").expect("known").scope();
        let alice = sensorhub_store::Scope::Account { account_id: key_account(s).await, key: None };
        let ask = async |scope, id: &str| {
            let head = s.window_hours(scope, id, 0, 1 << 40, 26).await.expect("window");
            head.found.map(|(d, _)| (d.pk, d.sensors.len()))
        };
        let d1 = ask(alice, "D1").await.expect("alice sees D1");
        assert_eq!(d1.1, 2);
        assert_eq!(ask(key, "D1").await, Some(d1), "the key lists D1");
        // Kept: the device is not looked up again while nothing moves (its
        // sensors' table renamed away from another connection).
        outside(&b, "ALTER TABLE sensors RENAME TO sensors_away").await;
        assert_eq!(ask(alice, "D1").await, Some(d1), "kept for alice");
        assert_eq!(ask(key, "D1").await, Some(d1), "kept for the key");
        outside(&b, "ALTER TABLE sensors_away RENAME TO sensors").await;

        let three = r#"{"devices":[{"device_id":"D1","name":"one","type":"AWS","lat":1,"long":2,"interval_seconds":60,
            "sensors":[{"sensor_id":"a","name":"A","type":"T","unit":"%"},{"sensor_id":"b","name":"B","type":"T","unit":"."},
                       {"sensor_id":"c","name":"C","type":"T","unit":"mm"}]}]}"#;
        apply(s, three).await.expect("a sensor added");
        assert_eq!(ask(alice, "D1").await, Some((d1.0, 3)), "a sensor added");

        assert_eq!(ask(key, "D1").await, Some((d1.0, 3)), "the key's, kept at these generations");
        let d2_id = "(SELECT id FROM devices WHERE device_id = 'D2')";
        outside(&b, &format!("UPDATE api_key_devices SET device_pk = {d2_id}")).await;
        assert_eq!(ask(key, "D1").await, None, "the key's list pointed at another device in place, by SQL");
        outside(&b, &format!("UPDATE api_key_devices SET device_pk = {}", d2_id.replace("D2", "D1"))).await;
        assert_eq!(ask(key, "D1").await, Some((d1.0, 3)), "and back");
        outside(&b, "DELETE FROM api_key_devices").await;
        assert_eq!(ask(key, "D1").await, None, "the key's list emptied by SQL from another connection");
        assert_eq!(ask(alice, "D1").await, Some((d1.0, 3)), "the account still sees it");
        outside(&b, "DELETE FROM account_devices").await;
        assert_eq!(ask(alice, "D1").await, None, "the account's grant deleted by SQL");
        apply(s, r#"{"accounts":[{"username":"alice","devices":["D1","D2"]}]}"#).await.expect("shown again");
        let d2 = ask(alice, "D2").await.expect("alice sees D2");
        assert_eq!(ask(alice, "D1").await, Some((d1.0, 3)));

        // The two devices' ids swapped by SQL: each id names the other device.
        outside(&b, "UPDATE devices SET device_id = 'tmp' WHERE device_id = 'D1'").await;
        outside(&b, "UPDATE devices SET device_id = 'D1' WHERE device_id = 'D2'").await;
        outside(&b, "UPDATE devices SET device_id = 'D2' WHERE device_id = 'tmp'").await;
        assert_eq!(ask(alice, "D1").await, Some(d2), "D1 is the other device now");
        assert_eq!(ask(alice, "D2").await, Some((d1.0, 3)));
    }
}

/// A window's device keeps each sensor at its stored position, a gap in
/// the positions (a sensor row deleted by hand) included, as the other
/// look-ups do: values are rendered by position, so packing the sensors
/// would put one sensor's values under another's id.
#[tokio::test]
async fn a_windows_sensors_keep_their_positions_across_a_gap() {
    for b in backends().await {
        let s = &*b.store;
        let three = r#"{"devices":[{"device_id":"D1","name":"one","type":"AWS","lat":1,"long":2,"interval_seconds":60,
            "sensors":[{"sensor_id":"a","name":"A","type":"T","unit":"%"},{"sensor_id":"b","name":"B","type":"T","unit":"."},
                       {"sensor_id":"c","name":"C","type":"T","unit":"mm"}]}]}"#;
        apply(s, three).await.expect("a third sensor");
        outside(&b, "DELETE FROM sensors WHERE sensor_id = 'b'").await;
        let alice = sensorhub_store::Scope::Account { account_id: key_account(s).await, key: None };
        let head = s.window_hours(alice, "D1", 0, 1 << 40, 26).await.expect("window");
        let (device, _) = head.found.expect("alice sees D1");
        let ids: Vec<_> = device.sensors.iter().map(|m| m.sensor_id.as_str()).collect();
        assert_eq!(ids, ["a", "", "c"], "c stays at position 2");
        let found = s.find_device(alice, "D1").await.expect("find").expect("found");
        assert_eq!(found.sensors, device.sensors, "as the device's own look-up places them");
    }
}

/// The account of the test's keys.
async fn key_account(s: &dyn Store) -> i64 {
    s.api_key_auth(&key_digest("k-all")).await.expect("lookup").expect("known").account_id
}
