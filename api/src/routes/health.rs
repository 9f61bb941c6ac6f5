//! Health, readiness and the OpenAPI document. No token needed.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use ninetrix_proto::api::ErrorBody;

use crate::error::ApiError;
use crate::state::App;

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "meta", responses((status = 200, description = "up", body = Object)))]
pub(crate) async fn healthz() -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({ "status": "ok" }))
}

/// The database answers.
#[utoipa::path(get, path = "/readyz", tag = "meta",
    responses((status = 200, description = "ready", body = Object), (status = 503, body = ErrorBody, description = "`not_ready`: the database does not answer")))]
pub(crate) async fn readyz(
    State(app): State<App>,
) -> Result<axum::Json<serde_json::Value>, ApiError> {
    match app.store.ping().await {
        Ok(()) => Ok(axum::Json(
            serde_json::json!({ "status": "ready", "backend": app.store.backend() }),
        )),
        Err(e) => {
            tracing::warn!(error = %e, "not ready");
            Err(ApiError::NotReady)
        }
    }
}

/// This API's OpenAPI 3.1 document.
#[utoipa::path(get, path = "/openapi.json", tag = "meta", responses((status = 200, description = "the OpenAPI document", body = Object)))]
pub(crate) async fn openapi() -> impl IntoResponse {
    let body = super::OPENAPI_JSON
        .get()
        .cloned()
        .unwrap_or_else(|| "{}".into());
    ([(header::CONTENT_TYPE, "application/json")], body)
}
