//! A keep-alive HTTP/1.1 connection for closed-loop loads: one request at a
//! time on one TCP connection, each answer read to the end of its
//! `Content-Length`, a new connection only when the server closed the last.
//! What a partner's or a gateway's HTTP client does; the loads that open a
//! connection per request measure the connection's setup as well.

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// One client's connection to a loopback port.
pub struct Conn {
    port: u16,
    stream: Option<BufReader<TcpStream>>,
}

impl Conn {
    /// A connection to `port`, opened at the first request.
    pub fn new(port: u16) -> Conn {
        Conn { port, stream: None }
    }

    /// POSTs `body` to `path` with `headers` (each ending in `\r\n`) and
    /// checks that the answer's status is `want`.
    pub async fn post(&mut self, path: &str, headers: &str, body: &str, want: u16) -> Result<(), String> {
        let sent = self.send(path, headers, body).await;
        if sent.is_err() {
            // Whatever is left on this connection is not to be read as the
            // next answer.
            self.stream = None;
        }
        let (status, answer) = sent?;
        if status != want {
            return Err(format!("{path} answered {status}: {}", String::from_utf8_lossy(&answer)));
        }
        Ok(())
    }

    /// Sends one request and reads its answer: the status and the body.
    async fn send(&mut self, path: &str, headers: &str, body: &str) -> Result<(u16, Vec<u8>), String> {
        let stream = match &mut self.stream {
            Some(s) => s,
            None => {
                let s = TcpStream::connect(("127.0.0.1", self.port)).await.map_err(|e| e.to_string())?;
                s.set_nodelay(true).map_err(|e| e.to_string())?;
                self.stream.insert(BufReader::new(s))
            }
        };
        let request =
            format!("POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}Content-Length: {}\r\n\r\n{body}", body.len());
        stream.get_mut().write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
        let (status, length, close) = read_head(stream).await?;
        let mut answer = vec![0; length];
        stream.read_exact(&mut answer).await.map_err(|e| e.to_string())?;
        if close {
            self.stream = None;
        }
        Ok((status, answer))
    }
}

/// An answer's status, `Content-Length` and whether the server closes after it.
async fn read_head(stream: &mut BufReader<TcpStream>) -> Result<(u16, usize, bool), String> {
    let mut line = String::new();
    let (mut status, mut length, mut close) = (None, 0, false);
    loop {
        line.clear();
        if stream.read_line(&mut line).await.map_err(|e| e.to_string())? == 0 {
            return Err("the server closed the connection".into());
        }
        let text = line.trim_end();
        if text.is_empty() {
            break;
        }
        if status.is_none() {
            status = text.split(' ').nth(1).and_then(|s| s.parse::<u16>().ok());
            continue;
        }
        let Some((name, value)) = text.split_once(':') else { continue };
        if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(format!("a {} answer: only answers with a Content-Length are read", value.trim()));
        }
        if name.eq_ignore_ascii_case("content-length") {
            length = value.trim().parse().map_err(|_| format!("bad Content-Length {value:?}"))?;
        } else if name.eq_ignore_ascii_case("connection") && value.trim().eq_ignore_ascii_case("close") {
            close = true;
        }
    }
    Ok((status.ok_or("no status line")?, length, close))
}
