//! A client's byte stream, plain TCP or TLS, behind one type every front
//! end uses: readiness-style calls (`readable`, `try_read_buf`,
//! `try_write`) for the 0-9-1 connection loop, and `AsyncRead` /
//! `AsyncWrite` for the AMQP 1.0, stream and HTTP servers.
//!
//! An enum rather than a generic parameter: the branch costs nothing next
//! to a syscall, and the front ends are compiled once.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::tls::io::TlsIo;
use crate::tls::peer::TlsInfo;
use crate::tls::Tls;

pub enum Transport {
    Plain(TcpStream),
    Tls(Box<TlsIo>),
}

impl Transport {
    /// The TLS handshake with a newly accepted client, within `timeout`.
    /// A failure is logged once with the peer's address and what went
    /// wrong (a plain-text client, an unknown CA, an expired
    /// certificate...); the socket and its buffers go with the task.
    pub async fn accept_tls(
        tls: &Tls,
        tcp: TcpStream,
        peer: SocketAddr,
        timeout: Duration,
    ) -> Option<Transport> {
        let session = match tls.session() {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(peer = %peer, "cannot start a TLS session: {e}");
                return None;
            }
        };
        let mut io = Box::new(TlsIo::new(tcp, session));
        match tokio::time::timeout(timeout, io.handshake()).await {
            Ok(Ok(())) => Some(Transport::Tls(io)),
            Ok(Err(e)) => {
                tracing::warn!(peer = %peer, "TLS handshake failed: {e}");
                None
            }
            Err(_) => {
                tracing::warn!(peer = %peer, "TLS handshake timed out after {} ms", timeout.as_millis());
                None
            }
        }
    }

    pub fn tcp(&self) -> &TcpStream {
        match self {
            Transport::Plain(s) => s,
            Transport::Tls(t) => &t.tcp,
        }
    }

    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        self.tcp().set_nodelay(on)
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp().local_addr()
    }

    /// What was agreed in the TLS handshake, and the client's certificate.
    pub fn tls_info(&self) -> Option<TlsInfo> {
        match self {
            Transport::Plain(_) => None,
            Transport::Tls(t) => Some(TlsInfo::of(&t.tls)),
        }
    }

    /// Wait until a read may make progress.
    pub async fn readable(&self) -> io::Result<()> {
        match self {
            Transport::Plain(s) => s.readable().await,
            Transport::Tls(t) if t.has_buffered() => Ok(()),
            Transport::Tls(t) => t.tcp.readable().await,
        }
    }

    /// Wait until a write may make progress.
    pub async fn writable(&self) -> io::Result<()> {
        self.tcp().writable().await
    }

    /// Read what is there into `buf` (up to its spare capacity, at least
    /// `min_room`); Ok(0) at the end of the stream.
    pub fn try_read_buf(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.try_read_buf(buf),
            Transport::Tls(t) => {
                let room = buf.capacity() - buf.len();
                t.try_read_buf(buf, room)
            }
        }
    }

    pub fn try_write(&mut self, data: &[u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.try_write(data),
            Transport::Tls(t) => t.try_write(data),
        }
    }

    /// Bytes accepted by `try_write` may still wait inside the TLS layer
    /// for the socket: the loop must wait on `writable` while this holds.
    pub fn wants_write(&self) -> bool {
        match self {
            Transport::Plain(_) => false,
            Transport::Tls(t) => t.wants_write(),
        }
    }

    /// Push out what the TLS layer holds; `WouldBlock` if the socket is full.
    pub fn flush_pending(&mut self) -> io::Result<()> {
        match self {
            Transport::Plain(_) => Ok(()),
            Transport::Tls(t) => t.flush_tls(),
        }
    }
}

impl AsyncRead for Transport {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Transport::Tls(t) => loop {
                let room = buf.remaining();
                match t.read_plain(room, &mut |chunk| buf.put_slice(chunk)) {
                    Ok(_) => return Poll::Ready(Ok(())),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        ready!(t.tcp.poll_read_ready(cx))?;
                    }
                    Err(e) => return Poll::Ready(Err(e)),
                }
            },
        }
    }
}

impl AsyncWrite for Transport {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Transport::Plain(s) => Pin::new(s).poll_write(cx, data),
            Transport::Tls(t) => loop {
                match t.try_write(data) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        ready!(t.tcp.poll_write_ready(cx))?;
                    }
                    r => return Poll::Ready(r),
                }
            },
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(s) => Pin::new(s).poll_flush(cx),
            Transport::Tls(t) => loop {
                match t.flush_tls() {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        ready!(t.tcp.poll_write_ready(cx))?;
                    }
                    r => return Poll::Ready(r),
                }
            },
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Transport::Tls(t) => {
                t.tls.send_close_notify();
                loop {
                    match t.flush_tls() {
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            ready!(t.tcp.poll_write_ready(cx))?;
                        }
                        Err(e) => return Poll::Ready(Err(e)),
                        Ok(()) => break,
                    }
                }
                Pin::new(&mut t.tcp).poll_shutdown(cx)
            }
        }
    }
}
