//! Eval suites (issue 42), admin only: threads (and ranges of their turns) marked into a named
//! suite — by the console's "Add to eval suite" or the API — and the runs `ninetrix eval` stores,
//! the last of which the console shows as a table.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ninetrix_proto::api::{
    ErrorBody, ErrorCode, EvalMember, EvalMemberRequest, EvalRunRequest, EvalRunStored, EvalSuite,
    EvalSuiteList, MAX_STORED_INT,
};
use ninetrix_proto::replay::check_suite_name;

use crate::access::Admin;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath};
use crate::state::App;

use super::replays::{bad_field, check_candidate, check_key};

/// The most cases a run holds.
const MAX_CASES: usize = 1_000;
/// The longest case name (characters).
const MAX_CASE_NAME_CHARS: usize = 300;
/// The most failed checks a case keeps.
const MAX_FAILED_CHECKS: usize = 50;

/// The suite from the path, checked (400 `invalid_path` naming it).
fn suite_param(suite: &str) -> Result<(), ApiError> {
    check_suite_name(suite).map_err(|e| ApiError::BadRequest {
        code: ErrorCode::InvalidPath,
        message: format!("suite {suite:?}: {e}"),
    })
}

/// Checks a run's fields against the bounds its schema states.
fn check_run(req: &EvalRunRequest) -> Result<(), ApiError> {
    check_key("key", &req.key)?;
    check_candidate("candidate", &req.candidate)?;
    if req.cases.len() > MAX_CASES {
        return Err(bad_field(
            "cases",
            format!(
                "has {} cases; a run holds at most {MAX_CASES}",
                req.cases.len()
            ),
        ));
    }
    for (i, case) in req.cases.iter().enumerate() {
        let n = case.name.chars().count();
        if n > MAX_CASE_NAME_CHARS {
            return Err(bad_field(
                &format!("cases[{i}].name"),
                format!("is {n} characters; it may be at most {MAX_CASE_NAME_CHARS}"),
            ));
        }
        if case.failed_checks.len() > MAX_FAILED_CHECKS {
            return Err(bad_field(
                &format!("cases[{i}].failed_checks"),
                format!(
                    "has {} entries; keep at most {MAX_FAILED_CHECKS}",
                    case.failed_checks.len()
                ),
            ));
        }
        if !case.cost_usd.is_finite() || case.cost_usd < 0.0 {
            return Err(bad_field(
                &format!("cases[{i}].cost_usd"),
                format!("is {}; a cost is 0 or more US dollars", case.cost_usd),
            ));
        }
    }
    Ok(())
}

/// Every eval suite that has members or runs, by name, with its member count and its last run's
/// time and outcome.
#[utoipa::path(get, path = "/v1/evals", tag = "admin",
    responses((status = 200, body = EvalSuiteList, description = "the suites, by name"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn list_evals(
    _: Admin,
    State(app): State<App>,
) -> Result<axum::Json<EvalSuiteList>, ApiError> {
    Ok(axum::Json(app.store.eval_suites().await?))
}

/// One suite: the threads marked into it, in the order they were marked, and its last run.
#[utoipa::path(get, path = "/v1/evals/{suite}", tag = "admin",
    params(("suite" = String, Path, description = "The suite (lowercase letters, digits, `-`, `_`; at most 63)", pattern = "^[a-z0-9][a-z0-9_-]{0,62}$")),
    responses((status = 200, body = EvalSuite, description = "its members and last run"),
        (status = 400, body = ErrorBody, description = "`invalid_path`: not a suite name"),
        (status = 404, body = ErrorBody, description = "`not_found`: the suite has neither members nor runs"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn get_eval(
    _: Admin,
    State(app): State<App>,
    ApiPath(suite): ApiPath<String>,
) -> Result<axum::Json<EvalSuite>, ApiError> {
    suite_param(&suite)?;
    match app.store.eval_suite(suite.clone()).await? {
        Some(s) => Ok(axum::Json(s)),
        None => Err(ApiError::NotFound(format!(
            "eval suite `{suite}` has no members and no runs: mark a thread into it (POST /v1/evals/{suite}/members, or the console's \"Add to eval suite\")"
        ))),
    }
}

/// Mark a thread (and a range of its turns) into the suite, made when first named. Marking the
/// same thread and range again changes nothing and answers the member marked before.
#[utoipa::path(post, path = "/v1/evals/{suite}/members", tag = "admin",
    params(("suite" = String, Path, description = "The suite (lowercase letters, digits, `-`, `_`; at most 63)", pattern = "^[a-z0-9][a-z0-9_-]{0,62}$")),
    request_body = EvalMemberRequest,
    responses((status = 201, body = EvalMember, description = "marked now"),
        (status = 200, body = EvalMember, description = "marked before: nothing changed"),
        (status = 400, body = ErrorBody, description = "`invalid_path`: not a suite name; `invalid_body`: `from_turn` 0 or after `to_turn`"),
        (status = 404, body = ErrorBody, description = "`not_found`: no such thread"),
        (status = 422, body = ErrorBody, description = "`invalid_body`: wrong types, unknown fields"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn add_eval_member(
    _: Admin,
    State(app): State<App>,
    ApiPath(suite): ApiPath<String>,
    ApiJson(request): ApiJson<EvalMemberRequest>,
) -> Result<Response, ApiError> {
    suite_param(&suite)?;
    for (field, turn) in [
        ("from_turn", request.from_turn),
        ("to_turn", request.to_turn),
    ] {
        if turn == Some(0) {
            return Err(bad_field(field, "is 0; turns count from 1".to_string()));
        }
    }
    if let (Some(from), Some(to)) = (request.from_turn, request.to_turn)
        && from > to
    {
        return Err(bad_field(
            "from_turn",
            format!("({from}) is after `to_turn` ({to}): give a range first..=last"),
        ));
    }
    let (member, made) = app.store.add_eval_member(suite, request).await?;
    let status = if made {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, axum::Json(member)).into_response())
}

/// Remove a member from the suite (its thread is untouched).
#[utoipa::path(delete, path = "/v1/evals/{suite}/members/{id}", tag = "admin",
    params(("suite" = String, Path, description = "The suite", pattern = "^[a-z0-9][a-z0-9_-]{0,62}$"),
        ("id" = u64, Path, description = "The member's ID in the suite", maximum = 9223372036854775807_i64)),
    responses((status = 204, description = "removed"),
        (status = 400, body = ErrorBody, description = "`invalid_path`: not a suite name or an ID"),
        (status = 404, body = ErrorBody, description = "`not_found`: the suite has no such member"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn remove_eval_member(
    _: Admin,
    State(app): State<App>,
    ApiPath((suite, id)): ApiPath<(String, u64)>,
) -> Result<StatusCode, ApiError> {
    suite_param(&suite)?;
    if id > MAX_STORED_INT {
        return Err(ApiError::BadRequest {
            code: ErrorCode::InvalidPath,
            message: format!("member {id} is larger than {MAX_STORED_INT}"),
        });
    }
    app.store.remove_eval_member(suite, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Store one run of the suite (what `ninetrix eval` measured), once per key: a key stored before
/// answers that run (`duplicate: true`) and stores nothing.
#[utoipa::path(post, path = "/v1/evals/{suite}/runs", tag = "admin",
    params(("suite" = String, Path, description = "The suite (lowercase letters, digits, `-`, `_`; at most 63)", pattern = "^[a-z0-9][a-z0-9_-]{0,62}$")),
    request_body = EvalRunRequest,
    responses((status = 201, body = EvalRunStored, description = "stored"),
        (status = 200, body = EvalRunStored, description = "a run with this key was stored before: nothing new"),
        (status = 400, body = ErrorBody, description = "`invalid_path`: not a suite name; `invalid_body`: a field out of its bounds (the message names it)"),
        (status = 422, body = ErrorBody, description = "`invalid_body`: wrong types, unknown fields"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn store_eval_run(
    _: Admin,
    State(app): State<App>,
    ApiPath(suite): ApiPath<String>,
    ApiJson(request): ApiJson<EvalRunRequest>,
) -> Result<Response, ApiError> {
    suite_param(&suite)?;
    check_run(&request)?;
    let stored = app.store.store_eval_run(suite, request).await?;
    let status = if stored.duplicate {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, axum::Json(stored)).into_response())
}
