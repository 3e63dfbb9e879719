//! Tests of answer_bytes.rs: what is counted, when it is let go, and the
//! wait for an address's answers to drain.

use super::*;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Body as _;

const MIB: usize = 1 << 20;

async fn next(
    body: &mut Counted<impl hyper::body::Body<Data = Bytes, Error = std::convert::Infallible> + Unpin>,
) -> Bytes {
    body.frame().await.expect("a frame").expect("no error").into_data().expect("data")
}

/// A GET's reservation, at once.
async fn reserved(bytes: &Arc<AddressBytes>) -> Reserved {
    bytes.admit(RESERVE, Duration::ZERO).await.expect("under its bound")
}

#[tokio::test]
async fn a_sized_answer_counts_whole_at_once_and_goes_in_pieces_of_the_same_bytes() {
    let bytes = AddressBytes::new(64 * MIB);
    let data: Vec<u8> = (0..3 * MIB + 5).map(|i| (i % 251) as u8).collect();
    let reservation = reserved(&bytes).await;
    assert_eq!(bytes.held(), RESERVE, "set aside while the handler renders");
    let mut body = Counted::new(Full::new(Bytes::from(data.clone())), reservation, SLICE);
    assert_eq!(body.size_hint().exact(), Some(data.len() as u64), "the length is kept");
    assert_eq!(bytes.held(), data.len(), "the reservation became the answer, counted before a byte is asked for");
    let mut got = Vec::new();
    while got.len() < data.len() {
        let piece = next(&mut body).await;
        assert!(!piece.is_empty() && piece.len() <= SLICE, "a piece of {}", piece.len());
        got.extend_from_slice(&piece);
        assert_eq!(bytes.held(), data.len() - got.len(), "what is handed on is no longer counted");
    }
    assert_eq!(got, data);
    assert!(body.is_end_stream());
    drop(body);
    assert_eq!(bytes.held(), 0);
}

#[tokio::test]
async fn an_answer_dropped_half_sent_or_never_made_lets_go_of_the_rest() {
    let bytes = AddressBytes::new(64 * MIB);
    let mut body = Counted::new(Full::new(Bytes::from(vec![7u8; 2 * MIB])), reserved(&bytes).await, SLICE);
    let first = next(&mut body).await;
    assert_eq!(bytes.held(), 2 * MIB - first.len());
    drop(body);
    assert_eq!(bytes.held(), 0, "the connection gone, nothing stays counted");
    drop(reserved(&bytes).await);
    assert_eq!(bytes.held(), 0, "a handler dropped before it answered lets its reservation go");
}

#[tokio::test]
async fn a_streamed_answer_counts_what_it_has_produced_and_not_yet_handed_on() {
    let bytes = AddressBytes::new(64 * MIB);
    let pages = vec![Bytes::from(vec![1u8; SLICE * 3]), Bytes::from(vec![2u8; 10])];
    let stream =
        futures_util::stream::iter(pages.into_iter().map(|b| Ok::<_, std::convert::Infallible>(Frame::data(b))));
    let mut body = Counted::new(StreamBody::new(stream), reserved(&bytes).await, SLICE);
    assert_eq!(bytes.held(), 0, "a stream's size is not known: nothing counted before it produces");
    assert_eq!(next(&mut body).await.len(), SLICE);
    assert_eq!(bytes.held(), 2 * SLICE, "the rest of the page is counted");
    drop(body);
    assert_eq!(bytes.held(), 0);
}

#[tokio::test]
async fn an_http2_answer_goes_in_h2s_pieces() {
    let bytes = AddressBytes::new(64 * MIB);
    let slice = AnswerBytes::new(bytes.clone()).for_h2().slice;
    assert_eq!(slice, super::super::stall::SLICE);
    let mut body = Counted::new(Full::new(Bytes::from(vec![3u8; MIB])), reserved(&bytes).await, slice);
    assert_eq!(next(&mut body).await.len(), slice, "the watch of unwritten bytes takes it whole");
    assert_eq!(bytes.held(), MIB - slice);
}

#[tokio::test(start_paused = true)]
async fn a_request_waits_for_its_addresss_answers_to_drain_and_not_longer_than_the_wait() {
    let bytes = AddressBytes::new(4 * MIB);
    let held = Counted::new(Full::new(Bytes::from(vec![0u8; 4 * MIB])), reserved(&bytes).await, SLICE);
    assert!(bytes.admit(0, ADMIT_WAIT).await.is_none(), "at its bound for the whole wait: refused");
    let waiting = tokio::spawn({
        let bytes = bytes.clone();
        async move { bytes.admit(RESERVE, ADMIT_WAIT).await.is_some() }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!waiting.is_finished(), "it waits");
    drop(held);
    assert!(waiting.await.expect("ran"), "admitted once the earlier answer is gone");
    assert_eq!(bytes.held(), 0, "and its reservation let go with it");
}

#[tokio::test]
async fn requests_arriving_together_are_admitted_one_reservation_past_the_bound_at_most() {
    let bytes = AddressBytes::new(20 * MIB);
    let mut admitted = Vec::new();
    for _ in 0..10 {
        if let Some(r) = bytes.admit(RESERVE, Duration::ZERO).await {
            admitted.push(r);
        }
    }
    assert_eq!(admitted.len(), 3, "8 + 8 + 8 MiB: the third passes the 20 MiB bound, the fourth waits");
    assert_eq!(bytes.held(), 3 * RESERVE);
    drop(admitted);
    assert_eq!(bytes.held(), 0);
}
