//! Why a call to the checkpoint API failed, typed so callers decide from data: retry a transient
//! failure, stop when fenced, tell the user which token was refused.

use ninetrix_proto::api::{ErrorCode, RunningTurn};

/// A failed call.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// No answer: the connection was refused, the name did not resolve, or the request timed
    /// out. `reason` is the whole cause chain (it names which of those it was).
    #[error("the checkpoint API at {url} is not reachable: {reason}")]
    Unreachable {
        /// The API's base URL.
        url: String,
        /// What the HTTP stack said, innermost cause included.
        reason: String,
    },
    /// The API answered with an error.
    #[error("the checkpoint API refused the request ({status} {code}): {message}")]
    Api {
        /// The HTTP status.
        status: u16,
        /// The API's error code.
        code: ErrorCode,
        /// The API's explanation.
        message: String,
        /// For `busy` (a message sent with mode `reject` while the thread is in a turn): that
        /// turn, as the body's `running` names it.
        running: Option<RunningTurn>,
    },
    /// The API answered success with a body this client cannot read (a different version?).
    #[error("the checkpoint API's answer to {what} could not be read ({status}): {reason}")]
    BadResponse {
        /// The request, e.g. `GET /v1/threads/…`.
        what: String,
        /// The HTTP status.
        status: u16,
        /// The decoding error.
        reason: String,
    },
}

impl ClientError {
    pub(crate) fn unreachable(url: &str, e: &reqwest::Error) -> ClientError {
        let mut reason = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(cause) = source {
            let text = cause.to_string();
            if !reason.contains(&text) {
                reason.push_str(": ");
                reason.push_str(&text);
            }
            source = cause.source();
        }
        ClientError::Unreachable {
            url: url.to_string(),
            reason,
        }
    }

    /// The API's error code, if it answered with one.
    pub fn code(&self) -> Option<&ErrorCode> {
        match self {
            ClientError::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    /// The turn the thread is in, when the API refused a message as `busy` (its mode was
    /// `reject`): nothing was stored; send it with another mode to wait for, join or stop it.
    pub fn running(&self) -> Option<RunningTurn> {
        match self {
            ClientError::Api { running, .. } => *running,
            _ => None,
        }
    }

    /// Whether the same request may succeed later: no answer, a server error, overload (429),
    /// or a request timeout (408). Fencing, conflicts and bad requests are not transient.
    pub fn is_transient(&self) -> bool {
        match self {
            ClientError::Unreachable { .. } => true,
            ClientError::Api { status, .. } => *status >= 500 || matches!(*status, 408 | 429),
            ClientError::BadResponse { .. } => false,
        }
    }

    /// Whether the API refused the token (missing, wrong, or a token for something else).
    pub fn is_auth(&self) -> bool {
        matches!(
            self.code(),
            Some(ErrorCode::Unauthorized | ErrorCode::Forbidden)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16, code: ErrorCode) -> ClientError {
        ClientError::Api {
            status,
            code,
            message: String::new(),
            running: None,
        }
    }

    #[test]
    fn only_outages_and_server_errors_are_worth_retrying() {
        let unreachable = ClientError::Unreachable {
            url: "http://x".into(),
            reason: "connection refused".into(),
        };
        assert!(unreachable.is_transient());
        assert!(api(503, ErrorCode::NotReady).is_transient());
        assert!(api(500, ErrorCode::Internal).is_transient());
        assert!(api(429, ErrorCode::Other("slow_down".into())).is_transient());
        assert!(!api(409, ErrorCode::Fenced).is_transient());
        assert!(!api(401, ErrorCode::Unauthorized).is_transient());
        assert!(!api(422, ErrorCode::InvalidKey).is_transient());
        assert!(api(401, ErrorCode::Unauthorized).is_auth());
        assert!(api(403, ErrorCode::Forbidden).is_auth());
        assert!(!api(404, ErrorCode::NotFound).is_auth());
    }
}
