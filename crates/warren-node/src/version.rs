//! The RabbitMQ release Warren announces, the same on every protocol and
//! in the management API: RabbitMQ's own clients turn features on by it
//! (the AMQP 1.0 clients gate filters and direct reply-to on 4.1 and
//! 4.2, the stream clients super streams and filtering on 3.11 and
//! 3.13), so it names the newest release whose client-visible features
//! Warren serves, and rises as they land. Warren's own version is under
//! `platform`.

/// The RabbitMQ version announced.
pub const RABBITMQ_VERSION: &str = "4.2.0";

/// What `platform` says: Warren and its version.
pub const PLATFORM: &str = concat!("Warren ", env!("CARGO_PKG_VERSION"));
