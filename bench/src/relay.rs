//! A TCP relay on loopback that holds each chunk for a while before it
//! passes it on, each way: a database "on another machine" for the
//! round-trip figures (`lineproto --database-delay-us`). Threads, not
//! tokio: its timers tick in milliseconds, a LAN's round trip is a
//! fraction of one.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Starts relaying connections made to the returned loopback port to
/// `target` (`host:port`), each chunk passed on `delay` after it arrived,
/// each way; it runs until the process ends.
pub(crate) fn start(target: String, delay: Duration) -> Result<u16, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(server) = TcpStream::connect(&target) else { continue };
            let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else { continue };
            for s in [&client, &server] {
                let _ = s.set_nodelay(true);
            }
            std::thread::spawn(move || pump(client, server, delay));
            std::thread::spawn(move || pump(s2, c2, delay));
        }
    });
    Ok(port)
}

/// Copies `from` to `to`, each chunk sent `delay` after it arrived, until
/// either ends. A thread reads and stamps, another waits and writes: chunks
/// that arrive while one waits are not held up by its wait (a pipeline's
/// replies keep their spacing, as on a wire).
fn pump(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    let (stamped, due) = std::sync::mpsc::channel::<(Instant, Vec<u8>)>();
    let writer = std::thread::spawn(move || {
        for (at, chunk) in due {
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Both);
    });
    let mut buf = vec![0; 64 << 10];
    while let Ok(n @ 1..) = from.read(&mut buf) {
        if stamped.send((Instant::now() + delay, buf[..n].to_vec())).is_err() {
            break;
        }
    }
    drop(stamped);
    let _ = writer.join();
    let _ = from.shutdown(Shutdown::Both);
}

/// `url` (`postgres://user@host:port/db`) with its host and port replaced
/// by loopback port `port`; also the `host:port` it named.
pub(crate) fn via(url: &str, port: u16) -> Result<(String, String), String> {
    let (scheme, rest) = url.split_once("://").ok_or("a database URL has a scheme")?;
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (user, host) = authority.rsplit_once('@').map_or(("", authority), |(u, h)| (u, h));
    let host = if host.contains(':') { host.to_owned() } else { format!("{host}:5432") };
    let user = if user.is_empty() { String::new() } else { format!("{user}@") };
    Ok((format!("{scheme}://{user}127.0.0.1:{port}/{path}"), host))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_url_is_sent_through_the_relay() {
        let (url, target) = super::via("postgres://postgres@127.0.0.1:5432/db_1", 9).expect("url");
        assert_eq!((url.as_str(), target.as_str()), ("postgres://postgres@127.0.0.1:9/db_1", "127.0.0.1:5432"));
        let (url, target) = super::via("postgres://localhost/x", 9).expect("url");
        assert_eq!((url.as_str(), target.as_str()), ("postgres://127.0.0.1:9/x", "localhost:5432"));
    }
}
