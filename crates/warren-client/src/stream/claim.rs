//! A publisher or subscription id taken on a connection by a call that
//! has not finished: if the call fails, or is dropped while it waits for
//! the broker (a `select!`, a timeout), the broker is told to forget the
//! id and it is freed, so neither the broker nor the connection keeps a
//! producer or subscription nothing owns.

use super::connection::Connection;

/// What an id names.
#[derive(Clone, Copy)]
pub(crate) enum Claimed {
    Publisher(u8),
    Subscription(u8),
}

/// An id a call holds until it hands it over ([`Claim::keep`]).
pub(crate) struct Claim<'a> {
    conn: &'a Connection,
    claimed: Option<Claimed>,
}

impl<'a> Claim<'a> {
    pub(crate) fn new(conn: &'a Connection, claimed: Claimed) -> Claim<'a> {
        Claim {
            conn,
            claimed: Some(claimed),
        }
    }

    /// The call is done: the id is its owner's now.
    pub(crate) fn keep(mut self) -> u8 {
        match self.claimed.take().expect("kept once") {
            Claimed::Publisher(id) | Claimed::Subscription(id) => id,
        }
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        match self.claimed {
            Some(Claimed::Publisher(id)) => self.conn.forget_publisher(id),
            Some(Claimed::Subscription(id)) => self.conn.forget_subscription(id),
            None => {}
        }
    }
}
