//! Each client address's answer bytes not yet sent: what a body holds
//! rendered (a one-page window whole, a streamed window's first page of up
//! to 8 MiB and more for a dense logger, its later runs of up to 512 KiB)
//! and what it has produced, counted until the connection takes it, in
//! pieces of at most [`SLICE`]: hyper holds at most about one piece of a
//! connection's answer beyond its own buffer of a few hundred KiB, and h2
//! only what the client's window lets it send, so what goes uncounted is
//! bounded by the connection. A client that reads slowly but steadily is
//! never cut by the write timeout, so without a bound one address could
//! hold its every connection (`--max-connections-per-address`, 512) with
//! 8 MiB each: 4 GiB of the server's memory, which every caller shares.
//!
//! Past `--max-answer-bytes-per-address` of unsent answers, an address's
//! next request waits (at most [`ADMIT_WAIT`]) for its earlier answers to
//! drain below it, and is then answered 429 in its path's form. The check
//! comes before the handler renders anything, so an address holds at most
//! its bound and the answers admitted while it was under it. The trusted
//! proxies are exempt, as from the connection share: their connections
//! carry many clients.

use super::AppState;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use bytes::Bytes;
use hyper::body::{Frame, SizeHint};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::sync::Notify;

/// The most of an answer handed on at once: a run of rendered hours (a
/// day of a five-sensor station) goes whole. Pieces of 64 KiB cost a day
/// window 6-7 % of its requests per second over HTTP/1.1 (bench/h1,
/// bench/RESULTS.md).
pub const SLICE: usize = 512 << 10;

/// The longest a request waits for its address's answers to drain.
pub const ADMIT_WAIT: Duration = Duration::from_secs(5);

/// One client address's answer bytes not yet taken by its connections.
#[derive(Debug)]
pub struct AddressBytes {
    held: AtomicUsize,
    cap: usize,
    drained: Notify,
}

impl AddressBytes {
    /// An address holding nothing, bounded by `cap`.
    pub fn new(cap: usize) -> Arc<Self> {
        Arc::new(Self { held: AtomicUsize::new(0), cap: cap.max(1), drained: Notify::new() })
    }

    /// The bytes held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    fn add(&self, n: usize) {
        if n > 0 {
            self.held.fetch_add(n, Ordering::AcqRel);
        }
    }

    fn sub(&self, n: usize) {
        if n == 0 {
            return;
        }
        let before = self.held.fetch_sub(n, Ordering::AcqRel);
        if before >= self.cap && before - n < self.cap {
            self.drained.notify_waiters();
        }
    }

    /// Whether the address holds less than its bound, waiting at most
    /// `wait` for it to.
    pub async fn admit(&self, wait: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.held() < self.cap {
                return true;
            }
            if tokio::time::timeout_at(deadline, drained).await.is_err() {
                return self.held() < self.cap;
            }
        }
    }
}

/// A request's extension: its connection's address's bytes (none for a
/// trusted proxy's connection).
#[derive(Debug, Clone)]
pub struct AnswerBytes(pub Arc<AddressBytes>);

/// The middleware, innermost (below compression, which would otherwise
/// hold the rendered body uncounted): admits the request by its address's
/// bytes and counts its answer's.
pub async fn count(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let Some(AnswerBytes(bytes)) = req.extensions().get::<AnswerBytes>().cloned() else {
        return next.run(req).await;
    };
    if !bytes.admit(ADMIT_WAIT).await {
        state.metrics.answer_bytes_refused();
        tracing::debug!(held = bytes.held(), "request refused: its address holds its answer bytes");
        return super::peers::refusal(req.uri().path());
    }
    next.run(req).await.map(|body| Body::new(Counted::new(body, bytes)))
}

/// An answer body counted in its address's bytes: what the body holds
/// (its size hint's lower bound: a sized body's whole length, a streamed
/// window's rendered pieces) and the rest of the frame being sliced, from
/// the start and again after each frame; a piece handed on is no longer
/// counted, and what is left when the body is dropped is let go.
#[derive(Debug)]
pub struct Counted<B: hyper::body::Body> {
    inner: B,
    /// What is left of the data frame being sliced.
    rest: Bytes,
    /// The bytes counted in the address for this body.
    counted: usize,
    bytes: Arc<AddressBytes>,
}

impl<B: hyper::body::Body> Counted<B> {
    /// `inner`, what it holds counted at once.
    pub fn new(inner: B, bytes: Arc<AddressBytes>) -> Self {
        let mut body = Self { inner, rest: Bytes::new(), counted: 0, bytes };
        body.settle();
        body
    }

    /// Counts what the body holds now.
    fn settle(&mut self) {
        let held =
            usize::try_from(self.inner.size_hint().lower()).unwrap_or(usize::MAX).saturating_add(self.rest.len());
        if held > self.counted {
            self.bytes.add(held - self.counted);
        } else {
            self.bytes.sub(self.counted - held);
        }
        self.counted = held;
    }

    /// The next piece of `rest`; what is held after it counted.
    fn hand(&mut self) -> Frame<Bytes> {
        let piece = self.rest.split_to(self.rest.len().min(SLICE));
        self.settle();
        Frame::data(piece)
    }
}

impl<B> hyper::body::Body for Counted<B>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        if !this.rest.is_empty() {
            return Poll::Ready(Some(Ok(this.hand())));
        }
        let frame = match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
            Some(Ok(frame)) => frame,
            other => {
                this.settle();
                return Poll::Ready(other);
            }
        };
        match frame.into_data() {
            Ok(data) => {
                this.rest = data;
                Poll::Ready(Some(Ok(this.hand())))
            }
            Err(other) => {
                this.settle();
                Poll::Ready(Some(Ok(other)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        super::stall::with_rest(self.inner.size_hint(), &self.rest)
    }
}

impl<B: hyper::body::Body> Drop for Counted<B> {
    fn drop(&mut self) {
        self.bytes.sub(self.counted);
    }
}

#[cfg(test)]
#[path = "answer_bytes_tests.rs"]
mod tests;
