//! HTTPS without a proxy (`--tls-cert`, `--tls-key`): rustls with the ring
//! provider (already linked for MQTT), HTTP/2 or HTTP/1.1 chosen by ALPN.
//! The certificate and key are read again on SIGHUP: new handshakes get the
//! new certificate, open connections (streams too) keep theirs. A pair that
//! does not load is refused and the current one kept.

use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use tokio_rustls::TlsAcceptor;

/// ALPN protocols offered, preferred first.
const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// The certificate served, and where it is read from.
#[derive(Debug)]
pub struct Certificates {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
}

/// Reads a PEM certificate chain and its private key.
fn load(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("cannot read the certificate {}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("the certificate {} is not PEM: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!("{} holds no certificate", cert.display()));
    }
    let private =
        PrivateKeyDer::from_pem_file(key).map_err(|e| format!("cannot read the key {}: {e}", key.display()))?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&private)
        .map_err(|e| format!("the key {} cannot sign: {e}", key.display()))?;
    let certified = CertifiedKey::new(chain, signing);
    certified
        .keys_match()
        .map_err(|e| format!("{} and {} do not belong together: {e}", cert.display(), key.display()))?;
    Ok(Arc::new(certified))
}

impl Certificates {
    /// Reads the pair at `cert` and `key`.
    pub fn load(cert: &Path, key: &Path) -> Result<Arc<Self>, String> {
        let current = RwLock::new(load(cert, key)?);
        Ok(Arc::new(Self { cert: cert.to_owned(), key: key.to_owned(), current }))
    }

    /// Reads the pair again; on failure the one in use stays.
    pub fn reload(&self) -> Result<(), String> {
        let fresh = load(&self.cert, &self.key)?;
        *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) = fresh;
        Ok(())
    }

    /// The acceptor of TLS connections with these certificates.
    pub fn acceptor(self: &Arc<Self>) -> Result<TlsAcceptor, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
        Ok(TlsAcceptor::from(Arc::new(config)))
    }

    /// Reloads the pair on every SIGHUP, for as long as the process runs.
    pub fn reload_on_sighup(self: &Arc<Self>) -> Result<(), String> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hangups = signal(SignalKind::hangup()).map_err(|e| format!("cannot listen for SIGHUP: {e}"))?;
        let certs = self.clone();
        tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                match certs.reload() {
                    Ok(()) => tracing::info!(cert = %certs.cert.display(), "TLS certificate reloaded"),
                    Err(e) => tracing::error!(error = %e, "TLS certificate not reloaded; the one in use stays"),
                }
            }
        });
        Ok(())
    }
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone())
    }
}

/// Whether the handshake chose HTTP/2.
pub fn is_h2(protocol: Option<&[u8]>) -> bool {
    protocol == Some(b"h2")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls").join(name)
    }

    #[test]
    fn a_pair_loads_a_mismatch_is_refused_and_a_failed_reload_keeps_the_current_one() {
        let certs = Certificates::load(&fixture("server-a.pem"), &fixture("server-a.key")).expect("a pair");
        let before = certs.current.read().expect("lock").cert.clone();
        assert!(Certificates::load(&fixture("server-a.pem"), &fixture("server-b.key")).is_err(), "not a pair");
        assert!(Certificates::load(&fixture("ca.pem"), &fixture("nope.key")).is_err());
        let broken = Certificates {
            cert: fixture("nope.pem"),
            key: fixture("server-a.key"),
            current: RwLock::new(certs.current.read().expect("lock").clone()),
        };
        assert!(broken.reload().is_err());
        assert_eq!(broken.current.read().expect("lock").cert, before, "kept");
        assert!(certs.acceptor().is_ok());
    }
}
