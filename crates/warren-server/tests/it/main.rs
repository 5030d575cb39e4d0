//! Interop and protocol tests: real third-party clients (lapin, amqprs) and
//! raw bytes against a broker started in-process on a loopback port, plus
//! a few tests of the `warren` binary itself. One test binary, so the
//! clients are compiled and linked once.

mod amqp10;
mod amqp10_management;
mod amqp10_messages;
mod amqp10_properties;
mod amqp10_quorum;
mod amqp10_rabbitmq4;
mod amqp10_raw;
mod amqp10_session;
mod amqprs_client;
mod binary;
mod cluster;
mod cluster_features;
mod cluster_forget;
mod cluster_join;
mod cluster_kill;
mod cluster_messages;
mod cluster_quorum;
mod cluster_quorum_features;
mod cluster_quorum_members;
mod cluster_snapshot;
mod cluster_streams;
mod cluster_tls;
mod cluster_topology;
mod common;
mod consumers;
mod durability;
mod errors;
mod exchanges;
mod faults;
mod flow;
mod http_api;
mod http_connections;
mod http_monitoring;
mod http_stats;
mod lapin_basics;
mod limits;
mod oauth2;
mod permissions;
mod pki;
mod policies;
mod proxy;
mod queues;
mod quorum;
mod quorum_faults;
mod quorum_order;
mod raw;
mod reply_to;
mod restart;
mod stream;
mod stream_faults;
mod stream_filter;
mod tls;
mod topic_permissions;
