//! What a backend sends back: `proxy::h1::parse_response` (the response head and its
//! framing) and the chunked body decoder, fed in pieces as reads would deliver them.
//!
//! Oracle: no panic; a head is found in pieces exactly when it is found in one piece,
//! with the same status, framing and headers; a `Content-Length` is only ever a length
//! every copy of the header agreed on, and is gone when `Transfer-Encoding` overrides
//! it; the chunked decoder gives the same data and the same end whatever the read sizes,
//! never more data bytes than it was given, and leaves the bytes after the body alone;
//! its trailer fields are the same whatever the read sizes, and never a field that may
//! not be a trailer (`h1::trailer_allowed`); the check of a body's start refuses only
//! bodies the decoder refuses, and keeps refusing as more of one comes.
#![no_main]

use arbitrary::Arbitrary;
use bytes::BytesMut;
use gearlb::proxy::h1::{self, BodyLen, Chunked, Step};
use http::Method;
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Input {
    head: bool,
    bytes: Vec<u8>,
    /// Read sizes (each 1..=256), cycled.
    steps: Vec<u8>,
}

/// `bytes` delivered into a buffer `steps` bytes at a time, as reads would.
struct Reads<'a> {
    bytes: &'a [u8],
    steps: &'a [usize],
    at: usize,
    i: usize,
    buf: BytesMut,
}

impl<'a> Reads<'a> {
    fn new(bytes: &'a [u8], steps: &'a [usize]) -> Self {
        Reads {
            bytes,
            steps,
            at: 0,
            i: 0,
            buf: BytesMut::new(),
        }
    }

    /// Append the next read to the buffer.
    fn read(&mut self) {
        let n = self.steps[self.i % self.steps.len()].min(self.bytes.len() - self.at);
        self.buf
            .extend_from_slice(&self.bytes[self.at..self.at + n]);
        self.at += n;
        self.i += 1;
    }

    fn all_read(&self) -> bool {
        self.at == self.bytes.len()
    }

    /// The buffer followed by what was not read yet.
    fn rest(mut self) -> BytesMut {
        self.buf.extend_from_slice(&self.bytes[self.at..]);
        self.buf
    }
}

/// Parse a head from `bytes` given `steps` bytes at a time: the head and the bytes left.
fn head_in_steps(
    bytes: &[u8],
    steps: &[usize],
    method: &Method,
) -> (Result<Option<h1::Head>, h1::ParseError>, BytesMut) {
    let mut r = Reads::new(bytes, steps);
    loop {
        r.read();
        match h1::parse_response(&mut r.buf, method) {
            Ok(None) if !r.all_read() => continue,
            res => return (res, r.rest()),
        }
    }
}

/// Decode a chunked body from `bytes` given `steps` bytes at a time.
type Decoded = (
    Result<bool, h1::ParseError>,
    Vec<u8>,
    BytesMut,
    Option<http::HeaderMap>,
);

fn chunked_in_steps(bytes: &[u8], steps: &[usize]) -> Decoded {
    let mut c = Chunked::default();
    let mut r = Reads::new(bytes, steps);
    let mut data = Vec::new();
    loop {
        r.read();
        loop {
            match c.decode(&mut r.buf) {
                Ok(Step::Data(d)) => {
                    assert!(!d.is_empty(), "empty data frame");
                    data.extend_from_slice(&d);
                }
                Ok(Step::More) => break,
                Ok(Step::End) => {
                    assert!(c.is_done());
                    let trailers = c.take_trailers();
                    if let Some(t) = &trailers {
                        assert!(!t.is_empty());
                        assert!(t.keys().all(h1::trailer_allowed), "{t:?}");
                    }
                    return (Ok(true), data, r.rest(), trailers);
                }
                Err(e) => return (Err(e), data, r.buf, None),
            }
        }
        if r.all_read() {
            return (Ok(false), data, r.buf, None);
        }
    }
}

fuzz_target!(|input: Input| {
    let mut steps: Vec<usize> = input.steps.iter().map(|&s| s as usize + 1).collect();
    if steps.is_empty() {
        steps.push(usize::MAX);
    }
    if input.head {
        for method in [Method::GET, Method::HEAD] {
            let (whole, rest_whole) = head_in_steps(&input.bytes, &[usize::MAX], &method);
            let (pieces, rest_pieces) = head_in_steps(&input.bytes, &steps, &method);
            match (&whole, &pieces) {
                (Ok(Some(a)), Ok(Some(b))) => {
                    assert_eq!(a.status, b.status);
                    assert_eq!(a.headers(), b.headers());
                    assert_eq!((a.body, a.keep_alive), (b.body, b.keep_alive));
                    assert_eq!(rest_whole, rest_pieces, "the bytes after the head");
                    let h = &a.headers();
                    if method == Method::HEAD || a.status.is_informational() {
                        assert_eq!(a.body, BodyLen::Empty);
                    }
                    if h.contains_key("transfer-encoding") {
                        assert!(!h.contains_key("content-length"));
                    }
                    if let BodyLen::Length(n) = a.body {
                        for v in h.get_all("content-length") {
                            for part in v.as_bytes().split(|&b| b == b',') {
                                let t = std::str::from_utf8(part).unwrap().trim();
                                assert_eq!(t.parse::<u64>().unwrap(), n);
                            }
                        }
                    }
                }
                (Ok(None), Ok(None)) | (Err(_), Err(_)) => {}
                // A head complete in one piece is complete in pieces too, and an error
                // is an error whichever way the bytes came.
                (a, b) => panic!("whole: {a:?}, in pieces: {b:?}"),
            }
        }
    } else {
        let (whole, data_whole, rest_whole, trailers_whole) =
            chunked_in_steps(&input.bytes, &[usize::MAX]);
        let (pieces, data_pieces, rest_pieces, trailers_pieces) =
            chunked_in_steps(&input.bytes, &steps);
        assert!(data_whole.len() <= input.bytes.len());
        match (&whole, &pieces) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a, b, "ended");
                assert_eq!(data_whole, data_pieces);
                if *a {
                    assert_eq!(rest_whole, rest_pieces, "the bytes after the body");
                    assert_eq!(trailers_whole, trailers_pieces, "the trailer fields");
                }
            }
            (Err(_), Err(_)) => {}
            (a, b) => panic!("whole: {a:?}, in pieces: {b:?}"),
        }
        // The check of a body's start (`h1::check_start`, on what came with the head):
        // whatever part of the body came, it refuses only a body the decoder refuses
        // (no 502 for a good answer), and more bytes never mend what it refused.
        let decoder_refuses = whole.is_err();
        let start_refuses = |b: &[u8]| h1::check_start(b).is_err();
        holds_to_decoder(&input.bytes, &steps, decoder_refuses, start_refuses, "start");
        // The walk for an oversized chunk size (`h1::oversized_size`, on a request's
        // bytes at hand before hyper reads them): the same two rules.
        holds_to_decoder(&input.bytes, &steps, decoder_refuses, h1::oversized_size, "size");
    }
});

/// A check made on a chunked body's first bytes, at every read boundary of `steps`:
/// it refuses only a body the decoder refuses, and once it refused, it refuses every
/// longer read of the same body.
fn holds_to_decoder(
    bytes: &[u8],
    steps: &[usize],
    decoder_refuses: bool,
    refuses: impl Fn(&[u8]) -> bool,
    what: &str,
) {
    let mut refused = false;
    let mut end: usize = 0;
    for step in steps.iter().cycle() {
        end = end.saturating_add(*step).min(bytes.len());
        let now = refuses(&bytes[..end]);
        assert!(!refused || now, "{what}: refused at a shorter read only");
        if now {
            assert!(decoder_refuses, "{what}: refused a body the decoder takes");
        }
        refused = now;
        if end == bytes.len() {
            break;
        }
    }
}
