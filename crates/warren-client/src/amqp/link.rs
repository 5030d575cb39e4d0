//! Attaching a link and waiting for the broker's side of it: a refused
//! link is answered with an attach whose terminus is null, then a detach
//! with the reason (spec 2.6.3), which the caller gets as
//! [`Error::LinkRefused`].

use std::sync::Arc;

use warren_amqp10::performative::{Attach, Role};

use super::connection::{Shared, CALL_TIMEOUT};
use super::error::Error;
use super::session::{AttachAnswer, Kind};

/// Attach `attach` as a link of `kind`; its handle once the broker has
/// its end. `now`: even while the connection recovers (recovery's own
/// links); other links made then are attached once the topology is back.
pub(crate) async fn attach(
    shared: &Arc<Shared>,
    attach: Attach,
    kind: Kind,
    now: bool,
) -> Result<u32, Error> {
    attach_answered(shared, attach, kind, now).await.map(|(h, _)| h)
}

/// [`attach`], with the broker's attach in answer (its terminus says
/// what it made of ours: a source's filters in force, say).
pub(crate) async fn attach_answered(
    shared: &Arc<Shared>,
    attach: Attach,
    kind: Kind,
    now: bool,
) -> Result<(u32, Attach), Error> {
    let (handle, answer) = shared.with(|s| match &s.ended {
        Some(e) => Err(e.clone()),
        None => Ok(s.attach(attach, kind, now)),
    })?;
    // Detached on an error, and when this call is dropped while it waits.
    let held = Held::new(shared, handle);
    let reply = answered(shared, handle, answer).await?;
    Ok((held.keep(), reply))
}

/// A link made for a call that has not yet handed it over: detached when
/// dropped (the call failed, or was dropped while it waited), so no link
/// is left attached that nothing owns.
pub(crate) struct Held<'a> {
    shared: &'a Shared,
    handle: Option<u32>,
}

impl<'a> Held<'a> {
    pub(crate) fn new(shared: &'a Shared, handle: u32) -> Held<'a> {
        Held {
            shared,
            handle: Some(handle),
        }
    }

    /// Hand the link over: it is no longer detached on drop.
    pub(crate) fn keep(mut self) -> u32 {
        self.handle.take().expect("kept once")
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Some(handle) = self.handle {
            self.shared.with(|s| s.detach(handle));
        }
    }
}

/// Wait for the broker's answer to link `handle`'s attach: Err with the
/// reason when it refused it (the link is then gone).
pub(crate) async fn answered(shared: &Shared, handle: u32, answer: AttachAnswer) -> Result<Attach, Error> {
    let reply = tokio::time::timeout(CALL_TIMEOUT, answer)
        .await
        .map_err(|_| Error::Timeout(CALL_TIMEOUT))?
        .map_err(|_| Error::ConnectionClosed("the connection ended".into()))??;
    let terminus = match reply.role {
        // The broker's end is the receiver: its target says where.
        Role::Receiver => &reply.target,
        Role::Sender => &reply.source,
    };
    if terminus.as_ref().is_none_or(|t| t.is_null()) {
        // Refused: the detach with the reason follows.
        let why = tokio::time::timeout(CALL_TIMEOUT, shared.wait_for(|s| Ok(s.why_gone(handle))))
            .await
            .map_err(|_| Error::Timeout(CALL_TIMEOUT))??;
        tracing::debug!(reason = %why, "AMQP 1.0 link refused");
        return Err(why);
    }
    Ok(reply)
}
