//! Every problem the decoder reports, in one place: each [`Problem`] has its
//! [`DiagnosticKind`] (and so its wire code), its severity, its message and its help. The
//! decoding code says *which* problem it found and where; this module says how it reads.

use super::names;
use super::providers;
use super::{Diagnostic, DiagnosticKind, DurationField, Severity, builtin_names};
use crate::handoffs;

/// Help for a missing or empty `runtime.model`.
const MODEL_HELP: &str = "name the model, e.g. `model: claude-sonnet-4-6` or `model: gpt-4o-mini`";
/// Help for a secret list written wrong.
const SECRETS_EXAMPLE: &str = "secrets: [ANTHROPIC_API_KEY]";

/// What an unknown key probably meant.
#[derive(Debug, PartialEq)]
pub(super) enum KeyHint<'a> {
    /// A known key of the same section, spelled close to it.
    Typo(&'a str),
    /// The section where the key belongs.
    Home {
        /// The key.
        key: &'a str,
        /// Where it belongs, e.g. `runtime.resources`.
        home: &'a str,
    },
    /// No guess: the section's known keys.
    Takes {
        /// How messages name the section.
        section: &'a str,
        /// Its known keys.
        known: Vec<&'a str>,
    },
}

impl std::fmt::Display for KeyHint<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyHint::Typo(s) => write!(f, "did you mean `{s}`?"),
            KeyHint::Home { key, home } => write!(f, "`{key}` belongs under `{home}`"),
            KeyHint::Takes { section, known } => {
                write!(f, "{section} takes: {}", known.join(", "))
            }
        }
    }
}

/// Why a tool name that is not a builtin cannot be used.
#[derive(Debug)]
pub(super) enum ToolGap<'a> {
    /// A tool source (`mcp://`, `hub://`, …); the text names it, e.g. "MCP servers are".
    Source(&'static str),
    /// A local tool file (`./tool.py`).
    LocalFile,
    /// A Ninetrix builtin with no ninetrix equivalent; the name without `builtin://`.
    NinetrixBuiltin(&'a str),
}

/// What is wrong with the shape of an `mcp_servers` entry.
#[derive(Debug, Clone, Copy)]
pub(super) enum Shape {
    /// Neither `url`, `image` + `command`, nor `command`.
    Nothing,
    /// `url` together with `image` or `command`.
    UrlAndCommand,
    /// `image` without `command`.
    ImageWithoutCommand,
    /// `headers` on a stdio server.
    HeadersWithoutUrl,
    /// `env`/`secrets` on a remote server.
    EnvOnUrl,
}

/// One problem found while decoding an agentfile.
#[derive(Debug)]
pub(super) enum Problem<'a> {
    /// The document is empty.
    EmptyFile,
    /// The document is not a mapping; its type.
    NotAMapping(&'static str),
    /// There is no `agents:`.
    NoAgentsKey,
    /// `agents:` holds no agent.
    EmptyAgents,
    /// A key of the public Ninetrix agentfile that ninetrix has no equivalent for: refused by
    /// name, never silently ignored.
    UnsupportedKey(&'a str),
    /// A key no section knows.
    UnknownKey {
        key: &'a str,
        /// How messages name the section.
        section: &'a str,
        hint: KeyHint<'a>,
    },
    /// A value of the wrong type: the key, what it must be, what it is.
    WrongType {
        leaf: &'a str,
        expected: &'a str,
        found: String,
    },
    /// A YAML 1.1 boolean word (`yes`, `off`, …) where a strict boolean belongs.
    LooseBoolean {
        leaf: &'a str,
        written: &'a str,
        meant: bool,
    },
    /// A whole number outside its range.
    IntOutOfRange {
        leaf: &'a str,
        min: u32,
        max: u32,
        found: i64,
    },
    /// A pool or agent name breaking the naming rules; `what` names the kind of name.
    InvalidName {
        name: &'a str,
        what: &'a str,
        example: Option<String>,
    },
    /// A `schema_version` that is not 1.x.
    UnsupportedVersion(&'a str),
    /// A name listed both in `secrets:` and in `env:`.
    SecretAlsoInEnv(&'a str),
    /// `temperature` outside 0–2.
    Temperature(f64),
    /// `cpu` not positive (or absurdly large).
    Cpu(f64),
    /// A memory size below Docker's minimum.
    MemoryTooSmall(&'a str),
    /// Text that is not a memory size.
    NotAMemorySize(&'a str),
    /// `base_url` that is not an http(s) URL.
    InvalidUrl(&'a str),
    /// Both `runtime.image` and `runtime.resources.base_image`.
    BaseImageTwice,
    /// A known provider that cannot be used directly, and why.
    UnsupportedProvider { name: &'a str, why: &'a str },
    /// A provider name nobody knows, and the closest known one.
    UnknownProvider {
        name: &'a str,
        closest: Option<&'a str>,
    },
    /// No `model` for a provider that has no default one.
    MissingModel { provider: &'a str },
    /// `model` is blank.
    EmptyModel,
    /// Provider `scripted` without `script`.
    MissingScript,
    /// An empty `script`.
    EmptyScript,
    /// `script` for a provider other than `scripted`.
    ScriptNotScripted { provider: &'a str },
    /// A script step with neither text nor tool calls.
    EmptyScriptStep,
    /// A scripted tool call without `name`.
    MissingCallName,
    /// A tool argument that JSON cannot hold.
    NonFiniteArgument,
    /// A script calls a tool the agent does not declare; the agent's tools.
    UndeclaredTool {
        name: &'a str,
        declared: Vec<&'a str>,
    },
    /// The script's last step calls tools.
    ScriptEndsWithToolCall,
    /// `max_turns` both in `runtime` and in `execution`, with different values.
    MaxTurnsTwice,
    /// A batch agent with several replicas.
    BatchReplicas(u32),
    /// An `env:` name that is not an environment variable name.
    InvalidEnvName(&'a str),
    /// An `env:` name reserved for the runner.
    ReservedEnv(&'a str),
    /// An `env:` value that is not a scalar; its type.
    EnvValueType { name: &'a str, found: &'static str },
    /// An `env:` entry that looks like a secret; the secret name to move it to.
    SecretInEnv { name: &'a str, secret: String },
    /// A `secrets:` item that is not a string; its type.
    SecretNotAName(&'static str),
    /// A secret listed twice.
    DuplicateSecret(&'a str),
    /// `secrets:` written as a mapping of names to values; the names.
    SecretValuesListed(String),
    /// `secrets:` neither a list nor a mapping; its type.
    SecretsNotAList(&'static str),
    /// A secret value where a secret name belongs.
    SecretValueNotName,
    /// A secret name breaking the naming rules, and a fixed spelling if there is one.
    InvalidSecretName {
        name: &'a str,
        example: Option<String>,
    },
    /// A blank `task`.
    EmptyTask,
    /// A resume mode that is neither `truncate` nor `complete`.
    UnknownResumeMode(&'a str),
    /// A budget that is not positive.
    BudgetNotPositive(f64),
    /// A `{ name, effect }` tool without `name`.
    MissingToolName,
    /// An effect that is not `read`, `idempotent` or `write`.
    UnknownEffect(&'a str),
    /// A tool listed twice.
    DuplicateTool(&'a str),
    /// A tool that exists elsewhere but not in ninetrix yet.
    UnsupportedTool { name: &'a str, gap: ToolGap<'a> },
    /// A tool name nobody knows, and the closest known one.
    UnknownTool {
        name: &'a str,
        closest: Option<&'a str>,
    },
    /// An `mcp_servers` entry whose keys do not make one kind of server.
    McpShape(&'a str, Shape),
    /// An MCP server `url` that is not http(s).
    McpUrl(&'a str),
    /// A header value that names no secret.
    HeaderNotASecret(&'a str),
    /// A command string that needs a shell to split.
    CommandNeedsList(&'a str),
    /// An empty command.
    EmptyCommand,
    /// An `mcp://` entry naming a server `mcp_servers` does not have.
    UnknownMcpServer {
        server: &'a str,
        closest: Option<String>,
        known: String,
    },
    /// `allow` on a one-tool entry.
    AllowOnOneTool(&'a str),
    /// `verify` without `tool`.
    MissingVerifyTool,
    /// A verifier that is not one of the agent's tools.
    UndeclaredVerifier {
        name: &'a str,
        declared: Vec<&'a str>,
    },
    /// A verifier that is not a tool name (`mcp://server` without a tool).
    VerifierNotATool(&'a str),
    /// An agent using a stdio server in its own container without `runtime.image`.
    McpNeedsImage(&'a str),
    /// A `human_approval.actions` entry that is not one of the agent's tools: the entry as
    /// written, the agent, the closest of its tools, all of them (as an agentfile names them),
    /// and whether the `human_approval` is the shared (top-level) one.
    ApprovalNotATool {
        name: &'a str,
        agent: &'a str,
        closest: Option<String>,
        has: Vec<String>,
        shared: bool,
    },
    /// `ask_human` (as written: `ask_human`, `ask_user`, …) in `human_approval.actions`.
    ApprovalGatesAskHuman(&'a str),
    /// An `actions` entry gating a tool an earlier entry gates; the earlier entry when it is
    /// written differently (`bash` after `shell`).
    DuplicateApprovalAction {
        name: &'a str,
        same_as: Option<String>,
    },
    /// An effect listed twice in `human_approval.effects`.
    DuplicateApprovalEffect(&'static str),
    /// A duration setting (`timeout`, `transfer_timeout`) whose text is not a duration.
    DurationFormat { leaf: &'a str, text: &'a str },
    /// A duration outside its setting's range, as written.
    DurationRange {
        leaf: &'a str,
        found: String,
        field: DurationField,
    },
    /// A `notify_url` that is not an http(s) URL with a host.
    ApprovalUrl(&'a str),
    /// A `notify_url` with credentials before the host (never repeated in the message).
    ApprovalUrlCredentials,
    /// `notify_url` without `notify_secret`.
    NotifyUrlWithoutSecret,
    /// `notify_secret` without `notify_url`.
    NotifySecretWithoutUrl,
    /// An enabled `human_approval` with neither `actions` nor `effects` (a warning).
    ApprovalGatesNothing,
    /// A `collaborators` entry that is no agent of the agentfile: the entry, the agent listing
    /// it, the closest other agent, and all of them.
    UnknownCollaborator {
        name: &'a str,
        agent: &'a str,
        closest: Option<&'a str>,
        others: Vec<&'a str>,
    },
    /// A `collaborators` entry that can never be one, and why.
    InvalidCollaborator { name: &'a str, why: CollaboratorGap },
    /// A collaborator listed twice.
    DuplicateCollaborator(&'a str),
    /// A handoff between agents where one side is a batch job: the agent listing collaborators
    /// (`collaborator: None`) or the collaborator it names.
    BatchCollaborator {
        agent: &'a str,
        collaborator: Option<&'a str>,
    },
    /// A collaborator whose `ask_<agent>` tool has the name of a tool the agent already has.
    HandoffToolTaken { collaborator: &'a str, tool: String },
    /// `transfer_timeout` on an agent without collaborators (a warning).
    TransferTimeoutUnused(&'a str),
}

/// Why a `collaborators` entry can never be a collaborator.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum CollaboratorGap {
    /// The agent lists itself.
    Itself,
    /// `human`: its tool would be the builtin `ask_human`.
    AskHuman,
    /// Longer than [`handoffs::MAX_AGENT_NAME_LEN`]: `ask_<name>` would be too long for a tool
    /// name; its length.
    TooLong(usize),
}

impl Problem<'_> {
    /// The kind, and so the wire code.
    pub(super) fn kind(&self) -> DiagnosticKind {
        use DiagnosticKind as K;
        match self {
            Problem::EmptyFile => K::EmptyFile,
            Problem::NotAMapping(_) => K::NotAMapping,
            Problem::NoAgentsKey
            | Problem::MissingModel { .. }
            | Problem::MissingScript
            | Problem::MissingCallName
            | Problem::MissingToolName => K::MissingKey,
            Problem::EmptyAgents => K::NoAgents,
            Problem::UnsupportedKey(_) => K::UnsupportedKey,
            Problem::UnknownKey { .. } => K::UnknownKey,
            Problem::WrongType { .. }
            | Problem::LooseBoolean { .. }
            | Problem::NonFiniteArgument
            | Problem::EnvValueType { .. }
            | Problem::SecretNotAName(_)
            | Problem::SecretsNotAList(_) => K::WrongType,
            Problem::IntOutOfRange { .. }
            | Problem::Temperature(_)
            | Problem::Cpu(_)
            | Problem::MemoryTooSmall(_)
            | Problem::BudgetNotPositive(_) => K::OutOfRange,
            Problem::InvalidName { .. }
            | Problem::InvalidEnvName(_)
            | Problem::InvalidSecretName { .. } => K::InvalidName,
            Problem::UnsupportedVersion(_) => K::UnsupportedVersion,
            Problem::SecretAlsoInEnv(_) | Problem::SecretInEnv { .. } => K::SecretInEnv,
            Problem::NotAMemorySize(_) => K::InvalidMemory,
            Problem::InvalidUrl(_) => K::InvalidUrl,
            Problem::BaseImageTwice | Problem::MaxTurnsTwice => K::DuplicateSetting,
            Problem::UnsupportedProvider { .. } => K::UnsupportedProvider,
            Problem::UnknownProvider { .. } => K::UnknownProvider,
            Problem::EmptyModel
            | Problem::EmptyScript
            | Problem::EmptyScriptStep
            | Problem::EmptyTask => K::EmptyValue,
            Problem::ScriptNotScripted { .. } => K::ScriptNotScripted,
            Problem::UndeclaredTool { .. } | Problem::UndeclaredVerifier { .. } => {
                K::UndeclaredTool
            }
            Problem::ScriptEndsWithToolCall => K::ScriptEndsWithToolCall,
            Problem::BatchReplicas(_) => K::BatchReplicas,
            Problem::ReservedEnv(_) => K::ReservedEnv,
            Problem::DuplicateSecret(_) => K::DuplicateSecret,
            Problem::SecretValuesListed(_) | Problem::SecretValueNotName => K::SecretValue,
            Problem::UnknownResumeMode(_) | Problem::UnknownEffect(_) => K::InvalidValue,
            Problem::DuplicateTool(_) => K::DuplicateTool,
            Problem::UnsupportedTool { .. } => K::UnsupportedTool,
            Problem::UnknownTool { .. } | Problem::VerifierNotATool(_) => K::UnknownTool,
            Problem::McpShape(..)
            | Problem::CommandNeedsList(_)
            | Problem::EmptyCommand
            | Problem::AllowOnOneTool(_) => K::InvalidMcpServer,
            Problem::McpUrl(_) => K::InvalidUrl,
            Problem::HeaderNotASecret(_) => K::SecretValue,
            Problem::UnknownMcpServer { .. } => K::UnknownMcpServer,
            Problem::MissingVerifyTool => K::MissingKey,
            Problem::McpNeedsImage(_) => K::McpNeedsImage,
            Problem::ApprovalNotATool { .. } => K::UndeclaredTool,
            Problem::ApprovalGatesAskHuman(_) | Problem::DurationFormat { .. } => K::InvalidValue,
            Problem::DuplicateApprovalAction { .. } => K::DuplicateTool,
            Problem::DuplicateApprovalEffect(_) => K::DuplicateSetting,
            Problem::DurationRange { .. } => K::OutOfRange,
            Problem::ApprovalUrl(_) => K::InvalidUrl,
            Problem::ApprovalUrlCredentials => K::SecretValue,
            Problem::NotifyUrlWithoutSecret | Problem::NotifySecretWithoutUrl => K::MissingKey,
            Problem::ApprovalGatesNothing => K::ApprovalGatesNothing,
            Problem::UnknownCollaborator { .. } => K::UnknownCollaborator,
            Problem::InvalidCollaborator { .. } => K::InvalidCollaborator,
            Problem::DuplicateCollaborator(_) => K::DuplicateCollaborator,
            Problem::BatchCollaborator { .. } => K::BatchCollaborator,
            Problem::HandoffToolTaken { .. } => K::DuplicateTool,
            Problem::TransferTimeoutUnused(_) => K::TransferTimeoutUnused,
        }
    }

    /// Warnings leave the agentfile valid; everything else is an error.
    pub(super) fn severity(&self) -> Severity {
        match self {
            Problem::SecretInEnv { .. }
            | Problem::ScriptEndsWithToolCall
            | Problem::ApprovalGatesNothing
            | Problem::TransferTimeoutUnused(_) => Severity::Warning,
            _ => Severity::Error,
        }
    }

    /// Whether the offending span may be a secret, so snippets must mask it.
    pub(super) fn redact(&self) -> bool {
        matches!(
            self,
            Problem::SecretInEnv { .. }
                | Problem::SecretValuesListed(_)
                | Problem::SecretValueNotName
                | Problem::HeaderNotASecret(_)
                | Problem::ApprovalUrlCredentials
        )
    }

    /// What is wrong.
    pub(super) fn message(&self) -> String {
        match self {
            Problem::EmptyFile => "the agentfile is empty".into(),
            Problem::NotAMapping(found) => {
                format!("the agentfile must be a mapping of keys, found {found}")
            }
            Problem::NoAgentsKey => "the agentfile has no `agents:`".into(),
            Problem::EmptyAgents => "`agents` is empty".into(),
            Problem::UnsupportedKey(key) => format!("`{key}` is not supported yet"),
            Problem::UnknownKey { key, section, .. } => {
                format!("unknown key `{key}` in {section}")
            }
            Problem::WrongType {
                leaf,
                expected,
                found,
            } => format!("`{leaf}` must be {expected}, found {found}"),
            Problem::LooseBoolean { leaf, written, .. } => {
                format!("`{leaf}` must be true or false, found \"{written}\"")
            }
            Problem::IntOutOfRange {
                leaf,
                min,
                max,
                found,
            } => format!("`{leaf}` must be between {min} and {max}, found {found}"),
            Problem::InvalidName { name, what, .. } => format!("`{name}` is not a valid {what}"),
            Problem::UnsupportedVersion(v) => format!("schema version `{v}` is not supported"),
            Problem::SecretAlsoInEnv(name) => {
                format!("`{name}` is both a secret and a plain `env:` setting")
            }
            Problem::Temperature(t) => {
                format!("`temperature` must be between 0 and 2, found {t}")
            }
            Problem::Cpu(c) => format!("`cpu` must be more than 0, found {c}"),
            Problem::MemoryTooSmall(t) => format!("memory `{t}` is below Docker's minimum of 6Mi"),
            Problem::NotAMemorySize(t) => format!("`{t}` is not a memory size"),
            Problem::InvalidUrl(url) => {
                format!("`base_url` must be an http:// or https:// URL, found \"{url}\"")
            }
            Problem::BaseImageTwice => "the base image is given twice (`runtime.image` and \
                                        `runtime.resources.base_image`)"
                .into(),
            Problem::UnsupportedProvider { name, .. } => {
                format!("provider `{name}` cannot be used directly")
            }
            Problem::UnknownProvider { name, .. } => format!("unknown provider `{name}`"),
            Problem::MissingModel { provider } => {
                format!("`runtime.model` is required for provider `{provider}`")
            }
            Problem::EmptyModel => "`model` is empty".into(),
            Problem::MissingScript => "provider `scripted` needs `runtime.script`".into(),
            Problem::EmptyScript => "`script` is empty".into(),
            Problem::ScriptNotScripted { provider } => {
                format!("`script` is only used by provider `scripted`, not `{provider}`")
            }
            Problem::EmptyScriptStep => "a script step needs `text` or `tool_calls`".into(),
            Problem::MissingCallName => "a scripted tool call needs `name`".into(),
            Problem::NonFiniteArgument => "tool arguments cannot hold NaN or infinity".into(),
            Problem::UndeclaredTool { name, .. } => {
                format!("the script calls `{name}`, which is not one of the agent's tools")
            }
            Problem::ScriptEndsWithToolCall => "the script's last step calls tools, so its turns \
                                                never end with a reply from it"
                .into(),
            Problem::MaxTurnsTwice => "`max_turns` is set both in `runtime` and in `execution` \
                                       with different values"
                .into(),
            Problem::BatchReplicas(n) => format!(
                "a batch agent (`durability: false`) runs once, so it cannot have {n} replicas"
            ),
            Problem::InvalidEnvName(name) => {
                format!("`{name}` is not a valid environment variable name")
            }
            Problem::ReservedEnv(name) => format!("`{name}` is set by ninetrix itself"),
            Problem::EnvValueType { name, found } => {
                format!("`{name}` must be a string, number or boolean, found {found}")
            }
            Problem::SecretInEnv { name, .. } => {
                format!("`{name}` looks like a secret in plain `env:`")
            }
            Problem::SecretNotAName(found) => format!("a secret must be a name, found {found}"),
            Problem::DuplicateSecret(name) => format!("secret `{name}` is listed twice"),
            Problem::SecretValuesListed(_) => "`secrets` lists secret names, not values".into(),
            Problem::SecretsNotAList(found) => {
                format!("`secrets` must be a list of names, found {found}")
            }
            Problem::SecretValueNotName => {
                "this looks like a secret value, not a secret name".into()
            }
            Problem::InvalidSecretName { name, .. } => {
                format!("`{name}` is not a valid secret name")
            }
            Problem::EmptyTask => "`task` is empty".into(),
            Problem::UnknownResumeMode(mode) => format!("unknown resume mode `{mode}`"),
            Problem::BudgetNotPositive(b) => {
                format!("`max_budget_per_run` must be more than 0, found {b}")
            }
            Problem::MissingToolName => "a tool needs `name`".into(),
            Problem::UnknownEffect(e) => format!("unknown effect `{e}`"),
            Problem::DuplicateTool(name) => format!("tool `{name}` is listed twice"),
            Problem::UnsupportedTool { name, .. } => format!("tool `{name}` is not supported yet"),
            Problem::UnknownTool { name, .. } => format!("unknown tool `{name}`"),
            Problem::McpShape(server, shape) => match shape {
                Shape::Nothing => {
                    format!("MCP server `{server}` says neither where it is nor how to start it")
                }
                Shape::UrlAndCommand => {
                    format!("MCP server `{server}` has both `url` and a command")
                }
                Shape::ImageWithoutCommand => {
                    format!("MCP server `{server}` has `image` but no `command`")
                }
                Shape::HeadersWithoutUrl => {
                    format!("MCP server `{server}` has `headers` but no `url`")
                }
                Shape::EnvOnUrl => {
                    format!("MCP server `{server}` is remote (`url`) but has `env` or `secrets`")
                }
            },
            Problem::McpUrl(url) => {
                format!("an MCP server `url` must be http:// or https://, found \"{url}\"")
            }
            Problem::HeaderNotASecret(header) => {
                format!("header `{header}` must name a secret, not hold a value")
            }
            Problem::CommandNeedsList(command) => {
                format!("command \"{command}\" needs quoting or a shell to split")
            }
            Problem::EmptyCommand => "`command` is empty".into(),
            Problem::UnknownMcpServer { server, .. } => format!("unknown MCP server `{server}`"),
            Problem::AllowOnOneTool(name) => {
                format!("`allow` only applies to a whole server, and `{name}` names one tool")
            }
            Problem::MissingVerifyTool => "`verify` needs `tool`".into(),
            Problem::UndeclaredVerifier { name, .. } => {
                format!("verifier `{name}` is not one of the agent's tools")
            }
            Problem::VerifierNotATool(name) => {
                format!("verifier `{name}` is a server, not a tool")
            }
            Problem::McpNeedsImage(server) => format!(
                "MCP server `{server}` runs inside the agent's container, which has no runtime \
                 for it (no `runtime.image`)"
            ),
            Problem::ApprovalNotATool { name, agent, .. } => format!(
                "`{name}` in `human_approval.actions` is not one of agent `{agent}`'s tools"
            ),
            Problem::ApprovalGatesAskHuman(name) if *name == "ask_human" => {
                "`ask_human` cannot be gated: it always asks a person".into()
            }
            Problem::ApprovalGatesAskHuman(name) => {
                format!("`{name}` is `ask_human`, which cannot be gated: it always asks a person")
            }
            Problem::DuplicateApprovalAction {
                name,
                same_as: None,
            } => format!("`{name}` is listed twice in `human_approval.actions`"),
            Problem::DuplicateApprovalAction {
                name,
                same_as: Some(earlier),
            } => format!(
                "`{name}` gates a tool that `{earlier}` already gates in `human_approval.actions`"
            ),
            Problem::DuplicateApprovalEffect(effect) => {
                format!("effect `{effect}` is listed twice in `human_approval.effects`")
            }
            Problem::DurationFormat { leaf, text } => format!(
                "`{leaf}` must be a duration such as `30s`, `15m`, `24h` or `7d`, found \"{text}\""
            ),
            Problem::DurationRange { leaf, found, field } => format!(
                "`{leaf}` must be from 1 second to {}, found {found}",
                field.max_text()
            ),
            Problem::ApprovalUrl(url) => format!(
                "`notify_url` must be an http:// or https:// URL with a host, found \"{url}\""
            ),
            Problem::ApprovalUrlCredentials => {
                "`notify_url` holds credentials (`user:password@` before the host)".into()
            }
            Problem::NotifyUrlWithoutSecret => "notify_url needs notify_secret: the name of the \
                                                secret whose value signs each notification \
                                                (HMAC-SHA256)"
                .into(),
            Problem::NotifySecretWithoutUrl => "`notify_secret` signs notifications, but \
                                                `human_approval` has no `notify_url` to send \
                                                them to"
                .into(),
            Problem::ApprovalGatesNothing => {
                "`human_approval` gates nothing; only `ask_human` asks people".into()
            }
            Problem::UnknownCollaborator { name, agent, .. } => format!(
                "`{name}` in agent `{agent}`'s `collaborators` is not an agent of this agentfile"
            ),
            Problem::InvalidCollaborator {
                name,
                why: CollaboratorGap::Itself,
            } => format!("agent `{name}` lists itself in `collaborators`"),
            Problem::InvalidCollaborator {
                name,
                why: CollaboratorGap::AskHuman,
            } => format!(
                "`{name}` cannot be a collaborator: its tool would be `{}`, the builtin that \
                 asks a person",
                handoffs::tool_name(name)
            ),
            Problem::InvalidCollaborator {
                name,
                why: CollaboratorGap::TooLong(len),
            } => format!(
                "collaborator `{name}` has {len} characters, too long for its tool name \
                 `ask_<agent>` (at most {} characters)",
                handoffs::MAX_AGENT_NAME_LEN
            ),
            Problem::DuplicateCollaborator(name) => {
                format!("collaborator `{name}` is listed twice")
            }
            Problem::BatchCollaborator {
                agent,
                collaborator: None,
            } => format!(
                "agent `{agent}` is a batch job (`execution.durability: false`), so it cannot \
                 hand work to collaborators"
            ),
            Problem::BatchCollaborator {
                collaborator: Some(name),
                ..
            } => format!(
                "collaborator `{name}` is a batch job (`execution.durability: false`), so it \
                 cannot take handed-off work"
            ),
            Problem::HandoffToolTaken { collaborator, tool } => format!(
                "collaborator `{collaborator}`'s tool `{tool}` has the name of a tool the agent \
                 already has"
            ),
            Problem::TransferTimeoutUnused(agent) => {
                format!("`transfer_timeout` has no effect: agent `{agent}` has no collaborators")
            }
        }
    }

    /// How to fix it, when there is something to say.
    pub(super) fn help(&self) -> Option<String> {
        let starter = "`ninetrix init` writes a starter";
        Some(match self {
            Problem::EmptyFile => {
                format!("an agentfile needs at least `agents:` with one agent; {starter}")
            }
            Problem::NotAMapping(_) => format!("start with `name:` and `agents:`; {starter}"),
            Problem::NoAgentsKey => {
                format!("add `agents:` with at least one agent; {starter}")
            }
            Problem::EmptyAgents => "declare at least one agent, e.g. `agents: { assistant: { \
                                     runtime: { provider: scripted, script: [{ text: hi }] } } }`"
                .into(),
            Problem::UnsupportedKey(key) => format!(
                "`{key}` is a key of the public Ninetrix agentfile that ninetrix does not \
                 implement yet; remove it (docs/agentfile.md lists what is supported)"
            ),
            Problem::UnknownKey { hint, .. } => hint.to_string(),
            Problem::WrongType { expected, .. } => format!("write {expected} here"),
            Problem::LooseBoolean { written, meant, .. } => format!(
                "agentfiles use strict booleans (YAML 1.2): write `{meant}` instead of `{written}`"
            ),
            Problem::IntOutOfRange { min, max, .. } => {
                format!("give a whole number from {min} to {max}")
            }
            Problem::InvalidName { what, example, .. } => format!(
                "{what}s use lower-case letters, digits, `-` and `_`, start with a letter or \
                 digit, and have at most {} characters{}",
                names::MAX_NAME_LEN,
                example
                    .as_ref()
                    .map_or(String::new(), |e| format!("; for example `{e}`"))
            ),
            Problem::UnsupportedVersion(_) => {
                "ninetrix reads agentfile schema 1.x (1.0, 1.1); remove the key or set \"1.1\""
                    .into()
            }
            Problem::SecretAlsoInEnv(name) => {
                format!("remove `{name}` from `env:`; the secret is mounted at /run/secrets/{name}")
            }
            Problem::Temperature(_) => {
                "0 is the most deterministic, 2 the most random; most agents use 0–1".into()
            }
            Problem::Cpu(_) => "give CPUs as a number, e.g. `cpu: 0.5` or `cpu: 2`".into(),
            Problem::MemoryTooSmall(_) => {
                "give at least `6Mi`; agents usually need `128Mi` or more".into()
            }
            Problem::NotAMemorySize(_) => {
                "write a number with a unit: `512Mi`, `1Gi`, `2g` (units are powers of 1024)".into()
            }
            Problem::InvalidUrl(_) => {
                "for a model server on this machine use http://host.docker.internal:<port>/v1"
                    .into()
            }
            Problem::BaseImageTwice => {
                "keep `runtime.image` and remove `resources.base_image`".into()
            }
            Problem::UnsupportedProvider { why, .. } => why.to_string(),
            Problem::UnknownProvider { closest, .. } => {
                let known = providers::known_names().join(", ");
                match closest {
                    Some(s) => format!("did you mean `{s}`? Providers: {known}"),
                    None => format!("providers: {known}"),
                }
            }
            Problem::MissingModel { .. } | Problem::EmptyModel => MODEL_HELP.into(),
            Problem::MissingScript => {
                "list the model's responses, e.g. `script: [{ text: \"Hello!\" }]`".into()
            }
            Problem::EmptyScript => {
                "list at least one response, e.g. `script: [{ text: \"Hello!\" }]`".into()
            }
            Problem::ScriptNotScripted { .. } => {
                "remove `script`, or set `provider: scripted` to run the agent offline".into()
            }
            Problem::EmptyScriptStep => "e.g. `- text: \"Done.\"` or `- tool_calls: [{ name: \
                                         file_read, args: { path: notes.md } }]`"
                .into(),
            Problem::MissingCallName => {
                "e.g. `{ name: file_read, args: { path: notes.md } }`".into()
            }
            Problem::UndeclaredTool { name, declared } if declared.is_empty() => {
                format!("add `{name}` to the agent's `tools:`")
            }
            Problem::UndeclaredTool { name, declared } => format!(
                "add `{name}` to the agent's `tools:` (it has: {})",
                declared.join(", ")
            ),
            Problem::ScriptEndsWithToolCall => "end the script with a text-only step (the final \
                                                answer); the script repeats from the start after \
                                                its last step"
                .into(),
            Problem::MaxTurnsTwice => "keep `execution.max_turns` (ninetrix's place for it) and \
                                       remove `runtime.max_turns`"
                .into(),
            Problem::BatchReplicas(_) => {
                "remove `replicas`, or set `durability: true` for a warm pool".into()
            }
            Problem::InvalidEnvName(_) => {
                "use letters, digits and `_`, not starting with a digit".into()
            }
            Problem::ReservedEnv(_) => "names starting with AGENTFILE_ are reserved for the \
                                        runner; choose another name"
                .into(),
            Problem::EnvValueType { .. } => {
                "environment values are plain text; quote the value".into()
            }
            Problem::SecretInEnv { secret, .. } => format!(
                "env values end up in the container's configuration and the agentfile; move it \
                 to `secrets: [{secret}]` and provide the value on the host"
            ),
            Problem::SecretNotAName(_) => format!("list secret names, e.g. `{SECRETS_EXAMPLE}`"),
            Problem::SecretValuesListed(names) => format!(
                "never put secret values in the agentfile; write `secrets: [{names}]` and \
                 provide the values on the host (environment or a secrets file)"
            ),
            Problem::SecretsNotAList(_) => format!("e.g. `{SECRETS_EXAMPLE}`"),
            Problem::SecretValueNotName => "never put secret values in the agentfile; list the \
                                            secret's name (e.g. `ANTHROPIC_API_KEY`) and provide \
                                            its value on the host"
                .into(),
            Problem::InvalidSecretName { example, .. } => format!(
                "secret names use upper-case letters, digits and `_`{}",
                example
                    .as_ref()
                    .map_or(String::new(), |e| format!(", e.g. `{e}`"))
            ),
            Problem::EmptyTask => "give the batch job's input, or remove `task`".into(),
            Problem::UnknownResumeMode(_) => "`truncate` re-runs an interrupted turn from its \
                                              input; `complete` finishes its pending tool calls"
                .into(),
            Problem::BudgetNotPositive(_) => "give a budget in US dollars, e.g. \
                                              `max_budget_per_run: 1.00`, or remove it for no \
                                              limit"
                .into(),
            Problem::UnknownEffect(_) => "effects are `read` (safe to re-run), `idempotent` \
                                          (re-running is harmless) and `write` (never re-run \
                                          silently)"
                .into(),
            Problem::DuplicateTool(_) => "list each tool once".into(),
            Problem::UnsupportedTool { gap, .. } => {
                let builtins = builtin_names();
                match gap {
                    ToolGap::Source(what) => {
                        format!("{what} not supported yet; the builtins are {builtins}")
                    }
                    ToolGap::LocalFile => format!(
                        "local tool files are not supported yet; the builtins are {builtins}"
                    ),
                    ToolGap::NinetrixBuiltin(bare) => format!(
                        "the Ninetrix builtin `{bare}` has no ninetrix equivalent yet; the \
                         builtins are {builtins}"
                    ),
                }
            }
            Problem::UnknownTool { closest, .. } => {
                let builtins = builtin_names();
                match closest {
                    Some(s) => format!("did you mean `{s}`? The builtins are {builtins}"),
                    None => format!("the builtins are {builtins}"),
                }
            }
            Problem::McpShape(_, shape) => match shape {
                Shape::ImageWithoutCommand => {
                    "add the server's `command`, e.g. `command: [mcp-server-time]`".into()
                }
                Shape::HeadersWithoutUrl => "a stdio server gets its credentials from `secrets` \
                                             (as environment variables); remove `headers`"
                    .into(),
                Shape::EnvOnUrl => "a remote server gets credentials from `headers` naming \
                                    secrets; remove `env`/`secrets`"
                    .into(),
                _ => "give `url:` for a remote streamable-HTTP server, `image:` + `command:` for \
                      a stdio server in a sidecar container, or `command:` alone for a stdio \
                      server inside the agent's container"
                    .into(),
            },
            Problem::McpUrl(_) => "e.g. `url: https://mcp.example.com/mcp`".into(),
            Problem::HeaderNotASecret(header) => format!(
                "never put credentials in the agentfile; write e.g. `{header}: \"Bearer \
                 ${{GITHUB_TOKEN}}\"` and provide GITHUB_TOKEN on the host"
            ),
            Problem::CommandNeedsList(_) => {
                "write the command as a list: `command: [uvx, mcp-server-time, \"--tz=UTC\"]`"
                    .into()
            }
            Problem::EmptyCommand => "e.g. `command: [mcp-server-time]`".into(),
            Problem::UnknownMcpServer { closest, known, .. } => match (closest, known.is_empty()) {
                (Some(c), _) => format!("did you mean `{c}`? `mcp_servers` has: {known}"),
                (None, true) => "declare it under the top-level `mcp_servers:`, e.g. \
                                 `mcp_servers: { time: { image: mcp/time, command: \
                                 [mcp-server-time] } }`"
                    .into(),
                (None, false) => format!("`mcp_servers` has: {known}"),
            },
            Problem::AllowOnOneTool(_) => {
                "write `name: mcp://<server>` with `allow: [<tool>, …]`, or drop `allow`".into()
            }
            Problem::MissingVerifyTool => {
                "e.g. `verify: { tool: mcp://tickets/get_ticket, args: same }`".into()
            }
            Problem::VerifierNotATool(_) => "name one tool: `mcp://<server>/<tool>`".into(),
            Problem::UndeclaredVerifier { name, declared } => format!(
                "add `{name}` to the agent's `tools:` (it has: {}); the runner calls the \
                 verifier as one of the agent's tools",
                declared.join(", ")
            ),
            Problem::McpNeedsImage(_) => "set `runtime.image` to an image that has the server's \
                                          runtime (e.g. python:3.12-slim), or give the server an \
                                          `image:` so it runs as a sidecar"
                .into(),
            Problem::ApprovalNotATool {
                agent,
                closest,
                has,
                shared,
                ..
            } => {
                let tools = if has.is_empty() {
                    "no tools it could gate".to_string()
                } else {
                    format!("these tools: {}", has.join(", "))
                };
                let fix = if *shared {
                    format!(
                        "the top-level `governance.human_approval` applies to every agent \
                         without its own: give `{agent}` its own `governance.human_approval`, or \
                         add the tool to its `tools:`"
                    )
                } else {
                    "add the tool to the agent's `tools:`, or remove it from `actions`".into()
                };
                match closest {
                    Some(c) => format!("did you mean `{c}`? Agent `{agent}` has {tools}; {fix}"),
                    None => format!("agent `{agent}` has {tools}; {fix}"),
                }
            }
            Problem::ApprovalGatesAskHuman(_) => "remove it from `actions`: each `ask_human` \
                                                  call already waits for a person's answer \
                                                  (`ninetrix answer ID TEXT`)"
                .into(),
            Problem::DuplicateApprovalAction { .. } => "list each tool once".into(),
            Problem::DuplicateApprovalEffect(_) => "list each effect once".into(),
            Problem::DurationFormat { leaf, .. } => format!(
                "write a whole number and a unit, `s`, `m`, `h` or `d` (`{leaf}: 30m`), or whole \
                 seconds (`{leaf}: 1800`)"
            ),
            Problem::DurationRange { field, .. } => match field {
                DurationField::ApprovalTimeout => "e.g. `timeout: 15m` or `timeout: 7d` (the \
                                                   default is `24h`); a request that expires \
                                                   counts as a rejection"
                    .into(),
                DurationField::TransferTimeout => "e.g. `transfer_timeout: 5m` or \
                                                   `transfer_timeout: 2h` (the default is `5m`); \
                                                   a call to a collaborator that gets no reply \
                                                   in time fails with an error"
                    .into(),
            },
            Problem::ApprovalUrl(_) => "e.g. `notify_url: https://hooks.example.com/ninetrix`; \
                                        each new request is POSTed there as signed JSON"
                .into(),
            Problem::ApprovalUrlCredentials => "never put credentials in the agentfile; remove \
                                                them from the URL: the receiver authenticates \
                                                each notification by its \
                                                `X-Ninetrix-Signature` header, an HMAC-SHA256 \
                                                keyed by the secret `notify_secret` names"
                .into(),
            Problem::NotifyUrlWithoutSecret => "add e.g. `notify_secret: \
                                                APPROVAL_WEBHOOK_SECRET` and provide its value \
                                                on the host; the receiver checks \
                                                `X-Ninetrix-Signature` with the same value"
                .into(),
            Problem::NotifySecretWithoutUrl => {
                "add `notify_url: https://…`, or remove `notify_secret`".into()
            }
            Problem::ApprovalGatesNothing => "list what to gate, e.g. `actions: [shell, \
                                              mcp://tickets/create_ticket]` or `effects: \
                                              [write]`; if it only sets `timeout` or \
                                              notifications for `ask_human`, write `enabled: \
                                              false`"
                .into(),
            Problem::UnknownCollaborator {
                closest, others, ..
            } => {
                let agents = if others.is_empty() {
                    "it is the only agent".to_string()
                } else {
                    format!("the other agents are: {}", others.join(", "))
                };
                let fix = "a collaborator is another agent of the same agentfile: declare it \
                           under `agents:`, or remove it from `collaborators`";
                match closest {
                    Some(c) => format!("did you mean `{c}`? {}; {fix}", capitalize(&agents)),
                    None => format!("{agents}; {fix}"),
                }
            }
            Problem::InvalidCollaborator { why, .. } => match why {
                CollaboratorGap::Itself => "remove it: an agent does its own work; list the \
                                            other agents it may hand tasks to"
                    .into(),
                CollaboratorGap::AskHuman => "rename the agent (e.g. `reviewer`) and list the \
                                              new name; to ask a person, give the agent the \
                                              `ask_human` tool instead"
                    .into(),
                CollaboratorGap::TooLong(_) => format!(
                    "rename the agent to at most {} characters (agent names have at most \
                     {})",
                    handoffs::MAX_AGENT_NAME_LEN,
                    names::MAX_NAME_LEN
                ),
            },
            Problem::DuplicateCollaborator(_) => "list each collaborator once".into(),
            Problem::BatchCollaborator {
                agent,
                collaborator: None,
            } => format!(
                "a handoff files the task in the collaborator's session and the caller's turn \
                 waits for the reply, which a one-shot batch job cannot do; set \
                 `execution.durability: true` on `{agent}`, or remove `collaborators`"
            ),
            Problem::BatchCollaborator {
                collaborator: Some(name),
                ..
            } => format!(
                "a handoff files the task in a session of `{name}` and waits for its reply, and \
                 a batch job serves no sessions (it runs its `task` once); set \
                 `execution.durability: true` on `{name}`, or remove it from `collaborators`"
            ),
            Problem::HandoffToolTaken { .. } => "each collaborator adds its own `ask_<agent>` \
                                                 tool; remove the other tool from `tools`, or \
                                                 the agent from `collaborators`"
                .into(),
            Problem::TransferTimeoutUnused(_) => "it limits how long a call to a collaborator \
                                                  waits for the reply; list the agents it may \
                                                  hand work to in `collaborators`, or remove \
                                                  `transfer_timeout`"
                .into(),
            Problem::DuplicateSecret(_) | Problem::NonFiniteArgument | Problem::MissingToolName => {
                return None;
            }
        })
    }

    /// The diagnostic for this problem at `path` and `loc`.
    pub(super) fn at(&self, path: &str, loc: super::Loc) -> Diagnostic {
        let mut d = Diagnostic::new(self.severity(), self.kind(), path, loc, self.message());
        d.help = self.help();
        d.redact = self.redact();
        d
    }
}

/// `text` with its first letter in upper case.
fn capitalize(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}
