//! The Redis that instances share (`--rate-limit-store redis://…`): one
//! multiplexed connection that reconnects by itself, short timeouts so that
//! a Redis outage costs a request at most a few milliseconds, and a key
//! prefix so that several installations (or test runs) can share a server.

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long one Redis command may take before the caller falls back.
const TIMEOUT: Duration = Duration::from_millis(250);
/// Time between two attempts to connect while Redis is down.
const RETRY: Duration = Duration::from_secs(1);

/// A shared Redis server.
pub struct SharedRedis {
    client: redis::Client,
    prefix: String,
    display: String,
    state: Mutex<State>,
}

struct State {
    conn: Option<ConnectionManager>,
    next_attempt: Instant,
}

impl std::fmt::Debug for SharedRedis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedRedis").field("url", &self.display).field("prefix", &self.prefix).finish()
    }
}

impl SharedRedis {
    /// A Redis at `url` (`redis://[:password@]host:port[/db]`); keys start with `prefix:`.
    /// Nothing is connected yet.
    pub fn new(url: &str, prefix: &str) -> Result<Self, String> {
        let display = sensorhub_store::redact_url(url);
        let client = redis::Client::open(url).map_err(|e| format!("Redis URL {display}: {e}"))?;
        Ok(Self {
            client,
            prefix: prefix.to_owned(),
            display,
            state: Mutex::new(State { conn: None, next_attempt: Instant::now() }),
        })
    }

    /// The URL, password redacted.
    pub fn display(&self) -> &str {
        &self.display
    }

    /// A key under this installation's prefix.
    pub fn key(&self, kind: &str, id: &[u8]) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.prefix.len() + kind.len() + id.len() + 2);
        key.extend_from_slice(self.prefix.as_bytes());
        key.push(b':');
        key.extend_from_slice(kind.as_bytes());
        key.push(b':');
        key.extend_from_slice(id);
        key
    }

    /// The connection, connecting first when there is none. While Redis
    /// is down, one caller a second tries to connect; the others fail at once.
    pub async fn connection(&self) -> redis::RedisResult<ConnectionManager> {
        {
            let Ok(mut state) = self.state.lock() else {
                return Err(redis::RedisError::from((redis::ErrorKind::ClientError, "poisoned lock")));
            };
            if let Some(conn) = &state.conn {
                return Ok(conn.clone());
            }
            let now = Instant::now();
            if now < state.next_attempt {
                return Err(redis::RedisError::from((redis::ErrorKind::IoError, "Redis is unreachable")));
            }
            state.next_attempt = now + RETRY;
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(TIMEOUT)
            .set_response_timeout(TIMEOUT)
            .set_number_of_retries(0);
        let conn = ConnectionManager::new_with_config(self.client.clone(), config).await?;
        if let Ok(mut state) = self.state.lock() {
            state.conn = Some(conn.clone());
        }
        Ok(conn)
    }

    /// A connection of its own for pub/sub (a subscribed connection takes
    /// no other command), with the connect timeout of the shared one.
    pub async fn pubsub(&self) -> redis::RedisResult<redis::aio::PubSub> {
        tokio::time::timeout(TIMEOUT, self.client.get_async_pubsub())
            .await
            .map_err(|_| redis::RedisError::from((redis::ErrorKind::IoError, "Redis did not answer in time")))?
    }

    /// Checks that Redis answers, for `serve` at start.
    pub async fn ping(&self) -> redis::RedisResult<()> {
        let mut conn = self.connection().await?;
        redis::cmd("PING").query_async::<()>(&mut conn).await
    }
}
