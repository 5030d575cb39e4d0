//! A link's writer task and what feeds it. It sends whatever has queued
//! in as few writes as it takes: Raft, pings and requests first (their
//! bounded channel), then the queue protocol's channel ([`DataSender`]).
//!
//! Replicated chunk bytes are never copied into the writer's buffer: a
//! `Chunks` frame's head is encoded and its body written after it as it
//! is. On a plain TCP link a body whose bytes also lie in a stream's
//! segment file ([`FileSpan`]) goes with sendfile, from the page cache,
//! so the kernel does not copy it from user memory once per replica
//! (that copy was 15 % of a three-node leader's samples at 1 KB
//! messages, perf; the splice path costs back most of it, about 4 % of
//! the broker's CPU per message is saved). The head before such a body
//! is held back (MSG_MORE) to leave in the same segment: sent alone it
//! made the leader slower than the copy did. TLS links write the bytes,
//! which must be encrypted in user space anyway.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncWrite, AsyncWriteExt, Interest};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use warren_peer::Message;

/// Most bytes one write gathers from the queues.
const WRITE_BATCH: usize = 256 << 10;

/// Where a message's body also lies: in `file` from `pos`, as many
/// bytes as the body holds. The file must hold them there until the
/// writer has sent them; a stream's segments are append-only while this
/// node leads (if a cut shortens one first, the writer sends the rest
/// from the body, see [`send_file`]).
#[derive(Debug, Clone)]
pub struct FileSpan {
    pub file: Arc<File>,
    pub pos: u64,
}

/// One message for a link's writer.
#[derive(Debug)]
pub struct Outgoing {
    pub message: Message,
    pub span: Option<FileSpan>,
}

/// The link is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

/// Where the queue protocol's messages for a peer go. It never drops and
/// has no bound of its own: its senders are bounded by credit
/// (`queue_client.rs`, `queue_host.rs`) or by a replica's window
/// (`stream_replicas/leader.rs`).
#[derive(Debug, Clone)]
pub struct DataSender(mpsc::UnboundedSender<Outgoing>);

/// The writer's end of a [`DataSender`].
pub type DataReceiver = mpsc::UnboundedReceiver<Outgoing>;

impl DataSender {
    pub fn channel() -> (DataSender, DataReceiver) {
        let (tx, rx) = mpsc::unbounded_channel();
        (DataSender(tx), rx)
    }

    /// Queue `m`; Err when the link is gone.
    pub fn send(&self, m: Message) -> Result<(), Closed> {
        self.0
            .send(Outgoing {
                message: m,
                span: None,
            })
            .map_err(|_| Closed)
    }

    /// Queue `m`, whose body (a `Chunks` message's bytes) also lies where
    /// `span` says.
    pub fn send_spanned(&self, m: Message, span: FileSpan) -> Result<(), Closed> {
        self.0
            .send(Outgoing {
                message: m,
                span: Some(span),
            })
            .map_err(|_| Closed)
    }
}

/// A link's write side: a plain TCP one can send from files.
pub trait LinkWrite: AsyncWrite + Unpin + Send + 'static {
    fn tcp(&self) -> Option<&TcpStream> {
        None
    }
}

impl LinkWrite for OwnedWriteHalf {
    fn tcp(&self) -> Option<&TcpStream> {
        Some(self.as_ref())
    }
}

impl<S: AsyncWrite + Unpin + Send + 'static> LinkWrite for tokio::io::WriteHalf<S> {}

/// What one write sends, in order.
enum Part {
    Bytes(Bytes),
    /// A body that also lies in a file.
    Spanned(Bytes, FileSpan),
}

impl Part {
    fn len(&self) -> usize {
        match self {
            Part::Bytes(b) | Part::Spanned(b, _) => b.len(),
        }
    }
}

/// Send what the link's queues hold until either closes or a write
/// fails; Raft and pings first, so a busy queue protocol cannot delay an
/// election.
pub async fn write_loop(mut wr: impl LinkWrite, mut rx: mpsc::Receiver<Message>, mut data: DataReceiver) {
    let mut out = BytesMut::new();
    let mut parts: Vec<Part> = Vec::new();
    loop {
        let m = tokio::select! {
            biased;
            m = rx.recv() => m.map(|message| Outgoing { message, span: None }),
            m = data.recv() => m,
        };
        let Some(m) = m else { return };
        // Bytes queued in `parts` (bodies and the heads before them).
        let mut size = add(m, &mut out, &mut parts);
        while out.len() + size < WRITE_BATCH {
            if let Ok(message) = rx.try_recv() {
                size += add(Outgoing { message, span: None }, &mut out, &mut parts);
            } else if let Ok(m) = data.try_recv() {
                size += add(m, &mut out, &mut parts);
            } else {
                break;
            }
        }
        if !out.is_empty() {
            parts.push(Part::Bytes(out.split().freeze()));
        }
        if write_parts(&mut wr, &mut parts).await.is_err() {
            return;
        }
    }
}

/// Encode `m` into `out`, or, for a large body sent as it is, move what
/// `out` holds and then the body to `parts`; the bytes moved.
fn add(m: Outgoing, out: &mut BytesMut, parts: &mut Vec<Part>) -> usize {
    match m.message.encode_split(out) {
        Some(body) => {
            let head = out.split().freeze();
            let n = head.len() + body.len();
            parts.push(Part::Bytes(head));
            parts.push(match m.span {
                Some(span) => Part::Spanned(body, span),
                None => Part::Bytes(body),
            });
            n
        }
        None => 0,
    }
}

/// Write every part, in order: runs of bytes with as few vectored writes
/// as it takes, spanned bodies with sendfile when the link is plain TCP.
async fn write_parts(wr: &mut impl LinkWrite, parts: &mut Vec<Part>) -> std::io::Result<()> {
    let mut first = 0;
    while first < parts.len() {
        if let (Part::Spanned(body, span), Some(tcp)) = (&parts[first], wr.tcp()) {
            let sent = send_file(tcp, span, body.len()).await?;
            if sent < body.len() {
                wr.write_all(&body[sent..]).await?;
            }
            first += 1;
            continue;
        }
        let slices: Vec<std::io::IoSlice> = parts[first..]
            .iter()
            .take(64)
            .map_while(|p| match p {
                Part::Spanned(..) if wr.tcp().is_some() => None,
                Part::Bytes(b) | Part::Spanned(b, _) => Some(std::io::IoSlice::new(b)),
            })
            .collect();
        // Bytes followed by a body sent from a file: held (MSG_MORE) to
        // go out with it rather than as a segment of their own.
        let more = parts
            .get(first + slices.len())
            .is_some_and(|p| matches!(p, Part::Spanned(..)));
        let mut n = match wr.tcp() {
            Some(tcp) if more => send_more(tcp, &slices).await?,
            _ => wr.write_vectored(&slices).await?,
        };
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while n > 0 {
            let p = match &mut parts[first] {
                Part::Bytes(b) | Part::Spanned(b, _) => b,
            };
            let k = n.min(p.len());
            p.advance(k);
            n -= k;
            if p.is_empty() {
                first += 1;
            }
        }
        while first < parts.len() && parts[first].len() == 0 {
            first += 1;
        }
    }
    parts.clear();
    Ok(())
}

/// Run `call`, a non-blocking syscall on `tcp` that returns a count or
/// -1, until it is not refused for want of room; its count.
async fn when_writable(tcp: &TcpStream, mut call: impl FnMut() -> isize) -> std::io::Result<usize> {
    loop {
        tcp.writable().await?;
        let r = tcp.try_io(Interest::WRITABLE, || match call() {
            r if r < 0 => Err(std::io::Error::last_os_error()),
            r => Ok(r as usize),
        });
        match r {
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ) => {}
            r => return r,
        }
    }
}

/// sendmsg with MSG_MORE: what fits of `slices`, held for what follows.
async fn send_more(tcp: &TcpStream, slices: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
    when_writable(tcp, || {
        // SAFETY: IoSlice is ABI-compatible with iovec; the iovecs point
        // into `slices`, alive for the call, which only reads them.
        let msg = libc::msghdr {
            msg_name: std::ptr::null_mut(),
            msg_namelen: 0,
            msg_iov: slices.as_ptr() as *mut libc::iovec,
            msg_iovlen: slices.len(),
            msg_control: std::ptr::null_mut(),
            msg_controllen: 0,
            msg_flags: 0,
        };
        unsafe { libc::sendmsg(tcp.as_raw_fd(), &msg, libc::MSG_MORE | libc::MSG_NOSIGNAL) }
    })
    .await
}

/// Send `len` bytes of `span`'s file to `tcp` from the page cache; the
/// bytes sent, fewer only when the file ended first (a cut shortened
/// it), for the caller to send the rest from its copy.
async fn send_file(tcp: &TcpStream, span: &FileSpan, len: usize) -> std::io::Result<usize> {
    let mut offset = span.pos as libc::off_t;
    let mut sent = 0;
    while sent < len {
        let n = when_writable(tcp, || {
            // SAFETY: both descriptors are open (the stream and the Arc'd
            // file are borrowed for the call); sendfile writes only
            // `offset`, a local it is given a pointer to.
            unsafe { libc::sendfile(tcp.as_raw_fd(), span.file.as_raw_fd(), &mut offset, len - sent) }
        })
        .await?;
        if n == 0 {
            break;
        }
        sent += n;
    }
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use tokio::io::AsyncReadExt;
    use warren_peer::stream::{StreamMsg, StreamRef};

    fn chunks(bytes: Bytes) -> Message {
        Message::Stream(StreamMsg::Chunks {
            stream: StreamRef {
                vhost: "/".into(),
                name: "s".into(),
                epoch: 1,
            },
            committed: Some(7),
            bytes,
        })
    }

    /// Everything `send` queues, as the peer reads it off a link whose
    /// write side `split` makes.
    async fn through_link<W: LinkWrite>(
        split: impl FnOnce(TcpStream) -> W,
        send: impl FnOnce(&DataSender),
    ) -> Vec<u8> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let dial = tokio::spawn(async move { TcpStream::connect(addr).await.unwrap() });
        let (mut peer, _) = listener.accept().await.unwrap();
        let wr = split(dial.await.unwrap());
        let (_tx, rx) = mpsc::channel(1);
        let (data, data_rx) = DataSender::channel();
        send(&data);
        drop(data);
        write_loop(wr, rx, data_rx).await;
        let mut got = Vec::new();
        peer.read_to_end(&mut got).await.unwrap();
        got
    }

    fn expected(bodies: &[Bytes]) -> Vec<u8> {
        let mut out = BytesMut::new();
        for b in bodies {
            chunks(b.clone()).encode(&mut out);
        }
        out.to_vec()
    }

    /// A file holding `bytes` from position 5.
    fn file_with(bytes: &[u8]) -> Arc<File> {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"12345").unwrap();
        f.write_all(bytes).unwrap();
        Arc::new(f)
    }

    #[tokio::test]
    async fn spanned_bodies_arrive_as_encoded_on_plain_and_split_links() {
        let big = warren_peer::stream::SPLIT_MIN + 100;
        let a = Bytes::from(vec![1u8; big]);
        let b = Bytes::from(vec![2u8; 10]);
        let c = Bytes::from((0..big).map(|i| i as u8).collect::<Vec<_>>());
        let file = file_with(&c);
        let want = expected(&[a.clone(), b.clone(), c.clone()]);
        let send = |d: &DataSender| {
            d.send(chunks(a.clone())).unwrap();
            d.send(chunks(b.clone())).unwrap();
            let span = FileSpan {
                file: file.clone(),
                pos: 5,
            };
            d.send_spanned(chunks(c.clone()), span).unwrap();
        };
        let plain = through_link(|t| t.into_split().1, send).await;
        assert_eq!(plain, want);
        let split = through_link(|t| tokio::io::split(t).1, send).await;
        assert_eq!(split, want);
    }

    #[tokio::test]
    async fn a_plain_link_takes_a_spanned_body_from_the_file_a_split_one_from_memory() {
        // Bytes that differ only to tell the two sources apart (the
        // leader's file and body always hold the same).
        let big = warren_peer::stream::SPLIT_MIN + 1;
        let body = Bytes::from(vec![1u8; big]);
        let disk = Bytes::from(vec![2u8; big]);
        let file = file_with(&disk);
        let send = |d: &DataSender| {
            let span = FileSpan {
                file: file.clone(),
                pos: 5,
            };
            d.send_spanned(chunks(body.clone()), span).unwrap();
        };
        let plain = through_link(|t| t.into_split().1, send).await;
        assert_eq!(plain, expected(&[disk]));
        let split = through_link(|t| tokio::io::split(t).1, send).await;
        assert_eq!(split, expected(&[body]));
    }

    #[tokio::test]
    async fn a_file_cut_short_sends_the_rest_from_the_body() {
        let big = warren_peer::stream::SPLIT_MIN + 100;
        let c = Bytes::from((0..big).map(|i| (i * 7) as u8).collect::<Vec<_>>());
        // The file holds only the first half of the body.
        let file = file_with(&c[..big / 2]);
        let got = through_link(
            |t| t.into_split().1,
            |d| {
                let span = FileSpan {
                    file: file.clone(),
                    pos: 5,
                };
                d.send_spanned(chunks(c.clone()), span).unwrap();
            },
        )
        .await;
        assert_eq!(got, expected(&[c]));
    }
}
