//! The byte stream under every protocol's connection: plain TCP, or TLS
//! over it (rustls), opened as a URI and TLS options say. The halves the
//! reader and writer tasks use; only plain TCP can be written to without
//! waiting (`try_write`), so a direct write from a sender applies to it
//! alone.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::tls::{TlsError, TlsOptions};
use crate::uri::AmqpUri;

/// Why a socket could not be opened.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// A connected socket, before it is split.
pub(crate) enum Socket {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

pub(crate) enum ReadHalf {
    Plain(OwnedReadHalf),
    Tls(tokio::io::ReadHalf<TlsStream<TcpStream>>),
}

pub(crate) enum WriteHalf {
    Plain(OwnedWriteHalf),
    Tls(tokio::io::WriteHalf<TlsStream<TcpStream>>),
}

impl WriteHalf {
    /// Whether many small pieces cost no more than one buffer to write:
    /// a vectored write on TCP, not TLS (which writes each on its own).
    pub(crate) fn gathers(&self) -> bool {
        matches!(self, WriteHalf::Plain(_))
    }
}

impl Socket {
    /// Connect to the URI's host and port (no Nagle), with TLS for a TLS
    /// URI or when options are given.
    pub(crate) async fn connect(uri: &AmqpUri, tls: Option<&TlsOptions>) -> Result<Socket, ConnectError> {
        let tcp = TcpStream::connect((uri.host.as_str(), uri.port)).await?;
        tcp.set_nodelay(true)?;
        Ok(if uri.tls || tls.is_some() {
            Socket::Tls(Box::new(tls_connect(uri, tls, tcp).await?))
        } else {
            Socket::Plain(tcp)
        })
    }

    pub(crate) fn split(self) -> (ReadHalf, WriteHalf) {
        match self {
            Socket::Plain(s) => {
                let (r, w) = s.into_split();
                (ReadHalf::Plain(r), WriteHalf::Plain(w))
            }
            Socket::Tls(s) => {
                let (r, w) = tokio::io::split(*s);
                (ReadHalf::Tls(r), WriteHalf::Tls(w))
            }
        }
    }
}

/// TLS over `tcp`, with the application's options or the URI's files.
async fn tls_connect(
    uri: &AmqpUri,
    tls: Option<&TlsOptions>,
    tcp: TcpStream,
) -> Result<TlsStream<TcpStream>, ConnectError> {
    let from_uri;
    let tls = match tls {
        Some(t) => t,
        None => {
            let client = match (&uri.certfile, &uri.keyfile) {
                (Some(c), Some(k)) => {
                    Some((std::path::Path::new(c.as_str()), std::path::Path::new(k.as_str())))
                }
                (None, None) => None,
                _ => return Err(TlsError("certfile and keyfile go together".into()).into()),
            };
            from_uri =
                TlsOptions::from_pem_files(uri.cacertfile.as_deref().map(std::path::Path::new), client)?;
            &from_uri
        }
    };
    let name = tls
        .server_name
        .clone()
        .or_else(|| uri.server_name_indication.clone())
        .unwrap_or_else(|| uri.host.clone());
    let name = ServerName::try_from(name).map_err(|e| TlsError(format!("server name: {e}")))?;
    tokio_rustls::TlsConnector::from(tls.config.clone())
        .connect(name, tcp)
        .await
        .map_err(|e| TlsError(format!("handshake: {e}")).into())
}

impl WriteHalf {
    /// Write what the socket takes now, without waiting (plain TCP only;
    /// over TLS this is always WouldBlock and the writer task writes).
    pub(crate) fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            WriteHalf::Plain(w) => w.try_write(buf),
            WriteHalf::Tls(_) => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    /// Write it all and push it out (TLS records included).
    pub(crate) async fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            WriteHalf::Plain(w) => w.write_all(buf).await,
            WriteHalf::Tls(w) => {
                w.write_all(buf).await?;
                w.flush().await
            }
        }
    }

    /// Write all of `pieces`, in order, and push them out; `pieces` is
    /// left empty. Over plain TCP a write takes many pieces' slices at
    /// once (vectored); over TLS each slice goes into the TLS records in
    /// turn.
    pub(crate) async fn write_all_pieces<P: Piece>(&mut self, pieces: &mut Vec<P>) -> io::Result<()> {
        /// Slices given to one vectored write (under IOV_MAX, 1024; a
        /// frame with lent bodies is two slices a message).
        const AT_ONCE: usize = 512;
        let w = match self {
            WriteHalf::Plain(w) => w,
            WriteHalf::Tls(w) => {
                let mut slices = [io::IoSlice::new(&[]); AT_ONCE];
                for p in pieces.iter() {
                    let mut from = 0;
                    while from < p.len() {
                        let n = p.slices(from, &mut slices);
                        for s in &slices[..n] {
                            w.write_all(s).await?;
                            from += s.len();
                        }
                    }
                }
                pieces.clear();
                return w.flush().await;
            }
        };
        // Written so far: whole pieces before `first`, and `from` bytes
        // of it.
        let (mut first, mut from) = (0, 0);
        while first < pieces.len() {
            let mut slices = [io::IoSlice::new(&[]); AT_ONCE];
            let mut n = 0;
            let mut skip = from;
            for piece in &pieces[first..] {
                if n == AT_ONCE {
                    break;
                }
                n += piece.slices(skip, &mut slices[n..]);
                skip = 0;
            }
            let mut written = w.write_vectored(&slices[..n]).await?;
            if written == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            // Past what went out: whole pieces, then part of one.
            while written > 0 {
                let rest = pieces[first].len() - from;
                if written >= rest {
                    written -= rest;
                    first += 1;
                    from = 0;
                } else {
                    from += written;
                    written = 0;
                }
            }
            // Empty pieces are past too.
            while pieces.get(first).is_some_and(|p| p.len() == from) {
                first += 1;
                from = 0;
            }
        }
        pieces.clear();
        Ok(())
    }

    pub(crate) async fn shutdown(&mut self) -> io::Result<()> {
        match self {
            WriteHalf::Plain(w) => w.shutdown().await,
            WriteHalf::Tls(w) => w.shutdown().await,
        }
    }
}

/// Something [`WriteHalf::write_all_pieces`] writes: bytes in one or
/// more slices (a frame whose bodies are lent is its own bytes between
/// them).
pub(crate) trait Piece {
    /// Its bytes.
    fn len(&self) -> usize;

    /// Its bytes from byte `from` on, as slices put in `out` (as many as
    /// fit); how many were put.
    fn slices<'a>(&'a self, from: usize, out: &mut [io::IoSlice<'a>]) -> usize;
}

impl Piece for bytes::Bytes {
    fn len(&self) -> usize {
        bytes::Bytes::len(self)
    }

    fn slices<'a>(&'a self, from: usize, out: &mut [io::IoSlice<'a>]) -> usize {
        match out.first_mut() {
            Some(s) => {
                *s = io::IoSlice::new(&self[from..]);
                1
            }
            None => 0,
        }
    }
}

impl ReadHalf {
    /// Read what the socket holds now, without waiting (plain TCP only;
    /// over TLS this is always WouldBlock).
    pub(crate) fn try_read_buf(&self, buf: &mut bytes::BytesMut) -> io::Result<usize> {
        match self {
            ReadHalf::Plain(r) => r.try_read_buf(buf),
            ReadHalf::Tls(_) => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl AsyncRead for ReadHalf {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ReadHalf::Plain(r) => Pin::new(r).poll_read(cx, buf),
            ReadHalf::Tls(r) => Pin::new(r).poll_read(cx, buf),
        }
    }
}

impl AsyncRead for Socket {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Socket::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Socket::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Socket {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Socket::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Socket::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Socket::Plain(s) => Pin::new(s).poll_flush(cx),
            Socket::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Socket::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Socket::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
