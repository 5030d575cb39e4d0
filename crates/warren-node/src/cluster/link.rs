//! One node's side of an inter-node link's handshake (`warren_peer`'s
//! wire format and rules): proving to each other, under the shared
//! secret, that both belong to the same cluster, and agreeing a protocol
//! version. Over any byte stream (TCP or TLS), bounded in time by the
//! caller.
//!
//! The MACs are HMAC-SHA256 from aws-lc-rs, the crypto library the TLS
//! listeners already use; the check is constant-time.

use aws_lc_rs::hmac;
use bytes::BytesMut;
use rand::RngCore;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use warren_peer::handshake::{choose_version, transcript, Agreed, Role};
use warren_peer::{parse_frame, CodecError, Message, HANDSHAKE_FRAME_MAX, VERSION_MAX, VERSION_MIN};

/// Who this node is, and the secret every node of its cluster shares.
#[derive(Clone)]
pub struct Identity {
    pub cluster: String,
    pub node: String,
    key: hmac::Key,
}

impl Identity {
    pub fn new(cluster: &str, node: &str, secret: &[u8]) -> Identity {
        Identity {
            cluster: cluster.into(),
            node: node.into(),
            key: hmac::Key::new(hmac::HMAC_SHA256, secret),
        }
    }

    fn mac(&self, role: Role, agreed: &Agreed<'_>) -> [u8; 32] {
        let tag = hmac::sign(&self.key, &transcript(role, agreed));
        let mut out = [0u8; 32];
        out.copy_from_slice(tag.as_ref());
        out
    }

    fn check(&self, role: Role, agreed: &Agreed<'_>, proof: &[u8; 32]) -> bool {
        hmac::verify(&self.key, &transcript(role, agreed), proof).is_ok()
    }
}

/// The node at the other end, once the handshake is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub node: String,
    pub version: u16,
}

#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("bad frame: {0}")]
    Codec(#[from] CodecError),
    #[error("the peer closed the link during the handshake")]
    Closed,
    #[error("unexpected {0} during the handshake")]
    Unexpected(&'static str),
    #[error("the peer refused the link: {0}")]
    RefusedByPeer(String),
    #[error("refused: {0}")]
    Refused(String),
}

fn nonce() -> [u8; 32] {
    let mut n = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut n);
    n
}

async fn send<S: AsyncWrite + Unpin>(s: &mut S, m: &Message) -> Result<(), LinkError> {
    let mut out = BytesMut::new();
    m.encode(&mut out);
    s.write_all(&out).await?;
    s.flush().await?;
    Ok(())
}

/// The next handshake message; the frame limit is the handshake's.
async fn receive<S: AsyncRead + Unpin>(s: &mut S, buf: &mut BytesMut) -> Result<Message, LinkError> {
    loop {
        if let Some(f) = parse_frame(buf, HANDSHAKE_FRAME_MAX)? {
            let m = Message::decode(f)?;
            if !m.is_handshake() {
                return Err(LinkError::Unexpected("a message before the handshake ended"));
            }
            return Ok(m);
        }
        if s.read_buf(buf).await? == 0 {
            return Err(LinkError::Closed);
        }
    }
}

/// Tell the peer why, then fail with the same words.
async fn refuse<S: AsyncWrite + Unpin>(s: &mut S, reason: String) -> LinkError {
    let _ = send(
        s,
        &Message::Refused {
            reason: reason.clone(),
        },
    )
    .await;
    LinkError::Refused(reason)
}

/// The dialing side. Bytes the peer sent after its last handshake message
/// are left in `buf` for the link to read.
pub async fn dial<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    me: &Identity,
    buf: &mut BytesMut,
) -> Result<Peer, LinkError> {
    let my_nonce = nonce();
    let hello = Message::Hello {
        version_min: VERSION_MIN,
        version_max: VERSION_MAX,
        cluster: me.cluster.clone(),
        node: me.node.clone(),
        nonce: my_nonce,
    };
    send(s, &hello).await?;
    let (version, node, their_nonce, proof) = match receive(s, buf).await? {
        Message::Challenge {
            version,
            cluster,
            node,
            nonce,
            proof,
        } => {
            if cluster != me.cluster {
                return Err(refuse(s, format!("cluster '{cluster}' is not '{}'", me.cluster)).await);
            }
            if !(VERSION_MIN..=VERSION_MAX).contains(&version) {
                return Err(refuse(s, format!("protocol version {version} was not offered")).await);
            }
            (version, node, nonce, proof)
        }
        Message::Refused { reason } => return Err(LinkError::RefusedByPeer(reason)),
        _ => return Err(LinkError::Unexpected("a message other than challenge")),
    };
    let agreed = Agreed {
        version,
        cluster: &me.cluster,
        dialer: &me.node,
        acceptor: &node,
        dialer_nonce: &my_nonce,
        acceptor_nonce: &their_nonce,
    };
    if !me.check(Role::Acceptor, &agreed, &proof) {
        return Err(refuse(s, format!("node '{node}' does not know the cluster secret")).await);
    }
    send(
        s,
        &Message::Proof {
            proof: me.mac(Role::Dialer, &agreed),
        },
    )
    .await?;
    match receive(s, buf).await? {
        Message::Welcome => Ok(Peer { node, version }),
        Message::Refused { reason } => Err(LinkError::RefusedByPeer(reason)),
        _ => Err(LinkError::Unexpected("a message other than welcome")),
    }
}

/// The accepting side.
pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    me: &Identity,
    buf: &mut BytesMut,
) -> Result<Peer, LinkError> {
    let Message::Hello {
        version_min,
        version_max,
        cluster,
        node,
        nonce: their_nonce,
    } = receive(s, buf).await?
    else {
        return Err(LinkError::Unexpected("a message other than hello"));
    };
    if cluster != me.cluster {
        return Err(refuse(s, format!("cluster '{cluster}' is not '{}'", me.cluster)).await);
    }
    if node == me.node {
        return Err(refuse(s, format!("node name '{node}' is this node's own")).await);
    }
    let Some(version) = choose_version(version_min, version_max) else {
        return Err(refuse(
            s,
            format!("no common protocol version: {version_min}..={version_max} offered, {VERSION_MIN}..={VERSION_MAX} spoken"),
        )
        .await);
    };
    let my_nonce = nonce();
    let agreed = Agreed {
        version,
        cluster: &me.cluster,
        dialer: &node,
        acceptor: &me.node,
        dialer_nonce: &their_nonce,
        acceptor_nonce: &my_nonce,
    };
    let challenge = Message::Challenge {
        version,
        cluster: me.cluster.clone(),
        node: me.node.clone(),
        nonce: my_nonce,
        proof: me.mac(Role::Acceptor, &agreed),
    };
    send(s, &challenge).await?;
    match receive(s, buf).await? {
        Message::Proof { proof } if me.check(Role::Dialer, &agreed, &proof) => {
            send(s, &Message::Welcome).await?;
            Ok(Peer { node, version })
        }
        Message::Proof { .. } => {
            Err(refuse(s, format!("node '{node}' does not know the cluster secret")).await)
        }
        Message::Refused { reason } => Err(LinkError::RefusedByPeer(reason)),
        _ => Err(LinkError::Unexpected("a message other than proof")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn pair(
        dialer: Identity,
        acceptor: Identity,
    ) -> (Result<Peer, LinkError>, Result<Peer, LinkError>) {
        let (mut a, mut b) = tokio::io::duplex(4096);
        let d = tokio::spawn(async move { dial(&mut a, &dialer, &mut BytesMut::new()).await });
        let c = tokio::spawn(async move { accept(&mut b, &acceptor, &mut BytesMut::new()).await });
        (d.await.unwrap(), c.await.unwrap())
    }

    #[tokio::test]
    async fn nodes_with_the_same_secret_agree() {
        let (d, a) = pair(
            Identity::new("c", "n1", b"secret"),
            Identity::new("c", "n2", b"secret"),
        )
        .await;
        assert_eq!(
            d.unwrap(),
            Peer {
                node: "n2".into(),
                version: 1
            }
        );
        assert_eq!(
            a.unwrap(),
            Peer {
                node: "n1".into(),
                version: 1
            }
        );
    }

    #[tokio::test]
    async fn a_wrong_secret_is_refused_on_both_sides() {
        let (d, a) = pair(
            Identity::new("c", "n1", b"secret"),
            Identity::new("c", "n2", b"other"),
        )
        .await;
        // The dialer finds out first: the acceptor's MAC does not check.
        assert!(
            matches!(d, Err(LinkError::Refused(ref r)) if r.contains("does not know the cluster secret")),
            "{d:?}"
        );
        assert!(matches!(a, Err(LinkError::RefusedByPeer(_))), "{a:?}");
    }

    #[tokio::test]
    async fn another_cluster_or_our_own_name_is_refused() {
        let (d, a) = pair(Identity::new("x", "n1", b"s"), Identity::new("c", "n2", b"s")).await;
        assert!(
            matches!(a, Err(LinkError::Refused(ref r)) if r.contains("cluster 'x'")),
            "{a:?}"
        );
        assert!(matches!(d, Err(LinkError::RefusedByPeer(_))), "{d:?}");
        let (_, a) = pair(Identity::new("c", "n2", b"s"), Identity::new("c", "n2", b"s")).await;
        assert!(
            matches!(a, Err(LinkError::Refused(ref r)) if r.contains("own")),
            "{a:?}"
        );
    }

    /// A dialer that replays a proof it saw on another link gets nowhere:
    /// the acceptor's fresh nonce is in what the proof must cover.
    #[tokio::test]
    async fn a_replayed_proof_is_refused() {
        let acceptor = Identity::new("c", "n2", b"secret");
        let (mut a, mut b) = tokio::io::duplex(4096);
        let acc = tokio::spawn(async move { accept(&mut b, &acceptor, &mut BytesMut::new()).await });
        let hello = Message::Hello {
            version_min: 1,
            version_max: 1,
            cluster: "c".into(),
            node: "n1".into(),
            nonce: [1; 32],
        };
        send(&mut a, &hello).await.unwrap();
        let mut buf = BytesMut::new();
        assert!(matches!(
            receive(&mut a, &mut buf).await.unwrap(),
            Message::Challenge { .. }
        ));
        // A proof made for some other acceptor nonce.
        let stale = Identity::new("c", "n1", b"secret").mac(
            Role::Dialer,
            &Agreed {
                version: 1,
                cluster: "c",
                dialer: "n1",
                acceptor: "n2",
                dialer_nonce: &[1; 32],
                acceptor_nonce: &[0; 32],
            },
        );
        send(&mut a, &Message::Proof { proof: stale }).await.unwrap();
        assert!(matches!(
            receive(&mut a, &mut buf).await.unwrap(),
            Message::Refused { .. }
        ));
        assert!(matches!(acc.await.unwrap(), Err(LinkError::Refused(_))));
    }

    #[tokio::test]
    async fn garbage_and_oversized_frames_are_refused_before_authentication() {
        let me = Identity::new("c", "n2", b"s");
        for bytes in [
            b"GET / HTTP/1.1\r\n\r\n".to_vec(),
            vec![0, 0, 0, 0],
            vec![0, 0, 0x10, 0x01, 1],
            vec![0, 0, 0, 1, 0x20],
        ] {
            let (mut a, mut b) = tokio::io::duplex(4096);
            let me = me.clone();
            let acc = tokio::spawn(async move { accept(&mut b, &me, &mut BytesMut::new()).await });
            a.write_all(&bytes).await.unwrap();
            drop(a);
            assert!(acc.await.unwrap().is_err(), "{bytes:?}");
        }
    }
}
