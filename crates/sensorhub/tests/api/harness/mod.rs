//! `TestApp`: a temporary database provisioned through the same path as
//! `apply`, the real router served on 127.0.0.1:0, and clients per actor.
//! Tests written with [`on_each_backend!`] run once on SQLite and once on
//! PostgreSQL (a database made for the test at `SENSORHUB_TEST_POSTGRES`,
//! default `postgres://postgres@127.0.0.1:5432/test`, dropped after it).

use reqwest::{Method, StatusCode, header::HeaderMap};
use sensorhub::config::serve::ServeSettings;
use sensorhub::config::server::{ConnectionLimits, CounterStore};
use sensorhub_core::model::ReadingInput;
use sensorhub_core::provision::{Provision, parse_json};
use sensorhub_core::time::RangeRules;
use sensorhub_store::Store;
use sensorhub_testing::TempDatabase;
use serde_json::Value;
use std::sync::Arc;
use tempfile::TempDir;
use tokio::sync::oneshot;

mod serve;
pub use serve::ServeProcess;

/// The provisioning file every test starts from.
pub const FIXTURE: &str = include_str!("../fixture.json");

/// Alice's password (it contains colons on purpose).
pub const ALICE_PASSWORD: &str = "alice:pass:with:colons";

/// The database a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

tokio::task_local! {
    /// The backend of the running test; SQLite outside [`on_each_backend!`].
    pub static BACKEND: Backend;
}

/// Defines `mod NAME { fn sqlite(); fn postgres(); }`: the test body run on
/// each backend.
macro_rules! on_each_backend {
    ($(async fn $name:ident() $body:block)*) => {$(
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            async fn body() $body

            #[tokio::test]
            async fn sqlite() {
                $crate::harness::BACKEND.scope($crate::harness::Backend::Sqlite, body()).await
            }

            #[tokio::test]
            async fn postgres() {
                $crate::harness::BACKEND.scope($crate::harness::Backend::Postgres, body()).await
            }
        }
    )*};
}

/// The PostgreSQL server tests make their databases on.
pub fn postgres_admin_url() -> String {
    std::env::var("SENSORHUB_TEST_POSTGRES").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A fresh empty database of the current test's backend: its URL, and what
/// keeps it alive.
pub async fn fresh_database() -> (String, TempDir, Option<TempDatabase>) {
    let dir = tempfile::tempdir().expect("temp dir");
    match BACKEND.try_with(|b| *b).unwrap_or(Backend::Sqlite) {
        Backend::Sqlite => (dir.path().join("test.db").to_str().expect("utf-8 path").to_owned(), dir, None),
        Backend::Postgres => {
            let pg = TempDatabase::create(&postgres_admin_url()).await.expect("a PostgreSQL test database");
            (pg.url().to_owned(), dir, Some(pg))
        }
    }
}

/// A running server over its own temporary database.
pub struct TestApp {
    /// `http://127.0.0.1:PORT/external/v1`
    pub base: String,
    /// The server's store (its live streams hear of what is written to it), for tests that add readings.
    pub store: Arc<dyn Store>,
    /// The database: a SQLite file path or a PostgreSQL URL.
    pub db: String,
    client: reqwest::Client,
    shutdown: Option<oneshot::Sender<()>>,
    _dir: TempDir,
    _pg: Option<TempDatabase>,
}

/// A response, parsed.
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
    pub text: String,
}

impl Answer {
    /// The `data` of a success envelope.
    pub fn data(&self) -> &Value {
        &self.body["data"]
    }
}

/// How a [`TestApp`] starts: its settings, its database, what it is
/// provisioned with. [`TestApp::builder`] starts from the harness's settings
/// ([`TestApp::settings`]) over a fresh database with the fixture.
pub struct Builder {
    settings: ServeSettings,
    fixture: Option<&'static str>,
    database: Option<(String, TempDir, Option<TempDatabase>)>,
}

impl Builder {
    /// Serves with `settings` (the database is the test's own).
    pub fn settings(mut self, settings: ServeSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Changes the settings in place.
    pub fn configure(mut self, change: impl FnOnce(&mut ServeSettings)) -> Self {
        change(&mut self.settings);
        self
    }

    /// Starts over an empty database: no fixture.
    pub fn empty(mut self) -> Self {
        self.fixture = None;
        self
    }

    /// Starts over an existing database (kept alive by `dir` and `pg`), as it is.
    pub fn over(mut self, db: String, dir: TempDir, pg: Option<TempDatabase>) -> Self {
        self.database = Some((db, dir, pg));
        self.fixture = None;
        self
    }

    /// Opens the database, provisions it through the same path as `apply`,
    /// and starts the service on 127.0.0.1:0 the way `serve` does
    /// ([`sensorhub::service::launch`]).
    pub async fn start(self) -> TestApp {
        let (db, dir, pg) = match self.database {
            Some(database) => database,
            None => fresh_database().await,
        };
        let store = sensorhub_store::open(&db).await.expect("open store");
        if let Some(text) = self.fixture {
            let mut doc: Provision = parse_json(text).expect("fixture parses");
            let readings = doc.check().expect("fixture is valid");
            store.apply(doc, readings).await.expect("fixture applies");
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let (tx, rx) = oneshot::channel::<()>();
        let stop = async {
            let _ = rx.await;
        };
        let settings = ServeSettings { database: db.clone(), ..self.settings };
        let service = sensorhub::service::launch(settings, store.clone(), listener, stop).await.expect("launch");
        TestApp {
            base: format!("http://{}/external/v1", service.address),
            store,
            db,
            client: reqwest::Client::new(),
            shutdown: Some(tx),
            _dir: dir,
            _pg: pg,
        }
    }
}

impl TestApp {
    /// The harness's settings: `serve`'s defaults with a short shutdown grace.
    pub fn settings() -> ServeSettings {
        let mut settings = ServeSettings::default();
        settings.connections.shutdown_grace = std::time::Duration::from_secs(5);
        settings
    }

    /// A builder over a fresh database with the fixture and [`TestApp::settings`].
    pub fn builder() -> Builder {
        Builder { settings: Self::settings(), fixture: Some(FIXTURE), database: None }
    }

    /// A server over the fixture with the harness's settings (tz 0, 366 days, 600/minute).
    pub async fn start() -> Self {
        Self::builder().start().await
    }

    /// A server over the fixture with `rules`.
    pub async fn with_rules(rules: RangeRules) -> Self {
        Self::builder().configure(|s| s.rules = rules).start().await
    }

    /// A server over the fixture with `settings`.
    pub async fn with(settings: ServeSettings) -> Self {
        Self::builder().settings(settings).start().await
    }

    /// A server over the fixture with `settings` and connection `limits`.
    pub async fn with_limits(settings: ServeSettings, limits: ConnectionLimits) -> Self {
        Self::builder().settings(ServeSettings { connections: limits, ..settings }).start().await
    }

    /// A server over an empty database.
    pub async fn empty() -> Self {
        Self::builder().empty().start().await
    }

    /// A server over an existing database (kept alive by `dir` and `pg`).
    pub async fn over(db: String, dir: TempDir, pg: Option<TempDatabase>) -> Self {
        Self::builder().over(db, dir, pg).start().await
    }

    /// Applies the provisioning document `text` as `apply` does.
    pub async fn apply(&self, text: &str) {
        let mut doc: Provision = parse_json(text).expect("document parses");
        let readings = doc.check().expect("document is valid");
        self.store.apply(doc, readings).await.expect("document applies");
    }

    /// Stores readings directly.
    pub async fn add_readings(&self, readings: Vec<ReadingInput>) {
        self.store
            .import(Box::new(readings.into_iter().map(Ok)), sensorhub_store::delivery::Outbox::Deliver)
            .await
            .expect("import");
    }

    /// Sends `method path` with an optional `Authorization` header.
    pub async fn send(&self, method: Method, path: &str, auth: Option<&str>) -> Answer {
        let headers: Vec<(&str, &str)> = auth.map(|a| ("Authorization", a)).into_iter().collect();
        self.request(method, &format!("{}{path}", self.base), &headers, None).await
    }

    /// Sends a request to `url` with `headers` and an optional body.
    pub async fn request(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
        body: Option<reqwest::Body>,
    ) -> Answer {
        let mut req = self.client.request(method, url);
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        if let Some(b) = body {
            req = req.body(b);
        }
        let res = req.send().await.expect("request");
        let status = res.status();
        let headers = res.headers().clone();
        let text = res.text().await.expect("body");
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Answer { status, headers, body, text }
    }

    /// `http://127.0.0.1:PORT`, for paths outside `/external/v1`.
    pub fn root(&self) -> String {
        self.base.trim_end_matches("/external/v1").to_owned()
    }

    /// POSTs `body` to the webhook with `key` as `X-API-KEY`.
    pub async fn webhook(&self, key: Option<&str>, body: &str) -> Answer {
        let mut headers = vec![("Content-Type", "application/json")];
        if let Some(k) = key {
            headers.push(("X-API-KEY", k));
        }
        let url = format!("{}/webhook/sensor-data", self.base);
        self.request(Method::POST, &url, &headers, Some(body.to_owned().into())).await
    }

    /// GET without credentials (public paths).
    pub async fn get(&self, path: &str) -> Answer {
        self.send(Method::GET, path, None).await
    }

    /// GET as `user:password` with HTTP Basic.
    pub async fn get_as(&self, user: &str, password: &str, path: &str) -> Answer {
        self.send(Method::GET, path, Some(&basic(user, password))).await
    }

    /// GET as alice.
    pub async fn alice(&self, path: &str) -> Answer {
        self.get_as("alice", ALICE_PASSWORD, path).await
    }

    /// A client acting as alice (HTTP Basic).
    pub fn as_alice(&self) -> Client<'_> {
        self.as_user("alice", ALICE_PASSWORD)
    }

    /// A client acting as `user` with `password` (HTTP Basic).
    pub fn as_user(&self, user: &str, password: &str) -> Client<'_> {
        Client { app: self, caller: Caller::Basic(basic(user, password)) }
    }

    /// A client acting through the public API key id `key` (in the path).
    pub fn with_key(&self, key: &str) -> Client<'_> {
        Client { app: self, caller: Caller::Key(key.to_owned()) }
    }

    /// A client sending with the webhook key `key` (`X-API-KEY`).
    pub fn with_webhook_key(&self, key: &str) -> Client<'_> {
        Client { app: self, caller: Caller::WebhookKey(key.to_owned()) }
    }
}

/// Who a [`Client`] acts as.
enum Caller {
    /// `Authorization: Basic …`.
    Basic(String),
    /// A public API key id, placed in the path after `/external/v1`.
    Key(String),
    /// A webhook key, sent as `X-API-KEY`.
    WebhookKey(String),
}

/// Requests to one [`TestApp`] as one caller; paths are under
/// `/external/v1` and name no key (a key client puts its own in).
pub struct Client<'a> {
    app: &'a TestApp,
    caller: Caller,
}

impl Client<'_> {
    fn url(&self, path: &str) -> String {
        match &self.caller {
            Caller::Key(key) => format!("{}/{key}{path}", self.app.base),
            _ => format!("{}{path}", self.app.base),
        }
    }

    fn headers(&self) -> Vec<(&str, &str)> {
        match &self.caller {
            Caller::Basic(auth) => vec![("Authorization", auth.as_str())],
            Caller::Key(_) => Vec::new(),
            Caller::WebhookKey(key) => vec![("X-API-KEY", key.as_str())],
        }
    }

    /// GET `path`.
    pub async fn get(&self, path: &str) -> Answer {
        self.app.request(Method::GET, &self.url(path), &self.headers(), None).await
    }

    /// POSTs `body` (JSON) to `path`.
    pub async fn post(&self, path: &str, body: &str) -> Answer {
        let mut headers = self.headers();
        headers.push(("Content-Type", "application/json"));
        self.app.request(Method::POST, &self.url(path), &headers, Some(body.to_owned().into())).await
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// An `Authorization: Basic …` value.
pub fn basic(user: &str, password: &str) -> String {
    use base64::Engine;
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")))
}

/// The value of the metric line starting with `prefix` in a `/metrics` text.
pub fn metric_in(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no metric {prefix} in {text}"))
}

/// Asserts an error answer: status, exact envelope, JSON content type.
pub fn assert_error(a: &Answer, status: u16, message: &str) {
    assert_eq!(a.status.as_u16(), status, "status of {}", a.text);
    assert_eq!(a.body["message"], message, "message of {}", a.text);
    assert!(a.body.get("data").is_some_and(Value::is_null), "data must be null: {}", a.text);
    assert_eq!(a.headers["content-type"], "application/json");
}

/// A reading of one value.
pub fn reading(device: &str, ts: i64, sensor: &str, value: f64) -> ReadingInput {
    ReadingInput {
        device_id: device.into(),
        timestamp: ts,
        values: vec![sensorhub_core::model::ValueInput { sensor_id: sensor.into(), value, unit: None }],
        origin: sensorhub_core::model::Origin::Item("test".into()),
    }
}

/// Seconds since the epoch of an RFC 3339 text.
pub fn secs(text: &str) -> i64 {
    text.parse::<jiff::Timestamp>().expect("timestamp").as_second()
}

/// The Redis server tests use.
pub fn redis_url() -> String {
    std::env::var("SENSORHUB_TEST_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// A random key prefix on the test Redis; its keys are deleted on drop.
pub struct RedisPrefix {
    pub prefix: String,
}

impl RedisPrefix {
    pub fn new() -> Self {
        Self { prefix: format!("sensorhub-test-{}", sensorhub_core::secret::generate_key("").expect("random")) }
    }

    /// The setting that keeps a server's counters under this prefix.
    pub fn counters(&self) -> CounterStore {
        CounterStore::Redis { url: sensorhub::config::Url(redis_url()), prefix: self.prefix.clone() }
    }
}

/// The setting of a Redis that is down: nothing listens on port 1, so
/// every call fails.
pub fn stopped_redis() -> CounterStore {
    CounterStore::Redis { url: sensorhub::config::Url("redis://127.0.0.1:1/".into()), prefix: "down".into() }
}

impl Drop for RedisPrefix {
    fn drop(&mut self) {
        let Ok(client) = redis::Client::open(redis_url()) else { return };
        let Ok(mut conn) = client.get_connection() else { return };
        let keys: Vec<Vec<u8>> =
            redis::cmd("KEYS").arg(format!("{}:*", self.prefix)).query(&mut conn).unwrap_or_default();
        if !keys.is_empty() {
            let _: redis::RedisResult<()> = redis::cmd("DEL").arg(keys).query(&mut conn);
        }
    }
}
