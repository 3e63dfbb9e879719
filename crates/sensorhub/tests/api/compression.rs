//! Compressed answers: gzip, br and zstd when `Accept-Encoding` asks,
//! decoding to exactly the identity answer; identity otherwise, and tiny
//! answers always plain.

use crate::harness::{TestApp, basic, reading, secs};
use std::io::Read;

/// GET `url` as alice with `Accept-Encoding: encoding` (none when empty):
/// the `Content-Encoding` and the body's raw bytes.
async fn fetch(app: &TestApp, url: &str, encoding: &str) -> (Option<String>, Vec<u8>) {
    let mut req = reqwest::Client::new()
        .get(format!("{}{url}", app.base))
        .header("Authorization", basic("alice", crate::harness::ALICE_PASSWORD));
    if !encoding.is_empty() {
        req = req.header("Accept-Encoding", encoding);
    }
    let res = req.send().await.expect("request");
    assert_eq!(res.status(), 200);
    let enc = res.headers().get("content-encoding").map(|v| v.to_str().expect("ascii").to_owned());
    (enc, res.bytes().await.expect("body").to_vec())
}

fn decode(encoding: &str, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match encoding {
        "gzip" => flate2::read::GzDecoder::new(bytes).read_to_end(&mut out).map(|_| ()),
        "br" => brotli::Decompressor::new(bytes, 4096).read_to_end(&mut out).map(|_| ()),
        "zstd" => zstd::stream::read::Decoder::new(bytes).and_then(|mut d| d.read_to_end(&mut out)).map(|_| ()),
        other => panic!("unexpected encoding {other}"),
    }
    .expect("decodes");
    out
}

on_each_backend! {
    async fn answers_are_compressed_when_asked_and_decode_to_the_same_bytes() {
        let app = TestApp::start().await;
        let start = secs("2026-06-01T00:00:00Z");
        app.add_readings((0..3000).map(|i| reading("AWLR-001", start + i * 60, "AWLR1-wl", 100.0 + (i % 97) as f64 / 4.0)).collect()).await;
        // One answer in one piece (a day), one streamed in batches (3,000 readings).
        for url in [
            "/devices/AWLR-001/data?start=2026-06-01T00:00:00Z&end=2026-06-01T23:59:59Z",
            "/devices/AWLR-001/data?start=2026-06-01T00:00:00Z&end=2026-06-03T23:59:59Z",
            "/devices/AWLR-001/data?start=2026-06-01T00:00:00Z&end=2026-06-03T23:59:59Z&format=csv",
        ] {
            let (enc, identity) = fetch(&app, url, "").await;
            assert_eq!(enc, None, "identity unless asked");
            for encoding in ["gzip", "br", "zstd"] {
                let (enc, body) = fetch(&app, url, encoding).await;
                assert_eq!(enc.as_deref(), Some(encoding), "{url}");
                assert!(body.len() * 5 < identity.len(), "{encoding}: {} of {} bytes", body.len(), identity.len());
                assert_eq!(decode(encoding, &body), identity, "{encoding} {url}");
            }
            let (enc, _) = fetch(&app, url, "zstd;q=1, gzip;q=0.5").await;
            assert_eq!(enc.as_deref(), Some("zstd"), "the preferred encoding");
        }
        // A tiny answer goes plain, whatever is asked.
        let (enc, body) = fetch(&app, "/devices/AWLR-001/data?start=2026-05-06T00:00:00Z&end=2026-05-06T01:00:00Z", "gzip").await;
        assert_eq!((enc, body), (None, br#"{"message":"Success","data":[]}"#.to_vec()));
    }
}
