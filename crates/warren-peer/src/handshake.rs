//! The handshake's rules: which version two nodes speak, and what each
//! side's MAC covers. The MAC itself (HMAC-SHA256 under the shared
//! secret) is the server's to compute; this module only fixes the bytes.
//!
//! 1. The dialer sends `Hello`: its version range, cluster name, node name
//!    and a fresh 32-byte nonce.
//! 2. The acceptor refuses (`Refused`) a peer of another cluster or with no
//!    version in common, else sends `Challenge`: the version chosen, its
//!    names, its own nonce, and its MAC over [`transcript`] as acceptor.
//! 3. The dialer checks that MAC (so it knows the acceptor has the secret
//!    before it says anything more) and sends `Proof`, its MAC over the
//!    transcript as dialer.
//! 4. The acceptor checks it and sends `Welcome`; from then on either side
//!    may send anything.
//!
//! Both nonces are in both MACs, so neither side's proof can be replayed
//! on another connection, and the two role labels differ, so the
//! acceptor's MAC cannot be sent back as the dialer's.

use bytes::BytesMut;

use crate::wire::put_name;

/// Versions of this protocol this build speaks. A later build may speak
/// several, which is what a rolling upgrade needs: the handshake picks the
/// highest both sides have.
pub const VERSION_MIN: u16 = 1;
pub const VERSION_MAX: u16 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Dialer,
    Acceptor,
}

/// The highest version both this build and a peer speaking
/// `peer_min..=peer_max` have, if any.
pub fn choose_version(peer_min: u16, peer_max: u16) -> Option<u16> {
    let v = peer_max.min(VERSION_MAX);
    (v >= peer_min.max(VERSION_MIN)).then_some(v)
}

/// What the two sides agreed and exchanged in the clear.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agreed<'a> {
    pub version: u16,
    pub cluster: &'a str,
    pub dialer: &'a str,
    pub acceptor: &'a str,
    pub dialer_nonce: &'a [u8; 32],
    pub acceptor_nonce: &'a [u8; 32],
}

/// The bytes `role` MACs: a label for the role, then every field of
/// `agreed`, each length-prefixed so no two transcripts run together.
pub fn transcript(role: Role, agreed: &Agreed<'_>) -> Vec<u8> {
    let mut out = BytesMut::with_capacity(160);
    put_name(
        &mut out,
        match role {
            Role::Dialer => "warren-peer dialer",
            Role::Acceptor => "warren-peer acceptor",
        },
    );
    out.extend_from_slice(&agreed.version.to_be_bytes());
    put_name(&mut out, agreed.cluster);
    put_name(&mut out, agreed.dialer);
    put_name(&mut out, agreed.acceptor);
    out.extend_from_slice(agreed.dialer_nonce);
    out.extend_from_slice(agreed.acceptor_nonce);
    out.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_highest_common_version_is_chosen() {
        assert_eq!(choose_version(1, 1), Some(1));
        assert_eq!(choose_version(1, 9), Some(VERSION_MAX));
        assert_eq!(choose_version(VERSION_MAX + 1, VERSION_MAX + 3), None);
        assert_eq!(choose_version(0, 0), None);
        assert_eq!(choose_version(5, 2), None);
    }

    #[test]
    fn transcripts_differ_by_role_and_by_every_field() {
        let (a, b) = ([1u8; 32], [2u8; 32]);
        let base = Agreed {
            version: 1,
            cluster: "c",
            dialer: "n1",
            acceptor: "n2",
            dialer_nonce: &a,
            acceptor_nonce: &b,
        };
        let t = transcript(Role::Dialer, &base);
        assert_ne!(t, transcript(Role::Acceptor, &base));
        let swapped = Agreed {
            dialer_nonce: &b,
            acceptor_nonce: &a,
            ..base.clone()
        };
        assert_ne!(t, transcript(Role::Dialer, &swapped));
        // "n1" + "n2" must not read the same as "n" + "1n2".
        let shifted = Agreed {
            dialer: "n",
            acceptor: "1n2",
            ..base.clone()
        };
        assert_ne!(t, transcript(Role::Dialer, &shifted));
    }
}
