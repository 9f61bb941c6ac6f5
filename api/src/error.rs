//! The API's one error type and its HTTP mapping: every failure is `{code, message}` JSON with
//! the right status. Storage failures become a generic 500; their cause goes to the log only.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ninetrix_proto::api::{ErrorBody, ErrorCode};

use crate::store::StoreError;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No usable credentials.
    #[error("missing or invalid bearer token")]
    Unauthorized,
    /// Valid credentials that may not do this.
    #[error("{0}")]
    Forbidden(&'static str),
    /// Nothing there.
    #[error("{0}")]
    NotFound(String),
    /// A malformed request (bad JSON syntax, bad path or query).
    #[error("{message}")]
    BadRequest {
        /// A stable code.
        code: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A request whose body or headers the server cannot take as they are.
    #[error("{message}")]
    Rejected {
        /// The status to answer with (413, 415, 422, …).
        status: StatusCode,
        /// A stable code.
        code: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The server is not ready (the database does not answer).
    #[error("the database is not reachable")]
    NotReady,
}

impl ApiError {
    fn parts(&self) -> (StatusCode, &'static str, String) {
        match self {
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized", self.to_string()),
            ApiError::Forbidden(m) => (StatusCode::FORBIDDEN, "forbidden", (*m).to_string()),
            ApiError::NotFound(m) => (StatusCode::NOT_FOUND, "not_found", m.clone()),
            ApiError::BadRequest { code, message } => {
                (StatusCode::BAD_REQUEST, code, message.clone())
            }
            ApiError::Rejected {
                status,
                code,
                message,
            } => (*status, code, message.clone()),
            ApiError::NotReady => (
                StatusCode::SERVICE_UNAVAILABLE,
                "not_ready",
                self.to_string(),
            ),
            ApiError::Store(e) => match e {
                StoreError::NotFound(what) => (
                    StatusCode::NOT_FOUND,
                    "not_found",
                    format!("{what} not found"),
                ),
                StoreError::Fenced { .. } => (StatusCode::CONFLICT, "fenced", e.to_string()),
                StoreError::VersionConflict { .. } => {
                    (StatusCode::CONFLICT, "version_conflict", e.to_string())
                }
                StoreError::AlreadyCompleted { .. } => {
                    (StatusCode::CONFLICT, "already_completed", e.to_string())
                }
                StoreError::Invalid { code, message } => {
                    (StatusCode::UNPROCESSABLE_ENTITY, code, message.clone())
                }
                StoreError::Database(_) | StoreError::Corrupt(_) => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "internal error; the server log has the details".into(),
                ),
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, message) = self.parts();
        if status.is_server_error() {
            tracing::error!(error = %self, "request failed");
        }
        (
            status,
            axum::Json(ErrorBody {
                code: ErrorCode::parse(code),
                message,
            }),
        )
            .into_response()
    }
}
