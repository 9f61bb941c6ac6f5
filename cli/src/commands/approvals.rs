//! Requests to people, from the terminal: `ninetrix approvals` lists a pool's pending approvals
//! of gated tool calls and `ask_human` questions (every status with `--all`), `approve`, `deny`
//! and `answer` decide one, and `approvals token` mints an approver token for one pool.
//!
//! The API is the one `trace` and `invoke` use (`AGENTFILE_API_URL` + `AGENTFILE_ADMIN_TOKEN` if
//! set, else this home's local API where its container publishes it now), with the admin token —
//! or, with `AGENTFILE_APPROVER_TOKEN`, an approver token (its decisions are recorded by its own
//! name); nothing here starts a container. A decision is recorded once: a different one later is
//! the API's 409, printed as it names the decision that stands. Rendering is a pure function of
//! the records and the time ([`render`]).

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use ninetrix_client::{ApprovalQuery, Client, ClientError, ErrorCode};
use ninetrix_proto::ApprovalId;
use ninetrix_proto::api::{
    Approval, ApprovalKind, ApprovalStatus, ApproverTokenRequest, DecisionRequest, Verdict,
};

use crate::cli::pool_name;
use crate::pool::local_api::Api;

/// Arguments of `ninetrix approvals`.
#[derive(Debug, Args)]
pub struct ApprovalsArgs {
    /// The agentfile (for the pool name).
    #[arg(short, long, default_value = "agentfile.yaml", value_name = "FILE")]
    pub file: PathBuf,
    /// The pool [default: the agentfile's, else the only pool]
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// Only this agent's requests.
    #[arg(long, value_name = "AGENT")]
    pub agent: Option<String>,
    /// Every request, decided and expired ones too (adds a STATUS column).
    #[arg(long)]
    pub all: bool,
    /// The records as a JSON array.
    #[arg(long)]
    pub json: bool,
    /// What else to do with the pool's requests.
    #[command(subcommand)]
    pub command: Option<ApprovalsCommand>,
}

/// The subcommands of `ninetrix approvals`.
#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// Mint an approver token (with the admin token): it lists and decides one pool's requests
    /// only. Prints only the token on stdout, its expiry on stderr.
    Token(TokenArgs),
}

/// Arguments of `ninetrix approvals token`.
#[derive(Debug, Args)]
pub struct TokenArgs {
    /// The pool whose requests it may list and decide (required; also accepted before `token`).
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// Who holds it: recorded as who decided.
    #[arg(long, value_name = "NAME", value_parser = non_empty)]
    pub name: String,
    /// How long it works: `30d`, `12h`, `90m`, or seconds (1m to 365d).
    #[arg(long, default_value = "30d", value_name = "TTL", value_parser = parse_ttl)]
    pub ttl: u64,
}

/// Arguments of `ninetrix approve`.
#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// The request, as `ninetrix approvals` lists it.
    #[arg(value_name = "ID", value_parser = approval_id)]
    pub id: ApprovalId,
    /// Why (recorded with the decision).
    #[arg(long, value_name = "REASON")]
    pub reason: Option<String>,
    /// Who decides, as recorded [default: $USER, else admin]
    #[arg(long, value_name = "NAME", value_parser = non_empty)]
    pub by: Option<String>,
}

/// Arguments of `ninetrix deny`.
#[derive(Debug, Args)]
pub struct DenyArgs {
    /// The request, as `ninetrix approvals` lists it.
    #[arg(value_name = "ID", value_parser = approval_id)]
    pub id: ApprovalId,
    /// Why: the agent is told, as the call's error result.
    #[arg(long, value_name = "REASON", value_parser = non_empty)]
    pub reason: String,
    /// Who decides, as recorded [default: $USER, else admin]
    #[arg(long, value_name = "NAME", value_parser = non_empty)]
    pub by: Option<String>,
}

/// Arguments of `ninetrix answer`.
#[derive(Debug, Args)]
pub struct AnswerArgs {
    /// The question, as `ninetrix approvals` lists it.
    #[arg(value_name = "ID", value_parser = approval_id)]
    pub id: ApprovalId,
    /// The answer; `-` reads it from stdin.
    #[arg(value_name = "TEXT")]
    pub text: String,
    /// Who answers, as recorded [default: $USER, else admin]
    #[arg(long, value_name = "NAME", value_parser = non_empty)]
    pub by: Option<String>,
}

/// Clap's check of a request ID: the bad value is named, with where IDs come from.
fn approval_id(value: &str) -> Result<ApprovalId, String> {
    value
        .parse::<ApprovalId>()
        .map_err(|e| format!("{e}; `ninetrix approvals` lists the requests with their IDs"))
}

/// Clap's check of a value that must say something.
fn non_empty(value: &str) -> Result<String, String> {
    if value.trim().is_empty() {
        Err("must not be empty".into())
    } else {
        Ok(value.to_string())
    }
}

/// Shortest approver token lifetime the API accepts, in seconds.
const MIN_TTL: u64 = 60;
/// Longest approver token lifetime the API accepts (a year), in seconds.
const MAX_TTL: u64 = 365 * 86_400;

/// `--ttl`: `30d`, `12h`, `90m`, `45s` or plain seconds, within what the API accepts. The
/// agentfile's duration rule ([`ninetrix_agentfile::units::parse_duration`]), read as `--ttl`
/// always was: trimmed and case-insensitive (`12H`), and a duration past 64 bits of seconds is
/// not a duration.
pub(crate) fn parse_ttl(value: &str) -> Result<u64, String> {
    let bad = || format!("`{value}` is not a duration: use e.g. 30d, 12h, 90m, or seconds");
    let secs = ninetrix_agentfile::units::parse_duration(&value.trim().to_ascii_lowercase())
        .filter(|&secs| secs != u64::MAX)
        .ok_or_else(bad)?;
    if !(MIN_TTL..=MAX_TTL).contains(&secs) {
        return Err(format!(
            "`{value}` is {secs} seconds; a token lasts from 1m (60 seconds) to 365d"
        ));
    }
    Ok(secs)
}

/// Who decides when `--by` is not given: the local user, else `admin`.
fn default_by() -> String {
    std::env::var("USER")
        .ok()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| "admin".into())
}

/// The checkpoint API as these commands reach it: with an approver token when
/// `AGENTFILE_APPROVER_TOKEN` is set (with `AGENTFILE_API_URL`: a person who may decide one pool's
/// requests and nothing else), else with the admin token, found as `trace` and `invoke` find it.
struct Admin {
    client: Client,
    /// The admin's API; `None` with an approver token.
    api: Option<Api>,
    /// The API's URL, for messages.
    url: String,
}

impl Admin {
    /// `AGENTFILE_API_URL` with `AGENTFILE_APPROVER_TOKEN` or `AGENTFILE_ADMIN_TOKEN` if set,
    /// else this home's local API (which must be running: nothing is started here).
    async fn connect() -> anyhow::Result<Admin> {
        let url = std::env::var("AGENTFILE_API_URL").unwrap_or_default();
        let approver = std::env::var("AGENTFILE_APPROVER_TOKEN").unwrap_or_default();
        if !approver.trim().is_empty() {
            if url.trim().is_empty() {
                bail!(
                    "AGENTFILE_APPROVER_TOKEN is set but AGENTFILE_API_URL is not; set it to the \
                     URL of the checkpoint API the token was minted by"
                );
            }
            let client = Client::new(
                ninetrix_client::http_client(),
                url.trim(),
                Some(ninetrix_client::Token::new(approver.trim().to_string())),
            );
            return Ok(Admin {
                client,
                api: None,
                url,
            });
        }
        let home = crate::home::agentfile_home()?;
        let external = !url.is_empty();
        let api = Api::any(&home).await.map_err(|e| {
            if external {
                e
            } else {
                anyhow::anyhow!(
                    "{e:#}; or set AGENTFILE_API_URL and AGENTFILE_ADMIN_TOKEN (or \
                     AGENTFILE_APPROVER_TOKEN) to use an API elsewhere"
                )
            }
        })?;
        Ok(Admin {
            client: api.client().clone(),
            url: api.url.clone(),
            api: Some(api),
        })
    }

    /// Whether the decisions made here are recorded by the token's own name (an approver token),
    /// so `by` is left out unless given.
    fn approver(&self) -> bool {
        self.api.is_none()
    }

    /// A failed call as an error that says what to do: a refused token names where it comes
    /// from; an unreachable API how to start one or name another.
    fn explain(&self, e: ClientError, doing: &str) -> anyhow::Error {
        if matches!(e, ClientError::Unreachable { .. }) {
            return anyhow::anyhow!(
                "{e}; `ninetrix up` starts the local API, or set AGENTFILE_API_URL and \
                 AGENTFILE_ADMIN_TOKEN to use another"
            );
        }
        match &self.api {
            Some(api) => api.explain(e, doing),
            None if e.is_auth() => anyhow::anyhow!(
                "the checkpoint API at {} refused the approver token while {doing} ({}); the \
                 token comes from AGENTFILE_APPROVER_TOKEN (an admin mints one with `ninetrix \
                 approvals token -p POOL --name NAME`; it works for that pool only, until it \
                 expires)",
                self.url,
                e.code().map(ToString::to_string).unwrap_or_default()
            ),
            None => anyhow::Error::new(e).context(format!("while {doing}")),
        }
    }
}

/// The error of a refused decision, for the refusals a person can act on: a decision that
/// already stands or an expiry (409: the API's message names what stands), a request that does
/// not exist (404), a decision that does not fit the request (422, with the command that fits
/// when the request's `kind` is known). Any other failure is handed back.
fn decision_error(
    id: ApprovalId,
    verdict: Verdict,
    kind: Option<ApprovalKind>,
    e: ClientError,
) -> Result<anyhow::Error, ClientError> {
    let ClientError::Api {
        status,
        code,
        message,
        ..
    } = &e
    else {
        return Err(e);
    };
    match (status, code) {
        (_, ErrorCode::AlreadyDecided | ErrorCode::ApprovalExpired) => {
            Ok(anyhow::anyhow!("{message}"))
        }
        (404, _) => Ok(anyhow::anyhow!(
            "no request {id} (list them with `ninetrix approvals`)"
        )),
        (_, ErrorCode::InvalidDecision) => {
            let hint = match (kind, verdict) {
                (Some(ApprovalKind::Question), Verdict::Approve) => format!(
                    "; use `ninetrix answer {id} TEXT` (or `ninetrix deny {id} --reason R`)"
                ),
                (Some(ApprovalKind::Approval), Verdict::Answer) => {
                    format!("; use `ninetrix approve {id}` or `ninetrix deny {id} --reason R`")
                }
                _ => String::new(),
            };
            Ok(anyhow::anyhow!("{message}{hint}"))
        }
        _ => Err(e),
    }
}

/// Runs `ninetrix approvals` (the listing) or its subcommand.
pub(crate) async fn run(args: &ApprovalsArgs) -> anyhow::Result<ExitCode> {
    match &args.command {
        Some(ApprovalsCommand::Token(token)) => {
            mint(token.pool.as_deref().or(args.pool.as_deref()), token).await
        }
        None => list(args).await,
    }
}

/// Requests fetched per page.
const PAGE: u32 = 1000;

/// `ninetrix approvals`: the pool's requests as a table, or JSON.
async fn list(args: &ApprovalsArgs) -> anyhow::Result<ExitCode> {
    let pool = crate::pool::resolve::pool_name(&args.file, args.pool.as_deref())?;
    let admin = Admin::connect().await?;
    let mut records: Vec<Approval> = Vec::new();
    loop {
        let query = ApprovalQuery {
            pool: Some(pool.clone()),
            agent: args.agent.clone(),
            thread: None,
            status: (!args.all).then_some(ApprovalStatus::Pending),
            limit: Some(PAGE),
            offset: Some(u32::try_from(records.len()).unwrap_or(u32::MAX)),
        };
        let page = admin
            .client
            .list_approvals(&query)
            .await
            .map_err(|e| admin.explain(e, &format!("listing the requests of pool {pool}")))?;
        let full = page.len() >= PAGE as usize;
        records.extend(page);
        if !full {
            break;
        }
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&records)?);
        return Ok(ExitCode::SUCCESS);
    }
    if records.is_empty() {
        eprintln!("{}", empty_line(&pool, args.agent.as_deref(), args.all));
        return Ok(ExitCode::SUCCESS);
    }
    crate::output::text(&render(&records, Utc::now(), args.all, terminal_width()));
    Ok(ExitCode::SUCCESS)
}

/// What an empty listing says.
fn empty_line(pool: &str, agent: Option<&str>, all: bool) -> String {
    let what = if all {
        "no requests"
    } else {
        "no pending requests"
    };
    match agent {
        Some(agent) => format!("{what} for agent {agent} in pool {pool}"),
        None => format!("{what} in pool {pool}"),
    }
}

/// The width the table fits: `COLUMNS`, else the terminal's, else 120.
fn terminal_width() -> usize {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .or_else(|| terminal_size::terminal_size().map(|(w, _)| usize::from(w.0)))
        .unwrap_or(120)
}

/// The narrowest the ARGS column gets, however narrow the terminal.
const MIN_ARGS: usize = 20;

/// The table of requests, as of `now`, fitted to `width` columns by cutting the ARGS preview:
/// ID, AGENT (`agent-replica`), KIND, TOOL, ARGS (one line; a question's text), AGE, EXPIRES
/// (`in 23h`, `expired`, `-` once decided), and with `all` the STATUS (`approved by alice`).
pub(crate) fn render(records: &[Approval], now: DateTime<Utc>, all: bool, width: usize) -> String {
    let fixed: Vec<[String; 7]> = records
        .iter()
        .map(|a| {
            [
                a.id.to_string(),
                agent_of(a),
                a.kind.as_str().to_string(),
                a.tool.clone(),
                age(now - a.requested_at),
                expires(a, now),
                status_of(a),
            ]
        })
        .collect();
    let headers = ["ID", "AGENT", "KIND", "TOOL", "AGE", "EXPIRES", "STATUS"];
    let columns = if all { 7 } else { 6 };
    let taken: usize = (0..columns)
        .map(|i| {
            fixed
                .iter()
                .map(|row| row[i].chars().count())
                .chain([headers[i].len()])
                .max()
                .unwrap_or(0)
        })
        .sum::<usize>()
        + 2 * columns;
    let budget = width.saturating_sub(taken).max(MIN_ARGS);
    let rows = records
        .iter()
        .zip(fixed)
        .map(|(a, [id, agent, kind, tool, age, exp, status])| {
            let args = cut(&args_preview(a), budget);
            [id, agent, kind, tool, args, age, exp, status]
        });
    let header = [
        "ID", "AGENT", "KIND", "TOOL", "ARGS", "AGE", "EXPIRES", "STATUS",
    ];
    if all {
        let rows: Vec<[String; 8]> = rows.collect();
        crate::ui::table::table(header, &rows)
    } else {
        let rows: Vec<[String; 7]> = rows
            .map(|[id, agent, kind, tool, args, age, exp, _]| {
                [id, agent, kind, tool, args, age, exp]
            })
            .collect();
        let [h0, h1, h2, h3, h4, h5, h6, _] = header;
        crate::ui::table::table([h0, h1, h2, h3, h4, h5, h6], &rows)
    }
}

/// `agent-replica` as `logs` and `up` name a replica; the agent alone without a replica.
fn agent_of(a: &Approval) -> String {
    match (&a.labels.agent, a.labels.replica) {
        (Some(agent), Some(r)) => format!("{agent}-{r}"),
        (Some(agent), None) => agent.clone(),
        (None, _) => "-".into(),
    }
}

/// What the request shows in one line: a question's text (or a budget raise's), else the
/// call's arguments as JSON.
fn args_preview(a: &Approval) -> String {
    let text = match (a.kind, a.args.get("question").and_then(|q| q.as_str())) {
        (ApprovalKind::Question | ApprovalKind::Budget, Some(q)) => q.to_string(),
        _ => a.args.to_string(),
    };
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` in at most `max` characters, `…` marking a cut.
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A span in the largest whole unit that fits, kubectl-style: `45s`, `12m`, `23h`, `3d` (hours up
/// to two days, so `in 47h` is not rounded down to `in 1d`).
fn span(d: chrono::TimeDelta) -> String {
    let s = d.num_seconds().max(0);
    match s {
        s if s < 60 => format!("{s}s"),
        s if s < 3_600 => format!("{}m", s / 60),
        s if s < 48 * 3_600 => format!("{}h", s / 3_600),
        s => format!("{}d", s / 86_400),
    }
}

/// The AGE column.
fn age(d: chrono::TimeDelta) -> String {
    span(d)
}

/// The EXPIRES column: `in 23h` while pending, `expired` once the clock settled it, `-` once a
/// person did.
fn expires(a: &Approval, now: DateTime<Utc>) -> String {
    match a.status {
        ApprovalStatus::Pending if a.expires_at > now => format!("in {}", span(a.expires_at - now)),
        ApprovalStatus::Pending | ApprovalStatus::Expired => "expired".into(),
        _ => "-".into(),
    }
}

/// The STATUS column: the status, and who decided.
fn status_of(a: &Approval) -> String {
    match (&a.decided_by, a.status) {
        (
            Some(by),
            ApprovalStatus::Approved | ApprovalStatus::Rejected | ApprovalStatus::Answered,
        ) => {
            format!("{} by {by}", a.status.as_str())
        }
        _ => a.status.as_str().to_string(),
    }
}

/// `ninetrix approvals token`: mints the token; stdout gets the token alone.
async fn mint(pool: Option<&str>, args: &TokenArgs) -> anyhow::Result<ExitCode> {
    let Some(pool) = pool else {
        bail!("name the pool: `ninetrix approvals token -p POOL --name NAME`");
    };
    let admin = Admin::connect().await?;
    let request = ApproverTokenRequest {
        pool: pool.to_string(),
        name: args.name.clone(),
        ttl_secs: Some(args.ttl),
    };
    let minted = admin
        .client
        .mint_approver_token(&request)
        .await
        .map_err(|e| admin.explain(e, &format!("minting an approver token for pool {pool}")))?;
    outln!("{}", minted.token);
    eprintln!(
        "approver token for {} in pool {}, valid for {}: expires {}",
        minted.name,
        minted.pool,
        crate::ui::exact_duration(args.ttl),
        minted
            .expires_at
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    );
    Ok(ExitCode::SUCCESS)
}

/// Posts a decision; a refusal becomes an error a person can act on. `by` left out is the local
/// user with the admin token; an approver token is recorded by its own name.
async fn decide(id: ApprovalId, mut request: DecisionRequest) -> anyhow::Result<ExitCode> {
    let admin = Admin::connect().await?;
    if request.by.is_none() && !admin.approver() {
        request.by = Some(default_by());
    }
    let decided = match admin.client.decide_approval(id, &request).await {
        Ok(decided) => decided,
        Err(e) => {
            // Which command fits depends on what the request is: ask only when it did not fit.
            let kind = if e.code() == Some(&ErrorCode::InvalidDecision) {
                admin
                    .client
                    .approval(id)
                    .await
                    .ok()
                    .flatten()
                    .map(|a| a.kind)
            } else {
                None
            };
            return Err(decision_error(id, request.decision, kind, e)
                .unwrap_or_else(|e| admin.explain(e, &format!("deciding request {id}"))));
        }
    };
    outln!("{}", decided_line(&decided));
    Ok(ExitCode::SUCCESS)
}

/// `approved ID (tool file_write, agent writer-1)`.
fn decided_line(a: &Approval) -> String {
    format!(
        "{} {} (tool {}, agent {})",
        a.status.as_str(),
        a.id,
        a.tool,
        agent_of(a)
    )
}

/// Runs `ninetrix approve`.
pub(crate) async fn approve(args: &ApproveArgs) -> anyhow::Result<ExitCode> {
    decide(
        args.id,
        DecisionRequest {
            decision: Verdict::Approve,
            reason: args.reason.clone(),
            answer: None,
            by: args.by.clone(),
        },
    )
    .await
}

/// Runs `ninetrix deny`.
pub(crate) async fn deny(args: &DenyArgs) -> anyhow::Result<ExitCode> {
    decide(
        args.id,
        DecisionRequest {
            decision: Verdict::Reject,
            reason: Some(args.reason.clone()),
            answer: None,
            by: args.by.clone(),
        },
    )
    .await
}

/// Runs `ninetrix answer`.
pub(crate) async fn answer(args: &AnswerArgs) -> anyhow::Result<ExitCode> {
    let text = answer_text(&args.text, || {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("cannot read the answer from stdin")?;
        Ok(text)
    })?;
    decide(
        args.id,
        DecisionRequest {
            decision: Verdict::Answer,
            reason: None,
            answer: Some(text),
            by: args.by.clone(),
        },
    )
    .await
}

/// The answer: TEXT, or stdin for `-` (its final line break dropped); never empty.
fn answer_text(
    arg: &str,
    stdin: impl FnOnce() -> anyhow::Result<String>,
) -> anyhow::Result<String> {
    let text = if arg == "-" {
        let read = stdin()?;
        read.strip_suffix('\n')
            .map(|t| t.strip_suffix('\r').unwrap_or(t))
            .unwrap_or(&read)
            .to_string()
    } else {
        arg.to_string()
    };
    if text.trim().is_empty() {
        bail!("the answer is empty; give TEXT, or `-` to read it from stdin");
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone as _;
    use ninetrix_proto::ThreadId;
    use ninetrix_proto::api::ThreadLabels;
    use serde_json::json;

    use super::*;
    use crate::cli::{Cli, Command};

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::parse_from_args(std::iter::once("ninetrix").chain(args.iter().copied()))
    }

    const ID: &str = "01936f5e-7c1a-7d3e-9f4b-2a6c8e0d1f35";

    #[test]
    fn deny_needs_a_reason() {
        let err = parse(&["deny", ID]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::MissingRequiredArgument);
        assert!(err.to_string().contains("--reason"), "{err}");
        let err = parse(&["deny", ID, "--reason", "  "]).unwrap_err();
        assert!(err.to_string().contains("must not be empty"), "{err}");
        let Command::Deny(d) = parse(&["deny", ID, "--reason", "too risky", "--by", "alice"])
            .unwrap()
            .command
        else {
            panic!("not deny");
        };
        assert_eq!(
            (d.id.to_string(), d.reason.as_str(), d.by.as_deref()),
            (ID.to_string(), "too risky", Some("alice"))
        );
    }

    #[test]
    fn a_bad_id_is_named_in_the_error() {
        for args in [
            &["approve", "writer-1"][..],
            &["deny", "writer-1", "--reason", "r"],
            &["answer", "writer-1", "text"],
        ] {
            let err = parse(args).unwrap_err();
            assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation);
            let text = err.to_string();
            assert!(
                text.contains("`writer-1` is not a valid approval ID")
                    && text.contains("ninetrix approvals"),
                "{text}"
            );
        }
    }

    #[test]
    fn approve_and_answer_take_their_arguments() {
        let Command::Approve(a) = parse(&["approve", ID]).unwrap().command else {
            panic!("not approve");
        };
        assert_eq!((a.reason, a.by), (None, None));
        let Command::Answer(a) = parse(&["answer", ID, "blue, as agreed", "--by", "carol"])
            .unwrap()
            .command
        else {
            panic!("not answer");
        };
        assert_eq!(a.text, "blue, as agreed");
        assert_eq!(a.by.as_deref(), Some("carol"));
        let Command::Answer(a) = parse(&["answer", ID, "-"]).unwrap().command else {
            panic!("not answer");
        };
        assert_eq!(a.text, "-");
        assert!(parse(&["answer", ID]).is_err(), "TEXT is required");
    }

    #[test]
    fn an_answer_from_stdin_loses_its_final_line_break_only() {
        let from = |s: &'static str| answer_text("-", move || Ok(s.to_string()));
        assert_eq!(from("yes\n").unwrap(), "yes");
        assert_eq!(from("two\nlines\r\n").unwrap(), "two\nlines");
        assert!(from("\n").is_err());
        assert_eq!(
            answer_text("text", || panic!("stdin is not read")).unwrap(),
            "text"
        );
        assert!(answer_text(" ", || unreachable!()).is_err());
    }

    #[test]
    fn approvals_lists_with_filters_and_token_mints_for_a_pool() {
        let Command::Approvals(a) =
            parse(&["approvals", "-p", "support", "--agent", "triage", "--all"])
                .unwrap()
                .command
        else {
            panic!("not approvals");
        };
        assert_eq!(a.pool.as_deref(), Some("support"));
        assert_eq!(a.agent.as_deref(), Some("triage"));
        assert!(a.all && !a.json && a.command.is_none());

        for args in [
            &["approvals", "token", "-p", "support", "--name", "alice"][..],
            &["approvals", "-p", "support", "token", "--name", "alice"],
            &["-p", "support", "approvals", "token", "--name", "alice"],
            &[
                "-p",
                "top",
                "approvals",
                "-p",
                "x",
                "token",
                "-p",
                "support",
                "--name",
                "alice",
            ],
        ] {
            let Command::Approvals(a) = parse(args).unwrap().command else {
                panic!("not approvals");
            };
            let Some(ApprovalsCommand::Token(t)) = a.command else {
                panic!("not token");
            };
            assert_eq!(
                t.pool.as_deref().or(a.pool.as_deref()),
                Some("support"),
                "the innermost -p wins: {args:?}"
            );
            assert_eq!((t.name.as_str(), t.ttl), ("alice", 30 * 86_400));
        }
        let err = parse(&["approvals", "token", "--name", "alice"]).unwrap_err();
        assert!(err.to_string().contains("-p POOL"), "{err}");
        assert!(
            parse(&["approvals", "--all", "token", "-p", "s", "--name", "a"]).is_err(),
            "listing flags do not mix with the subcommand"
        );
        let Command::Approvals(a) = parse(&[
            "approvals",
            "token",
            "-p",
            "s",
            "--name",
            "a",
            "--ttl",
            "12h",
        ])
        .unwrap()
        .command
        else {
            panic!("not approvals");
        };
        let Some(ApprovalsCommand::Token(t)) = a.command else {
            panic!("not token");
        };
        assert_eq!(t.ttl, 12 * 3_600);
    }

    #[test]
    fn ttls_take_days_hours_minutes_or_seconds_within_the_apis_range() {
        assert_eq!(parse_ttl("30d"), Ok(30 * 86_400));
        assert_eq!(parse_ttl("12h"), Ok(43_200));
        assert_eq!(parse_ttl("90m"), Ok(5_400));
        assert_eq!(parse_ttl("3600"), Ok(3_600));
        assert_eq!(parse_ttl("120s"), Ok(120));
        assert_eq!(parse_ttl("365d"), Ok(MAX_TTL));
        for bad in ["", "d", "30x", "1.5h", "-5m", "h12", "30 d x"] {
            let err = parse_ttl(bad).unwrap_err();
            assert!(err.contains("is not a duration"), "{bad}: {err}");
        }
        assert!(parse_ttl("59").unwrap_err().contains("from 1m"));
        assert!(parse_ttl("366d").unwrap_err().contains("to 365d"));
        assert!(parse_ttl("99999999999999999999d").is_err());
    }

    fn at(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 1, h, m, 0).unwrap()
    }

    fn approval(
        n: u8,
        agent: &str,
        kind: ApprovalKind,
        tool: &str,
        args: serde_json::Value,
        status: ApprovalStatus,
    ) -> Approval {
        Approval {
            id: ApprovalId::from(uuid::Uuid::from_u128(
                0x0193_6f5e_7c1a_7d3e_9f4b_2a6c_8e0d_1f00 + u128::from(n),
            )),
            thread_id: ThreadId::from(uuid::Uuid::from_u128(
                0x0193_6f5e_0000_7000_8000_0000_0000_0001,
            )),
            labels: ThreadLabels {
                pool: Some("support".into()),
                agent: Some(agent.into()),
                replica: Some(1),
                session: None,
            },
            epoch: 1,
            turn_seq: 1,
            key: format!("k{n}"),
            call_id: format!("call-{n}"),
            kind,
            tool: tool.into(),
            args,
            args_hash: "ab12".into(),
            status,
            requested_at: at(9, 0),
            expires_at: at(9, 0) + chrono::TimeDelta::hours(24),
            decided_at: None,
            decided_by: None,
            reason: None,
            answer: None,
            raise: None,
        }
    }

    fn sample() -> Vec<Approval> {
        let mut question = approval(
            2,
            "triage",
            ApprovalKind::Question,
            "ask_human",
            json!({"question": "Which customer tier\nis this ticket for?"}),
            ApprovalStatus::Pending,
        );
        question.requested_at = at(10, 30);
        let long = approval(
            3,
            "writer",
            ApprovalKind::Approval,
            "shell",
            json!({"command": "rm -rf /srv/app/cache && systemctl restart app && curl -fsS https://status.example.com/ping", "api_key": "***"}),
            ApprovalStatus::Pending,
        );
        let mut approved = approval(
            4,
            "writer",
            ApprovalKind::Approval,
            "file_write",
            json!({"path": "report.md"}),
            ApprovalStatus::Approved,
        );
        approved.decided_by = Some("alice".into());
        approved.decided_at = Some(at(9, 5));
        let mut expired = approval(
            5,
            "writer",
            ApprovalKind::Approval,
            "http_post",
            json!({"url": "https://example.com"}),
            ApprovalStatus::Expired,
        );
        expired.requested_at = at(9, 0) - chrono::TimeDelta::days(3);
        expired.expires_at = at(9, 0) - chrono::TimeDelta::days(2);
        vec![
            approval(
                1,
                "writer",
                ApprovalKind::Approval,
                "file_write",
                json!({"path": "out.txt", "content": "hello"}),
                ApprovalStatus::Pending,
            ),
            question,
            long,
            approved,
            expired,
        ]
    }

    #[test]
    fn a_budget_raise_is_previewed_by_its_question() {
        let raise = approval(
            6,
            "writer",
            ApprovalKind::Budget,
            "budget",
            json!({"question": "raise agent writer's budget for 2026-11-28 by $5.00?", "spent_usd": 5.02}),
            ApprovalStatus::Pending,
        );
        assert_eq!(
            args_preview(&raise),
            "raise agent writer's budget for 2026-11-28 by $5.00?"
        );
    }

    #[test]
    fn the_pending_table_fits_the_width_and_previews_questions_by_their_text() {
        let records: Vec<Approval> = sample()
            .into_iter()
            .filter(|a| a.status == ApprovalStatus::Pending)
            .collect();
        let text = render(&records, at(11, 0), false, 120);
        for line in text.lines() {
            assert!(line.chars().count() <= 120, "{line}");
        }
        assert!(!text.contains("STATUS"));
        insta::assert_snapshot!(text);
    }

    #[test]
    fn the_table_of_every_status_says_who_decided() {
        let text = render(&sample(), at(11, 0), true, 140);
        for line in text.lines() {
            assert!(line.chars().count() <= 140, "{line}");
        }
        insta::assert_snapshot!(text);
    }

    #[test]
    fn a_narrow_terminal_still_shows_some_args() {
        let text = render(&sample(), at(11, 0), false, 40);
        let first = text.lines().nth(1).unwrap();
        assert!(first.contains("  {\"content\":\"hello\",…  "), "{first}");
    }

    #[test]
    fn expiry_and_age_read_as_spans() {
        let mut a = sample().remove(0);
        assert_eq!(expires(&a, at(9, 0)), "in 24h");
        assert_eq!(expires(&a, at(9, 0) - chrono::TimeDelta::days(3)), "in 4d");
        assert_eq!(
            expires(&a, at(9, 0) + chrono::TimeDelta::days(2)),
            "expired"
        );
        a.status = ApprovalStatus::Rejected;
        assert_eq!(expires(&a, at(9, 0)), "-");
        assert_eq!(age(chrono::TimeDelta::seconds(45)), "45s");
        assert_eq!(age(chrono::TimeDelta::seconds(-5)), "0s");
        assert_eq!(age(chrono::TimeDelta::minutes(90)), "1h");
        assert_eq!(age(chrono::TimeDelta::hours(47)), "47h");
        assert_eq!(age(chrono::TimeDelta::hours(49)), "2d");
        assert_eq!(crate::ui::exact_duration(30 * 86_400), "30d");
        assert_eq!(crate::ui::exact_duration(36 * 3_600), "36h");
        assert_eq!(crate::ui::exact_duration(5_400), "90m");
        assert_eq!(crate::ui::exact_duration(61), "61s");
    }

    fn api_error(status: u16, code: ErrorCode, message: &str) -> ClientError {
        ClientError::Api {
            status,
            code,
            message: message.into(),
            running: None,
        }
    }

    #[test]
    fn refused_decisions_say_what_stands_or_what_fits() {
        let id: ApprovalId = ID.parse().unwrap();
        let stands = format!("approval {id} was already rejected by alice (too risky)");
        let e = decision_error(
            id,
            Verdict::Approve,
            None,
            api_error(409, ErrorCode::AlreadyDecided, &stands),
        )
        .unwrap();
        assert_eq!(e.to_string(), stands);
        let e = decision_error(
            id,
            Verdict::Approve,
            None,
            api_error(404, ErrorCode::NotFound, "approval not found"),
        )
        .unwrap();
        assert_eq!(
            e.to_string(),
            format!("no request {id} (list them with `ninetrix approvals`)")
        );
        let e = decision_error(
            id,
            Verdict::Approve,
            Some(ApprovalKind::Question),
            api_error(
                422,
                ErrorCode::InvalidDecision,
                "this request is a question: answer it",
            ),
        )
        .unwrap();
        assert!(
            e.to_string().ends_with(&format!(
                "use `ninetrix answer {id} TEXT` (or `ninetrix deny {id} --reason R`)"
            )),
            "{e}"
        );
        let e = decision_error(
            id,
            Verdict::Answer,
            Some(ApprovalKind::Approval),
            api_error(
                422,
                ErrorCode::InvalidDecision,
                "this request is an approval",
            ),
        )
        .unwrap();
        assert!(
            e.to_string().contains(&format!("`ninetrix approve {id}`")),
            "{e}"
        );
        assert!(
            decision_error(
                id,
                Verdict::Approve,
                None,
                api_error(503, ErrorCode::NotReady, "down")
            )
            .is_err(),
            "other failures are explained elsewhere"
        );
    }

    #[test]
    fn empty_listings_name_the_pool() {
        assert_eq!(
            empty_line("p", None, false),
            "no pending requests in pool p"
        );
        assert_eq!(
            empty_line("p", Some("triage"), true),
            "no requests for agent triage in pool p"
        );
    }
}
