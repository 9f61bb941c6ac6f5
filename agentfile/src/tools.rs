//! The builtin tools and their effect classes (docs/design.md §6.5, §10).
//!
//! The effect class decides what happens when a crash leaves a call without a recorded outcome:
//! `read` and `idempotent` tools run again, `write` tools are never silently re-run.

pub use ninetrix_proto::effects::Effect;

/// The effect class of one call of a tool: the agentfile's pinned class if it set one, else the
/// builtin's rule for these arguments (`file_write` in append mode and `http_request` with a
/// method other than GET/HEAD are `write`; `memory`'s `view` is `read`, its other commands
/// `idempotent`: the API applies each once per ledger key, so repeating one is harmless).
pub fn call_effect(tool: &str, default: Effect, pinned: bool, args: &serde_json::Value) -> Effect {
    if pinned {
        return default;
    }
    match tool {
        "file_write" if args.get("mode").and_then(|m| m.as_str()) == Some("append") => {
            Effect::Write
        }
        MEMORY if args.get("command").and_then(|c| c.as_str()) == Some("view") => Effect::Read,
        "http_request" => {
            let method = args.get("method").and_then(|m| m.as_str()).unwrap_or("GET");
            if method.eq_ignore_ascii_case("GET") || method.eq_ignore_ascii_case("HEAD") {
                Effect::Read
            } else {
                Effect::Write
            }
        }
        _ => default,
    }
}

/// How a tool's effect class reads in summaries: the pinned class, or the builtin's per-call rule.
pub fn effect_label(tool: &str, effect: Effect, pinned: bool) -> String {
    match (tool, pinned) {
        ("file_write", false) => "idempotent; append: write".to_string(),
        ("http_request", false) => "GET/HEAD: read; others: write".to_string(),
        (MEMORY, false) => "view: read; others: idempotent".to_string(),
        _ => effect.as_str().to_string(),
    }
}

/// A tool built into the runner.
#[derive(Clone, Copy, Debug)]
pub struct Builtin {
    /// Its name, as the model sees it.
    pub name: &'static str,
    /// Its default effect class.
    pub effect: Effect,
    /// What it does.
    pub summary: &'static str,
}

/// Every builtin tool.
pub const BUILTINS: &[Builtin] = &[
    Builtin {
        name: "file_read",
        effect: Effect::Read,
        summary: "read a file in the agent's workspace",
    },
    Builtin {
        name: "file_write",
        effect: Effect::Idempotent,
        summary: "write a file in the agent's workspace (overwrite: idempotent; append: write)",
    },
    Builtin {
        name: "list_dir",
        effect: Effect::Read,
        summary: "list a directory in the agent's workspace",
    },
    Builtin {
        name: "http_request",
        effect: Effect::Write,
        summary: "make an HTTP request (GET/HEAD: read; other methods: write)",
    },
    Builtin {
        name: "sleep",
        effect: Effect::Read,
        summary: "wait some seconds (to pace polling or retries)",
    },
    Builtin {
        name: "shell",
        effect: Effect::Write,
        summary: "run a command with /bin/sh (only in images that have one)",
    },
    Builtin {
        name: MEMORY,
        effect: Effect::Idempotent,
        summary: "files under /memories that outlive the conversation, kept by the checkpoint API (view, create, str_replace, insert, delete, rename)",
    },
    Builtin {
        name: JOB_START,
        effect: Effect::Write,
        summary: "start a background job: a command in a container of its own that outlives the runner (the `jobs` toolset)",
    },
    Builtin {
        name: "job_status",
        effect: Effect::Read,
        summary: "the state and exit code of the thread's background jobs",
    },
    Builtin {
        name: "job_output",
        effect: Effect::Read,
        summary: "a background job's output (its last lines, or those since an earlier read)",
    },
    Builtin {
        name: "job_wait",
        effect: Effect::Read,
        summary: "wait for a background job to end (at most the tool timeout per call)",
    },
    Builtin {
        name: "job_kill",
        effect: Effect::Idempotent,
        summary: "stop a background job (SIGTERM, then SIGKILL after 10 seconds)",
    },
    // No side effect: the runner never executes it. It stores the question, and the person's
    // answer becomes the call's result.
    Builtin {
        name: ASK_HUMAN,
        effect: Effect::Read,
        summary: "ask a person a question and wait for the answer (ninetrix answer ID TEXT)",
    },
];

/// The builtin that asks a person a question; its calls always wait for an answer, so
/// `human_approval` never gates them.
pub const ASK_HUMAN: &str = "ask_human";

/// The builtin that starts a background job.
pub const JOB_START: &str = "job_start";

/// The background-job tools, which `tools: [jobs]` gives together.
pub const JOB_TOOLS: &[&str] = &[
    JOB_START,
    "job_status",
    "job_output",
    "job_wait",
    "job_kill",
];

/// The name of the toolset of [`JOB_TOOLS`].
pub const JOBS_TOOLSET: &str = "jobs";

/// Whether `name` is one of the background-job tools.
pub fn is_job_tool(name: &str) -> bool {
    JOB_TOOLS.contains(&name)
}

/// ninetrix's toolsets: (its name, the builtins it gives).
pub const TOOLSETS: &[(&str, &[&str])] = &[(JOBS_TOOLSET, JOB_TOOLS)];

/// The builtins a name that is not itself a builtin gives: one of ninetrix's [`TOOLSETS`] or
/// one of the public Ninetrix's names ([`NINETRIX_ALIASES`]); `None` for any other name.
pub fn group(name: &str) -> Option<&'static [&'static str]> {
    TOOLSETS
        .iter()
        .chain(NINETRIX_ALIASES)
        .find(|(n, _)| *n == name)
        .map(|(_, ours)| *ours)
}

/// The builtin memory tool (Anthropic's memory tool's commands over files under `/memories`,
/// stored in the checkpoint API per agent or per session).
pub const MEMORY: &str = "memory";

/// Looks up a builtin by name.
pub fn builtin(name: &str) -> Option<&'static Builtin> {
    BUILTINS.iter().find(|b| b.name == name)
}

/// The public Ninetrix's names for the same builtins: (its name, ours).
pub const NINETRIX_ALIASES: &[(&str, &[&str])] = &[
    ("bash", &["shell"]),
    ("read_file", &["file_read"]),
    ("write_file", &["file_write"]),
    ("filesystem", &["file_read", "file_write", "list_dir"]),
    ("ask_user", &[ASK_HUMAN]),
];

/// Ninetrix builtins that ninetrix does not have yet.
pub const NINETRIX_UNSUPPORTED: &[&str] = &[
    "scheduler",
    "web_search",
    "web_browse",
    "notify",
    "sub_agent",
    "code_interpreter",
];
