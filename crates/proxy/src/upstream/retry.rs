//! A failed attempt at a backend, and what may be done about it: the retry decision
//! table, in one function ([`decide`]).
//!
//! Where an attempt failed ([`FailedAt`]) is fixed when its failure is built: a
//! [`SendFailure`] says whether a byte of the request left ([`SendFailure::NotSent`]
//! hands the request back untouched), its [`SendError`] whose fault it was, and the
//! connection whether one byte came back ([`Conn::answered_nothing`]). With what the
//! caller knows of the attempt ([`Attempt`]: a pooled connection or a new one, sent
//! again already, a request that may be replayed) that gives the [`RetryType`]:
//!
//! | failed at | reused | resent | replayable | retry | backend blamed |
//! |---|---|---|---|---|---|
//! | connecting | – | – | – | [`RetryType::Elsewhere`] (the request as is) | yes |
//! | before one byte was written | yes | – | – | [`RetryType::NextConnection`] (same backend) | no |
//! | before one byte was written | no | – | – | [`RetryType::Elsewhere`] | yes |
//! | the client's body failed | – | – | – | [`RetryType::Never`] | no |
//! | sent, closed or reset before one byte came back | yes | no | yes | [`RetryType::Resend`] (same backend, new connection) | no |
//! | sent, closed or reset before one byte came back | otherwise | | yes | [`RetryType::ReplayElsewhere`] | yes |
//! | sent, then failed in any other way (a byte came back, bad response) | – | – | yes | [`RetryType::ReplayElsewhere`] | yes |
//! | sent, then failed, not replayable | – | – | no | [`RetryType::Never`] | yes |
//! | a timeout (`server` or `client`) | – | – | – | [`RetryType::Never`] | no |
//!
//! A request is replayable when it is idempotent and has no body (RFC 9110 §9.2.2):
//! the balancer keeps its head to send it again. Whether the backend is blamed (the
//! failure counted toward its passive ejection) follows from the same row: [`blames`].

use super::connection::Conn;
use super::error::SendError;
use super::request::Outgoing;

/// A failed [`super::send`].
#[derive(Debug)]
pub enum SendFailure {
    /// Not one byte was written: the request is handed back, untouched.
    NotSent(Box<Outgoing>, SendError),
    /// It was (at least partly) sent.
    Sent(SendError),
}

/// Where an attempt at a backend failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailedAt {
    /// No connection could be made: the request never left.
    Connect,
    /// A connection, but not one byte of the request was written on it.
    NotSent,
    /// The client's request body failed (malformed, cut, longer or shorter than its
    /// length): the client's fault, never the backend's.
    ClientBody,
    /// Sent (at least partly); the connection closed or failed before one byte came
    /// back: on a pooled connection, the backend closed it as the request went out.
    SentUnanswered,
    /// Sent, and failed after that in any other way: the backend answered something
    /// (a cut response, a malformed head), or its failure came after bytes came back.
    Sent,
    /// A wait ran out: on the backend (`timeouts.server`) or on the client's body
    /// (`timeouts.client`).
    Timeout,
}

/// What the attempt was, as its caller knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// On a pooled connection (not one made for this attempt).
    pub reused: bool,
    /// Sent again already after a pooled connection closed under it.
    pub resent: bool,
    /// Idempotent and body-less: may be sent twice (RFC 9110 §9.2.2).
    pub replayable: bool,
}

/// What may be done after a failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryType {
    /// The request, untouched (it never left), on another connection to the same
    /// backend: a pooled one the backend had closed.
    NextConnection,
    /// The request sent again on a new connection to the same backend: a pooled one
    /// closed under it as it went out (as nginx does for its cached connections).
    Resend,
    /// The request, untouched (it never left), to another backend.
    Elsewhere,
    /// The request's head sent again, body-less, to another backend.
    ReplayElsewhere,
    /// Not sent again: the failure is the answer.
    Never,
}

impl RetryType {
    /// May be tried again at all.
    pub fn retryable(self) -> bool {
        self != RetryType::Never
    }

    /// Tried on another backend.
    pub fn elsewhere(self) -> bool {
        matches!(self, RetryType::Elsewhere | RetryType::ReplayElsewhere)
    }
}

/// The retry decision table (see the module docs): what may be done after an attempt
/// failed at `at`.
pub fn decide(at: FailedAt, attempt: Attempt) -> RetryType {
    match at {
        FailedAt::Connect => RetryType::Elsewhere,
        FailedAt::NotSent if attempt.reused => RetryType::NextConnection,
        FailedAt::NotSent => RetryType::Elsewhere,
        FailedAt::ClientBody | FailedAt::Timeout => RetryType::Never,
        FailedAt::SentUnanswered if attempt.replayable && attempt.reused && !attempt.resent => {
            RetryType::Resend
        }
        FailedAt::SentUnanswered | FailedAt::Sent if attempt.replayable => {
            RetryType::ReplayElsewhere
        }
        FailedAt::SentUnanswered | FailedAt::Sent => RetryType::Never,
    }
}

/// The backend is blamed for a failure at `at` (counted toward its passive ejection):
/// not for its client's fault, a timeout, nor a pooled connection closed under the
/// request (the last column of the table).
pub fn blames(at: FailedAt, attempt: Attempt) -> bool {
    !matches!(at, FailedAt::ClientBody | FailedAt::Timeout)
        && !matches!(
            decide(at, attempt),
            RetryType::NextConnection | RetryType::Resend
        )
}

impl SendError {
    /// The client's fault, not the backend's: its request body failed.
    pub fn is_client_body(&self) -> bool {
        matches!(self, SendError::ClientBody(_) | SendError::BodyLength)
    }
}

impl SendFailure {
    /// Where the exchange on `conn` failed.
    pub fn failed_at(&self, conn: &Conn) -> FailedAt {
        match self {
            SendFailure::NotSent(..) => FailedAt::NotSent,
            SendFailure::Sent(e) if e.is_client_body() => FailedAt::ClientBody,
            SendFailure::Sent(SendError::Closed | SendError::Io(_)) if conn.answered_nothing() => {
                FailedAt::SentUnanswered
            }
            SendFailure::Sent(_) => FailedAt::Sent,
        }
    }

    /// What may be done about it ([`decide`]).
    pub fn retry(&self, conn: &Conn, attempt: Attempt) -> RetryType {
        decide(self.failed_at(conn), attempt)
    }

    /// The error, whatever was sent.
    pub fn error(&self) -> &SendError {
        match self {
            SendFailure::NotSent(_, e) | SendFailure::Sent(e) => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row of the table, every combination of the attempt.
    #[test]
    fn the_retry_decision_table() {
        use FailedAt as F;
        use RetryType as R;
        let all = [false, true];
        for reused in all {
            for resent in all {
                for replayable in all {
                    let a = Attempt {
                        reused,
                        resent,
                        replayable,
                    };
                    let expect = |at: F| -> R {
                        match at {
                            F::Connect => R::Elsewhere,
                            F::NotSent if reused => R::NextConnection,
                            F::NotSent => R::Elsewhere,
                            F::ClientBody | F::Timeout => R::Never,
                            F::SentUnanswered if reused && !resent && replayable => R::Resend,
                            F::SentUnanswered | F::Sent if replayable => R::ReplayElsewhere,
                            F::SentUnanswered | F::Sent => R::Never,
                        }
                    };
                    for at in [
                        F::Connect,
                        F::NotSent,
                        F::ClientBody,
                        F::SentUnanswered,
                        F::Sent,
                        F::Timeout,
                    ] {
                        assert_eq!(decide(at, a), expect(at), "{at:?} {a:?}");
                    }
                }
            }
        }
        // The rows, spelled out.
        let a = |reused, resent, replayable| Attempt {
            reused,
            resent,
            replayable,
        };
        let rows = [
            (F::Connect, a(false, false, false), R::Elsewhere, true),
            (F::NotSent, a(true, false, false), R::NextConnection, false),
            (F::NotSent, a(false, false, true), R::Elsewhere, true),
            (F::ClientBody, a(true, false, true), R::Never, false),
            (F::SentUnanswered, a(true, false, true), R::Resend, false),
            (
                F::SentUnanswered,
                a(true, true, true),
                R::ReplayElsewhere,
                true,
            ),
            (
                F::SentUnanswered,
                a(false, false, true),
                R::ReplayElsewhere,
                true,
            ),
            (F::SentUnanswered, a(true, false, false), R::Never, true),
            (F::Sent, a(true, false, true), R::ReplayElsewhere, true),
            (F::Sent, a(false, false, false), R::Never, true),
            (F::Timeout, a(true, false, true), R::Never, false),
        ];
        for (at, attempt, want, blamed) in rows {
            assert_eq!(decide(at, attempt), want, "{at:?} {attempt:?}");
            assert_eq!(blames(at, attempt), blamed, "{at:?} {attempt:?}");
            assert_eq!(want.retryable(), want != R::Never);
        }
        assert!(R::ReplayElsewhere.elsewhere() && R::Elsewhere.elsewhere());
        assert!(!R::Resend.elsewhere() && !R::NextConnection.elsewhere());
    }
}
