//! Each client address's answer bytes not yet sent, so that slow readers
//! from one address cannot hold what every caller shares: a client that
//! reads slowly but steadily is never cut by the write timeout, and one
//! address could otherwise hold its every connection
//! (`--max-connections-per-address`, 512) with a rendered window of 8 MiB
//! and more (a one-page window whole; a dense logger's first page).
//!
//! A GET is admitted by reserving [`RESERVE`] bytes, what a window renders
//! before a byte of it goes, once its address holds less than
//! `--max-answer-bytes-per-address`; past it, the request waits (at most
//! [`ADMIT_WAIT`]) for the address's answers to drain below it, and is then
//! answered 429 in its path's form. Other requests need only the address
//! under its bound. When the handler has answered, the reservation becomes
//! what the body holds ([`Counted`]): its size hint's lower bound (a sized
//! body whole, a streamed window's rendered first page) and the piece being
//! handed on, which is let go as the connection takes it. So an address
//! holds at most its bound and one reservation more, besides what each
//! answer holds outside the count: the piece hyper or h2 has been handed
//! (pieces are at most [`SLICE`], over HTTP/2 h2's own 64 KiB), hyper's
//! buffer of a few hundred KiB a connection, a compressor's buffer, and a
//! streamed window's next run of hours (512 KiB or so) once rendered.
//! The trusted proxies are exempt, as from the connection share: their
//! connections carry many clients.

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

/// The longest a request waits for its address's answers to drain (or
/// less: the request timeout runs meanwhile).
pub const ADMIT_WAIT: Duration = Duration::from_secs(5);

/// Bytes a GET sets aside while its handler renders: the most a window
/// renders before its answer goes (hours.rs).
pub const RESERVE: usize = 8 << 20;

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

    /// `n` bytes set aside, if the address holds less than its bound.
    fn try_reserve(self: &Arc<Self>, n: usize) -> Option<Reserved> {
        let cap = self.cap;
        let taken =
            self.held.fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| (h < cap).then(|| h.saturating_add(n)));
        taken.ok().map(|_| Reserved { bytes: self.clone(), amount: n })
    }

    /// `reserve` bytes set aside once the address holds less than its
    /// bound, waiting at most `wait` for it to; `None` past the wait.
    pub async fn admit(self: &Arc<Self>, reserve: usize, wait: Duration) -> Option<Reserved> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if let Some(reserved) = self.try_reserve(reserve) {
                return Some(reserved);
            }
            if tokio::time::timeout_at(deadline, drained).await.is_err() {
                return self.try_reserve(reserve);
            }
        }
    }
}

/// Bytes set aside in an address for an answer being rendered; let go
/// when dropped (the handler failed, or the request was dropped) unless
/// an answer's [`Counted`] took them over.
#[derive(Debug)]
pub struct Reserved {
    bytes: Arc<AddressBytes>,
    amount: usize,
}

impl Drop for Reserved {
    fn drop(&mut self) {
        self.bytes.sub(self.amount);
    }
}

/// A request's extension: its connection's address's bytes (none for a
/// trusted proxy's connection), and the most of an answer handed on at
/// once on that connection.
#[derive(Debug, Clone)]
pub struct AnswerBytes {
    bytes: Arc<AddressBytes>,
    slice: usize,
}

impl AnswerBytes {
    /// An HTTP/1.1 connection's: pieces of [`SLICE`].
    pub fn new(bytes: Arc<AddressBytes>) -> Self {
        Self { bytes, slice: SLICE }
    }

    /// An HTTP/2 connection's: pieces of h2's own size, so that the watch
    /// of unwritten bytes (stall.rs), which slices again, holds none of a
    /// piece uncounted.
    pub fn for_h2(self) -> Self {
        Self { slice: super::stall::SLICE, ..self }
    }

    /// The address's bytes.
    pub fn address(&self) -> &Arc<AddressBytes> {
        &self.bytes
    }
}

/// The middleware, innermost (below compression, which would otherwise
/// hold the rendered body uncounted): admits the request by its address's
/// bytes and counts its answer's.
pub async fn count(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let Some(answer) = req.extensions().get::<AnswerBytes>().cloned() else {
        return next.run(req).await;
    };
    let reserve = if req.method() == axum::http::Method::GET { RESERVE } else { 0 };
    let Some(reserved) = answer.bytes.admit(reserve, ADMIT_WAIT).await else {
        state.metrics.answer_bytes_refused();
        tracing::debug!(held = answer.bytes.held(), "request refused: its address holds its answer bytes");
        return super::refusal::refusal(req.uri().path());
    };
    next.run(req).await.map(|body| Body::new(Counted::new(body, reserved, answer.slice)))
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
    /// The most handed on at once.
    slice: usize,
}

impl<B: hyper::body::Body> Counted<B> {
    /// `inner`, counted in place of `reserved`, handed on in pieces of at
    /// most `slice` bytes.
    pub fn new(inner: B, mut reserved: Reserved, slice: usize) -> Self {
        let counted = std::mem::take(&mut reserved.amount);
        let bytes = reserved.bytes.clone();
        drop(reserved);
        let mut body = Self { inner, rest: Bytes::new(), counted, bytes, slice: slice.max(1) };
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
        let piece = self.rest.split_to(self.rest.len().min(self.slice));
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
