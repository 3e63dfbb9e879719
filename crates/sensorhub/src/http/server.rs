//! The HTTP/1.1 server: accepts connections up to a cap, serves each with
//! hyper under the configured timeouts, and shuts down gracefully.
//!
//! What guards what:
//! - **header read** (hyper's `header_read_timeout`): from the moment a
//!   connection waits for a request (just accepted, or its previous answer
//!   sent) until that request's head is complete;
//! - **keep-alive idle** ([`Activity`]): a connection with no request in
//!   flight that has received no byte for this long is closed;
//! - **write stall** ([`GuardedStream`]): a client that accepts no byte of
//!   an answer for this long is cut; a slow reader that keeps taking bytes
//!   is not, however long the answer; over HTTP/2, where a client can shut
//!   one stream's window and keep the connection busy, each answer is
//!   watched on its own ([`super::stall`]);
//! - **connections**: past the cap the server stops accepting; new clients
//!   wait in the kernel's listen backlog until a connection closes;
//! - **an address's share** ([`super::peers`]): a connection from an
//!   address that holds its share already is answered 429 and closed.
//!
//! The time limit of handlers is a middleware ([`super::deadline`]).

use super::answer_bytes::AnswerBytes;
use super::peers::PeerShares;
use super::stall::Watch;
use crate::config::server::ConnectionLimits;
use crate::metrics::Metrics;
use axum::Router;
use axum::extract::ConnectInfo;
use axum::extract::Request;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use ipnet::IpNet;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::time::{Instant, Sleep};
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

/// Serves `app` on `listener` until `shutdown` resolves, then stops
/// accepting, closes idle connections and lets in-flight requests finish,
/// for at most `limits.shutdown_grace`. With `tls`, connections speak TLS
/// (HTTP/2 or HTTP/1.1 by ALPN); without, HTTP/1.1. Connections are counted
/// in `metrics`; those from `exempt` (the trusted proxies) do not count
/// against their address's share.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    limits: ConnectionLimits,
    exempt: Vec<IpNet>,
    metrics: Arc<Metrics>,
    tls: Option<TlsAcceptor>,
) -> io::Result<()> {
    let max = limits.max_connections.max(1);
    let slots = Arc::new(Semaphore::new(max));
    let shares = PeerShares::new(limits.per_address, limits.answer_bytes_per_address, exempt);
    let (stop, stopping) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            () = &mut shutdown => break,
            permit = slots.clone().acquire_owned() => permit.map_err(io::Error::other)?,
        };
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait for a close.
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Some(share) = shares.take(peer.ip()) else {
            drop(permit);
            metrics.connection_refused();
            tracing::debug!(client = %peer, "connection refused: the address holds its share");
            shares.refuse(stream, tls.is_some());
            continue;
        };
        let app = app.clone();
        let stopping = stopping.clone();
        let metrics = metrics.clone();
        let tls = tls.clone();
        metrics.connection_opened();
        let bytes = share.answer_bytes();
        tokio::spawn(async move {
            let reason = serve_connection(stream, (peer, bytes), app, limits, stopping, tls).await;
            metrics.connection_closed(reason);
            drop((share, permit));
        });
    }
    drop(listener);
    let _ = stop.send(true);
    let all_closed = async {
        // Every connection holds a slot: all slots back means all closed.
        let _ = slots.acquire_many(u32::try_from(max).unwrap_or(u32::MAX)).await;
    };
    if tokio::time::timeout(limits.shutdown_grace, all_closed).await.is_err() {
        tracing::warn!(
            grace_seconds = limits.shutdown_grace.as_secs(),
            "in-flight requests still running after the grace period; closing them"
        );
    }
    Ok(())
}

/// Serves one connection until it closes, is found idle, or the server
/// stops; returns why it ended (a reason of [`crate::metrics::CLOSE_REASONS`]).
/// A TLS handshake must be done within the header read timeout.
async fn serve_connection(
    stream: TcpStream,
    (peer, bytes): (SocketAddr, Option<AnswerBytes>),
    app: Router,
    limits: ConnectionLimits,
    stopping: watch::Receiver<bool>,
    tls: Option<TlsAcceptor>,
) -> &'static str {
    let _ = stream.set_nodelay(true);
    let activity = Arc::new(Activity::new());
    let guarded = GuardedStream::new(stream, limits.write_timeout, activity.clone());
    let Some(acceptor) = tls else {
        let conn = http1(&limits)
            .serve_connection(TokioIo::new(guarded), service(app, (peer, bytes), activity.clone(), plain));
        return drive(conn, peer, &activity, limits, stopping, std::future::pending()).await;
    };
    let stream = match tokio::time::timeout(limits.header_read_timeout, acceptor.accept(guarded)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            tracing::debug!(client = %peer, error = %e, "TLS handshake failed");
            return "tls";
        }
        Err(_) => return "header_timeout",
    };
    if super::tls::is_h2(stream.get_ref().1.alpn_protocol()) {
        let mut http = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
        http.timer(TokioTimer::new()).max_concurrent_streams(Some(MAX_H2_STREAMS));
        let watch = Watch::new();
        let watched = {
            let watch = watch.clone();
            move |body: axum::body::Body, request: InFlight| watch.body(plain(body, request))
        };
        let bytes = bytes.map(AnswerBytes::for_h2);
        let conn = http.serve_connection(TokioIo::new(stream), service(app, (peer, bytes), activity.clone(), watched));
        drive(conn, peer, &activity, limits, stopping, watch.stalled(limits.write_timeout)).await
    } else {
        let conn =
            http1(&limits).serve_connection(TokioIo::new(stream), service(app, (peer, bytes), activity.clone(), plain));
        drive(conn, peer, &activity, limits, stopping, std::future::pending()).await
    }
}

/// Requests one HTTP/2 connection may have in flight at once.
const MAX_H2_STREAMS: u32 = 100;

/// HTTP/1.1 with the header read timeout and keep-alive.
fn http1(limits: &ConnectionLimits) -> hyper::server::conn::http1::Builder {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout).keep_alive(true);
    http
}

/// The application as a connection's service: each request carries the
/// client's address (and its [`AnswerBytes`], unless exempt) and counts as in flight until its body is dropped
/// (sent whole, or the connection gone); `answer` makes the body sent of
/// the application's and the request's [`InFlight`] ([`plain`], or over
/// HTTP/2 [`Watch::body`] of it).
fn service<B: hyper::body::Body + Send + 'static>(
    app: Router,
    (peer, bytes): (SocketAddr, Option<AnswerBytes>),
    tracked: Arc<Activity>,
    answer: impl Fn(axum::body::Body, InFlight) -> B + Clone + Send + Sync + 'static,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = hyper::Response<B>,
    Error = std::convert::Infallible,
    Future = impl Future<Output = Result<hyper::Response<B>, std::convert::Infallible>> + Send,
> + Clone {
    hyper::service::service_fn(move |mut req: Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        if let Some(bytes) = &bytes {
            req.extensions_mut().insert(bytes.clone());
        }
        let request = tracked.begin();
        let (app, answer) = (app.clone(), answer.clone());
        async move {
            let response = app.oneshot(req.map(axum::body::Body::new)).await?;
            Ok::<_, std::convert::Infallible>(response.map(|body| answer(body, request)))
        }
    })
}

/// The application's body, holding `request` in flight until it is dropped.
fn plain(body: axum::body::Body, request: InFlight) -> axum::body::Body {
    axum::body::Body::new(body.map_frame(move |frame| {
        let _in_flight = &request;
        frame
    }))
}

/// A served connection of either protocol, which can be told to finish.
trait Connection: Future<Output = Result<(), hyper::Error>> {
    fn finish(self: Pin<&mut Self>);
}

impl<I, S, B> Connection for hyper::server::conn::http1::Connection<I, S>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    S: hyper::service::HttpService<Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn finish(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

impl<I, S, B, E> Connection for hyper::server::conn::http2::Connection<I, S, E>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    S: hyper::service::HttpService<Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    E: hyper::rt::bounds::Http2ServerConnExec<S::Future, B>,
{
    fn finish(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

/// Runs `conn` until it ends, finishing it gracefully once idle for the
/// keep-alive timeout or when the server stops, and cutting it when
/// `stalled` resolves (an HTTP/2 answer the client stopped taking); why it
/// ended.
async fn drive(
    conn: impl Connection,
    peer: SocketAddr,
    activity: &Activity,
    limits: ConnectionLimits,
    mut stopping: watch::Receiver<bool>,
    stalled: impl Future<Output = ()>,
) -> &'static str {
    tokio::pin!(conn);
    tokio::pin!(stalled);
    let idle = activity.idle(limits.keep_alive_timeout);
    tokio::pin!(idle);
    let mut closing = None;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                return match result {
                    Ok(()) => closing.unwrap_or("client"),
                    Err(e) => {
                        tracing::debug!(client = %peer, error = %e, "connection closed");
                        close_reason(&e)
                    }
                };
            }
            () = &mut stalled => {
                tracing::debug!(client = %peer, "an HTTP/2 answer took no byte for the write timeout; connection cut");
                return "write_stall";
            }
            () = &mut idle, if closing.is_none() => {
                closing = Some("idle");
                conn.as_mut().finish();
            }
            changed = stopping.changed(), if closing.is_none() => {
                if changed.is_err() || *stopping.borrow() {
                    closing = Some("client");
                    conn.as_mut().finish();
                }
            }
        }
    }
}

/// Which limit ended a connection that failed.
fn close_reason(e: &hyper::Error) -> &'static str {
    if e.is_timeout() {
        return "header_timeout";
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if s.downcast_ref::<io::Error>().is_some_and(|io| io.kind() == io::ErrorKind::TimedOut) {
            return "write_stall";
        }
        source = s.source();
    }
    if e.is_incomplete_message() || e.is_canceled() { "client" } else { "error" }
}

/// When a connection last received a byte, and how many of its requests
/// are in flight: what decides that it is idle.
struct Activity {
    origin: Instant,
    /// Milliseconds since `origin` of the last byte received or answer finished.
    last: AtomicU64,
    in_flight: AtomicUsize,
}

/// A request in flight; dropping it ends it.
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Activity {
    fn new() -> Self {
        Self { origin: Instant::now(), last: AtomicU64::new(0), in_flight: AtomicUsize::new(0) }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(ms, Ordering::Release);
    }

    fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.touch();
        InFlight(self.clone())
    }

    /// Resolves once the connection has had no request in flight and
    /// received nothing for `timeout`.
    async fn idle(&self, timeout: Duration) {
        loop {
            let last = self.origin + Duration::from_millis(self.last.load(Ordering::Acquire));
            let deadline = last + timeout;
            if Instant::now() >= deadline && self.in_flight.load(Ordering::Acquire) == 0 {
                return;
            }
            tokio::time::sleep_until(deadline.max(Instant::now() + Duration::from_millis(100))).await;
        }
    }
}

/// A TCP stream that records received bytes in [`Activity`] and fails a
/// write that makes no progress for the write timeout.
struct GuardedStream {
    inner: TcpStream,
    write_timeout: Duration,
    stall: Option<Pin<Box<Sleep>>>,
    activity: Arc<Activity>,
}

impl GuardedStream {
    fn new(inner: TcpStream, write_timeout: Duration, activity: Arc<Activity>) -> Self {
        Self { inner, write_timeout, stall: None, activity }
    }

    /// Runs one write-side poll: a result clears the stall timer; pending
    /// starts it (once) and fails the write when it runs out.
    fn guard<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match poll {
            Poll::Ready(r) => {
                self.stall = None;
                Poll::Ready(r)
            }
            Poll::Pending => {
                let timeout = self.write_timeout;
                let stall = self.stall.get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                ready!(stall.as_mut().poll(cx));
                Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "the client stopped reading")))
            }
        }
    }
}

impl AsyncRead for GuardedStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = ready!(Pin::new(&mut self.inner).poll_read(cx, buf));
        if buf.filled().len() > before {
            self.activity.touch();
        }
        Poll::Ready(result)
    }
}

impl AsyncWrite for GuardedStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.guard(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.guard(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.guard(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.guard(cx, poll)
    }
}
