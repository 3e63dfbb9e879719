//! HTTP/2 answers that a client has stopped reading. Over HTTP/1.1 such a
//! client stalls the socket and the write guard cuts it; over HTTP/2 it can
//! keep one stream's window shut while the connection goes on (other
//! streams, pings), and hyper then just stops asking that answer's body for
//! more: nothing is written, so the socket's guard never fires, and the
//! answer's rendered bytes are held for as long as the connection lives.
//!
//! So every HTTP/2 answer body is [`Watched`]: its data goes to hyper as
//! [`Piece`]s of at most [`SLICE`] bytes (the same bytes, not copied), and
//! its [`Mark`] counts the bytes handed over and not yet written, and the
//! time of its last progress (data handed over, or some written: h2
//! advances a piece as it writes frames, as the client's windows let it).
//! An answer with bytes unwritten and no progress for the write timeout
//! has a client that opened no window for it: [`Watch::stalled`] resolves
//! and the connection is cut, as it would be over HTTP/1.1. This holds to
//! the answer's very end: a piece counts until it is written or dropped,
//! whether or not hyper is still polling the body.
//!
//! Pieces are bounded because h2 grants the connection's window to one
//! waiting stream at a time, up to all that stream has queued: over a slow
//! link, an 8 MiB answer queued whole would leave the connection's other
//! answers with nothing written (and so cut) for as long as it takes to
//! send. With pieces of [`SLICE`] the grants take turns, and a connection
//! with `k` answers waiting moves each on about every `k` pieces.

use bytes::{Buf, Bytes};
use hyper::body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::time::Instant;

/// The most an answer hands to hyper at once over HTTP/2.
pub const SLICE: usize = 64 << 10;

/// Milliseconds since `origin`.
fn ms_since(origin: Instant) -> u64 {
    u64::try_from(origin.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// An answer's bytes handed to hyper and not yet written, and when it last
/// made progress.
#[derive(Debug)]
pub struct Mark {
    origin: Instant,
    unwritten: AtomicUsize,
    /// Milliseconds since `origin` of the last piece handed over or bytes
    /// written.
    last: AtomicU64,
}

impl Mark {
    fn moved(&self) {
        self.last.store(ms_since(self.origin), Ordering::Release);
    }

    /// When the answer last made progress, if it has bytes unwritten.
    fn waiting_since(&self) -> Option<u64> {
        (self.unwritten.load(Ordering::Acquire) > 0).then(|| self.last.load(Ordering::Acquire))
    }
}

/// The answers of one connection still being sent.
#[derive(Debug)]
pub struct Watch {
    origin: Instant,
    marks: Mutex<Marks>,
}

#[derive(Debug, Default)]
struct Marks {
    live: Vec<Weak<Mark>>,
    /// Length at which `live` is next rid of finished answers.
    prune_at: usize,
}

impl Watch {
    /// A connection with no answer yet.
    pub fn new() -> Arc<Self> {
        Arc::new(Self { origin: Instant::now(), marks: Mutex::default() })
    }

    fn marks(&self) -> std::sync::MutexGuard<'_, Marks> {
        self.marks.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `inner`, watched.
    pub fn body<B>(self: &Arc<Self>, inner: B) -> Watched<B> {
        let mark = Arc::new(Mark { origin: self.origin, unwritten: AtomicUsize::new(0), last: AtomicU64::new(0) });
        let mut marks = self.marks();
        if marks.live.len() >= marks.prune_at {
            marks.live.retain(|m| m.strong_count() > 0);
            marks.prune_at = (marks.live.len() * 2).max(64);
        }
        marks.live.push(Arc::downgrade(&mark));
        drop(marks);
        Watched { inner, rest: Bytes::new(), mark }
    }

    /// The last progress of the answer that has waited longest with bytes
    /// unwritten, if one has.
    fn oldest(&self) -> Option<u64> {
        let mut marks = self.marks();
        marks.live.retain(|m| m.strong_count() > 0);
        marks.live.iter().filter_map(Weak::upgrade).filter_map(|m| m.waiting_since()).min()
    }

    /// Resolves once an answer has had bytes unwritten and made no progress
    /// for `timeout`: its client opened no window for it.
    pub async fn stalled(&self, timeout: Duration) {
        let limit = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        loop {
            let wake = match self.oldest() {
                Some(last) if ms_since(self.origin).saturating_sub(last) >= limit => return,
                Some(last) => self.origin + Duration::from_millis(last) + timeout,
                None => Instant::now() + timeout,
            };
            tokio::time::sleep_until(wake.max(Instant::now() + Duration::from_millis(10))).await;
        }
    }
}

/// An HTTP/2 answer body: `B`'s frames, their data as [`Piece`]s of at
/// most [`SLICE`] bytes, counted in its [`Mark`].
#[derive(Debug)]
pub struct Watched<B> {
    inner: B,
    /// What is left of the data frame being sliced.
    rest: Bytes,
    mark: Arc<Mark>,
}

impl<B> Watched<B> {
    /// The next piece of `rest`, counted as handed over now.
    fn hand(&mut self) -> Frame<Piece> {
        let bytes = self.rest.split_to(self.rest.len().min(SLICE));
        self.mark.unwritten.fetch_add(bytes.len(), Ordering::AcqRel);
        self.mark.moved();
        Frame::data(Piece { bytes, mark: self.mark.clone() })
    }
}

impl<B> Body for Watched<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Piece;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Piece>, B::Error>>> {
        let this = &mut *self;
        if this.rest.has_remaining() {
            return Poll::Ready(Some(Ok(this.hand())));
        }
        let frame = match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
            Some(Ok(frame)) => frame,
            Some(Err(e)) => return Poll::Ready(Some(Err(e))),
            None => return Poll::Ready(None),
        };
        match frame.into_data() {
            Ok(data) => {
                this.rest = data;
                Poll::Ready(Some(Ok(this.hand())))
            }
            Err(other) => Poll::Ready(Some(Ok(other.map_data(|bytes| Piece { bytes, mark: this.mark.clone() })))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        with_rest(self.inner.size_hint(), &self.rest)
    }
}

/// The size hint of a body that holds `rest` of a frame ahead of `inner`'s.
pub(super) fn with_rest(inner: SizeHint, rest: &Bytes) -> SizeHint {
    let rest = rest.len() as u64;
    let mut hint = SizeHint::new();
    hint.set_lower(inner.lower().saturating_add(rest));
    if let Some(upper) = inner.upper() {
        hint.set_upper(upper.saturating_add(rest));
    }
    hint
}

/// Data of an HTTP/2 answer handed to hyper: its bytes, counted in its
/// answer's [`Mark`] until h2 writes them (advancing the piece) or drops
/// them (the stream reset, the connection gone).
#[derive(Debug)]
pub struct Piece {
    bytes: Bytes,
    mark: Arc<Mark>,
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
            self.mark.unwritten.fetch_sub(cnt, Ordering::AcqRel);
            self.mark.moved();
        }
    }
}

impl Drop for Piece {
    fn drop(&mut self) {
        self.mark.unwritten.fetch_sub(self.bytes.len(), Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full};

    async fn piece(body: &mut Watched<Full<Bytes>>) -> Piece {
        body.frame().await.expect("a frame").expect("data").into_data().expect("data")
    }

    #[tokio::test]
    async fn an_answer_goes_in_pieces_with_its_exact_length_and_same_bytes() {
        let watch = Watch::new();
        let bytes: Bytes = (0..(SLICE * 2 + 5)).map(|i| (i % 251) as u8).collect();
        let mut body = watch.body(Full::new(bytes.clone()));
        assert_eq!(body.size_hint().exact(), Some(bytes.len() as u64));
        let mut got = Vec::new();
        while !body.is_end_stream() {
            let mut piece = piece(&mut body).await;
            got.push(piece.copy_to_bytes(piece.remaining()));
            assert_eq!(
                body.size_hint().exact(),
                Some((bytes.len() - got.iter().map(Bytes::len).sum::<usize>()) as u64)
            );
        }
        assert_eq!(got.iter().map(Bytes::len).collect::<Vec<_>>(), [SLICE, SLICE, 5]);
        assert_eq!(got.concat(), bytes);
        assert!(body.frame().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_with_bytes_unwritten_and_no_progress_for_the_timeout_is_a_stall() {
        let watch = Watch::new();
        let timeout = Duration::from_secs(30);
        let quiet = |d: u64| tokio::time::timeout(Duration::from_secs(d), watch.stalled(timeout));
        let mut body = watch.body(Full::new(Bytes::from(vec![7u8; 3000])));
        let mut last = piece(&mut body).await;
        // hyper asks on: the body has no more, yet its last piece waits.
        assert!(body.frame().await.is_none());
        drop(body);
        assert!(quiet(20).await.is_err(), "handed over 20 s ago");
        last.advance(1000);
        assert!(quiet(20).await.is_err(), "bytes written 20 s ago: a slow reader");
        last.advance(1000);
        let started = Instant::now();
        watch.stalled(timeout).await;
        assert_eq!(started.elapsed(), timeout, "the end of an answer, held and never written, is watched");
        last.advance(1000);
        assert!(quiet(60).await.is_err(), "a piece written whole is no stall, even before it is dropped");
        drop(last);
        let mut reset = Watch::new().body(Full::new(Bytes::from(vec![7u8; 10])));
        drop(piece(&mut reset).await);
        assert_eq!(
            reset.mark.unwritten.load(Ordering::Acquire),
            0,
            "a piece dropped unwritten (a reset) counts no more"
        );
    }
}
