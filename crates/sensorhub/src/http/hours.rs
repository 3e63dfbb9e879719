//! A raw readings window answered hour by hour: stored hours are fetched a
//! page at a time; the whole hours inside the range go out as runs, one
//! piece each, from the [`RenderedHours`] cache when it holds those hours'
//! very bytes (else rendered and kept); the hours cut by the range are
//! rendered from their readings within it; and the pieces go to the socket
//! without being copied into one buffer. An answer that fits in one page
//! goes with its length; a longer one streams, a page in memory at a time.
//! The bytes are those of the batch-by-batch encoder exactly (pieces joined
//! by the format's separator).

use super::AppState;
use super::auth::Caller;
use super::encode::{ReadingEncoder, Shape};
use super::error::ApiError;
use super::guard::{Cut, Guard};
use super::rendered::{RenderedHours, RunBuilder, Sent};
use crate::metrics::Metrics;
use bytes::Bytes;
use futures_util::{StreamExt, stream};
use hyper::body::{Frame, SizeHint};
use sensorhub_core::model::SensorMeta;
use sensorhub_core::time::TimeRange;
use sensorhub_store::{Store, StoreResult, StoredHour};
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Stored hours fetched per round trip: a day and a little more, so that a
/// day window is one fetch and one answer with a length.
const PAGE_HOURS: usize = 26;

/// Rendered bytes beyond which an answer streams even if its hours came in
/// one page (a logger with many sensors reporting every few seconds).
const SIZED_LIMIT: usize = 8 << 20;

/// Rendered bytes at which a run of whole hours ends (its last hour is the
/// one that reaches them): a day of one-minute readings of a few sensors is
/// one run, and a logger with many sensors reporting every second an hour
/// a run.
const RUN_BYTES: usize = 512 << 10;

/// What one request needs to render hours.
struct Renderer {
    store: Arc<dyn Store>,
    cache: Arc<RenderedHours>,
    metrics: Arc<Metrics>,
    encoder: ReadingEncoder,
    shape: Option<Shape>,
    device_pk: i64,
    range: TimeRange,
    /// A non-empty piece has been written (the next needs a separator).
    wrote: bool,
}

impl Renderer {
    /// Whether `hour` lies wholly inside the range.
    fn whole(&self, hour: &StoredHour) -> bool {
        let (first, last) = hour.span();
        first >= self.range.start && last <= self.range.end
    }

    /// The next hours of `page` as answer pieces in `out` (a separator if
    /// one is needed, then the piece): an hour the range cuts, on its own;
    /// else the whole hours from there, as one run. Returns the bytes of
    /// the piece (0 for hours without readings in the range), or `None`
    /// once the page is done.
    fn render_next(
        &mut self,
        page: &mut std::vec::IntoIter<StoredHour>,
        out: &mut VecDeque<Bytes>,
    ) -> StoreResult<Option<usize>> {
        let hours = page.as_slice();
        let whole = hours.iter().take_while(|h| self.whole(h)).count();
        let (piece, readings, taken) = match self.shape.clone() {
            Some(shape) if whole > 0 => {
                let run = self.run(&shape, &hours[..whole])?;
                (run.rendered, run.readings, run.hours)
            }
            _ => match hours.first() {
                Some(hour) => {
                    let batch = hour.readings(self.device_pk, self.range.start, self.range.end)?;
                    (Bytes::from(self.encoder.piece(&batch)), batch.len(), 1)
                }
                None => return Ok(None),
            },
        };
        page.nth(taken - 1);
        self.metrics.readings_served(readings);
        if piece.is_empty() {
            return Ok(Some(0));
        }
        if self.wrote && !self.encoder.separator().is_empty() {
            out.push_back(Bytes::from_static(self.encoder.separator()));
        }
        self.wrote = true;
        let len = piece.len();
        out.push_back(piece);
        Ok(Some(len))
    }

    /// The longest run of `hours` (whole ones) that the cache holds as
    /// stored now; else hours from the first rendered together, up to
    /// [`RUN_BYTES`], and kept.
    fn run(&mut self, shape: &super::encode::Shape, hours: &[StoredHour]) -> StoreResult<Sent> {
        if let Some(hit) = self.cache.get(self.device_pk, shape, hours) {
            return Ok(hit);
        }
        let mut run = RunBuilder::default();
        self.encoder.begin_piece();
        for hour in hours {
            let batch = hour.readings(self.device_pk, self.range.start, self.range.end)?;
            self.encoder.append(&batch, &mut run.out);
            run.hour(hour, batch.len());
            if run.out.len() >= RUN_BYTES {
                break;
            }
        }
        let run = run.finish();
        let sent = run.sent();
        self.cache.put(self.device_pk, shape, run);
        Ok(sent)
    }
}

/// Rendered pieces, sent with their total length (`Content-Length`), or
/// followed by the rest of a streamed answer (`then`). Either way the size
/// hint's lower bound is the rendered bytes still held, which the answer's
/// address is counted by (answer_bytes.rs).
struct Pieces {
    left: VecDeque<Bytes>,
    remaining: u64,
    then: Option<axum::body::Body>,
}

impl hyper::body::Body for Pieces {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Some(b) = this.left.pop_front() {
            this.remaining -= b.len() as u64;
            return Poll::Ready(Some(Ok(Frame::data(b))));
        }
        match &mut this.then {
            Some(then) => Pin::new(then).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.left.is_empty() && self.then.as_ref().is_none_or(hyper::body::Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        let Some(then) = &self.then else { return SizeHint::with_exact(self.remaining) };
        let mut hint = SizeHint::new();
        hint.set_lower(self.remaining.saturating_add(then.size_hint().lower()));
        hint
    }
}

/// Where a streamed answer is between pages.
struct Rest {
    renderer: Renderer,
    /// Hours fetched and not yet rendered.
    page: std::vec::IntoIter<StoredHour>,
    /// The next hour to fetch, and the last of the range.
    next: i64,
    last: i64,
    /// The store has no hours past the page.
    exhausted: bool,
    tail: Option<&'static [u8]>,
    /// The caller, checked again before each later page.
    guard: Option<Guard>,
}

impl Rest {
    /// The next pieces: an hour's, after fetching a page when needed, then
    /// the tail; `None` at the end.
    async fn step(&mut self) -> Option<Result<VecDeque<Bytes>, Cut>> {
        let mut out = VecDeque::new();
        loop {
            match self.renderer.render_next(&mut self.page, &mut out) {
                Ok(Some(0)) => continue,
                Ok(Some(_)) => return Some(Ok(out)),
                Ok(None) => {}
                Err(e) => return Some(Err(self.stop(e.into()))),
            }
            if !self.exhausted {
                if let Some(guard) = &mut self.guard
                    && !guard.holds().await
                {
                    return Some(Err(self.stop(Cut::Refused)));
                }
                let r = &self.renderer;
                match r.store.read_hours(r.device_pk, self.next, self.last, PAGE_HOURS).await {
                    Ok(hours) => {
                        self.advance(&hours);
                        self.page = hours.into_iter();
                        continue;
                    }
                    Err(e) => return Some(Err(self.stop(e.into()))),
                }
            }
            return self.tail.take().map(|t| Ok(VecDeque::from([Bytes::from_static(t)])));
        }
    }

    /// Ends the answer after `e`: nothing more is fetched or rendered.
    fn stop(&mut self, e: Cut) -> Cut {
        self.page = Vec::new().into_iter();
        self.exhausted = true;
        self.tail = None;
        e
    }

    /// Notes what a fetch returned: where the next starts, or that there is none.
    fn advance(&mut self, hours: &[StoredHour]) {
        match hours.last() {
            Some(h) if hours.len() == PAGE_HOURS && h.chunk < self.last => self.next = h.chunk + 1,
            _ => self.exhausted = true,
        }
    }
}

/// What [`window`] answers.
pub enum Windowed<T = axum::body::Body> {
    /// The window, as a response body.
    Body(T),
    /// The device is not visible in the scope.
    NotVisible,
    /// The scope was to be confirmed at an access generation that is no
    /// longer the store's: nothing was rendered.
    Unconfirmed,
}

impl<T> Windowed<T> {
    /// The body made into something else.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Windowed<U> {
        match self {
            Windowed::Body(b) => Windowed::Body(f(b)),
            Windowed::NotVisible => Windowed::NotVisible,
            Windowed::Unconfirmed => Windowed::Unconfirmed,
        }
    }
}

/// The raw readings of `device_id` visible to `caller` within `range`,
/// rendered by the encoder `encoder` makes for its sensors, as a response
/// body. With `confirm`, the caller's scope is a kept one that holds only at that
/// access generation, which the store reads with the device; `checked` is
/// the generation the caller was checked at (or a later one). The first page
/// is fetched before this returns, so that a failing store is a 500 rather
/// than a cut-off 200; an answer of more pages checks its caller again
/// before each ([`Guard`]).
pub async fn window(
    state: &AppState,
    caller: &Caller,
    (confirm, checked): (Option<i64>, i64),
    device_id: &str,
    range: TimeRange,
    encoder: impl FnOnce(&[SensorMeta]) -> ReadingEncoder,
) -> Result<Windowed, ApiError> {
    let (first, last) = (StoredHour::of(range.start), StoredHour::of(range.end));
    let head = state.store.window_hours(caller.scope, device_id, first, last, PAGE_HOURS).await?;
    // The caller was checked at `checked`: if access moved since, the
    // guard asks again before the next page.
    let (seen, known) = (head.access.min(checked), head.access);
    if confirm.is_some_and(|g| g != head.access) {
        return Ok(Windowed::Unconfirmed);
    }
    let Some((device, hours)) = head.found else { return Ok(Windowed::NotVisible) };
    let encoder = encoder(&device.sensors);
    let shape = encoder.shape();
    let head = Bytes::copy_from_slice(encoder.head());
    let tail = encoder.end();
    let (store, cache, metrics) = (state.store.clone(), state.rendered.clone(), state.metrics.clone());
    let renderer = Renderer { store, cache, metrics, encoder, shape, device_pk: device.pk, range, wrote: false };
    let mut rest = Rest {
        renderer,
        page: Vec::new().into_iter(),
        next: first,
        last,
        exhausted: false,
        tail: Some(tail),
        guard: None,
    };
    rest.advance(&hours);
    let mut pieces = VecDeque::from([head]);
    let mut held = 0;
    let mut page = hours.into_iter();
    while let Some(n) = rest.renderer.render_next(&mut page, &mut pieces)? {
        held += n;
        if held > SIZED_LIMIT {
            break;
        }
    }
    rest.page = page;
    if rest.exhausted && rest.page.len() == 0 {
        pieces.push_back(Bytes::from_static(tail));
        let remaining = pieces.iter().map(|b| b.len() as u64).sum();
        return Ok(Windowed::Body(axum::body::Body::new(Pieces { left: pieces, remaining, then: None })));
    }
    rest.guard = Some(Guard::new(state, caller, device_id, seen).knowing(known));
    let later = stream::unfold(rest, |mut rest| async move { rest.step().await.map(|r| (r, rest)) });
    let later = later.flat_map(|r| {
        let items: Vec<Result<Bytes, std::io::Error>> = match r {
            Ok(pieces) => pieces.into_iter().map(Ok).collect(),
            Err(cut) => vec![Err(cut.ended())],
        };
        stream::iter(items)
    });
    // Fused: a compressing layer polls again after the end.
    let then = Some(axum::body::Body::from_stream(later.fuse()));
    let remaining = pieces.iter().map(|b| b.len() as u64).sum();
    Ok(Windowed::Body(axum::body::Body::new(Pieces { left: pieces, remaining, then })))
}
