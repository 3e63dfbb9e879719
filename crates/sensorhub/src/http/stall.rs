//! HTTP/2 answers that a client has stopped reading. Over HTTP/1.1 such a
//! client stalls the socket and the write guard cuts it; over HTTP/2 it can
//! keep one stream's window shut while the connection goes on (other
//! streams, pings), and hyper then just stops asking that answer's body for
//! more: nothing is written, so the socket's guard never fires, and the
//! answer's rendered bytes are held for as long as the connection lives.
//!
//! So every HTTP/2 answer body is [`Watched`]: it goes out in slices of at
//! most [`SLICE`] bytes (the bytes are the same; a slice is a view, not a
//! copy), and keeps a mark of when it last handed a slice to hyper or had
//! one written out (h2 drops a slice once it is written). hyper asks for
//! more once the window has room for what it queued, and the mark is
//! cleared then. An answer whose mark is older than the write timeout has
//! had data waiting for that long with none of it written: its client
//! opened no window. [`Watch::stalled`] resolves and the connection is cut,
//! as it would be over HTTP/1.1. The last slice keeps the mark alive until
//! it is written, so a small answer behind a shut window is watched too. A
//! reader that keeps opening windows is not cut, however long the answer;
//! h2 sends the answers of a connection in turn, a frame each, so one with
//! `k` answers waiting at once must carry `k` slices per write timeout.

use bytes::{Buf, Bytes};
use hyper::body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;

/// The most an answer body hands to hyper at once over HTTP/2: HTTP/2's
/// default frame size. A client must take this much within the write
/// timeout.
pub const SLICE: usize = 16 << 10;

/// A body's mark when it has no slice out.
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
    /// Each body's mark: milliseconds since `origin` at which it handed out
    /// the slice it waits to be asked past, or [`ASKED`].
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

    /// `inner`, sliced and watched.
    pub fn body<B>(self: &Arc<Self>, inner: B) -> Watched<B> {
        let mark = Arc::new(AtomicU64::new(ASKED));
        let mut bodies = self.bodies();
        if bodies.marks.len() >= bodies.prune_at {
            bodies.marks.retain(|m| m.strong_count() > 0);
            bodies.prune_at = (bodies.marks.len() * 2).max(64);
        }
        bodies.marks.push(Arc::downgrade(&mark));
        drop(bodies);
        Watched { inner, rest: Bytes::new(), mark, watch: self.clone() }
    }

    /// When the longest-waiting slice was handed out, if one is out.
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

/// An HTTP/2 answer body: `B`'s frames in slices of at most [`SLICE`]
/// bytes, its waits noted in its connection's [`Watch`].
#[derive(Debug)]
pub struct Watched<B> {
    inner: B,
    /// What is left of the data frame being sliced.
    rest: Bytes,
    mark: Arc<AtomicU64>,
    watch: Arc<Watch>,
}

impl<B> Watched<B> {
    /// The next slice of `rest`, noted as handed out now.
    fn hand(&mut self) -> Frame<Bytes> {
        let bytes = self.rest.split_to(self.rest.len().min(SLICE));
        let now = self.watch.now();
        self.mark.store(now, Ordering::Release);
        Frame::data(Bytes::from_owner(Slice { bytes, mark: self.mark.clone(), origin: self.watch.origin }))
    }
}

/// A slice handed to hyper: it keeps its answer's mark alive, and moves it
/// on when h2 drops it, written out.
struct Slice {
    bytes: Bytes,
    mark: Arc<AtomicU64>,
    origin: Instant,
}

impl AsRef<[u8]> for Slice {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for Slice {
    fn drop(&mut self) {
        let now = ms_since(self.origin);
        let _ = self.mark.fetch_update(Ordering::AcqRel, Ordering::Acquire, |m| (m != ASKED).then_some(now));
    }
}

impl<B> Body for Watched<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        this.mark.store(ASKED, Ordering::Release);
        if this.rest.has_remaining() {
            return Poll::Ready(Some(Ok(this.hand())));
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) if data.is_empty() => Poll::Ready(Some(Ok(Frame::data(data)))),
                Ok(data) => {
                    this.rest = data;
                    Poll::Ready(Some(Ok(this.hand())))
                }
                Err(other) => Poll::Ready(Some(Ok(other))),
            },
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.inner.size_hint();
        let rest = self.rest.len() as u64;
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower().saturating_add(rest));
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(rest));
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full};

    #[tokio::test]
    async fn a_body_goes_in_slices_with_its_exact_length_and_same_bytes() {
        let watch = Watch::new();
        let bytes: Bytes = (0..(SLICE * 2 + 5)).map(|i| (i % 251) as u8).collect();
        let mut body = watch.body(Full::new(bytes.clone()));
        assert_eq!(body.size_hint().exact(), Some(bytes.len() as u64));
        let mut got = Vec::new();
        let mut sizes = Vec::new();
        while let Some(frame) = body.frame().await {
            let data = frame.expect("frame").into_data().expect("data");
            sizes.push(data.len());
            got.extend_from_slice(&data);
            assert_eq!(body.size_hint().exact(), Some((bytes.len() - got.len()) as u64));
        }
        assert_eq!(sizes, [SLICE, SLICE, 5]);
        assert_eq!(got, bytes);
        assert!(body.is_end_stream());
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_with_a_slice_waiting_the_timeout_and_nothing_written_is_a_stall() {
        let watch = Watch::new();
        let timeout = Duration::from_secs(30);
        let quiet = |d: u64| tokio::time::timeout(Duration::from_secs(d), watch.stalled(timeout));
        let mut body = watch.body(Full::new(Bytes::from(vec![7u8; SLICE * 3])));
        let first = body.frame().await;
        assert!(quiet(20).await.is_err(), "handed out 20 s ago");
        drop(first);
        assert!(quiet(20).await.is_err(), "written out 20 s ago: a slow reader");
        drop(body.frame().await);
        let last = body.frame().await;
        assert!(body.is_end_stream());
        drop(body);
        let started = Instant::now();
        watch.stalled(timeout).await;
        assert_eq!(started.elapsed(), timeout, "the last slice, handed out and never written, is watched");
        drop(last);
        assert!(quiet(60).await.is_err(), "a finished answer is no stall");
    }
}
