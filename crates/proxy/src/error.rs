//! Why a request could not be forwarded, and the answer the client gets for it: the
//! one place a failure becomes a status.

use std::time::Duration;

use http::{header, HeaderValue, Response, StatusCode};

use super::body::ProxyBody;
use super::upstream::{self, SendError};

/// Why a request could not be forwarded; mapped to a status in one place.
#[derive(Debug, thiserror::Error)]
pub(super) enum ForwardError {
    #[error("no backend available")]
    NoBackend,
    /// No service's route matches the request's host and path.
    #[error("no route for this host and path")]
    NoRoute,
    /// Every slot of the chosen backend stayed taken for the queue timeout.
    #[error("no backend slot within {0:?}")]
    QueueTimeout(Duration),
    #[error(transparent)]
    Connect(upstream::ConnectError),
    /// Sent (at least partly) and failed before a response head.
    #[error("backend failed before answering: {0}")]
    Upstream(SendError),
    #[error("no progress from the backend within {0:?}")]
    Timeout(Duration),
    /// An HTTP/2 stream's request body stalled for `timeouts.client` (an HTTP/1
    /// connection that stalls is closed by its watchdog instead).
    #[error("no request body progress within {0:?}")]
    ClientTimeout(Duration),
    /// The client's request body failed (malformed chunked framing, or the client went
    /// away mid-upload): the client's fault, never counted against the backend.
    #[error("{0}")]
    ClientBody(SendError),
    /// Refused before forwarding (see `forward::request_problem`).
    #[error("request refused: {1}")]
    Refused(StatusCode, &'static str),
    /// The backend answered with something that cannot go to this client as it is (a
    /// `101` to a protocol nobody asked for, a transfer coding the client's protocol
    /// cannot carry): 502, the backend connection closed. Not the backend's failure for
    /// ejection: a client could provoke it.
    #[error("unusable response: {0}")]
    BadResponse(&'static str),
}

impl ForwardError {
    fn status(&self) -> StatusCode {
        match self {
            ForwardError::NoBackend | ForwardError::QueueTimeout(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ForwardError::NoRoute => StatusCode::NOT_FOUND,
            ForwardError::Connect(_) | ForwardError::Upstream(_) | ForwardError::BadResponse(_) => {
                StatusCode::BAD_GATEWAY
            }
            ForwardError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            ForwardError::ClientTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ForwardError::ClientBody(_) => StatusCode::BAD_REQUEST,
            ForwardError::Refused(status, _) => *status,
        }
    }

    fn body(&self) -> &'static str {
        match self {
            ForwardError::NoBackend => {
                "503 Service Unavailable: no web gear is available to serve this request.\n"
            }
            ForwardError::QueueTimeout(_) => {
                "503 Service Unavailable: every server of this service stayed busy; try again.\n"
            }
            ForwardError::NoRoute => "404 Not Found: no service is routed at this host and path.\n",
            ForwardError::Connect(_) | ForwardError::Upstream(_) | ForwardError::BadResponse(_) => {
                "502 Bad Gateway: the web gear did not answer properly.\n"
            }
            ForwardError::Timeout(_) => {
                "504 Gateway Timeout: the web gear did not answer in time.\n"
            }
            ForwardError::ClientTimeout(_) => {
                "408 Request Timeout: the request body did not arrive in time.\n"
            }
            ForwardError::ClientBody(_) => {
                "400 Bad Request: the request body was malformed or incomplete.\n"
            }
            ForwardError::Refused(StatusCode::METHOD_NOT_ALLOWED, _) => {
                "405 Method Not Allowed: CONNECT is not supported.\n"
            }
            ForwardError::Refused(StatusCode::NOT_IMPLEMENTED, _) => {
                "501 Not Implemented: transfer codings other than chunked are not supported.\n"
            }
            ForwardError::Refused(..) => "400 Bad Request: ambiguous request.\n",
        }
    }
}

pub(super) fn error_response(e: &ForwardError) -> Response<ProxyBody> {
    let mut resp = Response::new(ProxyBody::text(e.body()));
    *resp.status_mut() = e.status();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if matches!(
        e,
        ForwardError::Refused(..) | ForwardError::ClientBody(_) | ForwardError::ClientTimeout(_)
    ) {
        // What follows on this connection cannot be trusted to be framed as we think.
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}
