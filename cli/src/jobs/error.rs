//! The broker's one error type: every refusal a route answers, each with the
//! [`JobErrorCode`] and HTTP status it is sent as. A message says what happened and what to do;
//! none repeats a token.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ninetrix_proto::jobs::{JobError, JobErrorCode};

/// Why the broker refused a request.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BrokerError {
    /// No token or thread, or the checkpoint API refused the token.
    #[error("{0}")]
    Unauthorized(String),
    /// The caller's thread is not an agent of this pool with the job tools, or the job is
    /// another thread's.
    #[error("{0}")]
    Forbidden(String),
    /// No such job of the caller's thread.
    #[error("{0}")]
    NotFound(String),
    /// The agent runs its `max_concurrent` jobs already.
    #[error("{0}")]
    TooManyJobs(String),
    /// A request the broker cannot read.
    #[error("{0}")]
    Invalid(String),
    /// Docker or the checkpoint API failed.
    #[error("{0}")]
    Unavailable(String),
}

impl BrokerError {
    /// The wire code.
    pub(crate) fn code(&self) -> JobErrorCode {
        match self {
            BrokerError::Unauthorized(_) => JobErrorCode::Unauthorized,
            BrokerError::Forbidden(_) => JobErrorCode::Forbidden,
            BrokerError::NotFound(_) => JobErrorCode::NotFound,
            BrokerError::TooManyJobs(_) => JobErrorCode::TooManyJobs,
            BrokerError::Invalid(_) => JobErrorCode::Invalid,
            BrokerError::Unavailable(_) => JobErrorCode::Unavailable,
        }
    }

    /// The HTTP status.
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            BrokerError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            BrokerError::Forbidden(_) => StatusCode::FORBIDDEN,
            BrokerError::NotFound(_) => StatusCode::NOT_FOUND,
            BrokerError::TooManyJobs(_) => StatusCode::TOO_MANY_REQUESTS,
            BrokerError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
            BrokerError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// Docker failed doing `what`.
    pub(crate) fn docker(what: &str, e: &bollard::errors::Error) -> BrokerError {
        BrokerError::Unavailable(format!("Docker could not {what}: {e}"))
    }
}

impl IntoResponse for BrokerError {
    fn into_response(self) -> Response {
        let body = JobError {
            code: self.code(),
            message: self.to_string(),
        };
        (self.status(), axum::Json(body)).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_has_its_code_and_status() {
        let cases = [
            (BrokerError::Unauthorized("u".into()), 401, "unauthorized"),
            (BrokerError::Forbidden("f".into()), 403, "forbidden"),
            (BrokerError::NotFound("n".into()), 404, "not_found"),
            (BrokerError::TooManyJobs("t".into()), 429, "too_many_jobs"),
            (BrokerError::Invalid("i".into()), 422, "invalid"),
            (BrokerError::Unavailable("x".into()), 503, "unavailable"),
        ];
        for (e, status, code) in cases {
            assert_eq!(e.status().as_u16(), status);
            assert_eq!(
                serde_json::to_value(e.code()).unwrap(),
                serde_json::json!(code)
            );
        }
    }
}
