//! The AMQP 0-9-1 front end. One task per connection ([`connection`]) owns
//! the socket, the handshake and every channel's state; channels are plain
//! structs inside it ([`channel`]), not tasks. The connection's state as
//! handlers see it is [`conn::Conn`]; [`dispatch`] hands each method to its
//! handler, grouped by what it touches: [`handshake`] (the connection
//! class), [`declare`] (exchanges, queues, bindings), [`publish`] (content
//! assembly, routing, confirms, returns, tx) and [`consume`] (consumers,
//! deliveries, acks, basic.get). Handlers import the state below them
//! (`conn`, `channel`, `error`), never the task or the dispatcher.

pub mod channel;
pub mod conn;
pub mod connection;
pub mod consume;
pub mod declare;
pub mod dispatch;
pub mod error;
pub mod handshake;
pub mod publish;

use base64::Engine;
use rand::RngCore;

/// A server-generated name, RabbitMQ style: `prefix` then 22 base64url
/// characters of randomness (e.g. `amq.gen-…`, `amq.ctag-…`).
pub fn generated_name(prefix: &str) -> String {
    let mut raw = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut raw);
    format!(
        "{prefix}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
    )
}
