//! HTTP/2 answers that a client has stopped reading. Over HTTP/1.1 such a
//! client stalls the socket and the write guard cuts it; over HTTP/2 it can
//! keep one stream's window shut while the connection goes on (other
//! streams, pings), and hyper then just stops asking that answer's body for
//! more: nothing is written, so the socket's guard never fires, and the
//! answer's rendered bytes are held for as long as the connection lives.
//!
//! So every HTTP/2 answer body is [`Watched`]: it goes out in slices of at
//! most [`SLICE`] bytes (the bytes are the same; a slice is a view, not a
//! copy), and notes when it handed a slice over. hyper asks for the next
//! slice once the previous one has gone out, so a body asked for nothing
//! for the write timeout since its last slice belongs to a client that
//! opened no window for it: [`Watch::stalled`] resolves and the connection
//! is cut, as it would be over HTTP/1.1. A slow reader that keeps opening
//! windows keeps being asked, however long the answer.

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
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(ASKED - 1)
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
        let slice = self.rest.split_to(self.rest.len().min(SLICE));
        self.mark.store(self.watch.now(), Ordering::Release);
        Frame::data(slice)
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
    async fn a_slice_not_asked_past_for_the_timeout_is_a_stall() {
        let watch = Watch::new();
        let timeout = Duration::from_secs(30);
        let mut body = watch.body(Full::new(Bytes::from(vec![7u8; SLICE * 3])));
        let _first = body.frame().await;
        // Asked again every 20 s: a slow reader, never a stall.
        for _ in 0..2 {
            let waited = tokio::time::timeout(Duration::from_secs(20), watch.stalled(timeout)).await;
            assert!(waited.is_err(), "cut while being read");
            let _next = body.frame().await;
        }
        let started = Instant::now();
        watch.stalled(timeout).await;
        assert_eq!(started.elapsed(), Duration::from_secs(30), "cut 30 s after the last slice went out");
        drop(body);
        let finished = tokio::time::timeout(Duration::from_secs(60), watch.stalled(timeout)).await;
        assert!(finished.is_err(), "a finished body is no stall");
    }
}
