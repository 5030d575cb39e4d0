//! The socket side every protocol client shares: a TCP stream with its
//! read and write buffers, non-blocking reads and writes for the hot
//! loops, and waiting for readiness. The clients deref to it.

use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

pub struct Socket {
    stream: TcpStream,
    pub rbuf: BytesMut,
    pub wbuf: BytesMut,
}

impl Socket {
    pub async fn connect(addr: &str) -> std::io::Result<Socket> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Socket {
            stream,
            rbuf: BytesMut::with_capacity(64 << 10),
            wbuf: BytesMut::with_capacity(64 << 10),
        })
    }

    /// Write everything buffered (waiting for the socket as needed).
    pub async fn flush(&mut self) -> std::io::Result<()> {
        if !self.wbuf.is_empty() {
            self.stream.write_all(&self.wbuf).await?;
            self.wbuf.clear();
        }
        Ok(())
    }

    /// Write what the socket takes now; true if the buffer is empty.
    pub fn try_flush(&mut self) -> std::io::Result<bool> {
        while !self.wbuf.is_empty() {
            match self.stream.try_write(&self.wbuf) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    let _ = self.wbuf.split_to(n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Read what the socket has now; Ok(0) if nothing (EOF is an error).
    pub fn try_read(&mut self) -> std::io::Result<usize> {
        self.rbuf.reserve(64 << 10);
        match self.stream.try_read_buf(&mut self.rbuf) {
            Ok(0) => Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(0),
            Err(e) => Err(e),
        }
    }

    pub async fn readable(&self) -> std::io::Result<()> {
        self.stream.readable().await
    }

    /// Wait (at most `timeout`) until the socket is readable, or writable
    /// when `write` is set.
    pub async fn ready(&self, write: bool, timeout: Duration) -> std::io::Result<()> {
        let r = async {
            tokio::select! {
                r = self.stream.readable() => r,
                w = self.stream.writable(), if write => w,
            }
        };
        match tokio::time::timeout(timeout, r).await {
            Ok(r) => r,
            Err(_) => Ok(()),
        }
    }
}
