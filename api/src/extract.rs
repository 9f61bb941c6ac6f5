//! Extractors that turn axum's rejections into the API's `{code, message}` errors: bad JSON
//! syntax → 400, wrong types / unknown or missing fields → 422, a missing JSON content type → 415,
//! a body over the limit → 413, a bad path (e.g. a malformed UUID) or query → 400; text with
//! U+0000 anywhere → `invalid_text` naming the field (no backend stores it the same: Postgres
//! refuses it in text); and the bounds of the listings' `limit` and `after`.

use axum::body::Bytes;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use ninetrix_proto::api::{ErrorCode, MAX_STORED_INT};
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A JSON body.
pub(crate) struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !json_content_type(req.headers()) {
            return Err(ApiError::Rejected {
                status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
                code: ErrorCode::UnsupportedMediaType,
                message: "Expected request with `Content-Type: application/json`".into(),
            });
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::Rejected {
                    status: StatusCode::PAYLOAD_TOO_LARGE,
                    code: ErrorCode::TooLarge,
                    message: "the request body is larger than the server's limit".into(),
                }
            } else {
                ApiError::BadRequest {
                    code: ErrorCode::BadBody,
                    message: rejection.body_text(),
                }
            }
        })?;
        let axum::Json(value) = axum::Json::<T>::from_bytes(&bytes).map_err(json_error)?;
        // serde also reads a struct from a JSON array of its fields; every body is an object.
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(ApiError::Rejected {
                status: StatusCode::UNPROCESSABLE_ENTITY,
                code: ErrorCode::InvalidBody,
                message: "the body must be a JSON object".into(),
            });
        }
        if let Some(field) = nul_field(&bytes) {
            return Err(ApiError::Rejected {
                status: StatusCode::UNPROCESSABLE_ENTITY,
                code: ErrorCode::InvalidText,
                message: format!(
                    "`{field}` contains U+0000 (NUL), which the API does not store: remove it or replace it (e.g. with U+FFFD)"
                ),
            });
        }
        Ok(ApiJson(value))
    }
}

/// A raw body sent as `application/octet-stream` (a snapshot object).
pub(crate) struct OctetStream(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for OctetStream {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let mime = req
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|v| v.trim().to_ascii_lowercase());
        if mime.as_deref() != Some("application/octet-stream") {
            return Err(ApiError::Rejected {
                status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
                code: ErrorCode::UnsupportedMediaType,
                message: "Expected request with `Content-Type: application/octet-stream` (the object's bytes)".into(),
            });
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::Rejected {
                    status: StatusCode::PAYLOAD_TOO_LARGE,
                    code: ErrorCode::TooLarge,
                    message: "the object is larger than an object may be (32 MiB)".into(),
                }
            } else {
                ApiError::BadRequest {
                    code: ErrorCode::BadBody,
                    message: rejection.body_text(),
                }
            }
        })?;
        Ok(OctetStream(bytes))
    }
}

/// The JSON path (`append[2].blocks[0].text`, or `(key of) args` for an object key) of the first
/// string in `body` that holds U+0000, if any. A raw NUL byte is not valid JSON, so only the
/// escape `\u0000` can carry one: bodies without it are not parsed again.
fn nul_field(body: &[u8]) -> Option<String> {
    const ESCAPE: &[u8] = b"\\u0000";
    if !body.windows(ESCAPE.len()).any(|w| w == ESCAPE) {
        return None;
    }
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    find_nul(&value, String::new())
}

fn find_nul(value: &serde_json::Value, path: String) -> Option<String> {
    let at = |path: &str| {
        if path.is_empty() {
            "the body".to_string()
        } else {
            path.to_string()
        }
    };
    match value {
        serde_json::Value::String(s) => s.contains('\0').then(|| at(&path)),
        serde_json::Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| find_nul(v, format!("{path}[{i}]"))),
        serde_json::Value::Object(map) => map.iter().find_map(|(k, v)| {
            let inner = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            if k.contains('\0') {
                Some(format!("(a key of) {}", at(&path)))
            } else {
                find_nul(v, inner)
            }
        }),
        _ => None,
    }
}

/// The name of the first path or query parameter whose (percent-decoded) value holds U+0000.
fn nul_param<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Option<String> {
    pairs
        .into_iter()
        .find(|(k, v)| k.contains('\0') || v.contains('\0'))
        .map(|(k, _)| k.replace('\0', "\\0"))
}

fn nul_rejection(what: &str, name: &str) -> ApiError {
    ApiError::BadRequest {
        code: ErrorCode::InvalidText,
        message: format!(
            "the {what} parameter `{name}` contains U+0000 (NUL), which the API does not store"
        ),
    }
}

/// Whether the request says its body is JSON (`application/json` or `application/…+json`).
fn json_content_type(headers: &axum::http::HeaderMap) -> bool {
    let Some(value) = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let mime = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
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
            Ok(axum::extract::Path(value)) => {
                let raw = axum::extract::RawPathParams::from_request_parts(parts, state).await;
                if let Ok(raw) = raw
                    && let Some(name) = nul_param(raw.iter())
                {
                    return Err(nul_rejection("path", &name));
                }
                Ok(ApiPath(value))
            }
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
            Ok(axum::extract::Query(value)) => {
                let pairs: Vec<(String, String)> =
                    axum::extract::Query::<Vec<(String, String)>>::try_from_uri(&parts.uri)
                        .map(|q| q.0)
                        .unwrap_or_default();
                if let Some(name) = nul_param(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))) {
                    return Err(nul_rejection("query", &name));
                }
                Ok(ApiQuery(value))
            }
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

/// The page size a listing asked for: `default` when left out, else 1 to `max`.
pub(crate) fn page_limit(asked: Option<u32>, default: u32, max: u32) -> Result<u32, ApiError> {
    match asked {
        None => Ok(default),
        Some(n) if (1..=max).contains(&n) => Ok(n),
        Some(n) => Err(ApiError::BadRequest {
            code: ErrorCode::InvalidQuery,
            message: format!("limit {n} is out of range: ask for 1 to {max}"),
        }),
    }
}

/// A seq cursor (`after`) from a query: the store holds seqs up to [`MAX_STORED_INT`].
pub(crate) fn seq_cursor(after: u64) -> Result<u64, ApiError> {
    if after <= MAX_STORED_INT {
        Ok(after)
    } else {
        Err(ApiError::BadRequest {
            code: ErrorCode::InvalidQuery,
            message: format!("after {after} is larger than {MAX_STORED_INT}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_is_found_with_its_field() {
        assert_eq!(nul_field(br#"{"a": "x"}"#), None);
        assert_eq!(
            nul_field(br#"{"append": [{"blocks": [{"text": "a\u0000b"}]}]}"#).as_deref(),
            Some("append[0].blocks[0].text")
        );
        assert_eq!(
            nul_field(br#"{"args": {"k\u0000": 1}}"#).as_deref(),
            Some("(a key of) args")
        );
        // An escaped backslash before `u0000` is not a NUL.
        assert_eq!(nul_field(br#"{"a": "\\u0000"}"#), None);
        assert_eq!(nul_param([("pool", "a\0b")]).as_deref(), Some("pool"));
        assert_eq!(nul_param([("pool", "ab")]), None);
    }

    #[test]
    fn page_limits_default_and_refuse_what_is_out_of_range() {
        assert_eq!(page_limit(None, 100, 1000).unwrap(), 100);
        assert_eq!(page_limit(Some(1), 100, 1000).unwrap(), 1);
        assert_eq!(page_limit(Some(1000), 100, 1000).unwrap(), 1000);
        for bad in [0, 1001, u32::MAX] {
            assert!(
                matches!(
                    page_limit(Some(bad), 100, 1000),
                    Err(ApiError::BadRequest {
                        code: ErrorCode::InvalidQuery,
                        ..
                    })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn seq_cursors_stop_at_what_the_store_can_hold() {
        assert_eq!(seq_cursor(0).unwrap(), 0);
        assert_eq!(seq_cursor(MAX_STORED_INT).unwrap(), MAX_STORED_INT);
        assert!(seq_cursor(MAX_STORED_INT + 1).is_err());
    }
}
