//! Test support for sensorhub's tests and benchmarks, never part of the
//! service: a throwaway PostgreSQL database with a random name, dropped
//! (with its connections) when the value is dropped, so that a test never
//! touches another run's data.
#![forbid(unsafe_code)]

/// What went wrong making or dropping a database.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

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

/// `url` without its user-info (which may hold a password), for messages.
fn shown(url: &str) -> &str {
    url.rsplit_once('@').map_or(url, |(_, host)| host)
}

async fn admin(url: &str) -> Result<tokio_postgres::Client, Error> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

impl TempDatabase {
    /// Creates `sensorhub_test_<random>` on the server of `admin_url` (a
    /// database URL whose user may create databases).
    pub async fn create(admin_url: &str) -> Result<Self, Error> {
        let mut bytes = [0u8; 6];
        getrandom::fill(&mut bytes).map_err(|e| format!("no randomness: {e}"))?;
        let name = format!("sensorhub_test_{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>());
        let client = admin(admin_url)
            .await
            .map_err(|e| format!("cannot reach PostgreSQL at {} (is it running?): {e}", shown(admin_url)))?;
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
                Ok::<_, Error>(())
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
    fn messages_show_no_password() {
        assert_eq!(super::shown("postgres://u:secret@h:5432/test"), "h:5432/test");
    }

    #[test]
    fn the_database_name_is_replaced() {
        assert_eq!(super::with_database("postgres://u@h:5432/test", "x"), "postgres://u@h:5432/x");
        assert_eq!(super::with_database("postgres://h/test?sslmode=disable", "x"), "postgres://h/x?sslmode=disable");
        assert_eq!(super::with_database("postgres://h", "x"), "postgres://h/x");
    }
}
