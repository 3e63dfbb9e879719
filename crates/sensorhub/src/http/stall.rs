//! HTTP/2 answers that a client has stopped reading. Over HTTP/1.1 such a
//! client stalls the socket and the write guard cuts it; over HTTP/2 it can
//! keep one stream's window shut while the connection goes on (other
//! streams, pings), and hyper then just stops asking that answer's body for
//! more: nothing is written, so the socket's guard never fires, and the
//! answer's rendered bytes are held for as long as the connection lives.
//!
//! So every HTTP/2 answer body is [`Watched`]: its data goes to hyper as
//! [`Piece`]s (the same bytes, not copied) that keep a mark of when the
//! answer last handed data over or had some of it written out (h2 advances
//! a piece as it writes its frames, as the client's window lets it). The
//! mark is cleared while hyper asks the body for more. An answer whose mark
//! is older than the write timeout has had data waiting that long with
//! none of it written: its client opened no window. [`Watch::stalled`]
//! resolves and the connection is cut, as it would be over HTTP/1.1. A
//! piece keeps the mark alive until it is written whole, so the end of an
//! answer, after hyper is done with its body, is watched too. A reader that
//! keeps taking bytes is never cut, however long the answer; h2 sends the
//! answers of a connection in turn, a frame (16 KiB at most) each.

use bytes::{Buf, Bytes};
use hyper::body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::time::Instant;

/// A body's mark while hyper is asking it for more.
const ASKED: u64 = u64::MAX;

/// Milliseconds since `origin`, short of [`ASKED`].
fn ms_since(origin: Instant) -> u64 {
    u64::try_from(origin.elapsed().as_millis()).unwrap_or(ASKED - 1)
}

/// The answers of one connection still being sent.
#[derive(Debug)]
pub struct Watch {
    origin: Instant,
    bodies: Mutex<Bodies>,
}

#[derive(Debug, Default)]
struct Bodies {
    /// Each answer's mark: milliseconds since `origin` at which it last
    /// handed data to hyper or had some written, or [`ASKED`].
    marks: Vec<Weak<AtomicU64>>,
    /// Length at which `marks` is next rid of finished bodies.
    prune_at: usize,
}

impl Watch {
    /// A connection with no answer yet.
    pub fn new() -> Arc<Self> {
        Arc::new(Self { origin: Instant::now(), bodies: Mutex::default() })
    }

    fn now(&self) -> u64 {
        ms_since(self.origin)
    }

    fn bodies(&self) -> std::sync::MutexGuard<'_, Bodies> {
        self.bodies.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `inner`, watched.
    pub fn body<B>(self: &Arc<Self>, inner: B) -> Watched<B> {
        let mark = Arc::new(AtomicU64::new(ASKED));
        let mut bodies = self.bodies();
        if bodies.marks.len() >= bodies.prune_at {
            bodies.marks.retain(|m| m.strong_count() > 0);
            bodies.prune_at = (bodies.marks.len() * 2).max(64);
        }
        bodies.marks.push(Arc::downgrade(&mark));
        drop(bodies);
        Watched { inner, mark, origin: self.origin }
    }

    /// The oldest mark, if an answer has data waiting.
    fn oldest(&self) -> Option<u64> {
        let mut bodies = self.bodies();
        bodies.marks.retain(|m| m.strong_count() > 0);
        bodies.marks.iter().filter_map(Weak::upgrade).map(|m| m.load(Ordering::Acquire)).filter(|&t| t != ASKED).min()
    }

    /// Resolves once an answer has waited `timeout` for hyper to ask for
    /// more, that is, for the client to open its window.
    pub async fn stalled(&self, timeout: Duration) {
        let limit = u64::try_from(timeout.as_millis()).unwrap_or(ASKED - 1);
        loop {
            let wake = match self.oldest() {
                Some(out) if self.now().saturating_sub(out) >= limit => return,
                Some(out) => self.origin + Duration::from_millis(out) + timeout,
                None => Instant::now() + timeout,
            };
            tokio::time::sleep_until(wake.max(Instant::now() + Duration::from_millis(10))).await;
        }
    }
}

/// An HTTP/2 answer body: `B`'s frames, their data as [`Piece`]s, its
/// waits noted in its connection's [`Watch`].
#[derive(Debug)]
pub struct Watched<B> {
    inner: B,
    mark: Arc<AtomicU64>,
    origin: Instant,
}

impl<B> Body for Watched<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Piece;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Piece>, B::Error>>> {
        let this = &mut *self;
        this.mark.store(ASKED, Ordering::Release);
        let frame = match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
            Some(Ok(frame)) => frame,
            Some(Err(e)) => return Poll::Ready(Some(Err(e))),
            None => return Poll::Ready(None),
        };
        Poll::Ready(Some(Ok(frame.map_data(|bytes| {
            if !bytes.is_empty() {
                this.mark.store(ms_since(this.origin), Ordering::Release);
            }
            Piece { bytes, mark: this.mark.clone(), origin: this.origin }
        }))))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Data of an HTTP/2 answer handed to hyper: its bytes, and its answer's
/// mark, kept alive while h2 holds the piece and moved on as h2 writes it.
#[derive(Debug)]
pub struct Piece {
    bytes: Bytes,
    mark: Arc<AtomicU64>,
    origin: Instant,
}

impl Buf for Piece {
    fn remaining(&self) -> usize {
        self.bytes.len()
    }

    fn chunk(&self) -> &[u8] {
        &self.bytes
    }

    fn advance(&mut self, cnt: usize) {
        self.bytes.advance(cnt);
        if cnt > 0 {
            let now = ms_since(self.origin);
            let _ = self.mark.fetch_update(Ordering::AcqRel, Ordering::Acquire, |m| (m != ASKED).then_some(now));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full};

    #[tokio::test]
    async fn an_answer_goes_as_it_is_with_its_exact_length() {
        let watch = Watch::new();
        let bytes: Bytes = (0..70_000).map(|i| (i % 251) as u8).collect();
        let mut body = watch.body(Full::new(bytes.clone()));
        assert_eq!(body.size_hint().exact(), Some(bytes.len() as u64));
        let mut piece = body.frame().await.expect("a frame").expect("data").into_data().expect("data");
        assert_eq!(piece.copy_to_bytes(piece.remaining()), bytes);
        assert!(body.is_end_stream());
        assert!(body.frame().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_with_data_waiting_the_timeout_and_none_written_is_a_stall() {
        let watch = Watch::new();
        let timeout = Duration::from_secs(30);
        let quiet = |d: u64| tokio::time::timeout(Duration::from_secs(d), watch.stalled(timeout));
        let mut body = watch.body(Full::new(Bytes::from(vec![7u8; 3000])));
        let mut piece = body.frame().await.expect("a frame").expect("data").into_data().expect("data");
        assert!(body.is_end_stream());
        drop(body);
        assert!(quiet(20).await.is_err(), "handed out 20 s ago");
        piece.advance(1000);
        assert!(quiet(20).await.is_err(), "a byte written 20 s ago: a slow reader");
        piece.advance(1000);
        let started = Instant::now();
        watch.stalled(timeout).await;
        assert_eq!(started.elapsed(), timeout, "the end of an answer, held and never written, is watched");
        piece.advance(1000);
        drop(piece);
        assert!(quiet(60).await.is_err(), "a finished answer is no stall");
    }
}
