//! Builtin tools (docs/design.md §10): file tools confined to the workspace, `http_request`, `shell`,
//! and the definitions of `memory` (whose commands the driver runs through the checkpoint API)
//! and of the job tools (run by the driver through the pool's job broker, `crate::jobs`).
//! A tool's failure is a result the model sees (`is_error`), never a crash of the runner. Every
//! call runs under the agent's `tool_timeout`.

mod fs;
mod http;
pub(crate) mod memory;
pub mod sandbox;
mod shell;

use std::path::PathBuf;
use std::time::Duration;

use ninetrix_agentfile::{HandoffTarget, ToolSpec};
use serde_json::{Value, json};

use crate::llm::ToolDef;

/// What a tool returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolOutput {
    /// The text the model sees.
    pub content: String,
    /// Whether it is an error.
    pub is_error: bool,
}

impl ToolOutput {
    pub(crate) fn ok(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: false,
        }
    }

    pub(crate) fn error(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: true,
        }
    }
}

/// Where and how tools run.
#[derive(Clone, Debug)]
pub struct ToolContext {
    /// The workspace the file tools are confined to.
    pub workspace: PathBuf,
    /// The longest a call may take.
    pub timeout: Duration,
    /// The HTTP client for `http_request`.
    pub http: reqwest::Client,
    /// How `shell` starts its processes.
    pub sandbox: sandbox::Sandbox,
    /// The secrets `shell` was given by name (`{ name: shell, secrets: [...] }`).
    pub shell_secrets: sandbox::Given,
}

/// Most bytes of a tool result the model sees from an MCP server (as `http_request`'s body).
pub const MAX_RESULT: usize = 256 * 1024;

/// `text` as the checkpoint API stores it: U+0000 (NUL), which no backend stores as text (the
/// API refuses it), becomes U+FFFD, as `from_utf8_lossy` already does for bytes that are not
/// UTF-8. A tool that prints binary data then still records its outcome.
pub fn storable(text: String) -> String {
    if text.contains('\0') {
        text.replace('\0', "\u{FFFD}")
    } else {
        text
    }
}

/// `text` cut to at most `max` bytes (at a character boundary), saying where it was cut.
pub fn cap(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push_str(&format!("\n[result cut at {max} bytes]"));
    text
}

/// The definitions offered to the model for the agent's builtin tools (MCP tools are added by
/// the driver once their servers list them).
pub fn definitions(tools: &[ToolSpec]) -> Vec<ToolDef> {
    tools
        .iter()
        .filter(|t| t.mcp.is_none())
        .filter_map(|t| match &t.handoff {
            Some(target) => Some(handoff_definition(&t.name, target)),
            None => definition(&t.name),
        })
        .collect()
}

/// The definition of `ask_<agent>`: hand a task to a collaborator and get its reply.
fn handoff_definition(name: &str, target: &HandoffTarget) -> ToolDef {
    let about = target
        .about
        .as_deref()
        .map(|a| format!(" About `{}`: {a}", target.agent))
        .unwrap_or_default();
    let description = match &target.a2a {
        Some(_) => format!(
            "Send a task to `{}`, a remote agent (over A2A), and wait for its answer, which is the result. It sees only the task and the context you give.{about}",
            target.agent
        ),
        None => format!(
            "Hand a task to the agent `{}` and wait for its reply, which is the result. It works in a conversation of its own and sees only the task and the context you give.{about}",
            target.agent
        ),
    };
    ToolDef {
        name: name.to_string(),
        description,
        parameters: json!({"type": "object", "properties": {
            "task": {"type": "string", "description": "What to do, complete enough to do without other context."},
            "context": {"type": "string", "description": "Facts, constraints or earlier results the task needs."}
        }, "required": ["task"]}),
    }
}

fn definition(name: &str) -> Option<ToolDef> {
    let (description, parameters) = match name {
        "file_read" => (
            "Read a text file in the workspace.",
            json!({"type": "object", "properties": {"path": {"type": "string", "description": "Path relative to the workspace"}}, "required": ["path"]}),
        ),
        "file_write" => (
            "Write a text file in the workspace (creating directories). mode=overwrite replaces the file; mode=append adds to its end.",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "Path relative to the workspace"},
                "content": {"type": "string"},
                "mode": {"type": "string", "enum": ["overwrite", "append"], "default": "overwrite"}
            }, "required": ["path", "content"]}),
        ),
        "list_dir" => (
            "List a directory in the workspace (directories end with /).",
            json!({"type": "object", "properties": {"path": {"type": "string", "description": "Path relative to the workspace", "default": "."}}}),
        ),
        "http_request" => (
            "Make an HTTP request and return the status and body (at most 256 KiB).",
            json!({"type": "object", "properties": {
                "url": {"type": "string"},
                "method": {"type": "string", "default": "GET"},
                "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                "body": {"type": "string"}
            }, "required": ["url"]}),
        ),
        "sleep" => (
            "Wait for some seconds (at most the tool timeout), e.g. before checking something again.",
            json!({"type": "object", "properties": {"seconds": {"type": "number", "minimum": 0}}, "required": ["seconds"]}),
        ),
        "ask_human" => (
            "Ask a person a question and wait for their answer (it may take hours). Use it when you need a decision, a fact or a confirmation only a person can give; the answer is the result.",
            json!({"type": "object", "properties": {"question": {"type": "string", "description": "The question, complete enough to answer without other context."}}, "required": ["question"]}),
        ),
        "shell" => (
            "Run a command with /bin/sh -c in the workspace; returns the exit code and output (at most 64 KiB).",
            json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}),
        ),
        "memory" => (memory::DESCRIPTION, memory::parameters()),
        "job_start" => (
            "Start a background job: a shell command (/bin/sh -c) run in the workspace in a container of its own. It goes on while you work, and survives restarts of this conversation's runner; use it for builds, test suites, downloads, servers. Answers the job's ID at once; follow it with job_status, job_output, job_wait, job_kill.",
            json!({"type": "object", "properties": {
                "command": {"type": "string", "description": "The command, run with /bin/sh -c in the workspace"},
                "name": {"type": "string", "description": "A name to refer to it by (letters, digits, - _ .)"},
                "timeout": {"type": ["number", "string"], "description": "The longest it may run: seconds, or e.g. \"10m\", \"2h\" (default: the agent's runtime.jobs.default_timeout)"}
            }, "required": ["command"]}),
        ),
        "job_status" => (
            "The state (created, running, exited) and exit code of a background job, or of every job of this conversation when `job` is left out.",
            json!({"type": "object", "properties": {"job": {"type": "string", "description": "The job's name or ID"}}}),
        ),
        "job_output" => (
            "A background job's output (stdout and stderr), by line: the last `tail` lines, or the lines after `since` (the `next read` of an earlier answer). At most 64 KiB: the last lines.",
            json!({"type": "object", "properties": {
                "job": {"type": "string", "description": "The job's name or ID"},
                "tail": {"type": "integer", "minimum": 0},
                "since": {"type": "integer", "minimum": 0}
            }, "required": ["job"]}),
        ),
        "job_wait" => (
            "Wait for a background job to end, at most `timeout` seconds (and at most the tool timeout); answers its state and exit code. Call again to keep waiting.",
            json!({"type": "object", "properties": {
                "job": {"type": "string", "description": "The job's name or ID"},
                "timeout": {"type": "number", "minimum": 0}
            }, "required": ["job"]}),
        ),
        "job_kill" => (
            "Stop a background job (SIGTERM, then SIGKILL after 10 seconds); its output so far stays readable.",
            json!({"type": "object", "properties": {"job": {"type": "string", "description": "The job's name or ID"}}, "required": ["job"]}),
        ),
        _ => return None,
    };
    Some(ToolDef {
        name: name.to_string(),
        description: description.to_string(),
        parameters,
    })
}

/// Runs a builtin tool.
pub async fn run(name: &str, args: &Value, ctx: &ToolContext) -> ToolOutput {
    if args.get("_raw").is_some() {
        return ToolOutput::error(
            "the arguments were not valid JSON; call the tool again with a JSON object",
        );
    }
    let work = async {
        match name {
            "file_read" => fs::read(ctx, args).await,
            "file_write" => fs::write(ctx, args).await,
            "list_dir" => fs::list(ctx, args).await,
            "http_request" => http::request(ctx, args).await,
            "shell" => shell::run(ctx, args).await,
            // Its result is the person's answer, taken from the request the engine stored.
            "ask_human" => ToolOutput::error("ask_human is answered by a person, not run"),
            // Run by the driver through the checkpoint API, with the call's ledger key.
            "memory" => ToolOutput::error("the memory tool needs the checkpoint API"),
            "sleep" => match args.get("seconds").and_then(Value::as_f64) {
                Some(s) if s.is_finite() && s >= 0.0 => {
                    tokio::time::sleep(Duration::from_secs_f64(s.min(ctx.timeout.as_secs_f64())))
                        .await;
                    ToolOutput::ok(format!("waited {s} seconds"))
                }
                _ => ToolOutput::error("missing `seconds` (a number)"),
            },
            other => ToolOutput::error(format!("`{other}` is not a builtin tool")),
        }
    };
    let mut out = match tokio::time::timeout(ctx.timeout, work).await {
        Ok(out) => out,
        Err(_) => ToolOutput::error(format!(
            "`{name}` did not finish within {}s (runtime.tool_timeout)",
            ctx.timeout.as_secs()
        )),
    };
    out.content = storable(out.content);
    out
}

/// A short preview of arguments for events and logs: secret-looking keys masked, long strings
/// cut, known secret values scrubbed.
pub fn preview_args(args: &Value, secrets: &[&str]) -> String {
    crate::engine::preview(&mask(args, secrets, Some(80)).to_string(), 200)
}

/// Arguments as shown to people deciding on them: secret-looking keys masked and known secret
/// values scrubbed, nothing cut.
pub fn masked_args(args: &Value, secrets: &[&str]) -> Value {
    mask(args, secrets, None)
}

/// `args` with secret-looking keys' values replaced by `***` and the secret values scrubbed from
/// every string; strings cut to `cut` characters when given.
fn mask(args: &Value, secrets: &[&str], cut: Option<usize>) -> Value {
    fn walk(v: &Value, secrets: &[&str], cut: Option<usize>) -> Value {
        match v {
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| {
                        let lower = k.to_ascii_lowercase();
                        let hidden = [
                            "token",
                            "key",
                            "secret",
                            "password",
                            "authorization",
                            "cookie",
                        ]
                        .iter()
                        .any(|s| lower.contains(s));
                        (
                            k.clone(),
                            if hidden {
                                Value::String("***".into())
                            } else {
                                walk(v, secrets, cut)
                            },
                        )
                    })
                    .collect(),
            ),
            Value::Array(items) => {
                Value::Array(items.iter().map(|v| walk(v, secrets, cut)).collect())
            }
            Value::String(s) => {
                let mut s = s.clone();
                for secret in secrets.iter().filter(|s| s.len() >= 4) {
                    s = s.replace(secret, "***");
                }
                Value::String(match cut {
                    Some(n) => crate::engine::preview(&s, n),
                    None => s,
                })
            }
            other => other.clone(),
        }
    }
    walk(args, secrets, cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previews_hide_secrets() {
        let args = json!({"url": "https://x/?q=sk-live-abcdef", "headers": {"Authorization": "Bearer abc"}, "api_key": "zzz", "body": "x".repeat(500)});
        let p = preview_args(&args, &["sk-live-abcdef"]);
        assert!(
            !p.contains("sk-live") && !p.contains("Bearer abc") && !p.contains("zzz"),
            "{p}"
        );
        assert!(p.chars().count() <= 201, "{p}");
    }

    #[test]
    fn masked_args_hide_secrets_but_keep_everything_else_whole() {
        let long = "y".repeat(500);
        let args = json!({"to": "ops@example.com", "password": "hunter22", "body": format!("key sk-live-abcdef {long}")});
        let masked = masked_args(&args, &["sk-live-abcdef"]);
        assert_eq!(masked["password"], "***");
        assert_eq!(masked["to"], "ops@example.com");
        assert_eq!(masked["body"], format!("key *** {long}"), "nothing cut");
    }

    #[test]
    fn results_are_capped_at_a_character_boundary() {
        assert_eq!(storable("a\0b".into()), "a\u{FFFD}b");
        assert_eq!(storable("ab".into()), "ab");
        assert_eq!(cap("short".into(), 10), "short");
        let capped = cap("é".repeat(10), 5);
        assert_eq!(capped, "éé\n[result cut at 5 bytes]");
    }

    #[test]
    fn every_builtin_has_a_definition() {
        for b in ninetrix_agentfile::tools::BUILTINS {
            assert!(definition(b.name).is_some(), "{}", b.name);
        }
    }
}

#[cfg(test)]
mod process_tests {
    use super::*;

    fn ctx(dir: &std::path::Path, timeout_ms: u64) -> ToolContext {
        ToolContext {
            workspace: dir.to_path_buf(),
            timeout: Duration::from_millis(timeout_ms),
            http: reqwest::Client::new(),
            sandbox: sandbox::Sandbox::unconfined(dir),
            shell_secrets: sandbox::Given::default(),
        }
    }

    #[tokio::test]
    async fn shell_reports_exit_codes_and_is_killed_at_the_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let out = run(
            "shell",
            &json!({"command": "echo hi; echo oops >&2; exit 3"}),
            &ctx(dir.path(), 5000),
        )
        .await;
        assert!(out.is_error);
        assert!(
            out.content.starts_with("exit code 3\nhi\n") && out.content.contains("[stderr]\noops"),
            "{}",
            out.content
        );
        let out = run(
            "shell",
            &json!({"command": "sleep 5"}),
            &ctx(dir.path(), 200),
        )
        .await;
        assert!(
            out.is_error && out.content.contains("did not finish"),
            "{}",
            out.content
        );
    }

    #[tokio::test]
    async fn file_tools_write_append_read_and_list() {
        let dir = tempfile::tempdir().unwrap();
        let c = ctx(dir.path(), 5000);
        assert!(
            !run(
                "file_write",
                &json!({"path": "a/b.txt", "content": "one\n"}),
                &c
            )
            .await
            .is_error
        );
        assert!(
            !run(
                "file_write",
                &json!({"path": "a/b.txt", "content": "two\n", "mode": "append"}),
                &c
            )
            .await
            .is_error
        );
        assert_eq!(
            run("file_read", &json!({"path": "a/b.txt"}), &c)
                .await
                .content,
            "one\ntwo\n"
        );
        assert_eq!(run("list_dir", &json!({}), &c).await.content, "a/");
        let escape = run("file_write", &json!({"path": "../x", "content": "no"}), &c).await;
        assert!(escape.is_error && escape.content.contains("leaves the workspace"));
        let bad = run("file_write", &json!({"_raw": "{not json"}), &c).await;
        assert!(bad.is_error && bad.content.contains("not valid JSON"));
    }

    #[tokio::test]
    async fn http_request_caps_the_body() {
        let app = axum::Router::new().route(
            "/big",
            axum::routing::get(|| async { "x".repeat(300 * 1024) }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let dir = tempfile::tempdir().unwrap();
        let out = run(
            "http_request",
            &json!({"url": format!("http://{addr}/big")}),
            &ctx(dir.path(), 5000),
        )
        .await;
        assert!(!out.is_error);
        assert!(
            out.content.starts_with("HTTP 200")
                && out.content.ends_with("[body cut at 262144 bytes]")
        );
        let out = run(
            "http_request",
            &json!({"url": format!("http://{addr}/missing")}),
            &ctx(dir.path(), 5000),
        )
        .await;
        assert!(out.is_error && out.content.starts_with("HTTP 404"));
    }
}
