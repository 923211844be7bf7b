//! The HTTP/1.1 client side of the proxy, as pure functions over bytes: the request head
//! written to a backend, the response head read from it, and the response body's
//! framing (RFC 9112 §6).
//!
//! Owns the wire format and nothing else: no sockets, no timers. [`super::upstream`]
//! drives these over a backend connection in the task of the client's request, so that a
//! request costs no hand-over to another task (hyper's client connection runs in a task
//! of its own, fed through channels).
//!
//! Strict where a lenient reading could desynchronise the connection: a response whose
//! length cannot be known for sure (several different `Content-Length`s, a length that
//! is not a number, malformed chunk sizes) is an error and its connection is closed; a
//! body delimited by the connection's end is read to the end and never reused.

mod chunked;
mod reply;
mod response;
mod write;

#[cfg(test)]
mod tests;

pub use chunked::{check_start, oversized_size, Chunked, Step};
pub use reply::{declared_trailers, write_local, write_reply, Framing, Reply, SetCookie};
pub use response::{
    bodiless, is_tchar, is_text, parse_response, tokens, BodyLen, Head, ParseError, MAX_HEAD,
    MAX_HEADERS,
};
pub use write::{
    allowed_trailers, encode_chunk, encode_interim, encode_request_head, last_chunk, put_field,
    put_line, put_status_line, request_framing, trailer_allowed, ReqFraming, LAST_CHUNK,
};
