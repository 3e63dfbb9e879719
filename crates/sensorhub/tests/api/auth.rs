//! HTTP Basic, 401/403, and 405 before authentication.

use crate::harness::{ALICE_PASSWORD, TestApp, assert_error, basic};
use reqwest::Method;

on_each_backend! {
    async fn missing_malformed_and_wrong_credentials_are_401_with_a_challenge() {
        let app = TestApp::start().await;
        let cases = [
            None,
            Some("Bearer abc".to_owned()),
            Some("Basic !!!not-base64".to_owned()),
            Some("Basic YWxpY2U=".to_owned()), // "alice", no colon
            Some("Basic".to_owned()),
            Some(basic("alice", "wrong")),
            Some(basic("alice", "alice:pass")),
            Some(basic("nobody", "x")),
            Some(basic("", "")),
        ];
        for path in ["/devices", "/devices/AWLR-001/data"] {
            for auth in &cases {
                let a = app.send(Method::GET, path, auth.as_deref()).await;
                assert_error(&a, 401, "Unauthorized");
                assert_eq!(a.headers["www-authenticate"], "Basic realm=\"sensorhub\"", "{auth:?}");
            }
        }
    }
}

on_each_backend! {
    async fn two_authorization_headers_are_refused() {
        let app = TestApp::start().await;
        let res = reqwest::Client::new()
            .get(format!("{}/devices", app.base))
            .header("Authorization", basic("alice", ALICE_PASSWORD))
            .header("Authorization", basic("bob", "bob-pass"))
            .send()
            .await
            .expect("request");
        assert_eq!(res.status(), 401);
    }
}

on_each_backend! {
    async fn the_scheme_is_case_insensitive_and_passwords_may_hold_colons() {
        let app = TestApp::start().await;
        let value = basic("alice", ALICE_PASSWORD).replacen("Basic", "bAsIc", 1);
        let a = app.send(Method::GET, "/devices", Some(&value)).await;
        assert_eq!(a.status, 200, "{}", a.text);
    }
}

on_each_backend! {
    async fn a_disabled_account_is_403_with_the_right_password_and_401_without() {
        let app = TestApp::start().await;
        assert_error(&app.get_as("bob", "bob-pass", "/devices").await, 403, "Forbidden");
        assert_error(&app.get_as("bob", "bob-pass", "/devices/AWS-002/data").await, 403, "Forbidden");
        assert_error(&app.get_as("bob", "wrong", "/devices").await, 401, "Unauthorized");
    }
}

on_each_backend! {
    async fn other_methods_get_405_before_authentication() {
        let app = TestApp::start().await;
        let paths = ["/devices", "/devices/AWLR-001/data", "/pk-alice-all/devices", "/pk-nope/devices/X/data"];
        for path in paths {
            for method in [Method::POST, Method::PUT, Method::DELETE, Method::PATCH] {
                let a = app.send(method.clone(), path, None).await;
                assert_error(&a, 405, "Method Not Allowed");
                assert_eq!(a.headers["allow"], "GET, HEAD", "{method} {path}");
            }
        }
    }
}

on_each_backend! {
    async fn head_answers_like_get_without_a_body() {
        let app = TestApp::start().await;
        let a = app.send(Method::HEAD, "/devices", Some(&basic("alice", ALICE_PASSWORD))).await;
        assert_eq!(a.status, 200);
        assert!(a.text.is_empty());
        assert_eq!(a.headers["content-type"], "application/json");
    }
}

on_each_backend! {
    async fn a_password_change_invalidates_cached_credentials() {
        let app = TestApp::start().await;
        assert_eq!(app.alice("/devices").await.status, 200);
        let mut doc: sensorhub_core::provision::Provision =
            sensorhub_core::provision::parse_json(r#"{"accounts":[{"username":"alice","password":"new-pass"}]}"#)
                .expect("valid");
        let readings = doc.check().expect("valid");
        app.store.apply(doc, readings).await.expect("apply");
        assert_error(&app.alice("/devices").await, 401, "Unauthorized");
        assert_eq!(app.get_as("alice", "new-pass", "/devices").await.status, 200);
    }
}

on_each_backend! {
    async fn disabling_takes_effect_at_once_even_for_cached_logins_and_keys() {
        let app = TestApp::start().await;
        assert_eq!(app.alice("/devices").await.status, 200);
        let mut doc: sensorhub_core::provision::Provision =
            sensorhub_core::provision::parse_json(r#"{"accounts":[{"username":"alice","disabled":true}]}"#).expect("valid");
        let readings = doc.check().expect("valid");
        app.store.apply(doc, readings).await.expect("apply");
        assert_error(&app.alice("/devices").await, 403, "Forbidden");
        assert_error(&app.get("/pk-alice-all/devices").await, 403, "Forbidden");
    }
}

#[tokio::test]
async fn each_kind_of_caller_reaches_what_its_credentials_allow() {
    let app = TestApp::start().await;
    let by_basic = app.as_alice().get("/devices").await;
    let by_key = app.with_key("pk-alice-all").get("/devices").await;
    assert_eq!((by_basic.status.as_u16(), by_key.status.as_u16()), (200, 200), "{} {}", by_basic.text, by_key.text);
    assert_eq!(by_basic.data(), by_key.data(), "alice and her all-devices key see the same devices");
    assert_error(&app.with_key("pk-nobody").get("/devices").await, 403, "Forbidden");
    assert_error(&app.as_user("alice", "wrong").get("/devices").await, 401, "Unauthorized");
    let envelope = r#"{"event":"sensor-data","device_id":"AWLR-001","timestamp":"2026-05-05T07:00:00+07:00","data":{"AWLR1-wl":1}}"#;
    let sent = app.with_webhook_key("wh-alice-secret").post("/webhook/sensor-data", envelope).await;
    assert_eq!(sent.status, 200, "{}", sent.text);
    assert_eq!(app.with_webhook_key("wh-wrong").post("/webhook/sensor-data", envelope).await.status, 401);
}
