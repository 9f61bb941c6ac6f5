//! The A2A server (issue 43, docs/a2a.md): each agent `up` recorded with a card is an A2A agent —
//! its card (`GET /a2a/{pool}/{agent}/.well-known/agent-card.json`, public) and its JSON-RPC
//! endpoint (`POST /a2a/{pool}/{agent}`, an A2A token of the pool or the admin token) — and
//! `POST /v1/tokens/a2a` mints the tokens. The endpoint parses, authorises and dispatches; what a
//! task is and what answers for it are `a2a_rules`' (pure); the tasks are stored by
//! `store/ops/a2a.rs`; a blocking send and a cancel wait on the thread's notifier as long-polls
//! do (`wait.rs`); streams follow the thread's events and its streamed reply text (`hub.rs`).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use a2a::{
    CancelTaskRequest, DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest, GetTaskRequest, JsonRpcId, JsonRpcResponse,
    ListTaskPushNotificationConfigsRequest, ListTaskPushNotificationConfigsResponse,
    ListTasksRequest, ListTasksResponse, Message, Part, SendMessageRequest, SendMessageResponse,
    StreamResponse, SubscribeToTaskRequest, TaskArtifactUpdateEvent, TaskPushNotificationConfig,
    TaskStatusUpdateEvent, error_code,
};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use ninetrix_proto::api::{A2aTokenRequest, A2aTokenResponse, CancelRequest, ErrorBody};
use ninetrix_proto::deltas::Delta;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::a2a_rules::{self, MAX_CONTEXT_ID_CHARS, MAX_MESSAGE_ID_CHARS, Method, Phase, RpcError};
use crate::access::{A2aCaller, Admin};
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath};
use crate::faults::crash;
use crate::routes::wait::{Look, long_poll};
use crate::state::App;
use crate::store::{A2aTask, Answered, Decided, NewTask, TaskAnswer, TaskFilter};

/// The longest a blocking `SendMessage` waits for its task to settle (the server's `--max-wait`
/// may cap it lower).
const SEND_WAIT: Duration = Duration::from_secs(60);
/// The longest `CancelTask` waits for the task to read `CANCELED`.
const CANCEL_WAIT: Duration = Duration::from_secs(10);
/// Most characters of a cancel's `by` (the cancel route's bound).
const MAX_CANCEL_BY: usize = 64;

/// The OpenAPI schemas of the endpoint's JSON-RPC envelope (the A2A payloads inside are
/// `a2a-lf`'s and have no OpenAPI schema of their own).
mod doc {
    use std::borrow::Cow;

    use utoipa::openapi::{RefOr, Schema};

    /// Reads a schema written as JSON.
    fn schema(value: serde_json::Value) -> RefOr<Schema> {
        serde_json::from_value(value).expect("a valid schema")
    }

    /// A JSON-RPC 2.0 request to the A2A endpoint.
    pub(crate) struct A2aRpcRequest;

    impl utoipa::PartialSchema for A2aRpcRequest {
        fn schema() -> RefOr<Schema> {
            schema(serde_json::json!({
                "type": "object",
                "description": "A JSON-RPC 2.0 request: `method` an A2A 1.0 method (`SendMessage`, …) or its 0.3 name (`message/send`, …), `params` its request as ProtoJSON (docs/a2a.md).",
                "required": ["jsonrpc", "method"],
                "additionalProperties": false,
                "properties": {
                    "jsonrpc": {"type": "string", "enum": ["2.0"]},
                    "id": {"oneOf": [
                        {"type": "string"},
                        {"type": "integer", "minimum": -9223372036854775808_i64, "maximum": 9223372036854775807_i64},
                        {"type": "null"}
                    ]},
                    "method": {"type": "string"},
                    "params": {"type": "object"}
                }
            }))
        }
    }

    impl utoipa::ToSchema for A2aRpcRequest {
        fn name() -> Cow<'static, str> {
            Cow::Borrowed("A2aRpcRequest")
        }
    }

    /// A JSON-RPC 2.0 response of the A2A endpoint.
    pub(crate) struct A2aRpcResponse;

    impl utoipa::PartialSchema for A2aRpcResponse {
        fn schema() -> RefOr<Schema> {
            schema(serde_json::json!({
                "type": "object",
                "description": "A JSON-RPC 2.0 response: `result` (the method's A2A response as ProtoJSON) or `error` (`{code, message, data}`, A2A's codes).",
                "required": ["jsonrpc"],
                "properties": {
                    "jsonrpc": {"type": "string"},
                    "id": {"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
                    "result": {"type": "object"},
                    "error": {"type": "object", "required": ["code", "message"]}
                }
            }))
        }
    }

    impl utoipa::ToSchema for A2aRpcResponse {
        fn name() -> Cow<'static, str> {
            Cow::Borrowed("A2aRpcResponse")
        }
    }

    /// A 400 of the A2A endpoint: a JSON-RPC error (`-32700`, `-32600`), or the API's own
    /// error for a malformed path.
    pub(crate) struct A2aBadRequest;

    impl utoipa::PartialSchema for A2aBadRequest {
        fn schema() -> RefOr<Schema> {
            schema(serde_json::json!({
                "anyOf": [
                    {"$ref": "#/components/schemas/A2aRpcResponse"},
                    {"$ref": "#/components/schemas/ErrorBody"}
                ]
            }))
        }
    }

    impl utoipa::ToSchema for A2aBadRequest {
        fn name() -> Cow<'static, str> {
            Cow::Borrowed("A2aBadRequest")
        }
    }

    /// An A2A agent card.
    pub(crate) struct A2aAgentCard;

    impl utoipa::PartialSchema for A2aAgentCard {
        fn schema() -> RefOr<Schema> {
            schema(serde_json::json!({
                "type": "object",
                "description": "An A2A 1.0 agent card (ProtoJSON): name, description, skills, supportedInterfaces, capabilities, security.",
                "required": ["name", "version", "supportedInterfaces", "capabilities"]
            }))
        }
    }

    impl utoipa::ToSchema for A2aAgentCard {
        fn name() -> Cow<'static, str> {
            Cow::Borrowed("A2aAgentCard")
        }
    }
}

/// A pool or agent name of the path, checked (400 `invalid_path`).
fn check_names(pool: &str, agent: &str) -> Result<(), ApiError> {
    crate::names::check_path("pool", pool)?;
    crate::names::check_path("agent", agent)
}

/// The agent card of agent `agent` of pool `pool`: who it is, its skills, where its JSON-RPC
/// endpoint is and what token it takes. Public (no token). 404 for an agent `up` did not record
/// with a card.
#[utoipa::path(get, path = "/a2a/{pool}/{agent}/.well-known/agent-card.json", tag = "a2a", operation_id = "a2a_agent_card",
    params(("pool" = String, Path, description = "The pool (a name as in the agentfile)", min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$"),
        ("agent" = String, Path, description = "The agent (a name as in the agentfile)", min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$")),
    responses((status = 200, body = doc::A2aAgentCard, description = "the agent card"),
        (status = 400, body = ErrorBody, description = "`invalid_path`: a malformed pool or agent name; `invalid_text`: a name with U+0000"),
        (status = 404, body = ErrorBody, description = "`not_found`: no A2A agent of that name in the pool (`up` records an agent's card)")))]
pub(crate) async fn card(
    State(app): State<App>,
    ApiPath((pool, agent)): ApiPath<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    check_names(&pool, &agent)?;
    let info = served(&app, &pool, &agent).await?;
    let base = match &app.public_url {
        Some(url) => url.clone(),
        None => format!(
            "http://{}",
            headers
                .get(axum::http::header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("localhost")
        ),
    };
    Ok(axum::Json(a2a_rules::card(&pool, &agent, &info, &base)).into_response())
}

/// The card info of an agent served over A2A, or 404.
async fn served(
    app: &App,
    pool: &str,
    agent: &str,
) -> Result<ninetrix_proto::api::AgentCardInfo, ApiError> {
    app.store
        .a2a_card(pool.to_string(), agent.to_string())
        .await?
        .flatten()
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "no A2A agent {agent} in pool {pool}: an agent is served once `ninetrix up` records it with its card"
            ))
        })
}

/// Mint an A2A token: it calls the A2A endpoints of one pool's agents (`POST /a2a/{pool}/…`) and
/// nothing else; its calls are recorded as `a2a:<name>`. Stateless (signed with the server's
/// secret): it works until it expires or the secret changes.
#[utoipa::path(post, path = "/v1/tokens/a2a", tag = "admin",
    request_body = A2aTokenRequest,
    responses((status = 201, body = A2aTokenResponse, description = "an A2A token for the pool"),
        (status = 422, body = ErrorBody, description = "`invalid_body`: wrong types, unknown or missing fields, out-of-range values; `invalid_text`: U+0000 in a text field (the message names it)"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn mint_a2a_token(
    _: Admin,
    State(app): State<App>,
    ApiJson(request): ApiJson<A2aTokenRequest>,
) -> Result<(StatusCode, axum::Json<A2aTokenResponse>), ApiError> {
    let expires_at =
        super::approvals::pool_token_expiry(&request.pool, &request.name, request.ttl_secs)?;
    let token = app
        .auth
        .a2a_token(&request.pool, &request.name, expires_at.timestamp());
    tracing::info!(pool = %request.pool, name = %request.name, "a2a token minted");
    Ok((
        StatusCode::CREATED,
        axum::Json(A2aTokenResponse {
            pool: request.pool,
            name: request.name,
            expires_at,
            token,
        }),
    ))
}

/// A JSON-RPC response of `status` with `body`.
fn reply(status: StatusCode, body: &JsonRpcResponse) -> Response {
    (status, axum::Json(body)).into_response()
}

/// A JSON-RPC error of `status` to request `id`.
fn refuse(status: StatusCode, id: JsonRpcId, error: &RpcError) -> Response {
    reply(status, &a2a_rules::error_body(id, error))
}

/// A store or server failure as the endpoint answers it: the message says what went wrong for
/// a client's own error (a refused cancel, a purged thread), and nothing of the server's.
fn failed(e: ApiError) -> RpcError {
    match &e {
        ApiError::Store(
            crate::store::StoreError::Database(_) | crate::store::StoreError::Corrupt(_),
        )
        | ApiError::Internal(_) => {
            tracing::error!(error = %e, "an A2A call failed");
            RpcError::new(
                error_code::INTERNAL_ERROR,
                "internal error; the server log has the details",
            )
        }
        _ => RpcError::new(error_code::UNSUPPORTED_OPERATION, e.parts().2),
    }
}

/// The request's `id`, method and params; an unreadable body is `-32700`, a body that is not a
/// JSON-RPC 2.0 request `-32600` (each HTTP 400, with the `id` when it could be read).
fn parse(body: &[u8]) -> Result<(JsonRpcId, String, Option<Value>), (JsonRpcId, RpcError)> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        let error = RpcError::new(
            error_code::PARSE_ERROR,
            format!("the body is not JSON: {e}"),
        );
        (JsonRpcId::Null, error)
    })?;
    let id = value
        .get("id")
        .and_then(|v| serde_json::from_value::<JsonRpcId>(v.clone()).ok())
        .unwrap_or(JsonRpcId::Null);
    let invalid = |message: String| {
        (
            id.clone(),
            RpcError::new(error_code::INVALID_REQUEST, message),
        )
    };
    let Value::Object(object) = &value else {
        return Err(invalid(
            "a JSON-RPC request is an object (batches are not served)".into(),
        ));
    };
    if let Some(extra) = object
        .keys()
        .find(|k| !matches!(k.as_str(), "jsonrpc" | "id" | "method" | "params"))
    {
        return Err(invalid(format!(
            "a JSON-RPC request has jsonrpc, id, method and params, not {extra:?}"
        )));
    }
    let request: a2a::JsonRpcRequest = serde_json::from_value(
        serde_json::json!({"jsonrpc": object.get("jsonrpc"), "id": object.get("id").cloned().unwrap_or(Value::Null), "method": object.get("method"), "params": object.get("params")}),
    )
    .map_err(|e| invalid(format!("not a JSON-RPC 2.0 request: {e}")))?;
    if request.jsonrpc != "2.0" {
        return Err(invalid("jsonrpc must be \"2.0\"".into()));
    }
    if request
        .params
        .as_ref()
        .is_some_and(|p| !p.is_object() && !p.is_null())
    {
        return Err(invalid("params must be an object".into()));
    }
    Ok((
        request.id,
        request.method,
        request.params.filter(|p| !p.is_null()),
    ))
}

/// The params of a method as its a2a-lf request type (`-32602` naming the field).
fn params<T: DeserializeOwned>(params: Option<Value>) -> Result<T, RpcError> {
    serde_json::from_value(params.unwrap_or_else(|| Value::Object(Default::default())))
        .map_err(|e| RpcError::invalid_params(format!("params: {e}")))
}

/// The JSON of an a2a-lf value.
fn json(value: impl Serialize) -> Result<Value, RpcError> {
    serde_json::to_value(value).map_err(|e| {
        RpcError::new(
            error_code::INTERNAL_ERROR,
            format!("unencodable answer: {e}"),
        )
    })
}

/// Who calls which agent, with which request ID.
#[derive(Clone)]
struct Call {
    app: App,
    pool: String,
    agent: String,
    /// `a2a:<token name>`.
    by: String,
    id: JsonRpcId,
}

/// The A2A endpoint of agent `agent` of pool `pool`: JSON-RPC 2.0 (A2A 1.0's binding, 0.3's
/// method names accepted), `SendStreamingMessage` and `SubscribeToTask` answered as Server-Sent
/// Events whose `data:` are JSON-RPC responses. A2A errors are HTTP 200 with a JSON-RPC error;
/// a body that is not JSON or not a JSON-RPC request is HTTP 400 with one (docs/a2a.md).
#[utoipa::path(post, path = "/a2a/{pool}/{agent}", tag = "a2a", operation_id = "a2a_rpc",
    params(("pool" = String, Path, description = "The pool (a name as in the agentfile)", min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$"),
        ("agent" = String, Path, description = "The agent (a name as in the agentfile)", min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$")),
    request_body = doc::A2aRpcRequest,
    responses((status = 200, description = "the JSON-RPC response (a result or an A2A error); for the streaming methods an event stream of JSON-RPC responses",
            content((doc::A2aRpcResponse = "application/json"), (String = "text/event-stream"))),
        (status = 400, body = doc::A2aBadRequest, description = "`-32700` (not JSON) or `-32600` (not a JSON-RPC 2.0 request) as a JSON-RPC error; or the API's `invalid_path` (a malformed pool or agent name)"),
        (status = 404, body = doc::A2aRpcResponse, description = "no A2A agent of that name in the pool (a JSON-RPC error, `-32600`)"),
        (status = 401, body = doc::A2aRpcResponse, description = "no valid bearer token (a JSON-RPC error, `-32600`)"),
        (status = 403, body = doc::A2aRpcResponse, description = "a token that may not call this pool's agents: another pool's A2A token, a runner, agent or approver token (a JSON-RPC error, `-32600`)")),
    security(("bearer" = [])))]
pub(crate) async fn rpc(
    caller: A2aCaller,
    State(app): State<App>,
    ApiPath((pool, agent)): ApiPath<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    check_names(&pool, &agent)?;
    let (id, method, raw) = match parse(&body) {
        Ok(parsed) => parsed,
        Err((id, e)) => return Ok(refuse(StatusCode::BAD_REQUEST, id, &e)),
    };
    if let Err(ApiError::NotFound(message)) = served(&app, &pool, &agent).await.map(drop) {
        let e = RpcError::new(error_code::INVALID_REQUEST, message);
        return Ok(refuse(StatusCode::NOT_FOUND, id, &e));
    }
    let version = headers
        .get(a2a::SVC_PARAM_VERSION)
        .map(|v| v.to_str().unwrap_or("?"));
    if !a2a_rules::version_ok(version) {
        let e = RpcError::new(
            error_code::VERSION_NOT_SUPPORTED,
            format!(
                "A2A-Version {:?} is not served: this endpoint speaks A2A {} (send that, or no A2A-Version)",
                version.unwrap_or_default(),
                a2a_rules::PROTOCOL_VERSION
            ),
        );
        return Ok(refuse(StatusCode::OK, id, &e));
    }
    let Some(method) = Method::parse(&method) else {
        let e = RpcError::new(
            error_code::METHOD_NOT_FOUND,
            format!(
                "no method {method:?}: the A2A 1.0 methods are SendMessage, SendStreamingMessage, GetTask, ListTasks, CancelTask, SubscribeToTask and the push notification config methods (docs/a2a.md)"
            ),
        );
        return Ok(refuse(StatusCode::OK, id, &e));
    };
    let call = Call {
        app,
        pool,
        agent,
        by: caller.by,
        id: id.clone(),
    };
    Ok(match dispatch(&call, method, raw).await {
        Ok(Answer::Result(result)) => reply(StatusCode::OK, &JsonRpcResponse::success(id, result)),
        Ok(Answer::Stream(response)) => response,
        Err(e) => refuse(StatusCode::OK, id, &e),
    })
}

/// What a method answers: a result, or an event stream.
enum Answer {
    Result(Value),
    Stream(Response),
}

/// Runs one method.
async fn dispatch(call: &Call, method: Method, raw: Option<Value>) -> Result<Answer, RpcError> {
    let result = match method {
        Method::SendMessage => {
            let request: SendMessageRequest = params(raw)?;
            let config = request.configuration.clone().unwrap_or_else(no_config);
            let wait = !config.return_immediately.unwrap_or(false);
            let task = send(call, request).await?;
            let task = if wait {
                settled(call, &task, SEND_WAIT, Phase::settled).await?
            } else {
                task
            };
            json(SendMessageResponse::Task(
                task.to_a2a(config.history_length),
            ))?
        }
        Method::SendStreamingMessage => {
            let request: SendMessageRequest = params(raw)?;
            let history = request
                .configuration
                .as_ref()
                .and_then(|c| c.history_length);
            let task = send(call, request).await?;
            return Ok(Answer::Stream(stream(call, task, history)));
        }
        Method::GetTask => {
            let request: GetTaskRequest = params(raw)?;
            json(
                find(call, &request.id)
                    .await?
                    .to_a2a(request.history_length),
            )?
        }
        Method::ListTasks => json(list(call, params(raw)?).await?)?,
        Method::CancelTask => {
            let request: CancelTaskRequest = params(raw)?;
            json(cancel(call, &request.id).await?.to_a2a(None))?
        }
        Method::SubscribeToTask => {
            let request: SubscribeToTaskRequest = params(raw)?;
            let task = find(call, &request.id).await?;
            if let Phase::Ended { .. } = task.phase {
                return Err(RpcError::new(
                    error_code::UNSUPPORTED_OPERATION,
                    format!(
                        "task {} is {}: it will not change any more; GetTask reads it",
                        task.task_id,
                        a2a_rules::state_name(&task.phase.state())
                    ),
                ));
            }
            return Ok(Answer::Stream(stream(call, task, None)));
        }
        Method::CreatePushConfig => json(create_push(call, params(raw)?).await?)?,
        Method::GetPushConfig => {
            let request: GetTaskPushNotificationConfigRequest = params(raw)?;
            find(call, &request.task_id).await?;
            let mut found = push_configs(call, &request.task_id, Some(request.id.clone())).await?;
            json(found.pop().ok_or_else(|| {
                RpcError::new(
                    error_code::TASK_NOT_FOUND,
                    format!(
                        "task {} has no push notification config {:?}",
                        request.task_id, request.id
                    ),
                )
            })?)?
        }
        Method::ListPushConfigs => {
            let request: ListTaskPushNotificationConfigsRequest = params(raw)?;
            find(call, &request.task_id).await?;
            let configs = push_configs(call, &request.task_id, None).await?;
            json(ListTaskPushNotificationConfigsResponse {
                configs,
                next_page_token: None,
            })?
        }
        Method::DeletePushConfig => {
            let request: DeleteTaskPushNotificationConfigRequest = params(raw)?;
            find(call, &request.task_id).await?;
            call.app
                .store
                .a2a_delete_push(request.task_id, request.id)
                .await
                .map_err(|e| failed(e.into()))?;
            serde_json::json!({})
        }
        Method::GetExtendedAgentCard => {
            return Err(RpcError::new(
                error_code::EXTENDED_CARD_NOT_CONFIGURED,
                "this agent has no extended card: its public card says everything",
            ));
        }
    };
    Ok(Answer::Result(result))
}

/// A send's configuration when it gives none.
fn no_config() -> a2a::SendMessageConfiguration {
    a2a::SendMessageConfiguration {
        accepted_output_modes: None,
        task_push_notification_config: None,
        history_length: None,
        return_immediately: None,
    }
}

/// The task `task_id` of the called agent (`-32001` when it has none).
async fn find(call: &Call, task_id: &str) -> Result<A2aTask, RpcError> {
    call.app
        .store
        .a2a_task(call.pool.clone(), call.agent.clone(), task_id.to_string())
        .await
        .map_err(|e| failed(e.into()))?
        .ok_or_else(|| RpcError::task_not_found(task_id))
}

/// Checks the IDs a message brings: `messageId` 1 to 124 characters (it makes the inbox's dedupe
/// key), `contextId` at most 196 (it makes the session key), neither with a control character.
fn check_ids(m: &Message) -> Result<(), RpcError> {
    let bad = |field: &str, value: &str, max: usize| {
        let n = value.chars().count();
        (n == 0 || n > max || value.chars().any(char::is_control)).then(|| {
            RpcError::invalid_params(format!(
                "message.{field} must have 1 to {max} characters and no control character"
            ))
        })
    };
    if let Some(e) = bad("messageId", &m.message_id, MAX_MESSAGE_ID_CHARS) {
        return Err(e);
    }
    if let Some(e) = m
        .context_id
        .as_deref()
        .and_then(|c| bad("contextId", c, MAX_CONTEXT_ID_CHARS))
    {
        return Err(e);
    }
    Ok(())
}

/// Files a message: a new task in its context, or (with `taskId`) the answer to a task waiting
/// for input. Answers the task as it stands right after (never waits).
async fn send(call: &Call, request: SendMessageRequest) -> Result<A2aTask, RpcError> {
    let mut message = request.message;
    check_ids(&message)?;
    if let Some(task_id) = message.task_id.clone() {
        return answer(call, &task_id, message).await;
    }
    let text = a2a_rules::message_text(&message)?;
    let push = request
        .configuration
        .and_then(|c| c.task_push_notification_config);
    if let Some(push) = &push {
        a2a_rules::check_push_url(&push.url)?;
    }
    let context_id = message
        .context_id
        .clone()
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    message.context_id = Some(context_id.clone());
    let new = NewTask {
        pool: call.pool.clone(),
        agent: call.agent.clone(),
        context_id,
        message,
        text,
        caller: call.by.clone(),
        push,
    };
    let (task, wake, created) = call
        .app
        .store
        .a2a_send(new, crash)
        .await
        .map_err(|e| failed(e.into()))?;
    if created {
        crash("a2a_send_after_commit");
        tracing::info!(task_id = %task.task_id, thread_id = %task.thread_id, seq = task.seq, by = %call.by, "a2a task filed");
        call.app.hub.wake(&wake);
    }
    Ok(task)
}

/// Records `message` as the answer to task `task_id`, which must wait for input (a message whose
/// `messageId` the task took before answers it as it stands).
async fn answer(call: &Call, task_id: &str, message: Message) -> Result<A2aTask, RpcError> {
    let task = find(call, task_id).await?;
    if message
        .context_id
        .as_deref()
        .is_some_and(|c| c != task.context_id)
    {
        return Err(RpcError::invalid_params(format!(
            "message.contextId is not task {task_id}'s context ({}): leave it out or send the task's",
            task.context_id
        )));
    }
    if task
        .messages
        .iter()
        .any(|m| m.message_id == message.message_id)
    {
        return Ok(task);
    }
    let Phase::InputRequired { asked, .. } = &task.phase else {
        return Err(RpcError::new(
            error_code::UNSUPPORTED_OPERATION,
            format!(
                "task {task_id} is {}, not waiting for input: send a new message (no taskId) in its context {} instead",
                a2a_rules::state_name(&task.phase.state()),
                task.context_id
            ),
        ));
    };
    let decision = a2a_rules::decision(asked, &message)?;
    let answer = TaskAnswer {
        pool: call.pool.clone(),
        agent: call.agent.clone(),
        task_id: task_id.to_string(),
        message,
        approval: asked.id,
        decision,
        by: call.by.clone(),
    };
    let answered = call
        .app
        .store
        .a2a_answer(answer)
        .await
        .map_err(|e| failed(e.into()))?;
    let decided = match answered {
        Answered::Repeated => return find(call, task_id).await,
        Answered::Decided(thread, decided) => (thread, *decided),
    };
    match decided {
        (_, Decided::Repeated(_)) => {}
        (thread, Decided::Recorded(approval)) => {
            tracing::info!(task_id, approval_id = %approval.id, by = %call.by, "a2a answer recorded");
            call.app.hub.notify(thread);
        }
        (_, Decided::Conflict(a) | Decided::Expired(a)) => {
            return Err(RpcError::new(
                error_code::UNSUPPORTED_OPERATION,
                format!(
                    "the request the task waited on is {} already{}: GetTask reads where the task stands",
                    a.status.as_str(),
                    a.decided_by
                        .map(|b| format!(" (by {b})"))
                        .unwrap_or_default()
                ),
            ));
        }
    }
    find(call, task_id).await
}

/// The task once `done` says so of its phase, or as it stands after `limit` (capped by the
/// server's `--max-wait`), woken by its thread's writes.
async fn settled(
    call: &Call,
    task: &A2aTask,
    limit: Duration,
    done: fn(&Phase) -> bool,
) -> Result<A2aTask, RpcError> {
    let notify = call.app.hub.subscribe(task.thread_id);
    let id = task.task_id.clone();
    long_poll(&call.app, notify, limit, || async {
        let now = find(call, &id)
            .await
            .map_err(|e| ApiError::Internal(e.message))?;
        Ok(if done(&now.phase) {
            Look::Ready(now)
        } else {
            Look::NotYet {
                answer: now,
                wake: None,
            }
        })
    })
    .await
    .map_err(failed)
}

/// Cancels the task's running turn as `POST /v1/threads/{id}/cancel` does (by `a2a:<name>`, once
/// per task) and waits up to 10 s for it to read `CANCELED`. A task still `SUBMITTED` or ended
/// is `-32002`.
async fn cancel(call: &Call, task_id: &str) -> Result<A2aTask, RpcError> {
    let task = find(call, task_id).await?;
    if matches!(task.phase, Phase::Submitted | Phase::Ended { .. }) {
        let why = match task.phase {
            Phase::Submitted => {
                "still SUBMITTED: it waits behind another turn of its context, and only a running turn is cancelled"
            }
            _ => "already ended",
        };
        return Err(RpcError::new(
            error_code::TASK_NOT_CANCELABLE,
            format!("task {task_id} cannot be cancelled: it is {why}"),
        ));
    }
    let by: String = call.by.chars().take(MAX_CANCEL_BY).collect();
    let request = CancelRequest {
        by: Some(by.clone()),
        reason: Some("cancelled over A2A".into()),
        dedupe_key: Some(format!("a2a-cancel:{task_id}")),
    };
    let (response, wake) = call
        .app
        .store
        .cancel(task.thread_id, request, by, crash)
        .await
        .map_err(|e| failed(e.into()))?;
    if !response.duplicate {
        tracing::info!(task_id, thread_id = %task.thread_id, by = %call.by, "a2a task cancel stored");
        call.app.hub.wake(&wake);
    }
    settled(call, &task, CANCEL_WAIT, |p| {
        matches!(p, Phase::Ended { .. })
    })
    .await
}

/// One page of the agent's tasks.
async fn list(call: &Call, request: ListTasksRequest) -> Result<ListTasksResponse, RpcError> {
    let limit = a2a_rules::page_size(request.page_size)?;
    let after = request
        .page_token
        .as_deref()
        .filter(|t| !t.is_empty())
        .map(a2a_rules::page_after)
        .transpose()?;
    let filter = TaskFilter {
        context_id: request.context_id.filter(|c| !c.is_empty()),
        state: request.status.filter(|s| *s != a2a::TaskState::Unspecified),
        after,
        limit,
    };
    let page = call
        .app
        .store
        .a2a_list(call.pool.clone(), call.agent.clone(), filter)
        .await
        .map_err(|e| failed(e.into()))?;
    let artifacts = request.include_artifacts.unwrap_or(false);
    let tasks = page
        .tasks
        .iter()
        .map(|t| {
            let mut task = t.to_a2a(request.history_length);
            if !artifacts {
                task.artifacts = None;
            }
            task
        })
        .collect();
    Ok(ListTasksResponse {
        tasks,
        next_page_token: page
            .more_after
            .as_deref()
            .map(a2a_rules::page_token)
            .unwrap_or_default(),
        page_size: limit as i32,
        total_size: i32::try_from(page.total).unwrap_or(i32::MAX),
    })
}

/// Stores a webhook of a task (`CreateTaskPushNotificationConfig`).
async fn create_push(
    call: &Call,
    config: TaskPushNotificationConfig,
) -> Result<TaskPushNotificationConfig, RpcError> {
    if config.task_id.is_empty() {
        return Err(RpcError::invalid_params("params.taskId is missing"));
    }
    find(call, &config.task_id).await?;
    a2a_rules::check_push_url(&config.url)?;
    call.app
        .store
        .a2a_put_push(config.task_id.clone(), config)
        .await
        .map_err(|e| failed(e.into()))
}

/// A task's webhooks (`id`: that one only).
async fn push_configs(
    call: &Call,
    task_id: &str,
    id: Option<String>,
) -> Result<Vec<TaskPushNotificationConfig>, RpcError> {
    call.app
        .store
        .a2a_push_configs(task_id.to_string(), id)
        .await
        .map_err(|e| failed(e.into()))
}

/// Where one SSE stream of a task is.
struct Following {
    call: Call,
    task: A2aTask,
    history_length: Option<i32>,
    /// Events to send before looking again.
    out: VecDeque<StreamResponse>,
    /// The first event (the task) was queued.
    started: bool,
    /// The stream ends once `out` is sent.
    ending: bool,
    deltas: tokio::sync::broadcast::Receiver<Delta>,
}

/// The stream of a task (docs/a2a.md, "Streams"): the task, then a status update at each change
/// of state and an artifact update of the `reply` per piece of text the model streams in the
/// task's turn; the last one, when the turn completes, carries the whole reply (`append:
/// false`, `lastChunk: true`: the stored reply is the truth, whatever pieces a slow reader
/// skipped). It ends after a final state or `INPUT_REQUIRED`. Keep-alive comments flow while
/// idle.
fn stream(call: &Call, task: A2aTask, history_length: Option<i32>) -> Response {
    // Watching starts before the first read, so no delta between the two is missed.
    let deltas = call.app.hub.watch_deltas(task.thread_id);
    let following = Following {
        call: call.clone(),
        task,
        history_length,
        out: VecDeque::new(),
        started: false,
        ending: false,
        deltas,
    };
    let keep_alive = KeepAlive::new().interval(call.app.keep_alive);
    Sse::new(updates(following))
        .keep_alive(keep_alive)
        .into_response()
}

/// The status update of a task as it stands.
fn status_update(task: &A2aTask) -> StreamResponse {
    let t = task.to_a2a(Some(0));
    StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
        task_id: t.id,
        context_id: t.context_id,
        status: t.status,
        metadata: t.metadata,
    })
}

/// An artifact update of the task's `reply`.
fn reply_update(task: &A2aTask, text: String, append: bool, last_chunk: bool) -> StreamResponse {
    StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
        task_id: task.task_id.clone(),
        context_id: task.context_id.clone(),
        artifact: a2a_rules::reply_artifact(&task.task_id, vec![Part::text(text)]),
        append: Some(append),
        last_chunk: Some(last_chunk),
        metadata: None,
    })
}

/// Queues what changed since the task was last seen (`f.task`) as it is `now`; `true` when the
/// stream ends.
fn changes(f: &mut Following, now: A2aTask) -> bool {
    for phase in f.task.phase.path_to(&now.phase) {
        if let Phase::Ended {
            ended: a2a_rules::Ended::Completed(reply),
            ..
        } = &phase
        {
            f.out
                .push_back(reply_update(&now, reply.clone(), false, true));
        }
        let passed = A2aTask {
            phase,
            ..now.clone()
        };
        f.out.push_back(status_update(&passed));
    }
    let ends = now.phase.settled();
    f.task = now;
    ends
}

/// The stream's events, each a JSON-RPC response of the request's ID.
fn updates(f: Following) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    futures_util::stream::unfold(f, |mut f| async move {
        loop {
            if let Some(next) = f.out.pop_front() {
                let event = serde_json::to_value(&next)
                    .map(|v| JsonRpcResponse::success(f.call.id.clone(), v))
                    .ok()
                    .and_then(|r| SseEvent::default().json_data(r).ok())
                    .unwrap_or_else(|| SseEvent::default().comment("unencodable update"));
                return Some((Ok(event), f));
            }
            if f.ending {
                return None;
            }
            if !f.started {
                f.started = true;
                f.out
                    .push_back(StreamResponse::Task(f.task.to_a2a(f.history_length)));
                f.ending = f.task.phase.settled();
                continue;
            }
            let notify = f.call.app.hub.subscribe(f.task.thread_id);
            let woken = notify.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            match find(&f.call, &f.task.task_id).await {
                Ok(now) => f.ending = changes(&mut f, now),
                Err(e) => {
                    tracing::warn!(task_id = %f.task.task_id, error = %e, "an A2A stream ends: its task is gone");
                    return None;
                }
            }
            if !f.out.is_empty() {
                continue;
            }
            let recheck = f.call.app.store.recheck_every();
            let turn = f.task.phase.turn();
            tokio::select! {
                () = woken => {}
                () = tokio::time::sleep(recheck.unwrap_or(Duration::MAX)), if recheck.is_some() => {}
                () = f.call.app.shutdown.cancelled() => return None,
                d = next_delta(&mut f.deltas) => {
                    if let (Some(d), Some(turn)) = (d, turn) && d.batch.turn_seq == turn && !d.batch.text.is_empty() {
                        let update = reply_update(&f.task, d.batch.text, true, false);
                        f.out.push_back(update);
                    }
                }
            }
        }
    })
}

/// The next delta of the thread (`None` when the channel closed or a slow reader skipped some:
/// the final artifact update carries the whole reply anyway).
async fn next_delta(rx: &mut tokio::sync::broadcast::Receiver<Delta>) -> Option<Delta> {
    match rx.recv().await {
        Ok(d) => Some(d),
        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => None,
        Err(tokio::sync::broadcast::error::RecvError::Closed) => std::future::pending().await,
    }
}
