//! Connections to backends: one pool per backend, and the HTTP/1.1 exchange on them.
//!
//! Owns connecting (with `timeouts.connect`), a lock-free queue of idle keep-alive
//! connections per backend, and sending a request and reading its response over a
//! [`Conn`] with the wire format of [`super::h1`]. The exchange runs in the task of the
//! client's request: no task per backend connection, no channel between the request and
//! the socket (hyper's client connection would add both to every request). A pooled
//! connection is owned by nobody while idle; that the backend closed it is seen when it
//! is taken again, from the readiness the runtime already recorded (no system call for a
//! healthy one; a request that cannot be replayed also asks the kernel, see [`Check`]),
//! or by the background sweep.
//!
//! Why not hyper-util's pooled client: it keys one shared pool by host with no way to
//! close one backend's idle connections (drain needs that), and it merges "could not
//! connect" with "sent and failed", while a balancer must know whether a request left
//! the building before it retries it elsewhere: [`send`] hands back a request of which
//! no byte was written.
//!
//! A connection returns to the pool only when its response body was read to the end,
//! the request was sent in full, and the response allows another request (see
//! [`UpBody`]); anything else closes it. [`Pool::force_close`] (the drain deadline)
//! cuts busy connections too: each one has a `ConnCell` whose waker is set whenever its
//! owner waits on the socket. A backend named by host name is resolved once per
//! `proxy.dns_ttl` ([`Resolver`]).
//!
//! One concept per file: `connection` (a backend connection), `request` (a
//! request ready for the wire), `exchange` (sending it and reading the response head,
//! with the early-answer sub-machine), `upload` (its body), `body` (the response
//! body), `pool` and `resolve`; `error` says what failed and `retry` what may
//! be done about it (the retry decision table, in one function).
//!
//! # The exchange, as a decision table
//!
//! What the balancer does with what a gear sends on an HTTP/1.1 connection. "Test"
//! names the test that holds the row (`tests/proxy.rs` unless said; `u::` is this
//! module's unit tests, many on scripted I/O; `h1::`, `forward::`, `wait::` those
//! modules'; `h2c` is `tests/h2c.rs`).
//!
//! **Response framing** (RFC 9112 §6.3, in its order; the first row that applies wins)
//!
//! | the response | the balancer | test |
//! |---|---|---|
//! | answers `HEAD`, or is `1xx`, `204`, `304` | no body, whatever its head says (§6.3 ¶1–2); its framing fields are checked as any other's (a bad or conflicting length is a `502`; beside `Transfer-Encoding` it is dropped) and a `Content-Length` is passed on, once; a `1xx` goes on without framing fields (RFC 9110 §8.6) | `h1::response_heads_and_their_framing`, `h1::a_length_written_several_times_is_passed_on_once`, `h1::a_bodiless_answer_s_framing_fields_are_checked_and_fixed_as_any_other` |
//! | `Transfer-Encoding` list elements | empty ones ignored (`chunked,` is chunked, RFC 9110 §5.6.1); one that is not `token *(; param)` (`"chunked"`, `gzip x`) is a `502` | `h1::transfer_codings_are_read_as_lists_and_refused_when_malformed` |
//! | `Transfer-Encoding` with `chunked` last | chunked, decoded and re-framed for the client; a `Content-Length` beside it is dropped and the connection not reused (§6.3 ¶3) | `h1::response_heads_and_their_framing`, `backends_closing_idle_keep_alive_connections_fail_no_request` |
//! | `Transfer-Encoding` without `chunked` (`gzip`) | read to the close (§6.3 ¶3), never reused | `h1::response_heads_and_their_framing`, `transfer_codings_other_than_chunked_are_refused_or_passed_faithfully` |
//! | other codings than `chunked` (`gzip, chunked`) | kept for an HTTP/1.1 client (hyper adds the chunked framing, RFC 9112 §6.1); `502` for HTTP/1.0 (§6.1: no Transfer-Encoding to it) and HTTP/2 clients (RFC 9113 §8.2.2) | `transfer_codings_other_than_chunked_are_refused_or_passed_faithfully` |
//! | `chunked` twice, or not last with other codings | `502` (§6.1: chunked at most once, last) | `forward::transfer_codings_other_than_chunked` |
//! | `Content-Length`, one number (perhaps written several times: `3, 3`) | that length; passed on written once (RFC 9110 §8.6) | `host_and_length_are_made_valid_http_1_1` |
//! | `Content-Length` not a number, several different ones, or beyond a signed 64-bit number | `502`, connection closed (§6.3 ¶5) | `h1::partial_heads_wait_and_bad_ones_are_errors`, `h1::a_length_with_leading_zeros_goes_on_as_a_number_and_one_past_i64_is_refused` |
//! | `Content-Length` with leading zeros | passed on as the number | `h1::a_length_with_leading_zeros_goes_on_as_a_number_and_one_past_i64_is_refused` |
//! | neither | read to the close (§6.3 ¶8), never reused | `u::chunked_close_delimited_and_closing_responses` |
//! | HTTP/1.0 with `Transfer-Encoding` | framing faulty: closed after it, whatever `Connection` says (§6.1) | `an_http_1_0_response_with_transfer_encoding_closes_its_connection` |
//! | a body of unknown length (chunked, or to the close) for an HTTP/1.0 client | ended by the close, which its head says (`Connection: close`, also to a client that asked for `keep-alive`) | `an_http_1_0_client_is_told_the_close_ends_its_body` |
//! | a chunk size of 2^52 or more (14 significant hex digits; leading zeros count for nothing) | malformed: a `502` in the first chunk-size line read with the head (as HAProxy), a cut body further on (rows below); a client's: `400` at once when it comes with the head | `h1::chunk_sizes_stop_below_2_pow_52_and_leading_zeros_count_for_nothing`, `abuse::an_oversized_chunk_size_is_refused_at_once` |
//! | a head larger than 256 KiB, 100 fields, or not HTTP | `502`, connection closed | `h1::partial_heads_wait_and_bad_ones_are_errors` |
//! | chunks malformed before the first one is whole, in the bytes that came with the head | `502` (as HAProxy answers), connection closed; the client's connection goes on | `h1::a_chunked_body_is_checked_as_far_as_its_first_chunk`, `byte_path::a_chunked_body_broken_at_its_start_is_a_502_and_the_connection_goes_on` |
//! | a body cut short, or chunks malformed further on | the client gets the body as far as it went, then a cut (no last chunk, a short length; §8: incomplete); connection closed | `a_cut_or_malformed_response_body_reaches_the_client_as_far_as_it_went`, `h1::malformed_chunked_bodies_are_errors` |
//!
//! **Reuse** (RFC 9112 §9.3, §9.6)
//!
//! | the exchange | the connection | test |
//! |---|---|---|
//! | HTTP/1.1 without `close` (HTTP/1.0 with `keep-alive`), body read to its end, request sent in full | pooled | `u::connections_are_reused_after_a_full_response` |
//! | `Connection: close`, HTTP/1.0 without `keep-alive` | closed after the body (§9.6) | `u::chunked_close_delimited_and_closing_responses` |
//! | a pooled connection the gear closed before one byte came back | a replayable request (idempotent, no body: RFC 9110 §9.2.2) goes again on a new connection, others get `502` | `a_get_on_a_pooled_connection_the_gear_closes_is_sent_again_a_post_is_not` |
//!
//! **Answers before the request body was sent** (RFC 9112 §9.6)
//!
//! While the body waits (on the client's bytes, or on the gear to take them), what
//! the gear sends is read: interim responses go on, and a complete final head ends
//! the wait at once.
//!
//! | the answer | the balancer | test |
//! |---|---|---|
//! | an error (`>= 400`), or `Connection: close`, or not HTTP | the answer is the response, at once; no more body is sent; the connection is closed; the client's connection too, after reading and dropping the rest of its upload (lingering close) | `a_backend_answering_before_the_upload_ends_is_heard`, `a_client_that_sends_its_whole_upload_first_still_gets_the_refusal`, `u::a_refusal_while_the_body_waits_on_the_client_stops_the_upload` |
//! | the gear closed or reset while the body was written | what it answered before is the response; else `502` | `u::an_answer_before_a_broken_upload_is_the_response` |
//! | a success (`2xx`, `3xx`) without `close` | full duplex: the answer goes to the client at once, the rest of the body goes on alongside, and after the response in a task of its own (counted, timed: `client` / `server`); pooled once both are done, closed if the gear stops taking it | `an_early_redirect_from_a_gear_that_stops_reading_reaches_the_client_at_once`, `an_early_answer_from_a_gear_that_reads_on_leaves_both_connections_usable`, `u::a_success_before_the_whole_body_goes_on_at_once_and_the_rest_is_bounded` |
//!
//! **Upgrades** (RFC 9110 §7.8, §15.2.2)
//!
//! | the response | the balancer | test |
//! |---|---|---|
//! | `101` to a request with `Connection: upgrade`, every protocol of its `Upgrade` one the client listed | tunnel; the bytes after the head go first | `open_websockets_are_sessions_until_they_close`, `u::an_upgrade_hands_over_the_socket_and_the_bytes_after_the_head` |
//! | `101` to a request that asked for no upgrade, or switching to another protocol, or without `Upgrade` | `502`, connection closed, no tunnel (HAProxy 2.6 refuses the first) | `a_switch_to_a_protocol_nobody_asked_for_is_a_502_and_opens_no_tunnel`, `forward::a_switch_must_be_to_a_protocol_the_client_asked_for` |
//!
//! **Interim responses** (RFC 9110 §15.2)
//!
//! | the response | the balancer | test |
//! |---|---|---|
//! | `103`, `102`, any `1xx` but `100`, `101` | to an HTTP/1.1 client at once, before the final response (hop-by-hop fields removed); not to HTTP/1.0 (§15.2: MUST NOT), nor HTTP/2 (hyper's server cannot send one); at most 32, then `502` | `interim_responses_reach_http_1_1_clients_ahead_of_the_final_one`, `u::interim_responses_are_handed_on_but_100_continue` |
//! | `100 Continue` | not passed on: the balancer answers `Expect: 100-continue` itself when it starts reading the body, and sends the gear none | `expect_100_continue`, `u::interim_responses_are_handed_on_but_100_continue` |
//!
//! **Trailers** (RFC 9110 §6.5, RFC 9112 §7.1.2)
//!
//! | the message | the balancer | test |
//! |---|---|---|
//! | a request's trailer fields (chunked HTTP/1.1, HTTP/2) | in the last chunk to the gear (none with a `Content-Length` body: nowhere to put them); `TE: trailers` passed on | `trailer_fields_are_forwarded_both_ways` |
//! | a chunked HTTP/1 request body with a trailer section, or answered before the balancer read it to its end (an error, a gear's early refusal; hyper then reads the rest itself): hyper's decoder reads a trailer section to the first CRLF CRLF, bare LFs included, so it may hold the head of a request a front end saw behind it | the response closes the connection; a request read after it (the gear answered early, full duplex) gets a `400` and reaches no gear | `a_request_hidden_behind_a_trailer_section_never_reaches_a_gear`, `a_request_behind_a_trailer_section_after_an_early_answer_is_refused`, `a_request_hidden_behind_an_unread_chunked_body_never_reaches_a_gear` (`tests/abuse.rs`) |
//! | a response's trailer fields | to HTTP/2 clients; to HTTP/1.1 clients that sent `TE: trailers`, for the fields its `Trailer` names (hyper's rule); framing, routing, cookie and similar fields dropped (§6.5.1) | `trailer_fields_are_forwarded_both_ways` |
//!
//! **Timeouts** (HAProxy's `timeout client` / `timeout server`: inactivity; see
//! [`super::wait`])
//!
//! | the exchange waits on | limit, and what restarts it | on expiry | test |
//! |---|---|---|---|
//! | the gear taking the request body | `server`, from the last byte it took | `504` | `the_server_timeout_is_backend_inactivity_not_the_length_of_the_upload`, `u::the_server_timeout_counts_from_the_last_byte_sent` |
//! | the response head | `server`, from when the request was sent in full | `504` | `slow_backend_times_out_with_504`, `the_server_timeout_is_backend_inactivity_not_the_length_of_the_upload` |
//! | the gear, for more of the response body | `server`, from the last byte read | the body is cut | `u::a_backend_silent_mid_body_runs_out_the_server_timeout` |
//! | the client's request body | `client`, from its last byte | HTTP/1: the connection closes; HTTP/2: `408` | `idle_clients_are_cut_at_the_client_timeout`, `h2c::a_stream_whose_request_body_stalls_gets_408_after_the_client_timeout` |
//! | the client taking the response | `client`, from its last byte | HTTP/1: the connection closes; HTTP/2: the stream is reset with its gear connection | `h2c::streams_stalled_by_a_zero_window_are_reset_with_their_gear_connections` |
//! | connecting | `connect` | the next gear (the request was not sent) | `dead_backend_gives_502_not_a_hang` |

mod body;
mod connection;
mod error;
mod exchange;
mod pool;
mod request;
mod resolve;
mod retry;
mod upload;

#[cfg(test)]
mod tests;

pub use body::UpBody;
pub use connection::Conn;
pub use error::{ConnectError, SendError};
pub use exchange::{send, Answer, Interim};
pub use pool::{Check, Pool};
pub use request::{outgoing, BodyNotes, ClientBody, Outgoing, ReqBody};
pub use resolve::Resolver;
pub use retry::{blames, decide, Attempt, FailedAt, RetryType, SendFailure};
pub use upload::{finish_upload, Upload};
