//! `ApiError` bodies for requests hyper rejects before the router sees them.
//!
//! An unencoded `<`, `"` or space in a URL (curl sends `…/operations/<id>` as typed) or a
//! malformed header makes hyper answer by itself — `400 Bad Request`, `connection: close`,
//! `content-length: 0` — and neither hyper nor `axum::serve` has a hook for that answer.
//! So every accepted connection is wrapped ([`ApiErrorListener`]), and a response head that
//! only hyper writes (a 4xx/5xx closing the connection with an empty body: every error of
//! ours carries an `ApiError` body) is replaced on its way out by the same status with an
//! `ApiError` body.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// The API's listener: accepted connections answer hyper's own rejections with `ApiError`.
pub struct ApiErrorListener(pub TcpListener);

impl axum::serve::Listener for ApiErrorListener {
    type Io = ApiErrorIo<TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = axum::serve::Listener::accept(&mut self.0).await;
        (ApiErrorIo { inner: io, pending: None }, addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

/// A connection whose hyper-written error heads get an `ApiError` body.
pub struct ApiErrorIo<T> {
    inner: T,
    /// A replacement being written: its bytes, how many went out, and the length of the
    /// buffer it replaces (reported written once it is all out).
    pending: Option<(Vec<u8>, usize, usize)>,
}

/// The replacement of `head` when it is one of hyper's own rejections.
fn replacement(head: &[u8]) -> Option<Vec<u8>> {
    const EMPTY_CLOSE: &[u8] = b"\r\nconnection: close\r\ncontent-length: 0\r\n";
    let rest = head.strip_prefix(b"HTTP/1.1 ")?;
    if !matches!(rest.first(), Some(b'4' | b'5')) || !head.ends_with(b"\r\n\r\n") {
        return None;
    }
    let at = memchr::memmem::find(head, EMPTY_CLOSE)?;
    let status: u16 = std::str::from_utf8(rest.get(..3)?).ok()?.parse().ok()?;
    let message = match status {
        400 => {
            "malformed HTTP request: percent-encode characters such as <, >, \" and spaces in the URL; headers are `name: value` lines"
        }
        414 => "the request URL is too long",
        431 => "the request headers are too large",
        505 => "HTTP version not supported",
        _ => "the request could not be read",
    };
    let body = serde_json::json!({ "status": status, "message": message }).to_string();
    let mut out = Vec::with_capacity(head.len() + body.len() + 40);
    out.extend_from_slice(&head[..at]);
    out.extend_from_slice(b"\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: ");
    out.extend_from_slice(body.len().to_string().as_bytes());
    // The rest of hyper's head (the date line and the blank line).
    out.extend_from_slice(&head[at + EMPTY_CLOSE.len() - 2..]);
    out.extend_from_slice(body.as_bytes());
    Some(out)
}

impl<T: AsyncWrite + Unpin> ApiErrorIo<T> {
    /// Write out the pending replacement; `Ready(len)` of the buffer it replaced when done.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let Some((bytes, written, replaced)) = self.pending.as_mut() else { return Poll::Ready(Ok(0)) };
        while *written < bytes.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += n;
        }
        let replaced = *replaced;
        self.pending = None;
        Poll::Ready(Ok(replaced))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for ApiErrorIo<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ApiErrorIo<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if self.pending.is_none() {
            match replacement(buf) {
                Some(bytes) => self.pending = Some((bytes, 0, buf.len())),
                None => return Pin::new(&mut self.inner).poll_write(cx, buf),
            }
        }
        self.poll_pending(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        // hyper writes an error head alone, in one slice.
        if self.pending.is_some() || (bufs.len() == 1 && replacement(&bufs[0]).is_some()) {
            return self.poll_write(cx, &bufs[0]);
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.pending.is_some() {
            ready!(self.poll_pending(cx))?;
        }
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.pending.is_some() {
            ready!(self.poll_pending(cx))?;
        }
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hypers_own_rejections_get_an_api_error_body() {
        let head = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\ndate: Thu, 03 Dec 2026 07:36:38 GMT\r\n\r\n";
        let out = String::from_utf8(replacement(head).unwrap()).unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{out}");
        assert!(head.contains("\r\ncontent-type: application/json\r\n"), "{out}");
        assert!(head.contains(&format!("\r\ncontent-length: {}\r\n", body.len())), "{out}");
        assert!(head.ends_with("\r\ndate: Thu, 03 Dec 2026 07:36:38 GMT"), "{out}");
        let error: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(error["status"], 400);
        assert!(error["message"].as_str().unwrap().contains("percent-encode"));
    }

    #[test]
    fn other_responses_pass_through() {
        for head in [
            &b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"[..],
            b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 40\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n{\"partial\"",
            b"{\"status\":400}",
        ] {
            assert_eq!(replacement(head), None, "{}", String::from_utf8_lossy(head));
        }
    }
}
