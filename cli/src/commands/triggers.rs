//! `ninetrix triggers`: a pool's schedules and webhooks as the checkpoint API holds them (`up`
//! registers the agentfile's `triggers:`, `down` removes them), `triggers fire` to run one now and
//! `triggers history` to see what became of each fire and delivery.
//!
//! The API is the one `trace` and `approvals` use (`AGENTFILE_API_URL` + `AGENTFILE_ADMIN_TOKEN`
//! if set, else this home's local API where its container publishes it now); nothing here starts
//! a container. A fire only puts a message in a session's inbox: it waits there until a replica
//! of the agent takes it, and the output says so. Rendering lives in [`crate::ui::triggers`].

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use chrono::Utc;
use clap::{Args, Subcommand};
use ninetrix_client::{ClientError, ErrorCode};
use ninetrix_proto::api::{FireRequest, Trigger, TriggerOutcome};
use serde_json::Value;

use crate::cli::pool_name;
use crate::pool::local_api::{Api, lacks_trigger_routes};

/// The examples at the end of `ninetrix triggers --help`.
pub(crate) const EXAMPLES: &str = "\
Examples:
  ninetrix triggers                                # rule, next fire and last outcome of each
  ninetrix triggers -p support --json              # the records as JSON
  ninetrix triggers fire nightly-report            # run a schedule now
  ninetrix triggers fire gh-issues --body @issue.json
  ninetrix triggers history gh-issues --limit 50   # what became of each delivery";

/// The examples at the end of `ninetrix triggers fire --help`.
pub(crate) const FIRE_EXAMPLES: &str = "\
Examples:
  ninetrix triggers fire nightly-report
  ninetrix triggers fire gh-issues --body '{\"issue\": {\"title\": \"Login fails\"}}'
  ninetrix triggers fire gh-issues --body @issue.json
  curl -s https://api.github.com/repos/o/r/issues/1 | ninetrix triggers fire gh-issues --body @-";

/// The examples at the end of `ninetrix triggers history --help`.
pub(crate) const HISTORY_EXAMPLES: &str = "\
Examples:
  ninetrix triggers history nightly-report            # the last 20 entries, oldest first
  ninetrix triggers history gh-issues --limit 200 --json";

/// Arguments of `ninetrix triggers`.
#[derive(Debug, Args)]
pub struct TriggersArgs {
    /// The agentfile (for the pool name).
    #[arg(short, long, default_value = "agentfile.yaml", value_name = "FILE")]
    pub file: PathBuf,
    /// The pool [default: the agentfile's, else the only pool]
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// The triggers as a JSON array.
    #[arg(long)]
    pub json: bool,
    /// What else to do with a trigger.
    #[command(subcommand)]
    pub command: Option<TriggersCommand>,
}

/// The subcommands of `ninetrix triggers`.
#[derive(Debug, Subcommand)]
pub enum TriggersCommand {
    /// Fire a trigger now: its message goes to its session's inbox, where it waits until a
    /// replica of the agent takes it.
    ///
    /// A schedule puts its message in its session as a fire on its clock would. A webhook
    /// renders its templates over --body, the JSON a delivery would carry (`{}` without it), so a
    /// template that does not fit is reported as it would be for a real delivery. The fire is
    /// recorded in the trigger's history with source `manual`.
    #[command(after_long_help = FIRE_EXAMPLES)]
    Fire(FireArgs),
    /// Show a trigger's history, oldest first: each fire, skip and webhook delivery, with why and
    /// where its message went.
    ///
    /// One line per entry: when, the source (schedule, webhook, manual), the outcome and its
    /// reason (`skipped (overlap)`, `rejected (bad_signature)`), the scheduled time or delivery
    /// id, the session and the message's seq in its inbox, and any detail.
    #[command(after_long_help = HISTORY_EXAMPLES)]
    History(HistoryArgs),
}

/// Arguments of `ninetrix triggers fire`.
#[derive(Debug, Args)]
pub struct FireArgs {
    /// The trigger, as `ninetrix triggers` lists it.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// The agentfile (for the pool name) [default: agentfile.yaml]
    #[arg(short, long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// The pool [default: the agentfile's, else the only pool]
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// A webhook's JSON body: the JSON itself, `@FILE` to read it from a file, or `@-` from stdin.
    #[arg(long, value_name = "JSON|@FILE")]
    pub body: Option<String>,
    /// The history entry the fire recorded, as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `ninetrix triggers history`.
#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// The trigger, as `ninetrix triggers` lists it.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// The agentfile (for the pool name) [default: agentfile.yaml]
    #[arg(short, long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// The pool [default: the agentfile's, else the only pool]
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// How many of the newest entries to show (1 to 1000).
    #[arg(long, default_value_t = 20, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub limit: u32,
    /// The entries as a JSON array.
    #[arg(long)]
    pub json: bool,
}

/// Runs `ninetrix triggers` (the listing) or its subcommand.
pub(crate) async fn run(args: &TriggersArgs) -> anyhow::Result<ExitCode> {
    match &args.command {
        None => list(args).await,
        Some(TriggersCommand::Fire(fire_args)) => fire(args, fire_args).await,
        Some(TriggersCommand::History(history_args)) => history(args, history_args).await,
    }
}

/// The pool a command means (`-p`, else the agentfile's, else the only pool) and its API (which
/// must be running: nothing is started here).
async fn open(file: &Path, pool: Option<&str>) -> anyhow::Result<(String, Api)> {
    let pool = crate::pool::resolve::pool_name(file, pool)?;
    let api = Api::existing(&crate::home::agentfile_home()?).await?;
    Ok((pool, api))
}

/// A failed call as an error that says what to do: an API without the trigger routes is older
/// than this ninetrix; an unreachable one is started by `up`; a refused token names its source.
fn refused(api: &Api, e: ClientError, doing: &str) -> anyhow::Error {
    if lacks_trigger_routes(&e) {
        return anyhow::anyhow!(
            "the checkpoint API at {} has no trigger routes ({e}): it is older than this \
             ninetrix; `ninetrix up` recreates the local API with this version",
            api.url
        );
    }
    if matches!(e, ClientError::Unreachable { .. }) {
        return anyhow::anyhow!(
            "{e}; `ninetrix up` starts the local API, or set AGENTFILE_API_URL and \
             AGENTFILE_ADMIN_TOKEN to use another"
        );
    }
    api.explain(e, doing)
}

/// What an empty listing says: for a pool that is down (no container), that `down` removed its
/// triggers and `up` registers them again; else how triggers come to be.
fn none_line(pool: &str, down: bool) -> String {
    if down {
        return format!(
            "no triggers in pool {pool}: the pool is down (`ninetrix down` removes its triggers, \
             so nothing fires into it); `ninetrix up` registers the agentfile's triggers again"
        );
    }
    format!(
        "no triggers in pool {pool}; declare schedules and webhooks under `triggers:` in the \
         agentfile, then `ninetrix up` registers them"
    )
}

/// Whether the pool is down: Docker answers and has no container of it (a pool on Swarm, or an
/// engine that does not answer, is not known to be down).
async fn is_down(pool: &str) -> bool {
    let Ok(docker) = crate::docker::connect().await else {
        return false;
    };
    // A pool whose state cannot be read is taken as on this host, as before.
    let backend = crate::home::agentfile_home()
        .ok()
        .and_then(|h| crate::backend::Backend::read(&h, pool).ok())
        .unwrap_or(crate::backend::Backend::Host);
    backend.is_down(&docker, pool).await
}

/// `ninetrix triggers`: the pool's triggers as a table, or JSON.
async fn list(args: &TriggersArgs) -> anyhow::Result<ExitCode> {
    let (pool, api) = open(&args.file, args.pool.as_deref()).await?;
    let triggers = api
        .client()
        .triggers(Some(&pool), None)
        .await
        .map_err(|e| refused(&api, e, &format!("listing the triggers of pool {pool}")))?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&triggers)?);
        return Ok(ExitCode::SUCCESS);
    }
    if triggers.is_empty() {
        eprintln!("{}", none_line(&pool, is_down(&pool).await));
        return Ok(ExitCode::SUCCESS);
    }
    crate::output::text(&crate::ui::triggers::table(&triggers, &api.url, Utc::now()));
    Ok(ExitCode::SUCCESS)
}

/// The error for a trigger the pool does not have: the names it does have, and the closest one.
fn unknown_trigger(pool: &str, name: &str, known: &[String]) -> anyhow::Error {
    if known.is_empty() {
        return anyhow::anyhow!(
            "pool {pool} has no trigger `{name}`: {}",
            none_line(pool, false)
        );
    }
    let hint = ninetrix_proto::suggest::closest(name, known)
        .map(|c| format!("; did you mean `{c}`?"))
        .unwrap_or_default();
    anyhow::anyhow!(
        "pool {pool} has no trigger `{name}`{hint} (its triggers: {}; `ninetrix triggers -p \
         {pool}` lists them)",
        known.join(", ")
    )
}

/// The names of the pool's triggers, for an error about one it does not have (none if even this
/// fails: the error is about the name either way).
async fn known_names(api: &Api, pool: &str) -> Vec<String> {
    api.client()
        .triggers(Some(pool), None)
        .await
        .map(|all| all.into_iter().map(|t| t.spec.name).collect())
        .unwrap_or_default()
}

/// `--body`: JSON as given, `@FILE` read from a file, `@-` from stdin.
fn parse_body(
    arg: &str,
    read_file: impl FnOnce(&Path) -> std::io::Result<String>,
    read_stdin: impl FnOnce() -> std::io::Result<String>,
) -> anyhow::Result<Value> {
    let (text, from) = match arg.strip_prefix('@') {
        Some("-") => (
            read_stdin().context("cannot read --body from stdin")?,
            "stdin".to_string(),
        ),
        Some(path) => (
            read_file(Path::new(path)).with_context(|| format!("cannot read --body @{path}"))?,
            path.to_string(),
        ),
        None => (arg.to_string(), "--body".to_string()),
    };
    serde_json::from_str(&text).with_context(|| format!("{from} is not JSON"))
}

/// The trigger `name` of `pool`, or an error listing the ones it has.
async fn find(api: &Api, pool: &str, name: &str) -> anyhow::Result<Trigger> {
    let found = api
        .client()
        .triggers(Some(pool), Some(name))
        .await
        .map_err(|e| refused(api, e, &format!("reading trigger {name} of pool {pool}")))?;
    match found.into_iter().find(|t| t.spec.name == name) {
        Some(t) => Ok(t),
        None => Err(unknown_trigger(pool, name, &known_names(api, pool).await)),
    }
}

/// The error of a fire whose webhook templates did not fit the body.
fn template_error(name: &str, message: &str, body_given: bool) -> anyhow::Error {
    let given = if body_given {
        "pass the JSON a delivery would carry"
    } else {
        "without --body the templates render `{}`; pass the JSON a delivery would carry"
    };
    anyhow::anyhow!(
        "trigger {name} was not fired: the body does not fit its templates: {message} ({given} \
         with --body JSON or --body @FILE)"
    )
}

/// `ninetrix triggers fire NAME`: fires it and says where the message went.
async fn fire(args: &TriggersArgs, fire_args: &FireArgs) -> anyhow::Result<ExitCode> {
    let body = match &fire_args.body {
        Some(arg) => Some(parse_body(
            arg,
            |p| std::fs::read_to_string(p),
            || {
                let mut text = String::new();
                std::io::stdin().read_to_string(&mut text).map(|_| text)
            },
        )?),
        None => None,
    };
    let file = fire_args.file.as_deref().unwrap_or(&args.file);
    let pool = fire_args.pool.as_deref().or(args.pool.as_deref());
    let (pool, api) = open(file, pool).await?;
    let name = &fire_args.name;
    let trigger = find(&api, &pool, name).await?;
    if body.is_some() && trigger.spec.webhook().is_none() {
        bail!(
            "--body is for webhook triggers; {name} is a {} (its message is fixed in the \
             agentfile)",
            trigger.spec.kind_name()
        );
    }
    let request = FireRequest { body };
    let fired = match api.client().fire_trigger(&pool, name, &request).await {
        Ok(fired) => fired,
        Err(ClientError::Api {
            status: 404,
            message,
            ..
        }) if !message.starts_with("no route for") => {
            return Err(unknown_trigger(
                &pool,
                name,
                &known_names(&api, &pool).await,
            ));
        }
        Err(ClientError::Api {
            code: ErrorCode::TemplateFailed,
            message,
            ..
        }) => return Err(template_error(name, &message, request.body.is_some())),
        Err(e) => return Err(refused(&api, e, &format!("firing trigger {name}"))),
    };
    let queued = matches!(
        fired.outcome,
        TriggerOutcome::Fired | TriggerOutcome::CaughtUp
    );
    if fire_args.json || args.json {
        outln!("{}", serde_json::to_string_pretty(&fired)?);
    } else {
        outln!("{}", crate::ui::triggers::fired(name, &fired));
        if let (true, Some(thread)) = (queued, fired.thread_id) {
            eprintln!(
                "`ninetrix trace --thread-id {thread} -f` follows the turn that answers it \
                 (agent {})",
                trigger.spec.agent
            );
        }
    }
    Ok(if queued {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::EXIT_FAILURE)
    })
}

/// `ninetrix triggers history NAME`: the newest entries, oldest first.
async fn history(args: &TriggersArgs, history_args: &HistoryArgs) -> anyhow::Result<ExitCode> {
    let file = history_args.file.as_deref().unwrap_or(&args.file);
    let pool = history_args.pool.as_deref().or(args.pool.as_deref());
    let (pool, api) = open(file, pool).await?;
    let name = &history_args.name;
    let events = match api
        .client()
        .trigger_history(&pool, name, None, Some(history_args.limit))
        .await
    {
        Ok(events) => events,
        Err(ClientError::Api {
            status: 404,
            message,
            ..
        }) if !message.starts_with("no route for") => {
            return Err(unknown_trigger(
                &pool,
                name,
                &known_names(&api, &pool).await,
            ));
        }
        Err(e) => {
            return Err(refused(
                &api,
                e,
                &format!("reading the history of trigger {name}"),
            ));
        }
    };
    if history_args.json || args.json {
        outln!("{}", serde_json::to_string_pretty(&events)?);
        return Ok(ExitCode::SUCCESS);
    }
    if events.is_empty() {
        eprintln!(
            "trigger {name} of pool {pool} has no history yet (`ninetrix triggers fire {name}` \
             fires it now)"
        );
        return Ok(ExitCode::SUCCESS);
    }
    crate::output::text(&crate::ui::triggers::history(&events));
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::parse_from_args(std::iter::once("ninetrix").chain(args.iter().copied()))
    }

    fn triggers(args: &[&str]) -> TriggersArgs {
        match parse(args).unwrap().command {
            Command::Triggers(t) => t,
            other => panic!("not triggers: {other:?}"),
        }
    }

    #[test]
    fn the_listing_and_its_subcommands_take_their_arguments() {
        let t = triggers(&["triggers", "-p", "shop", "--json"]);
        assert_eq!(t.pool.as_deref(), Some("shop"));
        assert!(t.json && t.command.is_none());

        let t = triggers(&[
            "-p",
            "top",
            "triggers",
            "fire",
            "gh-issues",
            "-p",
            "shop",
            "--body",
            "@issue.json",
        ]);
        let Some(TriggersCommand::Fire(f)) = &t.command else {
            panic!("not fire");
        };
        assert_eq!(f.name, "gh-issues");
        assert_eq!(
            f.pool.as_deref().or(t.pool.as_deref()),
            Some("shop"),
            "the innermost -p wins"
        );
        assert_eq!(f.body.as_deref(), Some("@issue.json"));

        let t = triggers(&["-p", "top", "triggers", "history", "nightly"]);
        let Some(TriggersCommand::History(h)) = &t.command else {
            panic!("not history");
        };
        assert_eq!((h.name.as_str(), h.limit), ("nightly", 20));
        assert_eq!(h.pool.as_deref().or(t.pool.as_deref()), Some("top"));
        let t = triggers(&["triggers", "history", "nightly", "--limit", "1000"]);
        let Some(TriggersCommand::History(h)) = &t.command else {
            panic!("not history");
        };
        assert_eq!(h.limit, 1000);
        for bad in ["0", "1001", "x"] {
            assert!(
                parse(&["triggers", "history", "nightly", "--limit", bad]).is_err(),
                "{bad}"
            );
        }
        assert!(parse(&["triggers", "fire"]).is_err(), "NAME is required");
    }

    #[test]
    fn a_body_is_json_inline_from_a_file_or_from_stdin() {
        let no_file = |_: &Path| -> std::io::Result<String> { panic!("no file is read") };
        let no_stdin = || -> std::io::Result<String> { panic!("stdin is not read") };
        assert_eq!(
            parse_body(r#"{"a": 1}"#, no_file, no_stdin).unwrap(),
            serde_json::json!({"a": 1})
        );
        let from_file = parse_body(
            "@issue.json",
            |p| {
                assert_eq!(p, Path::new("issue.json"));
                Ok(r#"{"issue": {"title": "x"}}"#.into())
            },
            no_stdin,
        )
        .unwrap();
        assert_eq!(from_file["issue"]["title"], "x");
        assert_eq!(
            parse_body("@-", no_file, || Ok("[1, 2]\n".into())).unwrap(),
            serde_json::json!([1, 2])
        );
        let err = parse_body("{not json", no_file, no_stdin).unwrap_err();
        assert!(
            format!("{err:#}").starts_with("--body is not JSON"),
            "{err:#}"
        );
        let err = parse_body(
            "@gone.json",
            |_| Err(std::io::ErrorKind::NotFound.into()),
            no_stdin,
        )
        .unwrap_err();
        assert!(
            format!("{err:#}").contains("cannot read --body @gone.json"),
            "{err:#}"
        );
        let err = parse_body("@x.json", |_| Ok("nope".into()), no_stdin).unwrap_err();
        assert!(
            format!("{err:#}").starts_with("x.json is not JSON"),
            "{err:#}"
        );
    }

    #[test]
    fn an_unknown_trigger_names_the_pools_triggers_and_the_closest_one() {
        let known = ["gh-issues".to_string(), "nightly-report".to_string()];
        let e = unknown_trigger("shop", "nightly-reprot", &known).to_string();
        assert_eq!(
            e,
            "pool shop has no trigger `nightly-reprot`; did you mean `nightly-report`? (its \
             triggers: gh-issues, nightly-report; `ninetrix triggers -p shop` lists them)"
        );
        let e = unknown_trigger("shop", "gh", &known).to_string();
        assert!(e.contains("did you mean `gh-issues`?"), "{e}");
        let e = unknown_trigger("shop", "weekly", &known).to_string();
        assert!(!e.contains("did you mean"), "{e}");
        let e = unknown_trigger("shop", "nightly", &[]).to_string();
        assert!(
            e.starts_with("pool shop has no trigger `nightly`: no triggers in pool shop;")
                && e.contains("`triggers:`")
                && e.contains("`ninetrix up`"),
            "{e}"
        );
    }

    #[test]
    fn a_template_failure_shows_the_apis_message_and_what_to_pass() {
        let e = template_error("gh-issues", "`issue.title` is not in the body", false).to_string();
        assert_eq!(
            e,
            "trigger gh-issues was not fired: the body does not fit its templates: `issue.title` \
             is not in the body (without --body the templates render `{}`; pass the JSON a \
             delivery would carry with --body JSON or --body @FILE)"
        );
        let e = template_error("gh-issues", "m", true).to_string();
        assert!(!e.contains("without --body"), "{e}");
    }

    #[test]
    fn an_empty_listing_says_how_to_declare_triggers() {
        insta::assert_snapshot!(
            "no_triggers_in_a_pool_that_is_down",
            none_line("shop", true)
        );
        assert_eq!(
            none_line("shop", false),
            "no triggers in pool shop; declare schedules and webhooks under `triggers:` in the \
             agentfile, then `ninetrix up` registers them"
        );
    }
}
