//! Test support, built only with the `test-support` feature (the tests of
//! this workspace turn it on; the service never ships it): a throwaway
//! PostgreSQL database with a random name, dropped (with its connections)
//! when the value is dropped, so that a test never touches another run's
//! data.

use crate::{StoreError, StoreResult};

/// A database created for one run.
pub struct TempDatabase {
    admin_url: String,
    name: String,
    url: String,
}

/// `url` with its database name replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let host_part = match base[scheme_end..].find('/') {
        Some(slash) => &base[..scheme_end + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{host_part}/{name}?{q}"),
        None => format!("{host_part}/{name}"),
    }
}

async fn admin(url: &str) -> StoreResult<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

impl TempDatabase {
    /// Creates `sensorhub_test_<random>` on the server of `admin_url` (a
    /// database URL whose user may create databases).
    pub async fn create(admin_url: &str) -> StoreResult<Self> {
        let mut bytes = [0u8; 6];
        getrandom::fill(&mut bytes).map_err(|e| StoreError::Backend(format!("no randomness: {e}").into()))?;
        let name = format!("sensorhub_test_{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>());
        let client = admin(admin_url).await.map_err(|e| {
            StoreError::Backend(
                format!("cannot reach PostgreSQL at {} (is it running?): {e}", crate::redact_url(admin_url)).into(),
            )
        })?;
        client.batch_execute(&format!("CREATE DATABASE \"{name}\"")).await?;
        Ok(Self { admin_url: admin_url.to_owned(), url: with_database(admin_url, &name), name })
    }

    /// The URL of the new database.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for TempDatabase {
    fn drop(&mut self) {
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        // Drop may run inside or outside a runtime: use a thread with its own.
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            rt.block_on(async {
                let client = admin(&admin_url).await?;
                client.batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)")).await?;
                Ok::<_, StoreError>(())
            })
            .map_err(std::io::Error::other)
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("could not drop test database {}", self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_database_name_is_replaced() {
        assert_eq!(super::with_database("postgres://u@h:5432/test", "x"), "postgres://u@h:5432/x");
        assert_eq!(super::with_database("postgres://h/test?sslmode=disable", "x"), "postgres://h/x?sslmode=disable");
        assert_eq!(super::with_database("postgres://h", "x"), "postgres://h/x");
    }
}
