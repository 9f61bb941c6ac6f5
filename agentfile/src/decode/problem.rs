//! Every problem the decoder reports, in one place: each [`Problem`] has its
//! [`DiagnosticKind`] (and so its wire code), its severity, its message and its help. The
//! decoding code says *which* problem it found and where; this module says how it reads.

use super::context::ContextProblem;
use super::endpoint::ProviderKey;
use super::names;
use super::providers;
use super::{Diagnostic, DiagnosticKind, DurationField, Severity, builtin_names};
use ninetrix_proto::handoffs;
use ninetrix_proto::sessions::KeyError;
use ninetrix_proto::triggers::schedule::ScheduleError;
use ninetrix_proto::triggers::spec::{MAX_MAX_BODY_BYTES, MAX_NAME_CHARS, MAX_TRIGGERS};
use ninetrix_proto::triggers::template::TemplateError;

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
        min: u64,
        max: u64,
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
    /// A problem with `runtime.context` (its own module says how it reads).
    Context(ContextProblem<'a>),
    /// A problem with `security:` or `runtime.isolation` (its own module says how they read).
    Security(super::security::SecurityProblem<'a>),
    /// A problem with `runtime.jobs` or the job tools (its own module says how they read).
    Jobs(super::jobs::JobsProblem<'a>),
    /// A problem with a remote A2A collaborator or `skills:` (its own module says how they
    /// read).
    A2a(super::a2a::A2aProblem<'a>),
    /// `secrets:` on a tool entry other than `shell` (the entry's name as written).
    SecretsNotShell(&'a str),
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
    /// An `on_message_while_busy` that is not queue, steer, interrupt or reject.
    UnknownBusyMode(&'a str),
    /// A budget (`leaf`) that is not positive.
    BudgetNotPositive { leaf: &'a str, found: f64 },
    /// `max_pool_budget_per_day` under an agent's `governance`.
    PoolBudgetAtAgent,
    /// An `on_budget_exceeded` that is neither `stop` nor `ask_human`, and the closest.
    UnknownBudgetAction {
        found: &'a str,
        closest: Option<&'a str>,
    },
    /// `on_budget_exceeded` or `timezone` (`key`) where no budget beyond the run applies (a
    /// warning); `shared`: the top-level `governance`, which no agent's budget uses.
    BudgetSettingUnused { key: &'a str, shared: bool },
    /// `runtime.limits` (or a top-level `limits` entry) that sets no limit.
    EmptyLimits,
    /// A top-level `limits` entry without `provider`.
    PoolLimitNoProvider,
    /// A top-level `limits` entry with no number.
    PoolLimitNoNumber,
    /// A top-level `limits` entry for the provider key of an earlier one (on `first_line`).
    DuplicatePoolLimit { key: ProviderKey, first_line: u32 },
    /// A top-level `limits` entry that no model of the pool uses (a warning).
    PoolLimitUnused(ProviderKey),
    /// An agent's own `runtime.limits` that differ from what another model of the pool states
    /// for the same provider key (a warning): the other model, in words, and the key.
    LimitsConflict {
        agent: &'a str,
        other: String,
        key: ProviderKey,
    },
    /// A `runtime.fallback` entry without `key` (`provider` or `model`).
    FallbackMissing(&'static str),
    /// `provider: scripted` in a `runtime.fallback` entry.
    FallbackScripted,
    /// A fallback that is the primary model (`earlier: None`) or an earlier fallback (its
    /// 1-based number).
    FallbackRepeats {
        model: String,
        earlier: Option<usize>,
    },
    /// More `runtime.fallback` entries than the most allowed; how many.
    TooManyFallbacks(usize),
    /// `runtime.fallback_after` without a `fallback` (a warning).
    FallbackAfterUnused,
    /// `execution.snapshots.max_bytes` outside 1Mi to 64Gi (as written).
    SnapshotBytes(&'a str),
    /// `execution.snapshots` asking for snapshots where none are taken (a warning): on batch
    /// agent `Some(name)`, or at the top level (`None`) when every agent is a batch job.
    SnapshotsUnused(Option<&'a str>),
    /// A `{ name, effect }` tool without `name`.
    MissingToolName,
    /// An effect that is not `read`, `idempotent` or `write`.
    UnknownEffect(&'a str),
    /// A tool listed twice.
    /// A tool given by two entries of `tools`: its name, and how the first entry and this one
    /// are written (`jobs` and `job_start`; the same for a name listed twice).
    DuplicateTool {
        name: &'a str,
        first: &'a str,
        again: &'a str,
    },
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
    /// A memory scope that is neither `agent` nor `session`.
    UnknownMemoryScope(&'a str),
    /// `scope` on a tool other than `memory`.
    ScopeNotMemory(&'a str),
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
    /// An agent with the `shell` tool and no `runtime.image` (the runner image has no shell).
    ShellNeedsImage,
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
    /// A trigger key of the public Ninetrix: a webhook's own `endpoint`/`port` (`endpoint`),
    /// or a chat channel's.
    UnsupportedTriggerKey { key: &'a str, endpoint: bool },
    /// A trigger without `name`.
    TriggerNoName,
    /// A trigger without `type`, and the type its other keys suggest.
    TriggerNoType {
        trigger: Option<&'a str>,
        guess: Option<&'static str>,
    },
    /// `type: channel`.
    ChannelTrigger,
    /// A `type` that is neither `schedule` nor `webhook`, and the closest.
    UnknownTriggerType {
        found: &'a str,
        closest: Option<&'a str>,
    },
    /// A trigger name or webhook path breaking the rules of [`ninetrix_proto::triggers::spec::is_valid_name`].
    InvalidTriggerName { name: &'a str, what: NameOf },
    /// `target_agent` on a trigger declared under agent `agent`.
    TargetUnderAgent { agent: &'a str },
    /// A key of trigger type `owner` on a trigger of type `kind`.
    TriggerKeyOfOtherType {
        key: &'a str,
        trigger: Option<&'a str>,
        owner: &'static str,
        kind: &'static str,
    },
    /// A trigger without `message`.
    TriggerNoMessage {
        trigger: Option<&'a str>,
        webhook: bool,
    },
    /// A blank `message`.
    EmptyTriggerMessage { webhook: bool },
    /// A webhook `message`/`session` (`leaf`) that is not a template.
    InvalidTemplate { leaf: &'a str, err: TemplateError },
    /// `{{` in a schedule's `session`.
    TemplateInSchedule,
    /// A `session` that is not a session key.
    TriggerSessionKey(KeyError),
    /// A schedule with both `cron` and `every`.
    ScheduleRuleTwice { trigger: Option<&'a str> },
    /// A schedule with neither `cron` nor `every`.
    ScheduleNoRule { trigger: Option<&'a str> },
    /// `timezone` with `every`.
    TimezoneWithEvery,
    /// A `cron`, `every` or `timezone` the schedule rules refuse.
    Schedule(ScheduleError),
    /// An `overlap`, `catch_up` or `signature` (`leaf`) outside its set, and the closest.
    UnknownTriggerChoice {
        leaf: &'a str,
        found: &'a str,
        closest: Option<&'a str>,
    },
    /// A trigger setting the others make pointless (a warning).
    TriggerSettingUnused(Unused),
    /// A webhook without `secret`.
    WebhookNoSecret { trigger: Option<&'a str> },
    /// A `max_body` that is not a size.
    MaxBodyFormat(&'a str),
    /// A `max_body` outside 1 byte to 25 MiB, as written.
    MaxBodyRange(String),
    /// A pool with more triggers than the API takes.
    TooManyTriggers,
    /// A trigger name used before, on line `first_line`.
    DuplicateTrigger { name: &'a str, first_line: u32 },
    /// Webhook `trigger`'s path (its name when `defaulted`) is webhook `other`'s already.
    DuplicateWebhookPath {
        path: &'a str,
        trigger: &'a str,
        other: &'a str,
        defaulted: bool,
    },
    /// A top-level trigger's `target_agent` that is no agent of the file: the closest, and all.
    UnknownTriggerTarget {
        agent: &'a str,
        trigger: Option<&'a str>,
        closest: Option<&'a str>,
        agents: Vec<&'a str>,
    },
    /// A trigger whose agent is a batch job; `first`: the agent is the default (the first).
    BatchTriggerTarget {
        trigger: Option<&'a str>,
        agent: &'a str,
        first: bool,
    },
}

/// Which kind of name an [`Problem::InvalidTriggerName`] is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum NameOf {
    /// A trigger's `name`.
    Trigger,
    /// A webhook's `path`.
    WebhookPath,
}

/// Which trigger setting has no effect.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Unused {
    /// `catch_up_window` with `catch_up: none`.
    CatchUpWindow,
    /// `tolerance` with `signature: github`.
    Tolerance,
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
            Problem::Context(c) => c.kind(),
            Problem::Security(p) => p.kind(),
            Problem::Jobs(p) => p.kind(),
            Problem::A2a(p) => p.kind(),
            Problem::SecretsNotShell(_) => K::InvalidValue,
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
            | Problem::SnapshotBytes(_)
            | Problem::BudgetNotPositive { .. }
            | Problem::TooManyFallbacks(_) => K::OutOfRange,
            Problem::PoolBudgetAtAgent => K::MisplacedKey,
            Problem::UnknownBudgetAction { .. } => K::InvalidValue,
            Problem::BudgetSettingUnused { .. }
            | Problem::PoolLimitUnused(_)
            | Problem::SnapshotsUnused(_)
            | Problem::FallbackAfterUnused => K::SettingUnused,
            Problem::EmptyLimits => K::EmptyValue,
            Problem::PoolLimitNoProvider
            | Problem::PoolLimitNoNumber
            | Problem::FallbackMissing(_) => K::MissingKey,
            Problem::DuplicatePoolLimit { .. } | Problem::FallbackRepeats { .. } => {
                K::DuplicateSetting
            }
            Problem::LimitsConflict { .. } => K::LimitsConflict,
            Problem::FallbackScripted => K::UnsupportedProvider,
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
            Problem::UnknownResumeMode(_)
            | Problem::UnknownBusyMode(_)
            | Problem::UnknownEffect(_)
            | Problem::UnknownMemoryScope(_)
            | Problem::ScopeNotMemory(_) => K::InvalidValue,
            Problem::DuplicateTool { .. } => K::DuplicateTool,
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
            Problem::ShellNeedsImage => K::ShellNeedsImage,
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
            Problem::UnsupportedTriggerKey { .. } => K::UnsupportedKey,
            Problem::TriggerNoName
            | Problem::TriggerNoType { .. }
            | Problem::TriggerNoMessage { .. }
            | Problem::ScheduleNoRule { .. }
            | Problem::WebhookNoSecret { .. } => K::MissingKey,
            Problem::ChannelTrigger => K::UnsupportedTrigger,
            Problem::UnknownTriggerType { .. }
            | Problem::UnknownTriggerChoice { .. }
            | Problem::TriggerSessionKey(_)
            | Problem::MaxBodyFormat(_) => K::InvalidValue,
            Problem::InvalidTriggerName { .. } => K::InvalidName,
            Problem::TargetUnderAgent { .. }
            | Problem::TriggerKeyOfOtherType { .. }
            | Problem::TimezoneWithEvery => K::MisplacedTriggerKey,
            Problem::EmptyTriggerMessage { .. } => K::EmptyValue,
            Problem::InvalidTemplate { .. } | Problem::TemplateInSchedule => K::InvalidTemplate,
            Problem::ScheduleRuleTwice { .. } => K::DuplicateSetting,
            Problem::Schedule(err) => match err {
                ScheduleError::UnknownZone { .. } => K::UnknownTimeZone,
                ScheduleError::Every { .. } => K::InvalidValue,
                ScheduleError::Period { .. } => K::OutOfRange,
                ScheduleError::NoRule => K::MissingKey,
                ScheduleError::TwoRules => K::DuplicateSetting,
                ScheduleError::ZoneWithEvery { .. } => K::MisplacedTriggerKey,
                ScheduleError::EmptyCron
                | ScheduleError::FieldCount { .. }
                | ScheduleError::Field { .. }
                | ScheduleError::Cron { .. }
                | ScheduleError::NeverFires { .. } => K::InvalidCron,
            },
            Problem::TriggerSettingUnused(_) => K::TriggerSettingUnused,
            Problem::MaxBodyRange(_) | Problem::TooManyTriggers => K::OutOfRange,
            Problem::DuplicateTrigger { .. } => K::DuplicateTrigger,
            Problem::DuplicateWebhookPath { .. } => K::DuplicateWebhookPath,
            Problem::UnknownTriggerTarget { .. } => K::UnknownTriggerTarget,
            Problem::BatchTriggerTarget { .. } => K::BatchTriggerTarget,
        }
    }

    /// Warnings leave the agentfile valid; everything else is an error.
    pub(super) fn severity(&self) -> Severity {
        match self {
            Problem::Jobs(p) => p.severity(),
            Problem::SecretInEnv { .. }
            | Problem::ScriptEndsWithToolCall
            | Problem::ApprovalGatesNothing
            | Problem::TransferTimeoutUnused(_)
            | Problem::TriggerSettingUnused(_)
            | Problem::BudgetSettingUnused { .. }
            | Problem::PoolLimitUnused(_)
            | Problem::LimitsConflict { .. }
            | Problem::SnapshotsUnused(_)
            | Problem::FallbackAfterUnused => Severity::Warning,
            _ => Severity::Error,
        }
    }

    /// Whether the offending span may be a secret, so snippets must mask it.
    pub(super) fn redact(&self) -> bool {
        if let Problem::A2a(p) = self {
            return p.redact();
        }
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
            Problem::Context(c) => c.message(),
            Problem::Security(p) => p.message(),
            Problem::Jobs(p) => p.message(),
            Problem::A2a(p) => p.message(),
            Problem::SecretsNotShell(name) => format!(
                "`secrets` on tool `{name}`: only `shell` starts processes that can be given secrets"
            ),
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
            Problem::UnknownBusyMode(mode) => {
                format!("unknown `on_message_while_busy` mode `{mode}`")
            }
            Problem::BudgetNotPositive { leaf, found } => {
                format!("`{leaf}` must be more than 0, found {found}")
            }
            Problem::PoolBudgetAtAgent => "`max_pool_budget_per_day` is the pool's budget, not \
                                           an agent's"
                .into(),
            Problem::UnknownBudgetAction { found, .. } => {
                format!("unknown `on_budget_exceeded` value `{found}`")
            }
            Problem::BudgetSettingUnused { key, shared: false } => format!(
                "`{key}` has no effect: the agent has no budget beyond the run (per session, \
                 per day or the pool's per day)"
            ),
            Problem::BudgetSettingUnused { key, shared: true } => format!(
                "`{key}` has no effect: no agent has a budget beyond the run (per session, per \
                 day or the pool's per day)"
            ),
            Problem::SnapshotBytes(t) => {
                format!("`max_bytes` must be between 1Mi and 64Gi, found `{t}`")
            }
            Problem::SnapshotsUnused(Some(agent)) => format!(
                "`snapshots` has no effect: agent `{agent}` is a batch job (`durability: false`), \
                 whose runs are never forked, rewound or diffed, so no snapshot is taken"
            ),
            Problem::SnapshotsUnused(None) => "`snapshots` has no effect: every agent is a batch \
                job (`durability: false`), whose runs are never forked, rewound or diffed, so no \
                snapshot is taken"
                .into(),
            Problem::EmptyLimits => "`limits` sets no limit".into(),
            Problem::PoolLimitNoProvider => "a `limits` entry needs `provider`".into(),
            Problem::PoolLimitNoNumber => "this `limits` entry sets no limit".into(),
            Problem::DuplicatePoolLimit { key, first_line } => format!(
                "this `limits` entry is for the provider key of the entry on line {first_line} \
                 ({key})"
            ),
            Problem::PoolLimitUnused(key) => {
                format!("this `limits` entry limits nothing: no model of the pool uses {key}")
            }
            Problem::LimitsConflict { agent, other, key } => format!(
                "agent `{agent}`'s `runtime.limits` differ from those of {other}, on the same \
                 provider key ({key})"
            ),
            Problem::FallbackMissing(key) => format!("a fallback needs `{key}`"),
            Problem::FallbackScripted => "provider `scripted` cannot be a fallback".into(),
            Problem::FallbackRepeats {
                model,
                earlier: None,
            } => format!("this fallback is the agent's own model ({model})"),
            Problem::FallbackRepeats {
                model,
                earlier: Some(n),
            } => format!("this fallback is the same model as fallback {n} ({model})"),
            Problem::TooManyFallbacks(n) => format!(
                "`fallback` has {n} entries; at most {} are tried",
                super::limits::MAX_FALLBACKS
            ),
            Problem::FallbackAfterUnused => {
                "`fallback_after` has no effect: the runtime has no `fallback`".into()
            }
            Problem::MissingToolName => "a tool needs `name`".into(),
            Problem::UnknownEffect(e) => format!("unknown effect `{e}`"),
            Problem::DuplicateTool { name, first, again } if first == again => {
                match crate::tools::group(bare(again)) {
                    Some(_) => format!("`{again}` is listed twice"),
                    None => format!("tool `{name}` is listed twice"),
                }
            }
            Problem::DuplicateTool { name, first, again } => {
                format!("tool `{name}` is listed twice (`{first}` and `{again}` both give it)")
            }
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
            Problem::UnknownMemoryScope(scope) => format!("unknown memory scope `{scope}`"),
            Problem::ScopeNotMemory(name) => {
                format!("`scope` only applies to the `memory` tool, not `{name}`")
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
            Problem::ShellNeedsImage => "the `shell` tool runs /bin/sh, and the agent's container \
                                         has none (no `runtime.image`: the runner's own image has \
                                         no shell), so the agent could never start"
                .into(),
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
            Problem::UnsupportedTriggerKey {
                key,
                endpoint: true,
            } => format!(
                "`{key}` is not supported: webhooks are served by the checkpoint API, not on an \
                 endpoint of their own"
            ),
            Problem::UnsupportedTriggerKey { key, .. } => format!(
                "`{key}` is not supported yet: it configures a chat channel, and ninetrix has no \
                 channels yet"
            ),
            Problem::TriggerNoName => "a trigger needs `name`".into(),
            Problem::TriggerNoType { trigger, .. } => {
                format!("{} needs `type`", trigger_label(*trigger))
            }
            Problem::ChannelTrigger => "trigger type `channel` is not supported yet".into(),
            Problem::UnknownTriggerType { found, .. } => format!("unknown trigger type `{found}`"),
            Problem::InvalidTriggerName { name, what } => {
                format!("`{name}` is not a valid {}", what.as_str())
            }
            Problem::TargetUnderAgent { agent } => format!(
                "`target_agent` is only for top-level triggers: this trigger is under agent \
                 `{agent}`, so its messages go to `{agent}`"
            ),
            Problem::TriggerKeyOfOtherType {
                key,
                trigger,
                owner,
                kind,
            } => format!(
                "`{key}` is a key of {owner} triggers, and {} is a {kind}",
                trigger_label(*trigger)
            ),
            Problem::TriggerNoMessage { trigger, .. } => {
                format!("{} needs `message`", trigger_label(*trigger))
            }
            Problem::EmptyTriggerMessage { .. } => "`message` is empty".into(),
            Problem::InvalidTemplate { leaf, err } => {
                format!("`{leaf}` is not a valid template: {err}")
            }
            Problem::TemplateInSchedule => "a schedule's `session` cannot be a template: a fire \
                                            has no body to fill `{{ … }}` from"
                .into(),
            Problem::TriggerSessionKey(err) => format!("`session` is not a session key: {err}"),
            Problem::ScheduleRuleTwice { trigger } => {
                format!("{} has both `cron` and `every`", trigger_label(*trigger))
            }
            Problem::ScheduleNoRule { trigger } => {
                format!("{} needs `cron` or `every`", trigger_label(*trigger))
            }
            Problem::TimezoneWithEvery => "`timezone` does not apply to `every`: intervals are \
                                           aligned to the Unix epoch, not to a zone's clock"
                .into(),
            Problem::Schedule(ScheduleError::UnknownZone { name, .. }) => {
                format!("unknown time zone `{name}`")
            }
            Problem::Schedule(err) => err.to_string(),
            Problem::UnknownTriggerChoice { leaf, found, .. } => {
                format!("unknown `{leaf}` value `{found}`")
            }
            Problem::TriggerSettingUnused(Unused::CatchUpWindow) => {
                "`catch_up_window` has no effect with `catch_up: none`".into()
            }
            Problem::TriggerSettingUnused(Unused::Tolerance) => {
                "`tolerance` has no effect with `signature: github`: GitHub sends no timestamp"
                    .into()
            }
            Problem::WebhookNoSecret { trigger } => format!(
                "{} needs `secret`: the name of the secret its deliveries are signed with",
                trigger_label(*trigger)
            ),
            Problem::MaxBodyFormat(text) => {
                format!("`max_body` must be a size such as `1MiB` or `256k`, found \"{text}\"")
            }
            Problem::MaxBodyRange(found) => {
                format!("`max_body` must be from 1 byte to 25 MiB, found {found}")
            }
            Problem::TooManyTriggers => format!("the pool has more than {} triggers", MAX_TRIGGERS),
            Problem::DuplicateTrigger { name, first_line } => {
                format!("trigger name `{name}` is already used (line {first_line})")
            }
            Problem::DuplicateWebhookPath {
                path,
                trigger,
                other,
                defaulted,
            } => format!(
                "webhook `{trigger}`'s path `{path}`{} is already webhook `{other}`'s",
                if *defaulted { " (its name)" } else { "" }
            ),
            Problem::UnknownTriggerTarget { agent, trigger, .. } => format!(
                "`target_agent` `{agent}` of {} is not an agent of this agentfile",
                trigger_label(*trigger)
            ),
            Problem::BatchTriggerTarget {
                trigger,
                agent,
                first,
            } => format!(
                "{} goes to agent `{agent}`{}, which is a batch job (`execution.durability: \
                 false`)",
                trigger_label(*trigger),
                if *first {
                    " (the first agent: it has no `target_agent`)"
                } else {
                    ""
                }
            ),
        }
    }

    /// How to fix it, when there is something to say.
    pub(super) fn help(&self) -> Option<String> {
        let starter = "`ninetrix init` writes a starter";
        Some(match self {
            Problem::Context(c) => c.help(),
            Problem::Security(p) => p.help(),
            Problem::Jobs(p) => p.help(),
            Problem::A2a(p) => p.help(),
            Problem::SecretsNotShell(_) => "remove `secrets` from this entry; give secrets to \
                an MCP server in its `mcp_servers` entry (`secrets:`), or to `shell` with \
                `{ name: shell, secrets: [NAME] }`"
                .into(),
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
            Problem::UnknownBusyMode(_) => "`queue` (the default) waits for the running turn; \
                                            `steer` joins it; `interrupt` ends it and starts a \
                                            new one; `reject` refuses the message (409)"
                .into(),
            Problem::BudgetNotPositive { leaf, .. } => {
                format!(
                    "give a budget in US dollars, e.g. `{leaf}: 1.00`, or remove it for no limit"
                )
            }
            Problem::PoolBudgetAtAgent => "move it under the top-level `governance:`: every \
                                           agent of the pool spends from it. An agent's own \
                                           budget for a day is `max_budget_per_day`"
                .into(),
            Problem::UnknownBudgetAction { closest, .. } => {
                let takes = "`on_budget_exceeded` is `stop` (the default: the turn ends with a \
                             reply naming the budget) or `ask_human` (a person is asked to raise \
                             the budget; the turn waits for the answer)";
                match closest {
                    Some(c) => format!("did you mean `{c}`? {}", capitalize(takes)),
                    None => takes.into(),
                }
            }
            Problem::BudgetSettingUnused { key, .. } => format!(
                "it applies to `max_budget_per_session`, `max_budget_per_day` and the top-level \
                 `max_pool_budget_per_day`, which the checkpoint API keeps; `max_budget_per_run` \
                 is the runner's and always stops the turn. Set one of them, or remove `{key}`"
            ),
            Problem::SnapshotBytes(_) => "give the most bytes of files one snapshot may hold, \
                from `1Mi` to `64Gi` (units are powers of 1024), e.g. `max_bytes: 512Mi` (the \
                default); a workspace past it gets no snapshot for that turn"
                .into(),
            Problem::SnapshotsUnused(_) => "snapshots are taken at the end of a durable agent's \
                turns, for `ninetrix fork`, `rewind` and `diff`; remove `snapshots` here, or set \
                it on a durable agent"
                .into(),
            Problem::EmptyLimits | Problem::PoolLimitNoNumber => {
                "give at least one of `max_in_flight`, `requests_per_minute` and \
                 `tokens_per_minute`, e.g. `max_in_flight: 8`, or remove it"
                    .into()
            }
            Problem::PoolLimitNoProvider => "name the provider whose key it limits, e.g. \
                                             `provider: openai`, with `base_url` and \
                                             `api_key_secret` when the models use others than \
                                             the provider's own"
                .into(),
            Problem::DuplicatePoolLimit { .. } => "a provider key has one set of limits for \
                                                   the whole pool: merge the two entries"
                .into(),
            Problem::PoolLimitUnused(_) => "an entry applies to every agent's model and \
                                            fallback with the same `provider`, `base_url` and \
                                            `api_key_secret` (absent: the provider's own); \
                                            write them as the models do, or remove the entry"
                .into(),
            Problem::LimitsConflict { .. } => "the checkpoint API keeps one set of limits per \
                                               provider key for the whole pool, and the latest \
                                               call's numbers rule it: give every model on this \
                                               key the same limits (a top-level `limits:` entry \
                                               does), or use another key"
                .into(),
            Problem::FallbackMissing(_) => "write each fallback as `{ provider: anthropic, \
                                            model: claude-sonnet-4-6 }`, with `base_url` and \
                                            `api_key_secret` when they are not the provider's \
                                            own"
            .into(),
            Problem::FallbackScripted => "the scripted provider only answers from \
                                          `runtime.script`; name a provider that serves models, \
                                          e.g. `provider: anthropic` with `model: \
                                          claude-sonnet-4-6`"
                .into(),
            Problem::FallbackRepeats { .. } => "a fallback is tried when the models before it \
                                                keep failing; give another provider, model or \
                                                `base_url`, or remove this one"
                .into(),
            Problem::TooManyFallbacks(_) => "each fallback is tried in turn after \
                                             `fallback_after` of failures; keep the ones most \
                                             likely to answer"
                .into(),
            Problem::FallbackAfterUnused => "it is how long a model may keep failing before the \
                                             next of `runtime.fallback` is tried; add a \
                                             fallback, or remove `fallback_after`"
                .into(),
            Problem::UnknownMemoryScope(_) => {
                "`agent` (the default) shares the memory among every \
                                               session and replica of the agent; `session` keeps \
                                               one per session"
                    .into()
            }
            Problem::ScopeNotMemory(_) => "remove `scope`, or set it on `{ name: memory, scope: \
                                           session }`"
                .into(),
            Problem::UnknownEffect(_) => "effects are `read` (safe to re-run), `idempotent` \
                                          (re-running is harmless) and `write` (never re-run \
                                          silently)"
                .into(),
            Problem::DuplicateTool { first, again, .. } => {
                let group = [first, again]
                    .into_iter()
                    .find_map(|w| Some((bare(w), crate::tools::group(bare(w))?)))
                    .filter(|(_, tools)| tools.len() > 1);
                match group {
                    Some((g, tools)) => format!(
                        "list each tool once: `{g}` gives {}, so leave out the tools it gives, \
                         or name the ones needed instead of `{g}`",
                        tools.join(", ")
                    ),
                    None => "list each tool once".into(),
                }
            }
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
            Problem::ShellNeedsImage => "set `runtime.image` to an image that has /bin/sh and the \
                                         programs the commands need (e.g. debian:stable-slim), or \
                                         remove `shell` from `tools` (with `tools: all`, list \
                                         the tools the agent needs instead)"
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
                DurationField::CatchUpWindow => "e.g. `catch_up_window: 6h` (the default is \
                                                 `1h`); a fire missed longer ago than this is \
                                                 skipped"
                    .into(),
                DurationField::Tolerance => "e.g. `tolerance: 10m` (the default is `5m`); a \
                                             Standard Webhooks delivery whose `webhook-timestamp` \
                                             is further than this from the server's clock is \
                                             refused (401)"
                    .into(),
                DurationField::InterruptGrace => "e.g. `interrupt_grace: 30s` (the default is \
                                                  `10s`); a tool call still running after it \
                                                  when its turn is interrupted is stopped"
                    .into(),
                DurationField::JobTimeout => "e.g. `default_timeout: 30m` or \
                                              `default_timeout: 2d` (the default is `1h`); a \
                                              job still running at its timeout is killed"
                    .into(),
                DurationField::FallbackAfter => "e.g. `fallback_after: 2m` (the default is \
                                                 `30s`); a model that keeps failing this long \
                                                 (connection errors, 5xx, 429s) gives way to \
                                                 the next of `fallback`"
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
            Problem::UnsupportedTriggerKey {
                key,
                endpoint: true,
            } => format!(
                "a webhook's URL is `POST /v1/hooks/<pool>/<path>` on the checkpoint API; remove \
                 `{key}` and name the last segment with `path:` (the default is the trigger's \
                 name)"
            ),
            Problem::UnsupportedTriggerKey { key, .. } => format!(
                "`{key}` is a chat channel key of the public Ninetrix; remove it. A chat platform \
                 that sends webhooks can reach an agent through a `type: webhook` trigger \
                 (docs/agentfile.md, Triggers)"
            ),
            Problem::TriggerNoName => format!(
                "give it a name unique in the pool, e.g. `name: nightly-report` (lower-case \
                 letters, digits and `-`, at most {MAX_NAME_CHARS} characters)"
            ),
            Problem::TriggerNoType {
                guess: Some(guess), ..
            } => format!("it has {guess} keys: add `type: {guess}`"),
            Problem::TriggerNoType { guess: None, .. } => "add `type: schedule` (with `cron:` or \
                                                           `every:`) or `type: webhook` (with \
                                                           `secret:`)"
                .into(),
            Problem::ChannelTrigger => "chat channels (Telegram, Slack, …) are not supported \
                                        yet; a platform that sends webhooks can reach an agent \
                                        through `type: webhook`, one session per chat with e.g. \
                                        `session: \"chat-{{ message.chat.id }}\"`"
                .into(),
            Problem::UnknownTriggerType { closest, .. } => {
                let types = "a trigger is `type: schedule` (`cron:` or `every:`) or `type: \
                             webhook` (signed HTTP deliveries)";
                match closest {
                    Some(c) => format!("did you mean `{c}`? {}", capitalize(types)),
                    None => types.into(),
                }
            }
            Problem::InvalidTriggerName { name, what } => {
                let fixed = trigger_name_example(name);
                format!(
                    "{}s use lower-case letters, digits and `-`, start with a letter or digit, \
                     and have at most {MAX_NAME_CHARS} characters{}",
                    capitalize(what.as_str()),
                    fixed.map_or(String::new(), |e| format!("; for example `{e}`"))
                )
            }
            Problem::TargetUnderAgent { .. } => "remove `target_agent`; to send the trigger's \
                                                 messages to another agent, declare it under \
                                                 that agent, or in the top-level `triggers:` with \
                                                 `target_agent:`"
                .into(),
            Problem::TriggerKeyOfOtherType {
                key, owner, kind, ..
            } => {
                let takes = match *kind {
                    "schedule" => "cron or every, timezone, overlap, catch_up, catch_up_window",
                    _ => "path, secret, signature, tolerance, rate_limit, max_body",
                };
                format!(
                    "remove `{key}`, or make it a {owner} (`type: {owner}`); a {kind} takes \
                     {takes}"
                )
            }
            Problem::TriggerNoMessage { webhook, .. }
            | Problem::EmptyTriggerMessage { webhook } => {
                if *webhook {
                    "give the text each delivery puts in the session: a template over the JSON \
                     body, e.g. `message: \"New issue: {{ issue.title }}\"`"
                        .into()
                } else {
                    "give the text each fire puts in the session, e.g. `message: Write the \
                     daily report.`"
                        .into()
                }
            }
            Problem::InvalidTemplate { .. } => "a template is text with `{{ path }}` \
                                                placeholders into the delivery's JSON body: \
                                                `New issue: {{ issue.title }}`, \
                                                `chat-{{ message.chat.id }}`, \
                                                `{{ commits.0.id }}`"
                .into(),
            Problem::TemplateInSchedule => "write a fixed key (`session: daily-report`), or \
                                            `session: new` for a fresh session each fire; \
                                            templates are for webhooks"
                .into(),
            Problem::TriggerSessionKey(_) => "write a key of 1 to 200 characters on one line, \
                                              `session: new` for a fresh session each time, or \
                                              leave `session` out (the default is \
                                              `trigger:<name>`)"
                .into(),
            Problem::ScheduleRuleTwice { .. } => "keep one: `cron` for times on a clock (`0 9 * * \
                                                  1-5`), `every` for a fixed interval (`10m`)"
                .into(),
            Problem::ScheduleNoRule { .. } | Problem::Schedule(ScheduleError::NoRule) => {
                "add `cron: \"0 9 * * 1-5\"` (minute hour day-of-month month day-of-week, on the \
                 clock of `timezone`) or `every: 10m`"
                    .into()
            }
            Problem::TimezoneWithEvery => "remove `timezone`, or write the schedule as `cron:` \
                                           (e.g. `cron: \"*/10 * * * *\"`) to read it on that \
                                           zone's clock"
                .into(),
            Problem::Schedule(ScheduleError::UnknownZone { suggestion, .. }) => {
                let zones = "time zones are IANA names such as `Europe/Lisbon`, \
                             `America/New_York` or `UTC` (the default)";
                match suggestion {
                    Some(s) => format!("did you mean `{s}`? {}", capitalize(zones)),
                    None => zones.into(),
                }
            }
            Problem::Schedule(ScheduleError::Every { .. } | ScheduleError::Period { .. }) => {
                "e.g. `every: 30s`, `every: 10m` or `every: 1d`; from 1 second to 366 days, \
                 aligned to the Unix epoch"
                    .into()
            }
            Problem::Schedule(_) => "a cron expression has 5 fields, `minute hour day-of-month \
                                     month day-of-week`: `0 9 * * 1-5` is 9:00 on weekdays, \
                                     `*/15 * * * *` every 15 minutes; quote it in YAML"
                .into(),
            Problem::UnknownTriggerChoice { leaf, closest, .. } => {
                let takes = match *leaf {
                    "overlap" => {
                        "`overlap` is `skip` (the default: no fire while the previous \
                                  fire's turn runs), `buffer_one` (hold one back until it \
                                  ends) or `allow`"
                    }
                    "catch_up" => {
                        "`catch_up` is `last` (the default: after an outage, run the \
                                   latest missed fire once), `all` or `none`"
                    }
                    _ => {
                        "`signature` is `auto` (the default: whichever the headers show), \
                          `github` (`X-Hub-Signature-256`) or `standard_webhooks`"
                    }
                };
                match closest {
                    Some(c) => format!("did you mean `{c}`? {}", capitalize(takes)),
                    None => takes.into(),
                }
            }
            Problem::TriggerSettingUnused(Unused::CatchUpWindow) => "it limits how far back a \
                                                                      missed fire is caught up, \
                                                                      and `catch_up: none` skips \
                                                                      every missed fire; remove \
                                                                      it, or set `catch_up: last` \
                                                                      or `all`"
                .into(),
            Problem::TriggerSettingUnused(Unused::Tolerance) => "it bounds the age of a Standard \
                                                                  Webhooks `webhook-timestamp`; \
                                                                  remove it, or use `signature: \
                                                                  standard_webhooks` (or `auto`)"
                .into(),
            Problem::WebhookNoSecret { .. } => "add e.g. `secret: GITHUB_WEBHOOK_SECRET` and \
                                                provide its value on the host: `up` reads it from \
                                                its environment and gives it to the checkpoint \
                                                API only (never to an agent)"
                .into(),
            Problem::MaxBodyFormat(_) => "write bytes, or a number with a unit: `256k`, `1MiB`, \
                                          `5Mi` (units are powers of 1024); at most 25 MiB"
                .into(),
            Problem::MaxBodyRange(_) => format!(
                "the default is 1 MiB and the most {} MiB (GitHub's own cap); a larger \
                 delivery is answered 413",
                MAX_MAX_BODY_BYTES >> 20
            ),
            Problem::TooManyTriggers => "the checkpoint API holds at most 256 triggers per \
                                         pool; split the agents into several pools"
                .into(),
            Problem::DuplicateTrigger { first_line, .. } => format!(
                "trigger names are unique in the pool (the top-level `triggers:` and every \
                 agent's): rename this one or the one on line {first_line}"
            ),
            Problem::DuplicateWebhookPath { .. } => "each webhook of the pool has its own URL, \
                                                     `POST /v1/hooks/<pool>/<path>`: give one of \
                                                     them another `path:` (the default is the \
                                                     trigger's name)"
                .into(),
            Problem::UnknownTriggerTarget {
                closest, agents, ..
            } => {
                let list = format!("the agents are: {}", agents.join(", "));
                let fix = "a top-level trigger sends its messages to `target_agent`, an agent of \
                           the same agentfile (the first one when it is not given)";
                match closest {
                    Some(c) => format!("did you mean `{c}`? {}; {fix}", capitalize(&list)),
                    None => format!("{list}; {fix}"),
                }
            }
            Problem::BatchTriggerTarget { agent, .. } => format!(
                "a trigger puts its messages in a session of its agent, and a batch job serves \
                 no sessions (it runs its `task` once); set `execution.durability: true` on \
                 `{agent}`, or send the trigger to a durable agent"
            ),
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

/// "trigger `name`", or "this trigger" when it has no valid name.
fn trigger_label(trigger: Option<&str>) -> String {
    trigger.map_or_else(|| "this trigger".into(), |name| format!("trigger `{name}`"))
}

/// `name` fixed into a valid trigger name, if lower-casing and `-` for the characters between
/// words make one.
fn trigger_name_example(name: &str) -> Option<String> {
    let fixed: String = name
        .trim()
        .to_lowercase()
        .chars()
        .map(|c| {
            if matches!(c, '_' | ' ' | '.' | '/' | ':') {
                '-'
            } else {
                c
            }
        })
        .collect();
    let fixed = fixed.trim_start_matches('-').to_string();
    (fixed != name && ninetrix_proto::triggers::spec::is_valid_name(&fixed)).then_some(fixed)
}

impl NameOf {
    fn as_str(self) -> &'static str {
        match self {
            NameOf::Trigger => "trigger name",
            NameOf::WebhookPath => "webhook path",
        }
    }
}

/// A tool name as written without `builtin://`.
fn bare(written: &str) -> &str {
    written.strip_prefix("builtin://").unwrap_or(written)
}

/// `text` with its first letter in upper case.
fn capitalize(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}
