//! Where streams live (the Metadata command): for each stream asked
//! about, its leader's and replicas' advertised host and port. Producers
//! connect to the leader, consumers to a replica when there is one.

use std::collections::HashMap;

use bytes::{BufMut, Bytes, BytesMut};
use warren_stream::command::{begin_frame, code, end_frame, key};
use warren_stream::wire::{put_string, Reader};

use super::error::{Error, ResponseCode};

/// A node's stream listener, as the broker advertises it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Endpoint {
    pub(crate) host: String,
    pub(crate) port: u16,
}

/// Where one stream lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Placement {
    pub(crate) leader: Option<Endpoint>,
    pub(crate) replicas: Vec<Endpoint>,
}

/// Which member of a stream a connection is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// The leader: producers.
    Leader,
    /// A replica if the stream has one, else the leader: consumers.
    Replica,
}

/// A Metadata request for `streams`.
pub(crate) fn encode_request(out: &mut BytesMut, correlation_id: u32, streams: &[&str]) {
    let at = begin_frame(out);
    out.put_u16(key::METADATA);
    out.put_u16(1);
    out.put_u32(correlation_id);
    out.put_i32(streams.len() as i32);
    for s in streams {
        put_string(out, s);
    }
    end_frame(out, at);
}

/// A Metadata response after its correlation id (it has no response code
/// of its own): each stream's placement, or the code the broker gave it.
pub(crate) fn parse_response(rest: Bytes) -> Result<HashMap<String, Result<Placement, ResponseCode>>, Error> {
    let mut r = Reader::new(rest);
    let mut brokers = HashMap::new();
    // A broker entry is at least a reference, an empty host and a port.
    for _ in 0..r.count(8)? {
        let reference = r.u16()?;
        let host = r.string()?;
        let port = u16::try_from(r.u32()?).map_err(|_| Error::Protocol("a port above 65535".into()))?;
        brokers.insert(reference, Endpoint { host, port });
    }
    let mut streams = HashMap::new();
    for _ in 0..r.count(10)? {
        let name = r.string()?;
        let c = r.u16()?;
        let leader = r.u16()?;
        let mut replicas = Vec::new();
        for _ in 0..r.count(2)? {
            if let Some(b) = brokers.get(&r.u16()?) {
                replicas.push(b.clone());
            }
        }
        let placement = match c {
            code::OK => Ok(Placement {
                leader: brokers.get(&leader).cloned(),
                replicas,
            }),
            c => Err(ResponseCode::from_u16(c)),
        };
        streams.insert(name, placement);
    }
    Ok(streams)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_names_each_streams_leader_and_replicas() {
        let mut b = BytesMut::new();
        b.put_i32(2);
        for (i, port) in [(0u16, 5552u32), (1, 5553)] {
            b.put_u16(i);
            put_string(&mut b, "h");
            b.put_u32(port);
        }
        b.put_i32(2);
        put_string(&mut b, "s");
        b.put_u16(code::OK);
        b.put_u16(1);
        b.put_i32(2);
        b.put_u16(0);
        b.put_u16(7);
        put_string(&mut b, "gone");
        b.put_u16(code::STREAM_DOES_NOT_EXIST);
        b.put_u16(0xffff);
        b.put_i32(0);
        let m = parse_response(b.freeze()).unwrap();
        let ep = |port| Endpoint {
            host: "h".into(),
            port,
        };
        assert_eq!(
            m["s"],
            Ok(Placement {
                leader: Some(ep(5553)),
                replicas: vec![ep(5552)]
            })
        );
        assert_eq!(m["gone"], Err(ResponseCode::StreamDoesNotExist));
        assert!(parse_response(Bytes::from_static(&[0, 0, 0, 9, 0])).is_err());
    }
}
