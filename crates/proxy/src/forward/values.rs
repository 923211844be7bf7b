//! Header values built from bytes the rewriting assembled (valid by construction).

use bytes::BytesMut;
use http::header::HeaderValue;

/// A header value that later clones only count references (text known to be valid).
pub(super) fn shared_value(v: Vec<u8>) -> HeaderValue {
    let bytes = BytesMut::from(&v[..]).freeze();
    HeaderValue::from_maybe_shared(bytes).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// A header value from bytes assembled out of valid header values and tokens; invalid
/// bytes cannot occur, but would give an empty value rather than a panic.
pub(super) fn value(buf: BytesMut) -> HeaderValue {
    HeaderValue::from_maybe_shared(buf.freeze()).unwrap_or_else(|_| HeaderValue::from_static(""))
}
