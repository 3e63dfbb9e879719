//! One delivery attempt over HTTP/1.1: on an idle connection to the
//! endpoint if one is kept (pool.rs), else resolve the host, check every
//! address it resolves to, connect to a checked address (so a second
//! resolution cannot swap in another), TLS with the system's roots for
//! `https://`; then POST, read the status and at most [`MAX_ANSWER_BYTES`]
//! of the answer. Redirects are never followed: a 3xx is an answer like
//! another. hyper's connection API and tokio-rustls are already in the
//! tree (server and MQTT), so no HTTP client crate is added.

use super::pool::{Conn, Idle};
use super::target::{check_url, is_forbidden, is_own};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::body::Body as _;
use hyper::http::uri::Authority;
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
    /// Connections kept for the next delivery to their endpoint.
    idle: Idle,
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
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config));
        Ok(Self { tls, allow_private, timeout, idle: Idle::default() })
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
        let endpoint = format!("{}://{authority}", if https { "https" } else { "http" });
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let body = Bytes::from(body);
        let request = || {
            let mut request = Request::post(path)
                .header(hyper::header::HOST, authority.as_str())
                .header(hyper::header::CONTENT_TYPE, "application/json")
                .header(hyper::header::USER_AGENT, concat!("sensorhub/", env!("CARGO_PKG_VERSION")));
            for (name, value) in headers {
                request = request.header(name.as_str(), value.as_str());
            }
            request.body(Full::new(body.clone())).map_err(|e| Sent::Refused(format!("cannot build the request: {e}")))
        };
        // A kept connection that fails (the server closed it meanwhile)
        // gives way to a new one; a receiver de-duplicates by webhook-id
        // should the request have reached it after all.
        if let Some(conn) = self.idle.take(&endpoint) {
            match request() {
                Ok(r) => {
                    if let Ok(sent) = self.exchange(conn, r, &endpoint).await {
                        return sent;
                    }
                }
                Err(refused) => return refused,
            }
        }
        let conn = match self.connect(&authority, https).await {
            Ok(conn) => conn,
            Err(sent) => return sent,
        };
        match request() {
            Ok(r) => self.exchange(conn, r, &endpoint).await.unwrap_or_else(Sent::Network),
            Err(refused) => refused,
        }
    }

    /// A new connection to `authority` (TLS for `https`), to an address
    /// that the rules allow.
    async fn connect(&self, authority: &Authority, https: bool) -> Result<Conn, Sent> {
        let host = authority.host().trim_start_matches('[').trim_end_matches(']').to_owned();
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        let addrs: Vec<SocketAddr> = match tokio::net::lookup_host((host.as_str(), port)).await {
            Ok(addrs) => addrs.collect(),
            Err(e) => return Err(Sent::Network(format!("cannot resolve {host}: {e}"))),
        };
        if addrs.is_empty() {
            return Err(Sent::Network(format!("{host} resolves to no address")));
        }
        if !self.allow_private
            && let Some(bad) = addrs.iter().find(|a| is_forbidden(a.ip()) || is_own(a.ip()))
        {
            return Err(Sent::Refused(format!(
                "{host} resolves to {}, a loopback, private, link-local, metadata or this host's own address (the \
                 operator may allow them with --webhook-allow-private)",
                bad.ip()
            )));
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
        let Some(stream) = stream else { return Err(Sent::Network(last)) };
        let _ = stream.set_nodelay(true);
        if !https {
            return handshake(stream).await;
        }
        let name = ServerName::try_from(host.clone())
            .map_err(|e| Sent::Refused(format!("{host} is not a TLS server name: {e}")))?;
        match self.tls.connect(name, stream).await {
            Ok(tls) => handshake(tls).await,
            Err(e) => Err(Sent::Network(format!("TLS with {host} failed: {e}"))),
        }
    }

    /// Sends `request` on `conn` and reads the answer's status,
    /// `Retry-After` and at most [`MAX_ANSWER_BYTES`] of its body; keeps
    /// the connection for `endpoint` when the answer was read whole. An
    /// error is the exchange's failure, as text.
    async fn exchange(&self, mut conn: Conn, request: Request<Full<Bytes>>, endpoint: &str) -> Result<Sent, String> {
        conn.send().ready().await.map_err(|e| format!("the connection closed: {e}"))?;
        let response = conn.send().send_request(request).await.map_err(|e| format!("the exchange failed: {e}"))?;
        let status = response.status().as_u16();
        let retry_after =
            response.headers().get(hyper::header::RETRY_AFTER).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let mut body = response.into_body();
        let mut read = 0usize;
        let mut whole = false;
        while read < MAX_ANSWER_BYTES {
            match body.frame().await {
                Some(Ok(frame)) => read += frame.data_ref().map_or(0, Bytes::len),
                None => {
                    whole = true;
                    break;
                }
                Some(Err(_)) => break,
            }
        }
        // Otherwise dropping it ends the connection.
        if whole || body.is_end_stream() {
            self.idle.put(endpoint, conn);
        }
        Ok(Sent::Answer { status, retry_after })
    }
}

/// The HTTP/1.1 handshake over `io`, its connection driven by a task of
/// its own that ends when the connection is dropped.
async fn handshake<IO>(io: IO) -> Result<Conn, Sent>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (send, driver) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| Sent::Network(format!("HTTP handshake failed: {e}")))?;
    Ok(Conn::new(send, tokio::spawn(driver).abort_handle()))
}
