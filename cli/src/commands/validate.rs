//! `ninetrix validate`: a readable summary of a valid agentfile, or every error with its place.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use ninetrix_agentfile::mcp::McpTransport;
use ninetrix_agentfile::{
    self as agentfile, AgentSpec, ApprovalAction, DiagnosticKind, FallbackModel, Governance,
    HumanApproval, LoadError, ModelLimits, OnBudgetExceeded, Parsed, Provider, Report, Severity,
    units,
};
use ninetrix_proto::triggers::schedule::{CatchUp, Overlap};
use ninetrix_proto::triggers::{SignatureScheme, TriggerKind, TriggerSession, TriggerSpec};
use serde_json::json;

use crate::EXIT_FAILURE;
use crate::cli::pool_name;
use crate::ui::style::Style;

/// Arguments of `ninetrix validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The agentfile.
    #[arg(short, long, default_value = "agentfile.yaml", value_name = "FILE")]
    pub file: PathBuf,
    /// The pool name, overriding the agentfile's `name:`.
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// Print the result as JSON on stdout (the resolved agents, or the errors).
    #[arg(long)]
    pub json: bool,
}

/// Runs `ninetrix validate`.
pub(crate) fn run(args: &ValidateArgs) -> anyhow::Result<ExitCode> {
    let file = args.file.display().to_string();
    let result = agentfile::load(&args.file);
    if args.json {
        let (value, ok) = match &result {
            Ok(parsed) => (valid_json(args, parsed), true),
            Err(err) => (invalid_json(&file, err), false),
        };
        outln!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(exit(ok));
    }
    let err_style = Style::stderr();
    match result {
        Ok(parsed) => {
            if !parsed.warnings.diagnostics.is_empty() {
                eprint!("{}", parsed.warnings.render(err_style.color));
            }
            crate::output::text(&summary(args, &parsed, Style::stdout()));
            Ok(exit(true))
        }
        Err(LoadError::Invalid(report)) => {
            eprint!("{}", report.render(err_style.color));
            eprintln!("{} {}", err_style.error("error:"), counts(&report));
            Ok(exit(false))
        }
        Err(err @ LoadError::Io { .. }) if !args.file.exists() => {
            anyhow::bail!(
                "{err}\nhint: pass the agentfile with -f FILE, or write a starter with `ninetrix init`"
            )
        }
        Err(err) => Err(err.into()),
    }
}

fn exit(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FAILURE)
    }
}

fn counts(report: &Report) -> String {
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    let errors = report.count(Severity::Error);
    let warnings = report.count(Severity::Warning);
    let mut text = format!("{} is invalid: {}", report.file, plural(errors, "error"));
    if warnings > 0 {
        let _ = write!(text, " and {}", plural(warnings, "warning"));
    }
    text
}

fn pool(args: &ValidateArgs, parsed: &Parsed) -> Option<String> {
    parsed.agentfile.pool_name(args.pool.as_deref(), &args.file)
}

fn provider_label(agent: &AgentSpec) -> String {
    let r = &agent.runtime;
    match (r.provider, &r.via, &r.base_url) {
        (Provider::Scripted, _, _) => "scripted".into(),
        (_, Some(via), _) => format!("{via} ({}) {}", r.provider.as_str(), r.model),
        (Provider::Openai, None, Some(url)) => format!("openai {} @ {url}", r.model),
        (p, _, _) => format!("{} {}", p.as_str(), r.model),
    }
}

fn summary(args: &ValidateArgs, parsed: &Parsed, style: Style) -> String {
    let af = &parsed.agentfile;
    let mut out = String::new();
    let pool_name = pool(args, parsed);
    let pool = pool_name
        .clone()
        .unwrap_or_else(|| "(none: set `name:` or pass -p)".into());
    let agents = af.agents.len();
    let replicas: u32 = af.agents.iter().map(|a| a.execution.replicas).sum();
    let _ = writeln!(
        out,
        "{} {} is valid: pool {}, {agents} agent{}, {replicas} container{}",
        style.ok("✔"),
        args.file.display(),
        style.bold(&pool),
        if agents == 1 { "" } else { "s" },
        if replicas == 1 { "" } else { "s" },
    );
    out.push_str(&agents_table(af, style));
    out.push('\n');
    if !af.mcp_servers.is_empty() {
        let _ = writeln!(out, "MCP servers:");
        let width = af.mcp_servers.keys().map(String::len).max().unwrap_or(0);
        for (name, server) in &af.mcp_servers {
            let _ = writeln!(out, "  {name:<width$}  {}", style.dim(&server.describe()));
        }
    }
    // Every durable agent's context policy: what keeps a long thread inside its window.
    let durable: Vec<&AgentSpec> = af
        .agents
        .iter()
        .filter(|a| a.execution.durability)
        .collect();
    if !durable.is_empty() {
        let _ = writeln!(out, "context:");
        let width = durable.iter().map(|a| a.name.len()).max().unwrap_or(0);
        for a in durable {
            let policy = a.runtime.context.describe();
            let _ = writeln!(out, "  {:<width$}  {}", a.name, style.dim(&policy));
        }
    }
    out.push_str(&per_agent(
        "limits and fallback:",
        af,
        limits_summary,
        style,
    ));
    // Every durable agent's workspace snapshots (what fork, rewind and diff work with).
    out.push_str(&per_agent(
        "snapshots:",
        af,
        AgentSpec::snapshots_summary,
        style,
    ));
    out.push_str(&per_agent("budgets:", af, budget_summary, style));
    out.push_str(&per_agent("security:", af, security_summary, style));
    out.push_str(&per_agent("egress:", af, egress_summary, style));
    // Agents with job tools: the image, concurrency, timeout and resources of their jobs.
    out.push_str(&per_agent("jobs:", af, AgentSpec::jobs_summary, style));
    let gates: Vec<_> = af
        .agents
        .iter()
        .filter_map(|a| Some((&a.name, a.governance.human_approval.as_ref()?)))
        .collect();
    let width = gates.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    let gated: Vec<String> = gates
        .iter()
        .map(|(name, h)| format!("  {name:<width$}  {}", style.dim(&approval_summary(h))))
        .collect();
    if !gated.is_empty() {
        let _ = writeln!(out, "human approval:");
        for line in gated {
            let _ = writeln!(out, "{line}");
        }
    }
    let callers: Vec<&AgentSpec> = af
        .agents
        .iter()
        .filter(|a| !a.collaborators.is_empty() || a.a2a_collaborators().next().is_some())
        .collect();
    let width = callers.iter().map(|a| a.name.len()).max().unwrap_or(0);
    let delegating: Vec<String> = callers
        .iter()
        .map(|a| {
            let name = &a.name;
            format!("  {name:<width$}  {}", style.dim(&collaborators_summary(a)))
        })
        .collect();
    if !delegating.is_empty() {
        let _ = writeln!(out, "collaborators:");
        for line in delegating {
            let _ = writeln!(out, "{line}");
        }
    }
    if !af.triggers.is_empty() {
        let _ = writeln!(out, "triggers:");
        out.push_str(&triggers_summary(
            &af.triggers,
            pool_name.as_deref().unwrap_or("<pool>"),
            style,
        ));
    }
    out.push_str(&secrets_needed(af, style));
    out
}

/// The agents as a table: model, replicas, how each runs, resources and tools (with their
/// effects and verifiers).
fn agents_table(af: &agentfile::Agentfile, style: Style) -> String {
    let mut out = String::new();
    let header = [
        "AGENT",
        "MODEL",
        "REPLICAS",
        "RUNS AS",
        "RESOURCES",
        "TOOLS",
    ];
    let rows: Vec<[String; 6]> = af
        .agents
        .iter()
        .map(|a| {
            let runs_as = if a.execution.durability {
                format!("durable (resume: {})", a.execution.resume.as_str())
            } else {
                "batch (runs once)".into()
            };
            let mut resources = Vec::new();
            if let Some(cpu) = a.runtime.resources.cpu {
                resources.push(format!("{cpu} cpu"));
            }
            if let Some(mem) = a.runtime.resources.memory_bytes {
                resources.push(units::format_memory(mem));
            }
            let tools: Vec<String> = a
                .tools
                .iter()
                .map(|t| {
                    let label = match t.mcp.as_ref().and_then(|m| a.mcp_servers.get(&m.server)) {
                        Some(server) => agentfile::mcp::entry_effect_label(
                            t.effect_pinned.then_some(t.effect),
                            server,
                        ),
                        None => agentfile::tools::effect_label(&t.name, t.effect, t.effect_pinned),
                    };
                    let verify = t
                        .verify
                        .as_ref()
                        .map_or(String::new(), |v| format!("; verified by {}", v.tool));
                    format!("{} ({label}{verify})", t.name)
                })
                .collect();
            [
                a.name.clone(),
                provider_label(a),
                a.execution.replicas.to_string(),
                runs_as,
                if resources.is_empty() {
                    "-".into()
                } else {
                    resources.join(", ")
                },
                if tools.is_empty() {
                    "-".into()
                } else {
                    tools.join(", ")
                },
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    out.push('\n');
    let line = |cells: Vec<String>| {
        let last = cells.len() - 1;
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i == last {
                    c.clone()
                } else {
                    format!("{c:<w$}", w = widths[i])
                }
            })
            .collect::<Vec<_>>()
            .join("  ")
    };
    let _ = writeln!(
        out,
        "  {}",
        style.dim(&line(header.map(String::from).to_vec()))
    );
    for row in rows {
        let _ = writeln!(out, "  {}", line(row.to_vec()));
    }
    out
}

/// Which secrets the agentfile needs and who uses each (agents, webhooks, MCP servers), marking
/// those this environment does not set (`up` would refuse to start).
fn secrets_needed(af: &agentfile::Agentfile, style: Style) -> String {
    let mut out = String::new();
    let mut needed: Vec<(String, Vec<String>)> = Vec::new();
    let mut need = |secret: &str, user: String| match needed.iter_mut().find(|(s, _)| s == secret) {
        Some((_, users)) => users.push(user),
        None => needed.push((secret.to_string(), vec![user])),
    };
    for agent in &af.agents {
        for secret in &agent.secrets {
            need(secret, agent.name.clone());
        }
    }
    // A webhook's secret goes to the checkpoint API, which checks the deliveries' signatures.
    for t in &af.triggers {
        if let Some(w) = t.webhook() {
            need(
                &w.secret,
                format!("webhook {} (checkpoint API only)", t.name),
            );
        }
    }
    // A sidecar's secrets go to its server process, not to the agents.
    for (name, server) in &af.mcp_servers {
        if let McpTransport::Sidecar { secrets, .. } = &server.transport {
            for secret in secrets {
                need(secret, format!("MCP server {name}"));
            }
        }
    }
    if needed.is_empty() {
        let _ = writeln!(out, "secrets needed: none");
    } else {
        let _ = writeln!(
            out,
            "secrets needed (provide them on the host; agents and MCP servers get them at \
             /run/secrets/<NAME>, webhooks' go to the checkpoint API only):"
        );
        let width = needed
            .iter()
            .map(|(s, _)| s.chars().count())
            .max()
            .unwrap_or(0);
        for (secret, users) in needed {
            // `up` reads them from its environment; say now which it would not find.
            let unset = std::env::var(&secret).map_or(true, |v| v.is_empty());
            let _ = writeln!(
                out,
                "  {secret:<width$}  {}{}",
                style.dim(&format!("used by {}", users.join(", "))),
                if unset {
                    style.error(" (not set in this environment: `up` would refuse to start)")
                } else {
                    String::new()
                }
            );
        }
    }
    out
}

/// `title` and one aligned line per agent that `line` has something to say about; nothing when
/// it has nothing to say about any.
fn per_agent(
    title: &str,
    af: &agentfile::Agentfile,
    line: fn(&AgentSpec) -> Option<String>,
    style: Style,
) -> String {
    let lines: Vec<(&str, String)> = af
        .agents
        .iter()
        .filter_map(|a| Some((a.name.as_str(), line(a)?)))
        .collect();
    let mut out = String::new();
    if lines.is_empty() {
        return out;
    }
    let width = lines.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    let _ = writeln!(out, "{title}");
    for (name, text) in lines {
        let _ = writeln!(out, "  {name:<width$}  {}", style.dim(&text));
    }
    out
}

/// An agent's effective container settings, its runtime, and what it relaxes
/// (docs/security.md): `user 65532:65532, no capabilities, … · runtime runsc · relaxed: …`.
fn security_summary(a: &AgentSpec) -> Option<String> {
    let mut text = a.security.describe();
    text.push_str(&format!(
        " · runtime {}",
        a.runtime
            .isolation
            .as_deref()
            .unwrap_or("runc (the engine's default)")
    ));
    let relaxed = a.security.relaxed();
    if !relaxed.is_empty() {
        text.push_str(&format!(" · relaxed: {}", relaxed.join(", ")));
    }
    let given: Vec<&str> = a
        .tools
        .iter()
        .flat_map(|t| &t.secrets)
        .map(String::as_str)
        .collect();
    if !given.is_empty() {
        text.push_str(&format!(" · shell is given {}", given.join(", ")));
    }
    Some(text)
}

/// A restricted agent's allow-list, each entry with why: `*.github.com (network.egress),
/// api.openai.com:443 (the model gpt-4o)` and the API when it is reached through the proxy.
fn egress_summary(a: &AgentSpec) -> Option<String> {
    a.network.restricted().then(|| {
        let list: Vec<String> = ninetrix_agentfile::network::allow_list(a, &[])
            .iter()
            .map(|e| format!("{} ({})", e.rule, e.why))
            .collect();
        let list = if list.is_empty() {
            "nothing".to_string()
        } else {
            list.join(", ")
        };
        format!(
            "only {list}, and the checkpoint API; everything else refused through the pool's egress proxy"
        )
    })
}

/// A model's pool-wide limits in words: `8 in flight, 600 requests/min, 2000000 tokens/min`.
fn limits_text(l: &ModelLimits) -> String {
    let mut parts = Vec::new();
    if let Some(n) = l.max_in_flight {
        parts.push(format!("{n} in flight"));
    }
    if let Some(n) = l.requests_per_minute {
        parts.push(format!("{n} requests/min"));
    }
    if let Some(n) = l.tokens_per_minute {
        parts.push(format!("{n} tokens/min"));
    }
    if parts.is_empty() {
        "no limit".into()
    } else {
        parts.join(", ")
    }
}

/// A fallback model as `provider_label` writes a primary one.
fn fallback_label(f: &FallbackModel) -> String {
    match (&f.via, &f.base_url) {
        (Some(via), _) => format!("{via} ({}) {}", f.provider.as_str(), f.model),
        (None, Some(url)) => format!("{} {} @ {url}", f.provider.as_str(), f.model),
        (None, None) => format!("{} {}", f.provider.as_str(), f.model),
    }
}

/// One agent's model limits and fallbacks in words, when it has either: `gpt-4o: 8 in flight ·
/// falls back after 45s to anthropic claude-sonnet-4-6 (4 in flight)`.
fn limits_summary(a: &AgentSpec) -> Option<String> {
    let r = &a.runtime;
    if !r.limits.any() && r.fallback.is_empty() {
        return None;
    }
    let mut text = format!("{}: {}", r.model, limits_text(&r.limits));
    if !r.fallback.is_empty() {
        let models: Vec<String> = r
            .fallback
            .iter()
            .map(|f| format!("{} ({})", fallback_label(f), limits_text(&f.limits)))
            .collect();
        let _ = write!(
            text,
            " · falls back after {} to {}",
            crate::ui::exact_duration(r.fallback_after_secs),
            models.join(", then ")
        );
    }
    Some(text)
}

/// One agent's budgets in words, when it has one: `$5.00 per session · $50.00 per day · pool
/// $200.00 per day · days in Europe/Lisbon · when spent: ask a person`.
fn budget_summary(a: &AgentSpec) -> Option<String> {
    let g: &Governance = &a.governance;
    let amounts = [
        (g.max_budget_per_run, "per run"),
        (g.max_budget_per_session, "per session"),
        (g.max_budget_per_day, "per day"),
    ];
    let mut parts: Vec<String> = amounts
        .iter()
        .filter_map(|(usd, per)| Some(format!("${:.2} {per}", (*usd)?)))
        .collect();
    if let Some(usd) = g.max_pool_budget_per_day {
        parts.push(format!("pool ${usd:.2} per day"));
    }
    if parts.is_empty() {
        return None;
    }
    // The run's budget is the runner's and always stops; the rest are the checkpoint API's.
    if g.budgets().is_some() {
        if g.max_budget_per_day.is_some() || g.max_pool_budget_per_day.is_some() {
            parts.push(format!("days in {}", g.timezone));
        }
        parts.push(match g.on_budget_exceeded {
            OnBudgetExceeded::Stop => "when spent: stop".into(),
            OnBudgetExceeded::AskHuman => "when spent: ask a person to raise it".into(),
        });
    }
    Some(parts.join(" · "))
}

/// One agent's approval gates in words: `gates write calls, http_request · requests expire
/// after 24h · notifies https://…`.
fn approval_summary(h: &HumanApproval) -> String {
    if !h.enabled {
        return "off (ask_human still asks)".into();
    }
    let mut what: Vec<String> = h
        .effects
        .iter()
        .map(|e| format!("{} calls", e.as_str()))
        .collect();
    what.extend(h.actions.iter().map(|a| match a {
        ApprovalAction::Tool(name) => name.clone(),
        ApprovalAction::Server(server) => format!("every tool of mcp://{server}"),
    }));
    let mut parts = vec![if what.is_empty() {
        "gates nothing (ask_human still asks)".to_string()
    } else {
        format!("gates {}", what.join(", "))
    }];
    let timeout = crate::ui::exact_duration(h.timeout_secs);
    parts.push(format!("requests expire after {timeout} (rejected)"));
    if let Some(url) = &h.notify_url {
        parts.push(format!("notifies {url}"));
    }
    parts.join(" · ")
}

/// One agent's collaborators in words, the pool's agents then the remote A2A ones:
/// `researcher (ask_researcher), crm (ask_crm) → A2A https://crm.example.com/agent-card.json
/// (secret CRM_A2A_TOKEN) · transfer_timeout 5m · max_delegation_depth 4`.
fn collaborators_summary(a: &AgentSpec) -> String {
    let tool_of = |name: &str| {
        a.tools
            .iter()
            .find(|t| t.handoff.as_ref().is_some_and(|h| h.agent == name))
            .map_or_else(|| format!("ask_{name}"), |t| t.name.clone())
    };
    let local = a
        .collaborators
        .iter()
        .map(|name| format!("{name} ({})", tool_of(name)));
    let remote = a.a2a_collaborators().map(|(name, remote)| {
        let secret = remote
            .secret
            .as_ref()
            .map(|s| format!(" (secret {s})"))
            .unwrap_or_default();
        format!("{name} ({}) → A2A {}{secret}", tool_of(name), remote.card)
    });
    let who: Vec<String> = local.chain(remote).collect();
    format!(
        "{} · transfer_timeout {} · max_delegation_depth {}",
        who.join(", "),
        crate::ui::exact_duration(a.execution.transfer_timeout_secs),
        a.execution.max_delegation_depth
    )
}

/// The pool's triggers, one aligned line each: name, type, agent, session and rule, e.g.
/// `standup  schedule  → lead  session trigger:standup  cron 0 9 * * 1-5 (Europe/Lisbon) ·
/// overlap skip · catch_up last (1h)`.
fn triggers_summary(triggers: &[TriggerSpec], pool: &str, style: Style) -> String {
    let rows: Vec<[String; 5]> = triggers
        .iter()
        .map(|t| {
            let session = match &t.session {
                TriggerSession::New => "new".to_string(),
                TriggerSession::Key(key) => key.clone(),
            };
            [
                t.name.clone(),
                t.kind_name().to_string(),
                format!("→ {}", t.agent),
                format!("session {session}"),
                trigger_rule(t, pool),
            ]
        })
        .collect();
    let mut widths = [0; 5];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for [name, kind, agent, session, rule] in rows {
        let _ = writeln!(
            out,
            "  {name:<w0$}  {kind:<w1$}  {agent:<w2$}  {session:<w3$}  {}",
            style.dim(&rule),
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3],
        );
    }
    out
}

/// A trigger's rule in words: `cron 0 9 * * 1-5 (Europe/Lisbon) · overlap skip · catch_up last
/// (1h)`, or `POST /v1/hooks/<pool>/<path> (signature auto, secret NAME)`.
fn trigger_rule(t: &TriggerSpec, pool: &str) -> String {
    match &t.kind {
        TriggerKind::Schedule(s) => {
            let overlap = match s.overlap {
                Overlap::Skip => "skip",
                Overlap::BufferOne => "buffer_one",
                Overlap::Allow => "allow",
            };
            let window = crate::ui::exact_duration(s.catch_up_window_secs);
            let catch_up = match s.catch_up {
                CatchUp::None => "none".to_string(),
                CatchUp::Last => format!("last ({window})"),
                CatchUp::All => format!("all ({window})"),
            };
            format!("{} · overlap {overlap} · catch_up {catch_up}", s.describe())
        }
        TriggerKind::Webhook(w) => {
            let signature = match w.signature {
                SignatureScheme::Auto => "auto",
                SignatureScheme::Github => "github",
                SignatureScheme::StandardWebhooks => "standard_webhooks",
            };
            format!(
                "POST /v1/hooks/{pool}/{} (signature {signature}, secret {})",
                w.path, w.secret
            )
        }
    }
}

fn valid_json(args: &ValidateArgs, parsed: &Parsed) -> serde_json::Value {
    json!({
        "valid": true,
        "file": args.file.display().to_string(),
        "pool": pool(args, parsed),
        "agents": parsed.agentfile.agents,
        "mcp_servers": parsed.agentfile.mcp_servers,
        "triggers": parsed.agentfile.triggers,
        "errors": [],
        "warnings": parsed.warnings.diagnostics,
    })
}

fn invalid_json(file: &str, err: &LoadError) -> serde_json::Value {
    let (errors, warnings) = match err {
        LoadError::Invalid(report) => {
            let (errors, warnings): (Vec<_>, Vec<_>) = report
                .diagnostics
                .iter()
                .partition(|d| d.severity == Severity::Error);
            (json!(errors), json!(warnings))
        }
        other => {
            let code = other.kind().map(DiagnosticKind::code);
            (
                json!([{ "severity": "error", "code": code, "path": "", "line": 0, "column": 0, "message": other.to_string() }]),
                json!([]),
            )
        }
    };
    json!({ "valid": false, "file": file, "errors": errors, "warnings": warnings })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Parsed {
        agentfile::parse("agentfile.yaml", text).unwrap_or_else(|r| panic!("{}", r.render(false)))
    }

    fn args(pool: Option<&str>) -> ValidateArgs {
        ValidateArgs {
            file: PathBuf::from("agentfile.yaml"),
            pool: pool.map(String::from),
            json: false,
        }
    }

    const TRIGGERS: &str = "name: team\nagents:\n  lead:\n    runtime: { provider: scripted, \
                            script: [hi] }\n  triager:\n    runtime: { provider: scripted, \
                            script: [hi] }\n    triggers:\n      - { name: queue-check, type: \
                            schedule, every: 10m, message: m, catch_up: none, overlap: \
                            buffer_one }\ntriggers:\n  - name: standup\n    type: schedule\n    \
                            cron: 0 9 * * 1-5\n    timezone: Europe/Lisbon\n    message: Post \
                            the stand-up.\n  - name: gh-issues\n    type: webhook\n    \
                            target_agent: triager\n    secret: VALIDATE_TEST_GH_SECRET\n    \
                            signature: github\n    message: \"New issue: {{ issue.title }}\"\n    \
                            session: \"issue-{{ issue.number }}\"\n  - { name: chat, type: \
                            webhook, secret: VALIDATE_TEST_GH_SECRET, message: m, session: new, \
                            signature: standard_webhooks }\n";

    #[test]
    fn triggers_are_listed_aligned_after_the_agents() {
        let p = parsed(TRIGGERS);
        let plain = Style { color: false };
        let text = summary(&args(None), &p, plain);
        let listed: Vec<&str> = text
            .lines()
            .skip_while(|l| *l != "triggers:")
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .collect();
        assert_eq!(
            listed,
            [
                "  standup      schedule  → lead     session trigger:standup           cron 0 9 * \
                 * 1-5 (Europe/Lisbon) · overlap skip · catch_up last (1h)",
                "  gh-issues    webhook   → triager  session issue-{{ issue.number }}  POST \
                 /v1/hooks/team/gh-issues (signature github, secret VALIDATE_TEST_GH_SECRET)",
                "  chat         webhook   → lead     session new                       POST \
                 /v1/hooks/team/chat (signature standard_webhooks, secret \
                 VALIDATE_TEST_GH_SECRET)",
                "  queue-check  schedule  → triager  session trigger:queue-check       every 10m · \
                 overlap buffer_one · catch_up none",
            ],
            "{text}"
        );
        // The webhooks' secret is needed once, by the API, not by an agent.
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with("VALIDATE_TEST_GH_SECRET"))
            .unwrap_or_default();
        assert!(
            line.contains(
                "used by webhook gh-issues (checkpoint API only), webhook chat (checkpoint API \
                 only)"
            ),
            "{text}"
        );
        // Without a pool name, the URL says where it goes.
        let text = summary(
            &args(None),
            &parsed(&TRIGGERS.replace("name: team\n", "")),
            plain,
        );
        assert!(text.contains("POST /v1/hooks/"), "{text}");
        let text = summary(&args(Some("other")), &p, plain);
        assert!(text.contains("POST /v1/hooks/other/gh-issues"), "{text}");
    }

    #[test]
    fn limits_fallbacks_and_budgets_are_listed_per_agent() {
        let p = parsed(
            "governance: { max_pool_budget_per_day: 200, timezone: Europe/Lisbon, \
             on_budget_exceeded: ask_human }\nlimits:\n  - { provider: openai, max_in_flight: \
             8, requests_per_minute: 600 }\n  - { provider: groq, tokens_per_minute: 100000 \
             }\nagents:\n  triage:\n    runtime: { provider: openai, model: gpt-4o-mini }\n    \
             governance: { max_budget_per_session: 0.5 }\n  writer:\n    runtime:\n      \
             provider: openai\n      model: gpt-4o\n      fallback_after: 45s\n      \
             fallback:\n        - { provider: groq, model: llama-3.3-70b-versatile }\n        \
             - { provider: anthropic, model: claude-sonnet-4-6 }\n    governance: { \
             max_budget_per_run: 1, max_budget_per_day: 50 }\n  quiet:\n    runtime: { \
             provider: scripted, script: [hi] }\n",
        );
        let text = summary(&args(None), &p, Style { color: false });
        let section = |title: &str| -> Vec<String> {
            text.lines()
                .skip_while(|l| *l != title)
                .skip(1)
                .take_while(|l| l.starts_with("  "))
                .map(String::from)
                .collect()
        };
        assert_eq!(
            section("limits and fallback:"),
            [
                "  triage  gpt-4o-mini: 8 in flight, 600 requests/min",
                "  writer  gpt-4o: 8 in flight, 600 requests/min · falls back after 45s to groq \
                 (openai) llama-3.3-70b-versatile (100000 tokens/min), then anthropic \
                 claude-sonnet-4-6 (no limit)",
            ],
            "{text}"
        );
        assert_eq!(
            section("budgets:"),
            [
                "  triage  $0.50 per session · pool $200.00 per day · days in Europe/Lisbon · \
                 when spent: ask a person to raise it",
                "  writer  $1.00 per run · $50.00 per day · pool $200.00 per day · days in \
                 Europe/Lisbon · when spent: ask a person to raise it",
                // The pool's budget reaches every agent.
                "  quiet   pool $200.00 per day · days in Europe/Lisbon · when spent: ask a \
                 person to raise it",
            ],
            "{text}"
        );
        // The JSON holds the resolved numbers.
        let v = valid_json(&args(None), &p);
        assert_eq!(
            v["agents"][1]["runtime"]["fallback"][0]["limits"]["tokens_per_minute"],
            100000
        );
        assert_eq!(
            v["agents"][0]["governance"]["max_pool_budget_per_day"],
            200.0
        );
    }

    #[test]
    fn no_limits_or_budgets_no_listing() {
        let p = parsed("agents:\n  a:\n    runtime: { provider: scripted, script: [hi] }\n");
        let text = summary(&args(None), &p, Style { color: false });
        assert!(!text.contains("limits and fallback:"), "{text}");
        assert!(!text.contains("budgets:"), "{text}");
    }

    #[test]
    fn no_triggers_no_listing() {
        let p = parsed("agents:\n  a:\n    runtime: { provider: scripted, script: [hi] }\n");
        let text = summary(&args(None), &p, Style { color: false });
        assert!(!text.contains("triggers:"), "{text}");
        assert_eq!(valid_json(&args(None), &p)["triggers"], json!([]));
    }

    #[test]
    fn the_json_holds_the_resolved_triggers() {
        let v = valid_json(&args(None), &parsed(TRIGGERS));
        let t = &v["triggers"];
        assert_eq!(t.as_array().unwrap().len(), 4);
        assert_eq!(t[0]["name"], "standup");
        assert_eq!(t[0]["agent"], "lead");
        assert_eq!(t[0]["session"], json!({ "key": "trigger:standup" }));
        assert_eq!(
            t[0]["kind"],
            json!({
                "type": "schedule",
                "cron": "0 9 * * 1-5",
                "timezone": "Europe/Lisbon",
                "message": "Post the stand-up.",
                "overlap": "skip",
                "catch_up": "last",
                "catch_up_window_secs": 3600
            })
        );
        assert_eq!(
            t[1]["kind"],
            json!({
                "type": "webhook",
                "path": "gh-issues",
                "message": "New issue: {{ issue.title }}",
                "secret": "VALIDATE_TEST_GH_SECRET",
                "signature": "github",
                "tolerance_secs": 300,
                "rate_limit_per_minute": 60,
                "max_body_bytes": 1_048_576
            })
        );
        assert_eq!(t[2]["session"], "new");
        assert_eq!(t[3]["agent"], "triager");
    }
}
