//! The AMQP 1.0 front end (OASIS AMQP 1.0 on the AMQP port, told apart
//! from 0-9-1 by its protocol header; see `sniff.rs`). One task per
//! connection ([`connection`]); sessions are plain state inside it.

pub mod address;
pub mod connection;
pub mod convert;
pub mod management;
pub mod publish;
pub mod source_filter;
