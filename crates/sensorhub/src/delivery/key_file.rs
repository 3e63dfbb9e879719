//! The sealing key of a SQLite database when `SENSORHUB_SECRET_KEY` is not
//! set: 32 random bytes in base64 in a file beside the database
//! (`<database>.secret-key`, mode 0600), made by the first command that
//! needs it and used by every later one. The database alone still cannot
//! sign: a dump or `.backup` of it does not hold the key. On PostgreSQL
//! (several instances, no shared file) the variable stays required.

use super::seal::{KEY_VAR, SealError, SealingKey};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Where the key of the SQLite database at `db` is kept.
pub fn path_for(db: &str) -> PathBuf {
    PathBuf::from(format!("{db}.secret-key"))
}

/// The sealing key for the database `url`: the variable's, else (SQLite)
/// the file's, made now when `create` and there is none yet.
pub fn sealing_key(url: &str, create: bool) -> Result<SealingKey, SealError> {
    if let Ok(v) = std::env::var(KEY_VAR)
        && !v.trim().is_empty()
    {
        return SealingKey::from_base64(&v);
    }
    let Some(db) = sensorhub_store::sqlite_file(url) else { return Err(SealError::NoKeyPostgres) };
    let path = path_for(db);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            warn_if_readable(&path);
            SealingKey::from_base64(&text).map_err(|_| SealError::BadKeyFile(path))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
            let text = create_key_file(&path).map_err(|e| SealError::KeyFile(path.clone(), e.to_string()))?;
            SealingKey::from_base64(&text)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(SealError::NoKey),
        Err(e) => Err(SealError::KeyFile(path, e.to_string())),
    }
}

/// Writes a new key to `path` atomically (a whole file appears, or none),
/// readable by its owner only; when another process made one meanwhile,
/// that one is kept and returned.
fn create_key_file(path: &Path) -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    sensorhub_core::secret::fill_random(&mut bytes).map_err(std::io::Error::other)?;
    let text = STANDARD.encode(bytes);
    let mut suffix = [0u8; 6];
    sensorhub_core::secret::fill_random(&mut suffix).map_err(std::io::Error::other)?;
    let tmp = PathBuf::from(format!("{}.tmp-{}", path.display(), STANDARD.encode(suffix).replace('/', "_")));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        file.write_all(format!("{text}\n").as_bytes())?;
        file.sync_all()
    })();
    let linked = written.and_then(|()| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            eprintln!(
                "made the key that seals webhook secrets: {} (keep it, and back it up apart from the database; \
                 {KEY_VAR} overrides it)",
                path.display()
            );
            Ok(text)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => std::fs::read_to_string(path),
        Err(e) => Err(e),
    }
}

fn warn_if_readable(path: &Path) {
    if let Ok(meta) = std::fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(file = %path.display(), "the secret key file is readable by others than its owner: chmod 600 it");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_made_once_owner_only_and_read_back() {
        let dir = tempfile::tempdir().expect("dir");
        let db = dir.path().join("a.db");
        let url = db.to_str().expect("utf-8");
        assert!(matches!(sealing_key(url, false), Err(SealError::NoKey)), "not made unless asked");
        let first = sealing_key(url, true).expect("made");
        let path = path_for(url);
        assert_eq!(std::fs::metadata(&path).expect("file").permissions().mode() & 0o777, 0o600);
        let sealed = first.seal("sub_x", b"secret").expect("seal");
        let again = sealing_key(&format!("sqlite://{url}"), true).expect("read back");
        assert_eq!(again.open("sub_x", &sealed).expect("the same key"), b"secret");
        assert!(matches!(sealing_key("postgres://h/db", true), Err(SealError::NoKeyPostgres)));
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).expect("dir").filter_map(Result::ok).collect();
        assert_eq!(leftovers.len(), 1, "no temporary file left: {leftovers:?}");
    }
}
