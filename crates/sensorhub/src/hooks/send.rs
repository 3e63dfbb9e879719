//! One delivery attempt over HTTP/1.1: resolve the host, check every
//! address it resolves to, connect to a checked address (so a second
//! resolution cannot swap in another), TLS with the system's roots for
//! `https://`, POST, read the status and at most [`MAX_ANSWER_BYTES`] of
//! the answer. Redirects are never followed: a 3xx is an answer like
//! another. hyper's connection API and tokio-rustls are already in the
//! tree (server and MQTT), so no HTTP client crate is added.

use super::target::{check_url, is_forbidden};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// The most of an answer's body read before it is dropped.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// What an attempt came to, before the retry rules judge it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sent {
    /// The endpoint answered with `status`, and maybe a `Retry-After`.
    Answer { status: u16, retry_after: Option<String> },
    /// No answer: resolution, connection, TLS or the exchange failed or
    /// timed out.
    Network(String),
    /// Not sent: the URL or the addresses it resolves to are not allowed.
    Refused(String),
}

/// Sends deliveries.
#[derive(Clone)]
pub struct Sender {
    tls: tokio_rustls::TlsConnector,
    /// Whether loopback, private and link-local targets are allowed.
    allow_private: bool,
    /// The time an attempt may take, from resolution to the answer's status.
    timeout: Duration,
}

impl Sender {
    /// A sender that trusts the system's certificate roots.
    pub fn new(allow_private: bool, timeout: Duration) -> Result<Self, String> {
        let mut roots = rustls::RootCertStore::empty();
        let found = rustls_native_certs::load_native_certs();
        for e in &found.errors {
            tracing::warn!(error = %e, "a system certificate could not be loaded for webhook deliveries");
        }
        let (added, _) = roots.add_parsable_certificates(found.certs);
        if added == 0 {
            tracing::warn!("no system certificate roots: https webhook deliveries will fail");
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS for webhook deliveries: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Self { tls: tokio_rustls::TlsConnector::from(Arc::new(config)), allow_private, timeout })
    }

    /// POSTs `body` (JSON) to `url` with `headers`, within the attempt's time limit.
    pub async fn post(&self, url: &str, allow_http: bool, headers: &[(String, String)], body: String) -> Sent {
        match tokio::time::timeout(self.timeout, self.attempt(url, allow_http, headers, body)).await {
            Ok(sent) => sent,
            Err(_) => Sent::Network(format!("no answer within {} ms", self.timeout.as_millis())),
        }
    }

    async fn attempt(&self, url: &str, allow_http: bool, headers: &[(String, String)], body: String) -> Sent {
        let uri = match check_url(url, allow_http) {
            Ok(uri) => uri,
            Err(e) => return Sent::Refused(e.to_string()),
        };
        let https = uri.scheme_str() == Some("https");
        let Some(authority) = uri.authority().cloned() else { return Sent::Refused("no host".into()) };
        let host = authority.host().trim_start_matches('[').trim_end_matches(']').to_owned();
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        let addrs: Vec<SocketAddr> = match tokio::net::lookup_host((host.as_str(), port)).await {
            Ok(addrs) => addrs.collect(),
            Err(e) => return Sent::Network(format!("cannot resolve {host}: {e}")),
        };
        if addrs.is_empty() {
            return Sent::Network(format!("{host} resolves to no address"));
        }
        if !self.allow_private
            && let Some(bad) = addrs.iter().find(|a| is_forbidden(a.ip()))
        {
            return Sent::Refused(format!(
                "{host} resolves to {}, a loopback, private, link-local or metadata address (the operator may allow \
                 them with --webhook-allow-private)",
                bad.ip()
            ));
        }
        let mut last = String::new();
        let mut stream = None;
        for addr in &addrs {
            match TcpStream::connect(addr).await {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = format!("cannot connect to {addr}: {e}"),
            }
        }
        let Some(stream) = stream else { return Sent::Network(last) };
        let _ = stream.set_nodelay(true);
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let mut request = Request::post(path)
            .header(hyper::header::HOST, authority.as_str())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::USER_AGENT, concat!("sensorhub/", env!("CARGO_PKG_VERSION")));
        for (name, value) in headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let request = match request.body(Full::new(Bytes::from(body))) {
            Ok(r) => r,
            Err(e) => return Sent::Refused(format!("cannot build the request: {e}")),
        };
        if https {
            let name = match ServerName::try_from(host.clone()) {
                Ok(n) => n,
                Err(e) => return Sent::Refused(format!("{host} is not a TLS server name: {e}")),
            };
            match self.tls.connect(name, stream).await {
                Ok(tls) => exchange(tls, request).await,
                Err(e) => Sent::Network(format!("TLS with {host} failed: {e}")),
            }
        } else {
            exchange(stream, request).await
        }
    }
}

/// Sends `request` over `io` and reads the answer's status, `Retry-After`
/// and at most [`MAX_ANSWER_BYTES`] of its body.
async fn exchange<IO>(io: IO, request: Request<Full<Bytes>>) -> Sent
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(io)).await {
        Ok(pair) => pair,
        Err(e) => return Sent::Network(format!("HTTP handshake failed: {e}")),
    };
    let conn = tokio::spawn(conn);
    let sent = match sender.send_request(request).await {
        Ok(response) => {
            let status = response.status().as_u16();
            let retry_after =
                response.headers().get(hyper::header::RETRY_AFTER).and_then(|v| v.to_str().ok()).map(str::to_owned);
            let mut body = response.into_body();
            let mut read = 0usize;
            while read < MAX_ANSWER_BYTES {
                match body.frame().await {
                    Some(Ok(frame)) => read += frame.data_ref().map_or(0, Bytes::len),
                    _ => break,
                }
            }
            Sent::Answer { status, retry_after }
        }
        Err(e) => Sent::Network(format!("the exchange failed: {e}")),
    };
    // The connection is not reused: dropping the sender ends it.
    drop(sender);
    conn.abort();
    sent
}
