//! A TLS session driven over a non-blocking socket by the connection's own
//! task: rustls's `ServerConnection` fed with `try_read` / `try_write`.
//!
//! Why not tokio-rustls: the 0-9-1 front end is written against readiness
//! (`readable()`, then read until `WouldBlock`), which an `AsyncRead`
//! wrapper cannot offer, and a second layer of buffering per connection
//! would cost memory on idle connections. Here the ciphertext moves
//! straight between the socket and rustls's own buffers, and plaintext
//! straight into the front end's read buffer: one copy each way, no extra
//! task. The same type also implements `AsyncRead`/`AsyncWrite` (in
//! `transport.rs`) for the front ends and HTTP server that read that way.

use std::io::{self, BufRead, Read, Write};

use bytes::{Buf, BytesMut};
use rustls::ServerConnection;
use tokio::net::TcpStream;

/// Most plaintext handed to rustls while its encrypted output has not yet
/// reached the socket: bounds the ciphertext a slow reader can make us hold.
const PENDING_LIMIT: usize = 64 << 10;

pub struct TlsIo {
    pub(crate) tcp: TcpStream,
    pub(crate) tls: ServerConnection,
    /// Plaintext read ahead (the 8 bytes read to tell AMQP 0-9-1 from 1.0),
    /// handed out before anything else.
    pushback: BytesMut,
    /// rustls may hold plaintext we have not taken yet: report readable
    /// without waiting for the socket.
    plain_ready: bool,
    /// The socket reported end of file.
    eof: bool,
    /// Ciphertext read from the socket that rustls could not take yet
    /// (the caller's buffer filled first); empty, and unallocated, mostly.
    staged: BytesMut,
}

/// Most ciphertext read from the socket at once. rustls reads 4 KiB per
/// `read_tls`; one syscall for a whole burst instead of one per 4 KiB,
/// into a buffer each worker thread has once (reads never wait, so no
/// task holds it across an await) rather than each connection.
const READ_AHEAD: usize = 64 << 10;

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; READ_AHEAD]);
}

/// `Read` over a non-blocking socket: `WouldBlock` comes through as is,
/// and tokio clears the socket's readiness on it.
struct SocketRead<'a>(&'a TcpStream);

impl Read for SocketRead<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

struct SocketWrite<'a>(&'a TcpStream);

impl Write for SocketWrite<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.0.try_write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn invalid(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl TlsIo {
    pub fn new(tcp: TcpStream, mut tls: ServerConnection) -> TlsIo {
        tls.set_buffer_limit(Some(PENDING_LIMIT));
        TlsIo {
            tcp,
            tls,
            pushback: BytesMut::new(),
            plain_ready: false,
            eof: false,
            staged: BytesMut::new(),
        }
    }

    /// Run the handshake to its end (the caller bounds it in time). A peer
    /// that speaks something else than TLS gets rustls's alert, and the
    /// error says what was wrong.
    pub async fn handshake(&mut self) -> io::Result<()> {
        while self.tls.is_handshaking() {
            while self.tls.wants_write() {
                match self.flush_tls() {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.tcp.writable().await?,
                    Err(e) => return Err(e),
                }
            }
            if !self.tls.is_handshaking() {
                break;
            }
            match self.tls.read_tls(&mut SocketRead(&self.tcp)) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.tcp.readable().await?;
                    continue;
                }
                Err(e) => return Err(e),
            }
            if let Err(e) = self.tls.process_new_packets() {
                // The alert rustls queued, if the socket takes it.
                let _ = self.flush_tls();
                return Err(invalid(e));
            }
        }
        // In TLS 1.2 the server's ChangeCipherSpec and Finished come after
        // the client's Finished: the handshake is over on this side with
        // them still queued, and the client waits for them (and TLS 1.3's
        // session tickets are queued here too). Send them now.
        while self.tls.wants_write() {
            match self.flush_tls() {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.tcp.writable().await?,
                Err(e) => return Err(e),
            }
        }
        // The client may have sent application data behind its Finished.
        self.plain_ready = true;
        Ok(())
    }

    /// Put bytes back in front of the plaintext still to be read.
    pub fn unread(&mut self, bytes: &[u8]) {
        let mut b = BytesMut::with_capacity(bytes.len() + self.pushback.len());
        b.extend_from_slice(bytes);
        b.extend_from_slice(&self.pushback);
        self.pushback = b;
    }

    /// Is there plaintext to take without waiting for the socket?
    pub fn has_buffered(&self) -> bool {
        self.plain_ready || !self.pushback.is_empty() || !self.staged.is_empty()
    }

    /// Does rustls hold ciphertext the socket has not taken yet?
    pub fn wants_write(&self) -> bool {
        self.tls.wants_write()
    }

    /// Hand up to `room` bytes of plaintext to `sink`, as much as rustls
    /// holds and the socket has without waiting: a client writes a record
    /// per message, and taking one record per call would cost the caller a
    /// pass (and a flush of its replies, confirms among them) per message.
    /// Ok(0) is the end of the stream (close_notify, or the socket closed);
    /// `WouldBlock` means nothing is buffered and the socket has nothing
    /// more.
    pub fn read_plain(&mut self, room: usize, sink: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        if room == 0 {
            return Ok(0);
        }
        if !self.pushback.is_empty() {
            let n = room.min(self.pushback.len());
            sink(&self.pushback[..n]);
            self.pushback.advance(n);
            if self.pushback.is_empty() {
                self.pushback = BytesMut::new();
            }
            return Ok(n);
        }
        let mut total = 0;
        loop {
            let (n, end) = self.take_plain(room - total, sink)?;
            total += n;
            if end || total == room {
                return Ok(total);
            }
            if !self.staged.is_empty() {
                let mut staged = std::mem::take(&mut self.staged);
                let mut r = &staged[..];
                self.feed(&mut r)?;
                staged.advance(staged.len() - r.len());
                if !staged.is_empty() {
                    self.staged = staged;
                }
                continue;
            }
            if self.eof {
                return Ok(total);
            }
            let read = SCRATCH.with_borrow_mut(|buf| -> io::Result<()> {
                let got = self.tcp.try_read(buf)?;
                if got == 0 {
                    self.eof = true;
                    return Ok(());
                }
                // Never hand rustls an empty reader: it takes that for
                // the end of the stream.
                let mut r = &buf[..got];
                loop {
                    self.feed(&mut r)?;
                    let (n, end) = self.take_plain(room - total, sink)?;
                    total += n;
                    if r.is_empty() || end {
                        return Ok(());
                    }
                    if total == room {
                        self.staged.extend_from_slice(r);
                        return Ok(());
                    }
                }
            });
            match read {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // tokio has cleared the socket's readiness.
                    self.plain_ready = false;
                    return if total > 0 { Ok(total) } else { Err(e) };
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Hand `sink` up to `want` bytes of the plaintext rustls holds;
    /// true with it at the end of the stream.
    fn take_plain(&mut self, want: usize, sink: &mut dyn FnMut(&[u8])) -> io::Result<(usize, bool)> {
        let mut taken = 0;
        while taken < want {
            match self.tls.reader().fill_buf() {
                Ok([]) => return Ok((taken, true)),
                Ok(chunk) => {
                    let n = (want - taken).min(chunk.len());
                    sink(&chunk[..n]);
                    self.tls.reader().consume(n);
                    self.plain_ready = true;
                    taken += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                // The peer closed the socket without close_notify: an end
                // all the same (the front ends treat it as the peer gone).
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok((taken, true)),
                Err(e) => return Err(e),
            }
        }
        Ok((taken, false))
    }

    /// Give rustls ciphertext from `r` (as much as it takes now) and
    /// decrypt it.
    fn feed(&mut self, r: &mut &[u8]) -> io::Result<()> {
        self.tls.read_tls(r)?;
        if let Err(e) = self.tls.process_new_packets() {
            // The alert rustls queued, if the socket takes it.
            let _ = self.flush_tls();
            return Err(invalid(e));
        }
        // Key updates and the like want an answer.
        if self.tls.wants_write() {
            match self.flush_tls() {
                Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }

    /// Plaintext into `dst`, at most `room` bytes.
    pub fn try_read_buf(&mut self, dst: &mut BytesMut, room: usize) -> io::Result<usize> {
        self.read_plain(room, &mut |chunk| dst.extend_from_slice(chunk))
    }

    /// Encrypt as much of `data` as rustls takes and send what the socket
    /// takes. `WouldBlock` while earlier ciphertext still waits.
    pub fn try_write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.flush_tls()?;
        let n = self.tls.writer().write(data)?;
        match self.flush_tls() {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        if n == 0 && !data.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    /// Send the ciphertext rustls holds; `WouldBlock` if the socket is full.
    pub fn flush_tls(&mut self) -> io::Result<()> {
        while self.tls.wants_write() {
            if self.tls.write_tls(&mut SocketWrite(&self.tcp))? == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
        }
        Ok(())
    }

    /// Say close_notify, as far as the socket takes it without waiting.
    pub fn close_notify(&mut self) {
        self.tls.send_close_notify();
        let _ = self.flush_tls();
    }
}

impl Drop for TlsIo {
    fn drop(&mut self) {
        // Clients (Python's ssl among them) report a TLS stream that ends
        // without close_notify as an error.
        if !self.tls.is_handshaking() && !self.eof {
            self.close_notify();
        }
    }
}
