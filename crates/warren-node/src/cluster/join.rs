//! Joining a running cluster: `warrenctl join_cluster NODE` (or
//! `POST /api/cluster/join`) on a node that is alone, as `rabbitmqctl
//! join_cluster` after `reset`.
//!
//! The node that joins dials the node it was given on the inter-node port
//! and proves the cluster's secret (inside TLS if configured), as any link
//! does. It is not a peer yet, so the connection carries one request
//! (`request::JOIN`, its inter-node address as JSON) and its answer. The
//! metadata leader adds it to the metadata group with the next free Raft
//! id (a membership change whose context, `Command::AddNode`, every node
//! applies at the same index: node table, definitions store, links). A
//! node that does not lead says which node does, and the joining node asks
//! that one. The answer ([`Joined`]) tells the new node its id, every node
//! and the group's first voters; it keeps that in `DATA_DIR/cluster.json`
//! and restarts: its own data goes (as `reset`), and it starts as a member
//! whose empty log the leader fills (entries or a snapshot).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use warren_peer::{parse_frame, Message};

use super::link::dial;
use super::link_tls::LinkStream;
use super::links::{request, Cluster};
use super::meta::JoinRefusal;
use super::nodes::Joined;

/// How long the first message of a connection from a node that is not a
/// peer may take.
const FIRST_MESSAGE: Duration = Duration::from_secs(5);
/// A join request and its answer are small.
const JOIN_FRAME_MAX: u32 = 1 << 20;
/// How long the leader may take to commit the change that adds a node.
pub const JOIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Leaders asked in turn before giving up (one redirect is the rule).
const HOPS: usize = 3;

/// What the joining node sends.
#[derive(Debug, Serialize, Deserialize)]
struct Ask {
    /// Where the others reach its inter-node listener.
    address: String,
}

#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error("{0}")]
    Refused(#[from] JoinRefusal),
    #[error("could not reach {address}: {reason}")]
    Unreachable { address: String, reason: String },
    #[error("{0}")]
    Protocol(String),
}

/// The next message on a connection that carries only a join request
/// and its answer (frames up to [`JOIN_FRAME_MAX`]).
async fn next_message(stream: &mut (impl AsyncRead + Unpin), buf: &mut BytesMut) -> Result<Message, String> {
    loop {
        if let Some(f) = parse_frame(buf, JOIN_FRAME_MAX).map_err(|e| e.to_string())? {
            return Message::decode(f).map_err(|e| e.to_string());
        }
        match stream.read_buf(buf).await {
            Ok(0) => return Err("the node closed the connection".into()),
            Ok(_) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// The first message on a connection from a node that is not a peer, if
/// it is a request.
pub(super) async fn first_request(stream: &mut impl LinkStream, buf: &mut BytesMut) -> Option<(u64, Bytes)> {
    match tokio::time::timeout(FIRST_MESSAGE, next_message(stream, buf)).await {
        Ok(Ok(Message::Request { id, body })) => Some((id, body)),
        _ => None,
    }
}

/// Answer `node`'s request to join (`ask` is the request's body after its
/// kind), then close the connection.
pub(super) async fn serve(
    cluster: &Arc<Cluster>,
    mut stream: impl LinkStream,
    node: &str,
    id: u64,
    ask: &[u8],
) {
    let answer = match serde_json::from_slice::<Ask>(ask) {
        Err(e) => Err(JoinRefusal::Refused(format!(
            "a join request that does not parse: {e}"
        ))),
        Ok(ask) => match cluster.events.get() {
            None => Err(JoinRefusal::Refused("this node is starting".into())),
            Some(events) => events.join_request(node, &ask.address).await,
        },
    };
    let (ok, body) = match &answer {
        Ok(joined) => {
            tracing::info!(peer = %node, "a node joined the cluster");
            (true, joined.clone())
        }
        Err(e) => {
            tracing::warn!(peer = %node, "a node's request to join refused: {e}");
            (false, serde_json::to_vec(e).expect("plain data encodes"))
        }
    };
    let mut out = BytesMut::new();
    Message::Reply {
        id,
        ok,
        body: Bytes::from(body),
    }
    .encode(&mut out);
    let _ = stream.write_all(&out).await;
    let _ = stream.flush().await;
}

/// Ask `node` at `address` (or the leader it names) to let this node join.
pub async fn ask(cluster: &Cluster, node: &str, address: &str) -> Result<Joined, JoinError> {
    let (mut node, mut address) = (node.to_string(), address.to_string());
    for _ in 0..HOPS {
        match ask_one(cluster, &node, &address).await {
            Err(JoinError::Refused(JoinRefusal::NotLeader { node: n, address: a })) => {
                (node, address) = (n, a);
            }
            other => return other,
        }
    }
    Err(JoinError::Protocol(format!(
        "no metadata leader answered after {HOPS} tries"
    )))
}

async fn ask_one(cluster: &Cluster, node: &str, address: &str) -> Result<Joined, JoinError> {
    let unreachable = |reason: String| JoinError::Unreachable {
        address: address.to_string(),
        reason,
    };
    let tcp = tokio::time::timeout(FIRST_MESSAGE, TcpStream::connect(address))
        .await
        .map_err(|_| unreachable("timed out".into()))?
        .map_err(|e| unreachable(e.to_string()))?;
    let _ = tcp.set_nodelay(true);
    let mine = advertised(cluster.listen, tcp.local_addr().ok());
    let mut stream: Box<dyn LinkStream> = match &cluster.tls {
        Some(tls) => Box::new(
            tls.connect(address, tcp)
                .await
                .map_err(|e| unreachable(e.to_string()))?,
        ),
        None => Box::new(tcp),
    };
    let mut buf = BytesMut::new();
    let peer = tokio::time::timeout(FIRST_MESSAGE, dial(&mut stream, &cluster.me, &mut buf))
        .await
        .map_err(|_| unreachable("the handshake timed out".into()))?
        .map_err(|e| unreachable(e.to_string()))?;
    if peer.node != node {
        return Err(unreachable(format!("it is node '{}', not '{node}'", peer.node)));
    }
    let mut body = vec![request::JOIN];
    body.extend(serde_json::to_vec(&Ask { address: mine }).expect("plain data encodes"));
    let mut out = BytesMut::new();
    Message::Request {
        id: 1,
        body: Bytes::from(body),
    }
    .encode(&mut out);
    stream
        .write_all(&out)
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    let answer = async {
        loop {
            match next_message(&mut stream, &mut buf)
                .await
                .map_err(JoinError::Protocol)?
            {
                Message::Reply { id: 1, ok, body } => return Ok((ok, body)),
                Message::Goodbye { reason } | Message::Refused { reason } => {
                    return Err(JoinError::Refused(JoinRefusal::Refused(reason)))
                }
                // Pings or status a node may send first: not the answer.
                _ => continue,
            }
        }
    };
    let (ok, body) = tokio::time::timeout(JOIN_TIMEOUT + FIRST_MESSAGE, answer)
        .await
        .map_err(|_| JoinError::Protocol("no answer in time".into()))??;
    if ok {
        serde_json::from_slice(&body)
            .map_err(|e| JoinError::Protocol(format!("an answer that does not parse: {e}")))
    } else {
        let refusal = serde_json::from_slice(&body)
            .unwrap_or_else(|_| JoinRefusal::Refused(String::from_utf8_lossy(&body).into_owned()));
        Err(JoinError::Refused(refusal))
    }
}

/// This node's inter-node address as others reach it: the listener's,
/// with the address this connection left from when it listens on all.
fn advertised(listen: SocketAddr, local: Option<SocketAddr>) -> String {
    match local {
        Some(l) if listen.ip().is_unspecified() => SocketAddr::new(l.ip(), listen.port()).to_string(),
        _ => listen.to_string(),
    }
}
