//! Extractors that turn axum's rejections into the API's `{code, message}` errors: bad JSON
//! syntax → 400, wrong types / unknown or missing fields → 422, a missing JSON content type → 415,
//! a body over the limit → 413, a bad path (e.g. a malformed UUID) or query → 400.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use ninetrix_proto::api::ErrorCode;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A JSON body.
pub(crate) struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(ApiJson(value)),
            Err(rejection) => Err(json_error(rejection)),
        }
    }
}

fn json_error(rejection: JsonRejection) -> ApiError {
    let status = rejection.status();
    let code = match &rejection {
        JsonRejection::JsonDataError(_) => ErrorCode::InvalidBody,
        JsonRejection::JsonSyntaxError(_) => ErrorCode::BadJson,
        JsonRejection::MissingJsonContentType(_) => ErrorCode::UnsupportedMediaType,
        _ if status == StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::TooLarge,
        _ => ErrorCode::BadBody,
    };
    let message = match code {
        ErrorCode::TooLarge => "the request body is larger than the server's limit".to_string(),
        _ => rejection.body_text(),
    };
    if status == StatusCode::BAD_REQUEST {
        ApiError::BadRequest { code, message }
    } else {
        ApiError::Rejected {
            status,
            code,
            message,
        }
    }
}

/// Path parameters.
pub(crate) struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(ApiPath(value)),
            Err(rejection) => Err(ApiError::BadRequest {
                code: ErrorCode::InvalidPath,
                message: path_message(&rejection),
            }),
        }
    }
}

fn path_message(rejection: &PathRejection) -> String {
    let text = rejection.body_text();
    if text.contains("UUID") || text.contains("uuid") {
        format!("{text} (IDs are UUIDs such as 01936f5e-7c1a-7d3e-9f4b-2a6c8e0d1f35)")
    } else {
        text
    }
}

/// Query parameters.
pub(crate) struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(ApiQuery(value)),
            Err(rejection) => Err(ApiError::BadRequest {
                code: ErrorCode::InvalidQuery,
                message: query_message(&rejection),
            }),
        }
    }
}

fn query_message(rejection: &QueryRejection) -> String {
    rejection.body_text()
}
