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
        code: ErrorCode,
        /// What is wrong.
        message: String,
    },
    /// A request whose body or headers the server cannot take as they are.
    #[error("{message}")]
    Rejected {
        /// The status to answer with (413, 415, 422, …).
        status: StatusCode,
        /// A stable code.
        code: ErrorCode,
        /// What is wrong.
        message: String,
    },
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The server is not ready (the database does not answer).
    #[error("the database is not reachable")]
    NotReady,
    /// The server failed outside the store (the text is for logs only, never for clients).
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    /// The status, code and client-facing message of this error.
    pub(crate) fn parts(&self) -> (StatusCode, ErrorCode, String) {
        match self {
            ApiError::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                ErrorCode::Unauthorized,
                self.to_string(),
            ),
            ApiError::Forbidden(m) => (StatusCode::FORBIDDEN, ErrorCode::Forbidden, (*m).into()),
            ApiError::NotFound(m) => (StatusCode::NOT_FOUND, ErrorCode::NotFound, m.clone()),
            ApiError::BadRequest { code, message } => {
                (StatusCode::BAD_REQUEST, code.clone(), message.clone())
            }
            ApiError::Rejected {
                status,
                code,
                message,
            } => (*status, code.clone(), message.clone()),
            ApiError::Internal(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                ErrorCode::Internal,
                "internal error; the server log has the details".into(),
            ),
            ApiError::NotReady => (
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::NotReady,
                self.to_string(),
            ),
            ApiError::Store(e) => match e {
                StoreError::NotFound(what) => (
                    StatusCode::NOT_FOUND,
                    ErrorCode::NotFound,
                    format!("{what} not found"),
                ),
                StoreError::Fenced { .. } => {
                    (StatusCode::CONFLICT, ErrorCode::Fenced, e.to_string())
                }
                StoreError::VersionConflict { .. } => (
                    StatusCode::CONFLICT,
                    ErrorCode::VersionConflict,
                    e.to_string(),
                ),
                StoreError::SessionMismatch { .. } => (
                    StatusCode::CONFLICT,
                    ErrorCode::SessionMismatch,
                    e.to_string(),
                ),
                StoreError::LabelsFixed { .. } => {
                    (StatusCode::CONFLICT, ErrorCode::LabelsFixed, e.to_string())
                }
                StoreError::AlreadyCompleted { .. } => (
                    StatusCode::CONFLICT,
                    ErrorCode::AlreadyCompleted,
                    e.to_string(),
                ),
                StoreError::NotCollaborator(_) => (
                    StatusCode::FORBIDDEN,
                    ErrorCode::NotCollaborator,
                    e.to_string(),
                ),
                StoreError::UnknownTrigger(_) => {
                    (StatusCode::NOT_FOUND, ErrorCode::NotFound, e.to_string())
                }
                StoreError::UnknownHandoff(_) => {
                    (StatusCode::NOT_FOUND, ErrorCode::NotFound, e.to_string())
                }
                StoreError::Invalid { code, message } => (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    code.clone(),
                    message.clone(),
                ),
                StoreError::Purged(_) => (StatusCode::GONE, ErrorCode::Purged, e.to_string()),
                StoreError::KeyReused(_) => {
                    (StatusCode::CONFLICT, ErrorCode::KeyReused, e.to_string())
                }
                StoreError::Busy { .. } | StoreError::RewindBusy { .. } => {
                    (StatusCode::CONFLICT, ErrorCode::Busy, e.to_string())
                }
                StoreError::MissingObjects(_) => (
                    StatusCode::CONFLICT,
                    ErrorCode::MissingObjects,
                    e.to_string(),
                ),
                StoreError::SnapshotDropped(_) => (
                    StatusCode::CONFLICT,
                    ErrorCode::SnapshotDropped,
                    e.to_string(),
                ),
                StoreError::Absent(_) => {
                    (StatusCode::NOT_FOUND, ErrorCode::NotFound, e.to_string())
                }
                StoreError::UnsupportedUrl | StoreError::Database(_) | StoreError::Corrupt(_) => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    ErrorCode::Internal,
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
        let running = match &self {
            ApiError::Store(
                StoreError::Busy { running, .. } | StoreError::RewindBusy { running, .. },
            ) => Some(*running),
            _ => None,
        };
        (
            status,
            axum::Json(ErrorBody {
                code,
                message,
                running,
            }),
        )
            .into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/api.md's table of errors names every code a client can get.
    #[test]
    fn every_error_code_is_in_the_documented_table() {
        let docs = include_str!("../../docs/api.md");
        let table = docs
            .split("## Errors")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .expect("docs/api.md has an Errors section");
        let missing: Vec<&str> = ErrorCode::ALL
            .iter()
            .map(ErrorCode::as_str)
            .filter(|code| !table.contains(&format!("`{code}`")))
            .collect();
        assert!(
            missing.is_empty(),
            "not in docs/api.md's Errors table: {missing:?}"
        );
    }

    #[test]
    fn purged_and_reused_keys_have_their_statuses() {
        let thread = ninetrix_proto::ThreadId::new_v7();
        let purged = ApiError::Store(StoreError::Purged(thread)).parts();
        assert_eq!((purged.0, purged.1), (StatusCode::GONE, ErrorCode::Purged));
        assert!(purged.2.contains(&thread.to_string()));
        let reused = ApiError::Store(StoreError::KeyReused("k".into())).parts();
        assert_eq!(
            (reused.0, reused.1),
            (StatusCode::CONFLICT, ErrorCode::KeyReused)
        );
    }
}
