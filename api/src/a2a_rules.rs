//! The A2A server's decisions (docs/a2a.md), as pure functions tested without I/O: which JSON-RPC
//! method a name is (A2A 1.0's and 0.3's), what state a task is in from its thread's events
//! ([`PhaseReader`]), the A2A `Task` that answers for it, a message's text, an answer to a
//! question or an approval, the agent card and the checks on what `up` records for it, the
//! listing's page token, and a push notification's headers. The wire types are `a2a-lf`'s; the
//! signature and retry schedule of a push are `ninetrix_proto::notify`'s.

use std::collections::{HashMap, HashSet};

use a2a::{
    AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Artifact, HttpAuthSecurityScheme,
    Message, Part, PartContent, Role, SecurityScheme, Task, TaskState, TaskStatus, error_code,
};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, TimeDelta, Utc};
use ninetrix_proto::api::{
    AgentCardInfo, ApprovalKind, CARD_NAME_CHARS, CARD_TEXT_CHARS, DecisionRequest, Event,
    SKILL_EXAMPLES, SKILL_TAGS, Verdict,
};
use ninetrix_proto::events::{Decoded, StoppedBy, TraceEvent};
use ninetrix_proto::{ApprovalId, ThreadId};
use serde_json::{Value, json};

/// Most characters of a `messageId`: the inbox's dedupe key `a2a:<messageId>` has at most 128.
pub(crate) const MAX_MESSAGE_ID_CHARS: usize = 124;
/// Most characters of a `contextId`: the session key `a2a:<contextId>` has at most 200.
pub(crate) const MAX_CONTEXT_ID_CHARS: usize = 196;
/// The name of the artifact that holds a task's reply.
pub(crate) const REPLY_ARTIFACT: &str = "reply";
/// The A2A protocol version served.
pub(crate) const PROTOCOL_VERSION: &str = a2a::VERSION;
/// Tasks one `ListTasks` page holds when the request does not say.
pub(crate) const DEFAULT_PAGE_SIZE: u32 = 50;
/// Most tasks one `ListTasks` page holds.
pub(crate) const MAX_PAGE_SIZE: u32 = 100;

/// A JSON-RPC error as the endpoint answers it: an A2A or JSON-RPC code and a message that names
/// the field or the state and what to do next.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub(crate) struct RpcError {
    /// The code (`a2a::error_code`).
    pub(crate) code: i32,
    /// What is wrong, for people.
    pub(crate) message: String,
}

impl RpcError {
    pub(crate) fn new(code: i32, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
        }
    }

    /// `-32602`: a parameter that cannot be used, named.
    pub(crate) fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(error_code::INVALID_PARAMS, message)
    }

    /// `-32001`: no such task for this agent.
    pub(crate) fn task_not_found(task: &str) -> Self {
        Self::new(
            error_code::TASK_NOT_FOUND,
            format!("task {task:?} not found for this agent; ListTasks lists its tasks"),
        )
    }

    /// The JSON-RPC error object (with A2A's `ErrorInfo` detail).
    pub(crate) fn to_jsonrpc(&self) -> a2a::JsonRpcError {
        a2a::A2AError::new(self.code, self.message.clone()).to_jsonrpc_error()
    }
}

/// The JSON-RPC response of an error to request `id`.
pub(crate) fn error_body(id: a2a::JsonRpcId, error: &RpcError) -> a2a::JsonRpcResponse {
    a2a::JsonRpcResponse::error(id, error.to_jsonrpc())
}

/// A method of the endpoint, by its A2A 1.0 name or its 0.3 alias.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Method {
    SendMessage,
    SendStreamingMessage,
    GetTask,
    ListTasks,
    CancelTask,
    SubscribeToTask,
    CreatePushConfig,
    GetPushConfig,
    ListPushConfigs,
    DeletePushConfig,
    GetExtendedAgentCard,
}

impl Method {
    /// The method a request names, or `None` (`-32601`).
    pub(crate) fn parse(name: &str) -> Option<Method> {
        use a2a::methods as m;
        Some(match name {
            m::SEND_MESSAGE | "message/send" => Method::SendMessage,
            m::SEND_STREAMING_MESSAGE | "message/stream" => Method::SendStreamingMessage,
            m::GET_TASK | "tasks/get" => Method::GetTask,
            m::LIST_TASKS | "tasks/list" => Method::ListTasks,
            m::CANCEL_TASK | "tasks/cancel" => Method::CancelTask,
            m::SUBSCRIBE_TO_TASK | "tasks/resubscribe" => Method::SubscribeToTask,
            m::CREATE_PUSH_CONFIG | "tasks/pushNotificationConfig/set" => Method::CreatePushConfig,
            m::GET_PUSH_CONFIG | "tasks/pushNotificationConfig/get" => Method::GetPushConfig,
            m::LIST_PUSH_CONFIGS | "tasks/pushNotificationConfig/list" => Method::ListPushConfigs,
            m::DELETE_PUSH_CONFIG | "tasks/pushNotificationConfig/delete" => {
                Method::DeletePushConfig
            }
            m::GET_EXTENDED_AGENT_CARD | "agent/getAuthenticatedExtendedCard" => {
                Method::GetExtendedAgentCard
            }
            _ => return None,
        })
    }
}

/// Whether an `A2A-Version` header (absent: `None`) is one this endpoint serves: 1.0, or none
/// (a 0.3 client names no version). Anything else is `-32009`.
pub(crate) fn version_ok(header: Option<&str>) -> bool {
    header.is_none_or(|v| v.trim() == PROTOCOL_VERSION)
}

/// A request to a person that a task's turn waits on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Asked {
    /// The request (decided through the approvals' store op).
    pub id: ApprovalId,
    /// A question, an approval or a budget raise.
    pub kind: ApprovalKind,
    /// The tool called.
    pub tool: String,
    /// The question, or a preview of the arguments.
    pub args: String,
    /// When it stops standing by itself.
    pub expires_at: DateTime<Utc>,
}

/// How a task's turn ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    /// With a reply.
    Completed(String),
    /// Not ok; the reply says why.
    Failed(String),
    /// Cancelled or interrupted: by whom.
    Canceled(String),
}

/// Where a task stands, read from its thread's events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The message waits in the inbox.
    Submitted,
    /// Its turn runs.
    Working {
        /// The turn.
        turn: u64,
    },
    /// Its turn waits for a person.
    InputRequired {
        /// The turn.
        turn: u64,
        /// What it waits for.
        asked: Asked,
    },
    /// Its turn ended.
    Ended {
        /// The turn.
        turn: u64,
        /// How.
        ended: Ended,
    },
}

impl Phase {
    /// The A2A state.
    pub(crate) fn state(&self) -> TaskState {
        match self {
            Phase::Submitted => TaskState::Submitted,
            Phase::Working { .. } => TaskState::Working,
            Phase::InputRequired { .. } => TaskState::InputRequired,
            Phase::Ended { ended, .. } => match ended {
                Ended::Completed(_) => TaskState::Completed,
                Ended::Failed(_) => TaskState::Failed,
                Ended::Canceled(_) => TaskState::Canceled,
            },
        }
    }

    /// The turn that takes the task, once it started.
    pub(crate) fn turn(&self) -> Option<u64> {
        match self {
            Phase::Submitted => None,
            Phase::Working { turn }
            | Phase::InputRequired { turn, .. }
            | Phase::Ended { turn, .. } => Some(*turn),
        }
    }

    /// Whether a blocking `SendMessage` answers now, and a stream ends: a final state or
    /// `INPUT_REQUIRED`.
    pub(crate) fn settled(&self) -> bool {
        matches!(self, Phase::Ended { .. } | Phase::InputRequired { .. })
    }

    /// The phases a stream reports going from `self` (what it last saw) to `now`: `now` when the
    /// state changed, preceded by `WORKING` when the task was last seen `SUBMITTED` and its turn
    /// has since started and already stopped or ended — a fast turn still worked, and a client
    /// that waits for `WORKING` sees it. Nothing when the state is the same.
    pub(crate) fn path_to(&self, now: &Phase) -> Vec<Phase> {
        if now.state() == self.state() {
            return Vec::new();
        }
        let mut path = Vec::new();
        if let (Phase::Submitted, Some(turn)) = (self, now.turn())
            && !matches!(now, Phase::Working { .. })
        {
            path.push(Phase::Working { turn });
        }
        path.push(now.clone());
        path
    }
}

/// Reads the phase of the task of inbox seq `seq` from its thread's events after the message was
/// filed, one page at a time ([`PhaseReader::feed`] says when no later event matters).
#[derive(Clone, Debug)]
pub(crate) struct PhaseReader {
    seq: u64,
    turn: Option<u64>,
    pending: Vec<Asked>,
    ended: Option<Ended>,
}

impl PhaseReader {
    pub(crate) fn new(seq: u64) -> Self {
        PhaseReader {
            seq,
            turn: None,
            pending: Vec::new(),
            ended: None,
        }
    }

    /// Takes the next event; `true` once the task's turn ended (stop reading).
    pub(crate) fn feed(&mut self, event: &Event) -> bool {
        if self.ended.is_some() {
            return true;
        }
        let Decoded::Known(decoded) = event.decode() else {
            return false;
        };
        match decoded {
            TraceEvent::TurnStarted(t) if t.seq == self.seq => {
                self.turn = Some(t.turn_seq);
                self.pending.clear();
            }
            TraceEvent::TurnResumed(t) if t.seq == self.seq => self.turn = Some(t.turn_seq),
            TraceEvent::ApprovalRequested(a) if self.turn.is_some() => {
                let timeout = TimeDelta::try_seconds(i64::try_from(a.timeout_secs).unwrap_or(0))
                    .unwrap_or_default();
                self.pending.push(Asked {
                    id: a.id,
                    kind: a.kind,
                    tool: a.tool,
                    args: a.args,
                    expires_at: event.at() + timeout,
                });
            }
            TraceEvent::ApprovalDecided(d) => self.pending.retain(|a| a.id != d.id),
            TraceEvent::ApprovalExpired(d) => self.pending.retain(|a| a.id != d.id),
            TraceEvent::TurnCompleted(t) if t.seq == self.seq => {
                self.turn = Some(t.turn_seq);
                self.ended = Some(match (t.stopped_by, t.ok) {
                    (Some(StoppedBy::Cancelled { by, .. }), _) => {
                        Ended::Canceled(format!("cancelled by {by}"))
                    }
                    (Some(StoppedBy::Interrupted { seq }), _) => {
                        Ended::Canceled(format!("interrupted by message {seq} of its context"))
                    }
                    (None, true) => Ended::Completed(t.reply),
                    (None, false) => Ended::Failed(t.reply),
                });
                return true;
            }
            _ => {}
        }
        false
    }

    /// The phase at `now` (a request past its expiry no longer waits).
    pub(crate) fn phase(&self, now: DateTime<Utc>) -> Phase {
        let Some(turn) = self.turn else {
            return Phase::Submitted;
        };
        if let Some(ended) = &self.ended {
            return Phase::Ended {
                turn,
                ended: ended.clone(),
            };
        }
        match self.pending.iter().find(|a| a.expires_at > now) {
            Some(asked) => Phase::InputRequired {
                turn,
                asked: asked.clone(),
            },
            None => Phase::Working { turn },
        }
    }
}

/// What a task is, besides its phase: its IDs, where its work is, and the messages it took.
#[derive(Clone, Debug)]
pub(crate) struct TaskFacts<'a> {
    pub(crate) task_id: &'a str,
    pub(crate) context_id: &'a str,
    pub(crate) thread_id: ThreadId,
    pub(crate) seq: u64,
    /// The user's messages, oldest first (the first, then each answer).
    pub(crate) messages: &'a [Message],
    /// When its state was last read.
    pub(crate) at: DateTime<Utc>,
}

/// A message of the agent in a task.
fn agent_message(f: &TaskFacts<'_>, id: String, text: String) -> Message {
    Message {
        message_id: id,
        context_id: Some(f.context_id.to_string()),
        task_id: Some(f.task_id.to_string()),
        role: Role::Agent,
        parts: vec![Part::text(text)],
        metadata: None,
        extensions: None,
        reference_task_ids: None,
    }
}

/// What the status message of a task waiting for a person says: the question, or the tool and
/// its arguments, and how to answer.
pub(crate) fn asking(asked: &Asked) -> String {
    match asked.kind {
        ApprovalKind::Question => format!(
            "The agent asks: {}\nAnswer with a message of this task (its text is the answer).",
            asked.args
        ),
        ApprovalKind::Approval => format!(
            "The agent waits for approval to call `{}` with {}. Answer with a message of this task: `approve` or `reject`, optionally followed by a reason (or a data part {{\"approve\": true|false, \"reason\": \"…\"}}).",
            asked.tool, asked.args
        ),
        ApprovalKind::Budget => format!(
            "The agent's budget is spent and it asks to raise it ({}). Answer with a message of this task: `approve` or `reject`, optionally followed by a reason.",
            asked.args
        ),
    }
}

/// The A2A task: its status (with a message saying what it waits for or why it ended), the
/// `reply` artifact once completed, the history (the user's messages and, once ended, the
/// reply; the last `history_length` of them when given, none for 0) and the metadata
/// `ninetrix: {thread_id, seq, turn}`.
pub(crate) fn task(f: &TaskFacts<'_>, phase: &Phase, history_length: Option<i32>) -> Task {
    let status_text = match phase {
        Phase::Submitted
        | Phase::Working { .. }
        | Phase::Ended {
            ended: Ended::Completed(_),
            ..
        } => None,
        Phase::InputRequired { asked, .. } => Some(asking(asked)),
        Phase::Ended {
            ended: Ended::Failed(why) | Ended::Canceled(why),
            ..
        } => Some(why.clone()),
    };
    let reply = match phase {
        Phase::Ended {
            ended: Ended::Completed(reply),
            ..
        } => Some(reply.clone()),
        _ => None,
    };
    let mut history: Vec<Message> = f.messages.to_vec();
    if let Phase::Ended { ended, .. } = phase {
        let (Ended::Completed(text) | Ended::Failed(text) | Ended::Canceled(text)) = ended;
        history.push(agent_message(
            f,
            format!("{}-reply", f.task_id),
            text.clone(),
        ));
    }
    let keep = history_length.map(|n| usize::try_from(n.max(0)).unwrap_or(0));
    if let Some(keep) = keep {
        history.drain(..history.len().saturating_sub(keep));
    }
    let metadata = HashMap::from([(
        "ninetrix".to_string(),
        json!({"thread_id": f.thread_id, "seq": f.seq, "turn": phase.turn()}),
    )]);
    Task {
        id: f.task_id.to_string(),
        context_id: f.context_id.to_string(),
        status: TaskStatus {
            state: phase.state(),
            message: status_text.map(|t| agent_message(f, format!("{}-status", f.task_id), t)),
            timestamp: Some(f.at),
        },
        artifacts: reply.map(|text| vec![reply_artifact(f.task_id, vec![Part::text(text)])]),
        history: (!history.is_empty()).then_some(history),
        metadata: Some(metadata),
    }
}

/// The task's `reply` artifact with these parts (`<task>-reply`).
pub(crate) fn reply_artifact(task_id: &str, parts: Vec<Part>) -> Artifact {
    Artifact {
        artifact_id: format!("{task_id}-reply"),
        name: Some(REPLY_ARTIFACT.to_string()),
        description: None,
        parts,
        metadata: None,
        extensions: None,
    }
}

/// The text a message files in the inbox: its text parts joined by blank lines, a data part as
/// its JSON. A `raw` or `url` part is `-32005`; no part, or no text at all, `-32602`.
pub(crate) fn message_text(m: &Message) -> Result<String, RpcError> {
    if m.parts.is_empty() {
        return Err(RpcError::invalid_params(
            "message.parts is empty: send at least one text or data part",
        ));
    }
    let mut pieces = Vec::with_capacity(m.parts.len());
    for (i, part) in m.parts.iter().enumerate() {
        match &part.content {
            PartContent::Text(t) => pieces.push(t.clone()),
            PartContent::Data(d) => pieces.push(d.to_string()),
            PartContent::Raw(_) | PartContent::Url(_) => {
                return Err(RpcError::new(
                    error_code::CONTENT_TYPE_NOT_SUPPORTED,
                    format!(
                        "message.parts[{i}] is a file (raw or url): this agent takes text and data parts only (text/plain, application/json)"
                    ),
                ));
            }
        }
    }
    let text = pieces.join("\n\n");
    if text.trim().is_empty() {
        return Err(RpcError::invalid_params(
            "message.parts hold no text: send the request as a text part",
        ));
    }
    if text.contains('\0') {
        return Err(RpcError::invalid_params(
            "message.parts hold U+0000, which cannot be stored: remove it",
        ));
    }
    Ok(text)
}

/// The decision an answer to a task waiting on `asked` makes: for a question, the message's
/// text is the answer; for an approval (or a budget raise), `approve`/`yes` or `reject`/`no`
/// (optionally followed by a reason), or a data part `{"approve": bool, "reason": "…"}`. A
/// rejection without a reason is recorded with one saying it came over A2A.
pub(crate) fn decision(asked: &Asked, m: &Message) -> Result<DecisionRequest, RpcError> {
    if asked.kind == ApprovalKind::Question {
        return Ok(DecisionRequest {
            decision: Verdict::Answer,
            reason: None,
            answer: Some(message_text(m)?),
            by: None,
        });
    }
    let data = m.parts.iter().find_map(|p| match &p.content {
        PartContent::Data(Value::Object(o)) if o.contains_key("approve") => Some(o),
        _ => None,
    });
    let (approve, reason) = match data {
        Some(o) => {
            let approve = o.get("approve").and_then(Value::as_bool).ok_or_else(|| {
                RpcError::invalid_params("message.parts[].data.approve must be true or false")
            })?;
            let reason = o.get("reason").and_then(Value::as_str).map(str::to_string);
            (approve, reason)
        }
        None => {
            let text = message_text(m)?;
            let trimmed = text.trim();
            let (word, rest) = trimmed
                .split_once(char::is_whitespace)
                .unwrap_or((trimmed, ""));
            let word = word.trim_end_matches([':', ',', '.', '!']).to_lowercase();
            let approve = match word.as_str() {
                "approve" | "approved" | "yes" => true,
                "reject" | "rejected" | "no" => false,
                _ => {
                    return Err(RpcError::invalid_params(format!(
                        "the task waits for approval to call `{}`: answer `approve` or `reject` (optionally followed by a reason), not {:?}",
                        asked.tool,
                        ninetrix_proto::text::preview(trimmed, 40)
                    )));
                }
            };
            let rest = rest.trim();
            (approve, (!rest.is_empty()).then(|| rest.to_string()))
        }
    };
    let reason = reason.filter(|r| !r.trim().is_empty());
    Ok(if approve {
        DecisionRequest {
            decision: Verdict::Approve,
            reason,
            answer: None,
            by: None,
        }
    } else {
        DecisionRequest {
            decision: Verdict::Reject,
            reason: Some(reason.unwrap_or_else(|| "rejected over A2A".to_string())),
            answer: None,
            by: None,
        }
    })
}

/// The agent card of `agent` of `pool` as served at `base` (docs/a2a.md, "Serving a pool's
/// agents").
pub(crate) fn card(pool: &str, agent: &str, info: &AgentCardInfo, base: &str) -> AgentCard {
    let name = info
        .display_name
        .clone()
        .unwrap_or_else(|| agent.to_string());
    let description = info
        .description
        .clone()
        .unwrap_or_else(|| format!("ninetrix agent {agent} of pool {pool}"));
    let mut skills: Vec<AgentSkill> = info
        .skills
        .iter()
        .map(|s| AgentSkill {
            id: s.id.clone(),
            name: s.name.clone(),
            description: s.description.clone(),
            tags: s.tags.clone(),
            examples: (!s.examples.is_empty()).then(|| s.examples.clone()),
            input_modes: None,
            output_modes: None,
            security_requirements: None,
        })
        .collect();
    if skills.is_empty() {
        skills.push(AgentSkill {
            id: agent.to_string(),
            name: name.clone(),
            description: description.clone(),
            tags: Vec::new(),
            examples: None,
            input_modes: None,
            output_modes: None,
            security_requirements: None,
        });
    }
    let mut interface = AgentInterface::new(
        format!("{}/a2a/{pool}/{agent}", base.trim_end_matches('/')),
        a2a::TRANSPORT_PROTOCOL_JSONRPC,
    );
    interface.protocol_version = PROTOCOL_VERSION.to_string();
    AgentCard {
        name,
        description,
        version: env!("CARGO_PKG_VERSION").to_string(),
        supported_interfaces: vec![interface],
        capabilities: AgentCapabilities {
            streaming: Some(true),
            push_notifications: Some(true),
            extensions: None,
            extended_agent_card: Some(false),
        },
        default_input_modes: vec!["text/plain".into(), "application/json".into()],
        default_output_modes: vec!["text/plain".into()],
        skills,
        provider: None,
        documentation_url: None,
        icon_url: None,
        security_schemes: Some(HashMap::from([(
            "bearer".to_string(),
            SecurityScheme::HttpAuth(HttpAuthSecurityScheme {
                scheme: "Bearer".into(),
                description: Some("an A2A token of the pool (`ninetrix a2a token`)".into()),
                bearer_format: None,
            }),
        )])),
        security_requirements: Some(vec![HashMap::from([("bearer".to_string(), Vec::new())])]),
        signatures: None,
    }
}

/// Checks what `up` records for an agent's card (the limits of `AgentCardInfo`'s docs): the
/// first field out of bounds, named (`card.skills[2].id`), with the rule.
pub(crate) fn check_card(info: &AgentCardInfo) -> Result<(), String> {
    let text = |field: String, value: &str, min: usize, max: usize| {
        let n = value.chars().count();
        if n < min || n > max || value.contains('\0') {
            Err(format!(
                "{field} must have {min} to {max} characters (without U+0000), not {n}"
            ))
        } else {
            Ok(())
        }
    };
    if let Some(name) = &info.display_name {
        text("card.display_name".into(), name, 1, CARD_NAME_CHARS)?;
    }
    if let Some(description) = &info.description {
        text("card.description".into(), description, 0, CARD_TEXT_CHARS)?;
    }
    if info.skills.len() > ninetrix_proto::api::MAX_SKILLS {
        return Err(format!(
            "card.skills has {} skills; at most {}",
            info.skills.len(),
            ninetrix_proto::api::MAX_SKILLS
        ));
    }
    let mut ids = HashSet::new();
    for (i, s) in info.skills.iter().enumerate() {
        if !ninetrix_proto::api::is_skill_id(&s.id) {
            return Err(format!(
                "card.skills[{i}].id {:?} is not a skill ID: 1 to 64 of [a-z0-9_-], starting with a letter or digit",
                crate::names::shown(&s.id)
            ));
        }
        if !ids.insert(s.id.as_str()) {
            return Err(format!(
                "card.skills[{i}].id {:?} is used twice: a skill's ID is unique within the agent",
                s.id
            ));
        }
        text(
            format!("card.skills[{i}].name"),
            &s.name,
            1,
            CARD_NAME_CHARS,
        )?;
        text(
            format!("card.skills[{i}].description"),
            &s.description,
            0,
            CARD_TEXT_CHARS,
        )?;
        for (field, list, most, max) in [
            ("tags", &s.tags, SKILL_TAGS.0, SKILL_TAGS.1),
            ("examples", &s.examples, SKILL_EXAMPLES.0, SKILL_EXAMPLES.1),
        ] {
            if list.len() > most {
                return Err(format!(
                    "card.skills[{i}].{field} has {} items; at most {most}",
                    list.len()
                ));
            }
            for (j, item) in list.iter().enumerate() {
                text(format!("card.skills[{i}].{field}[{j}]"), item, 0, max)?;
            }
        }
    }
    Ok(())
}

/// The opaque `pageToken` of the page after the task `last`.
pub(crate) fn page_token(last: &str) -> String {
    URL_SAFE_NO_PAD.encode(last.as_bytes())
}

/// The task a `pageToken` continues after (`-32602` for one this server did not make).
pub(crate) fn page_after(token: &str) -> Result<String, RpcError> {
    URL_SAFE_NO_PAD
        .decode(token)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .filter(|t| uuid::Uuid::parse_str(t).is_ok())
        .ok_or_else(|| {
            RpcError::invalid_params(
                "pageToken is not one this server gave: pass the nextPageToken of the previous page, or none for the first",
            )
        })
}

/// A `pageSize` as a number of tasks: 1 to 100, 50 when left out. An explicit 0 is refused, as
/// the official SDK's server and the A2A TCK do.
pub(crate) fn page_size(asked: Option<i32>) -> Result<u32, RpcError> {
    match asked {
        None => Ok(DEFAULT_PAGE_SIZE),
        Some(n) if (1..=MAX_PAGE_SIZE as i32).contains(&n) => Ok(n as u32),
        Some(n) => Err(RpcError::invalid_params(format!(
            "pageSize must be 1 to {MAX_PAGE_SIZE}, not {n}"
        ))),
    }
}

/// A state's ProtoJSON name (`TASK_STATE_COMPLETED`): how it is stored and named in a push's
/// delivery ID.
pub(crate) fn state_name(state: &TaskState) -> String {
    serde_json::to_value(state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Whether a state is one no task leaves.
pub(crate) fn final_state_name(name: &str) -> bool {
    serde_json::from_value::<TaskState>(Value::String(name.to_string()))
        .is_ok_and(|s| s.is_terminal())
}

/// Checks a webhook's URL: `http://` or `https://` and a host.
pub(crate) fn check_push_url(url: &str) -> Result<(), RpcError> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    match rest {
        Some(r) if !r.is_empty() && !r.starts_with('/') && url.len() <= 2048 => Ok(()),
        _ => Err(RpcError::invalid_params(format!(
            "the push notification url must be an http:// or https:// URL (at most 2048 characters), not {:?}",
            ninetrix_proto::text::preview(url, 60)
        ))),
    }
}

/// The headers of one push of a task's state (docs/a2a.md, "Push notifications"): the config's
/// token as `X-A2A-Notification-Token` and the HMAC signature keyed by it, the timestamp, the
/// delivery ID `<task>:<state>` (the same on every attempt), and `Authorization` for a `Bearer`
/// authentication with credentials.
pub(crate) fn push_headers(
    token: Option<&str>,
    bearer: Option<&str>,
    delivery: &str,
    timestamp: i64,
    body: &[u8],
) -> Vec<(&'static str, String)> {
    let mut headers = vec![
        ("Content-Type", "application/json".to_string()),
        ("X-Ninetrix-Timestamp", timestamp.to_string()),
        ("X-Ninetrix-Delivery", delivery.to_string()),
    ];
    if let Some(token) = token.filter(|t| !t.is_empty()) {
        headers.push(("X-A2A-Notification-Token", token.to_string()));
        headers.push((
            "X-Ninetrix-Signature",
            ninetrix_proto::notify::signature(token.as_bytes(), timestamp, body),
        ));
    }
    if let Some(credentials) = bearer.filter(|c| !c.is_empty()) {
        headers.push(("Authorization", format!("Bearer {credentials}")));
    }
    headers
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone as _;
    use ninetrix_proto::api::SkillInfo;
    use ninetrix_proto::events::{
        ApprovalDecided, ApprovalRequested, TurnCompleted, TurnResumed, TurnStarted,
    };

    use super::*;

    #[test]
    fn a_stream_reports_working_for_a_turn_that_started_and_ended_between_two_looks() {
        let done = Phase::Ended {
            turn: 3,
            ended: Ended::Completed("hi".into()),
        };
        assert_eq!(
            Phase::Submitted.path_to(&done),
            [Phase::Working { turn: 3 }, done.clone()]
        );
        // Seen working already: only the end.
        assert_eq!(
            Phase::Working { turn: 3 }.path_to(&done),
            std::slice::from_ref(&done)
        );
        // No change, nothing; a turn just started, just WORKING.
        assert!(done.path_to(&done).is_empty());
        assert_eq!(
            Phase::Submitted.path_to(&Phase::Working { turn: 3 }),
            [Phase::Working { turn: 3 }]
        );
    }

    fn at(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + secs, 0).unwrap()
    }

    fn event(seq: u64, e: TraceEvent, secs: i64) -> Event {
        let new = e.to_new_event(at(secs));
        Event {
            seq,
            kind: new.kind,
            data: new.data,
            epoch: 1,
            created_at: at(secs),
        }
    }

    fn completed(turn_seq: u64, seq: u64, ok: bool, stopped_by: Option<StoppedBy>) -> TraceEvent {
        TraceEvent::TurnCompleted(TurnCompleted {
            turn_seq,
            seq,
            ok,
            reply: "the reply".into(),
            usage: Default::default(),
            duration_ms: 1.0,
            stopped_by,
        })
    }

    fn requested(id: ApprovalId, kind: ApprovalKind) -> TraceEvent {
        TraceEvent::ApprovalRequested(ApprovalRequested {
            id,
            kind,
            tool: "refund".into(),
            args: "{\"amount\": 5}".into(),
            timeout_secs: 60,
        })
    }

    fn read(seq: u64, events: &[Event], now: DateTime<Utc>) -> (Phase, usize) {
        let mut r = PhaseReader::new(seq);
        let mut read = 0;
        for e in events {
            read += 1;
            if r.feed(e) {
                break;
            }
        }
        (r.phase(now), read)
    }

    #[test]
    fn a_task_is_submitted_then_working_then_waits_then_ends_with_its_reply() {
        let started = |turn_seq, seq| {
            TraceEvent::TurnStarted(TurnStarted {
                turn_seq,
                seq,
                input: String::new(),
            })
        };
        let id = ApprovalId::new_v7();
        let mut events = vec![
            // Another message's turn first: not this task's.
            event(1, started(1, 1), 0),
            event(2, completed(1, 1, true, None), 1),
        ];
        assert_eq!(read(2, &events, at(2)).0, Phase::Submitted);
        events.push(event(3, started(2, 2), 2));
        assert_eq!(read(2, &events, at(3)).0, Phase::Working { turn: 2 });
        events.push(event(4, requested(id, ApprovalKind::Approval), 3));
        let (waiting, _) = read(2, &events, at(4));
        let Phase::InputRequired { turn: 2, asked } = &waiting else {
            panic!("{waiting:?}")
        };
        assert_eq!((asked.id, asked.tool.as_str()), (id, "refund"));
        assert!(asking(asked).contains("`refund` with {\"amount\": 5}"));
        // Past its expiry it no longer waits (nobody posts an expiry).
        assert_eq!(read(2, &events, at(64)).0, Phase::Working { turn: 2 });
        events.push(event(
            5,
            TraceEvent::ApprovalDecided(ApprovalDecided {
                id,
                kind: ApprovalKind::Approval,
                tool: "refund".into(),
                status: ninetrix_proto::api::ApprovalStatus::Approved,
                by: "a2a:crm".into(),
                reason: None,
                answer: None,
            }),
            4,
        ));
        assert_eq!(read(2, &events, at(5)).0, Phase::Working { turn: 2 });
        events.push(event(6, completed(2, 2, true, None), 5));
        events.push(event(7, started(3, 3), 6));
        let (done, read_events) = read(2, &events, at(7));
        assert_eq!(
            done,
            Phase::Ended {
                turn: 2,
                ended: Ended::Completed("the reply".into())
            }
        );
        assert_eq!(read_events, 6, "reading stops at the task's turn_completed");
        assert_eq!(done.state(), TaskState::Completed);
        assert!(done.settled());
    }

    #[test]
    fn a_turn_not_ok_fails_and_a_stopped_one_is_canceled() {
        let resumed = TraceEvent::TurnResumed(TurnResumed {
            turn_seq: 4,
            seq: 9,
        });
        let cases = [
            (completed(4, 9, false, None), TaskState::Failed),
            (
                completed(
                    4,
                    9,
                    false,
                    Some(StoppedBy::Cancelled {
                        seq: 10,
                        by: "a2a:crm".into(),
                    }),
                ),
                TaskState::Canceled,
            ),
            (
                completed(4, 9, false, Some(StoppedBy::Interrupted { seq: 11 })),
                TaskState::Canceled,
            ),
        ];
        for (end, state) in cases {
            let events = [event(1, resumed.clone(), 0), event(2, end, 1)];
            let (phase, _) = read(9, &events, at(2));
            assert_eq!(phase.state(), state);
            assert_eq!(phase.turn(), Some(4));
        }
        // A resumed turn is working.
        assert_eq!(
            read(9, &[event(1, resumed, 0)], at(1)).0,
            Phase::Working { turn: 4 }
        );
    }

    fn user(parts: Vec<Part>) -> Message {
        Message {
            message_id: "m1".into(),
            context_id: None,
            task_id: None,
            role: Role::User,
            parts,
            metadata: None,
            extensions: None,
            reference_task_ids: None,
        }
    }

    #[test]
    fn the_task_has_its_reply_artifact_history_and_where_to_look() {
        let thread = ThreadId::new_v7();
        let messages = [user(vec![Part::text("hello")])];
        let f = TaskFacts {
            task_id: "t1",
            context_id: "c1",
            thread_id: thread,
            seq: 3,
            messages: &messages,
            at: at(0),
        };
        let done = Phase::Ended {
            turn: 2,
            ended: Ended::Completed("hi there".into()),
        };
        let t = task(&f, &done, None);
        assert_eq!(t.status.state, TaskState::Completed);
        let artifact = &t.artifacts.as_ref().unwrap()[0];
        assert_eq!(artifact.artifact_id, "t1-reply");
        assert_eq!(artifact.name.as_deref(), Some(REPLY_ARTIFACT));
        assert_eq!(artifact.parts[0].as_text(), Some("hi there"));
        let history = t.history.as_ref().unwrap();
        assert_eq!(history.len(), 2);
        assert_eq!(history[1].role, Role::Agent);
        assert_eq!(
            t.metadata.as_ref().unwrap()["ninetrix"],
            json!({"thread_id": thread, "seq": 3, "turn": 2})
        );
        assert_eq!(task(&f, &done, Some(1)).history.unwrap().len(), 1);
        assert!(task(&f, &done, Some(0)).history.is_none());
        let submitted = task(&f, &Phase::Submitted, None);
        assert!(submitted.artifacts.is_none() && submitted.status.message.is_none());
        assert_eq!(
            submitted.history.unwrap().len(),
            1,
            "the reply comes once ended"
        );
        let failed = task(
            &f,
            &Phase::Ended {
                turn: 2,
                ended: Ended::Failed("the model failed".into()),
            },
            None,
        );
        assert!(failed.artifacts.is_none());
        assert_eq!(
            failed.status.message.unwrap().parts[0].as_text(),
            Some("the model failed")
        );
    }

    #[test]
    fn a_message_files_its_text_and_data_and_refuses_files() {
        let m = user(vec![
            Part::text("one"),
            Part::data(json!({"a": 1})),
            Part::text("two"),
        ]);
        assert_eq!(message_text(&m).unwrap(), "one\n\n{\"a\":1}\n\ntwo");
        for part in [Part::raw(vec![1]), Part::url("https://x.example/f.pdf")] {
            let err = message_text(&user(vec![Part::text("see"), part])).unwrap_err();
            assert_eq!(err.code, error_code::CONTENT_TYPE_NOT_SUPPORTED);
            assert!(err.message.contains("parts[1]"), "{err}");
        }
        assert_eq!(
            message_text(&user(vec![])).unwrap_err().code,
            error_code::INVALID_PARAMS
        );
        assert_eq!(
            message_text(&user(vec![Part::text("  ")]))
                .unwrap_err()
                .code,
            error_code::INVALID_PARAMS
        );
    }

    #[test]
    fn an_answer_approves_rejects_or_answers() {
        let asked = |kind| Asked {
            id: ApprovalId::new_v7(),
            kind,
            tool: "refund".into(),
            args: "{}".into(),
            expires_at: at(60),
        };
        let approval = asked(ApprovalKind::Approval);
        let d = decision(&approval, &user(vec![Part::text("Yes")])).unwrap();
        assert_eq!((d.decision, d.reason), (Verdict::Approve, None));
        let d = decision(
            &approval,
            &user(vec![Part::text("approve: checked the order")]),
        )
        .unwrap();
        assert_eq!(
            (d.decision, d.reason.as_deref()),
            (Verdict::Approve, Some("checked the order"))
        );
        let d = decision(&approval, &user(vec![Part::text("no too much")])).unwrap();
        assert_eq!(
            (d.decision, d.reason.as_deref()),
            (Verdict::Reject, Some("too much"))
        );
        let d = decision(&approval, &user(vec![Part::text("reject")])).unwrap();
        assert_eq!(
            (d.decision, d.reason.as_deref()),
            (Verdict::Reject, Some("rejected over A2A"))
        );
        let d = decision(
            &approval,
            &user(vec![Part::data(
                json!({"approve": false, "reason": "fraud"}),
            )]),
        )
        .unwrap();
        assert_eq!(
            (d.decision, d.reason.as_deref()),
            (Verdict::Reject, Some("fraud"))
        );
        let err = decision(&approval, &user(vec![Part::text("maybe later")])).unwrap_err();
        assert_eq!(err.code, error_code::INVALID_PARAMS);
        assert!(err.message.contains("approve") && err.message.contains("refund"));
        let err =
            decision(&approval, &user(vec![Part::data(json!({"approve": "y"}))])).unwrap_err();
        assert!(err.message.contains("approve must be true or false"));
        let d = decision(
            &asked(ApprovalKind::Question),
            &user(vec![Part::text("blue")]),
        )
        .unwrap();
        assert_eq!(
            (d.decision, d.answer.as_deref()),
            (Verdict::Answer, Some("blue"))
        );
    }

    #[test]
    fn methods_have_their_one_and_zero_three_names() {
        for (one, zero) in [
            ("SendMessage", "message/send"),
            ("SendStreamingMessage", "message/stream"),
            ("GetTask", "tasks/get"),
            ("ListTasks", "tasks/list"),
            ("CancelTask", "tasks/cancel"),
            ("SubscribeToTask", "tasks/resubscribe"),
            (
                "CreateTaskPushNotificationConfig",
                "tasks/pushNotificationConfig/set",
            ),
            (
                "GetTaskPushNotificationConfig",
                "tasks/pushNotificationConfig/get",
            ),
            (
                "ListTaskPushNotificationConfigs",
                "tasks/pushNotificationConfig/list",
            ),
            (
                "DeleteTaskPushNotificationConfig",
                "tasks/pushNotificationConfig/delete",
            ),
        ] {
            assert!(Method::parse(one).is_some(), "{one}");
            assert_eq!(Method::parse(one), Method::parse(zero), "{zero}");
        }
        assert_eq!(Method::parse("sendMessage"), None);
        assert!(version_ok(None) && version_ok(Some("1.0")));
        assert!(!version_ok(Some("0.3")) && !version_ok(Some("2.0")));
    }

    #[test]
    fn the_card_says_who_the_agent_is_and_where_to_reach_it() {
        let info = AgentCardInfo {
            display_name: None,
            description: None,
            skills: vec![],
        };
        let c = card("shop", "clerk", &info, "https://agents.example.com/");
        assert_eq!(c.name, "clerk");
        assert_eq!(c.description, "ninetrix agent clerk of pool shop");
        assert_eq!(c.skills.len(), 1);
        assert_eq!(c.skills[0].id, "clerk");
        assert_eq!(
            c.supported_interfaces[0].url,
            "https://agents.example.com/a2a/shop/clerk"
        );
        assert_eq!(c.supported_interfaces[0].protocol_binding, "JSONRPC");
        assert_eq!(c.capabilities.streaming, Some(true));
        assert!(c.security_schemes.unwrap().contains_key("bearer"));
    }

    #[test]
    fn a_card_out_of_bounds_is_refused_naming_the_field() {
        let skill = |id: &str| SkillInfo {
            id: id.into(),
            name: "A skill".into(),
            description: String::new(),
            tags: vec![],
            examples: vec![],
        };
        let ok = AgentCardInfo {
            display_name: Some("Clerk".into()),
            description: Some("Sells".into()),
            skills: vec![skill("sell"), skill("refund-2")],
        };
        assert_eq!(check_card(&ok), Ok(()));
        let refused = |info: AgentCardInfo, field: &str| {
            let err = check_card(&info).unwrap_err();
            assert!(err.contains(field), "{err}");
        };
        refused(
            AgentCardInfo {
                skills: vec![skill("Sell")],
                ..ok.clone()
            },
            "card.skills[0].id",
        );
        refused(
            AgentCardInfo {
                skills: vec![skill("a"), skill("a")],
                ..ok.clone()
            },
            "card.skills[1].id",
        );
        refused(
            AgentCardInfo {
                skills: vec![skill("a"); 33],
                ..ok.clone()
            },
            "card.skills",
        );
        refused(
            AgentCardInfo {
                display_name: Some(String::new()),
                ..ok.clone()
            },
            "card.display_name",
        );
        let mut tagged = skill("t");
        tagged.tags = vec!["x".into(); 17];
        refused(
            AgentCardInfo {
                skills: vec![tagged],
                ..ok.clone()
            },
            "card.skills[0].tags",
        );
        let mut long = skill("l");
        long.examples = vec!["e".repeat(1001)];
        refused(
            AgentCardInfo {
                skills: vec![long],
                ..ok
            },
            "card.skills[0].examples[0]",
        );
    }

    #[test]
    fn pages_and_their_tokens() {
        let id = uuid::Uuid::now_v7().to_string();
        assert_eq!(page_after(&page_token(&id)).unwrap(), id);
        assert!(page_after("not-a-token").is_err());
        assert_eq!(page_size(None).unwrap(), 50);
        assert_eq!(page_size(Some(100)).unwrap(), 100);
        assert!(page_size(Some(101)).is_err() && page_size(Some(-1)).is_err());
        assert!(page_size(Some(0)).is_err(), "0 is not a page size");
    }

    #[test]
    fn a_push_is_signed_with_its_token_and_named_by_task_and_state() {
        let body = br#"{"task":{}}"#;
        let headers = push_headers(
            Some("tok"),
            Some("cred"),
            "t1:TASK_STATE_WORKING",
            1_700_000_000,
            body,
        );
        let get = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(get("X-A2A-Notification-Token").as_deref(), Some("tok"));
        assert_eq!(
            get("X-Ninetrix-Signature").unwrap(),
            ninetrix_proto::notify::signature(b"tok", 1_700_000_000, body)
        );
        assert_eq!(
            get("X-Ninetrix-Delivery").as_deref(),
            Some("t1:TASK_STATE_WORKING")
        );
        assert_eq!(get("Authorization").as_deref(), Some("Bearer cred"));
        let bare = push_headers(None, None, "t1:x", 1, body);
        assert!(
            bare.iter()
                .all(|(n, _)| *n != "X-Ninetrix-Signature" && *n != "Authorization")
        );
        assert_eq!(
            state_name(&TaskState::InputRequired),
            "TASK_STATE_INPUT_REQUIRED"
        );
        assert!(final_state_name("TASK_STATE_CANCELED") && !final_state_name("TASK_STATE_WORKING"));
        assert!(check_push_url("https://hooks.example.com/a2a").is_ok());
        assert!(check_push_url("ftp://x").is_err() && check_push_url("http://").is_err());
    }
}
