//! Hostile clients for the benchmark: connections that send half a request
//! head and then nothing (slowloris), held open for as long as they last,
//! each re-opened as soon as the server sheds it, so that the server always
//! faces the full count.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// Slow connections held on a thread until dropped.
pub struct Slowloris {
    stop: Arc<AtomicBool>,
    reopened: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

fn open(port: u16) -> Option<TcpStream> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.write_all(b"GET /external/v1/devices HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ").ok()?;
    s.set_nonblocking(true).ok()?;
    Some(s)
}

impl Slowloris {
    /// Opens `count` slow connections to `port` and keeps them open.
    pub fn hold(port: u16, count: usize) -> Result<Self, String> {
        let mut conns: Vec<Option<TcpStream>> = (0..count).map(|_| open(port)).collect();
        let opened = conns.iter().filter(|c| c.is_some()).count();
        if opened < count {
            return Err(format!("only {opened} of {count} slow connections opened (file descriptor limit?)"));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let reopened = Arc::new(AtomicU64::new(0));
        let (halt, count_reopened) = (stop.clone(), reopened.clone());
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while !halt.load(Ordering::Relaxed) {
                for slot in &mut conns {
                    let closed = match slot {
                        Some(s) => match s.read(&mut buf) {
                            Ok(0) => true,
                            Ok(_) => false,
                            Err(e) => e.kind() != ErrorKind::WouldBlock,
                        },
                        None => true,
                    };
                    if closed {
                        *slot = open(port);
                        count_reopened.fetch_add(1, Ordering::Relaxed);
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Ok(Self { stop, reopened, thread: Some(thread) })
    }

    /// How many connections the server shed (and were re-opened) so far.
    pub fn reopened(&self) -> u64 {
        self.reopened.load(Ordering::Relaxed)
    }
}

impl Drop for Slowloris {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
