//! Byte formats TCP mode reads and writes on the wire, as pure functions over buffers:
//! the TLS ClientHello's server name ([`client_hello`], for routing by SNI without
//! terminating), the PROXY protocol v1/v2 ([`proxy_protocol`], sent to backends that
//! ask for it and accepted from trusted fronts), and HAProxy's `ssl-hello-chk` probe
//! and verdict ([`hello_check`]). No I/O here: the proxy reads, these decide.

pub mod client_hello;
pub mod hello_check;
pub mod proxy_protocol;
