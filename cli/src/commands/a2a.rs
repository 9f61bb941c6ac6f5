//! `ninetrix a2a token`: mints an A2A token (docs/a2a.md, "Tokens") — what a partner's A2A client
//! sends to call one pool's agents over A2A and nothing else — with the admin token, found as
//! `ninetrix approvals token` finds it (`AGENTFILE_API_URL` and `AGENTFILE_ADMIN_TOKEN`, else this
//! home's local API). Prints the token alone on stdout; its expiry and the card URL of each agent
//! of the pool the API serves over A2A on stderr.

use std::collections::BTreeSet;
use std::process::ExitCode;

use anyhow::bail;
use clap::{Args, Subcommand};
use ninetrix_client::ThreadQuery;
use ninetrix_proto::api::A2aTokenRequest;

use crate::cli::pool_name;
use crate::commands::approvals::parse_ttl;
use crate::pool::local_api::Api;

/// Arguments of `ninetrix a2a`.
#[derive(Debug, Args)]
pub struct A2aArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: A2aCommand,
}

/// The subcommands of `ninetrix a2a`.
#[derive(Debug, Subcommand)]
pub enum A2aCommand {
    /// Mint an A2A token (with the admin token): it calls the A2A endpoints of one pool's agents
    /// and nothing else. Prints only the token on stdout; its expiry and the agents' card URLs on
    /// stderr.
    Token(A2aTokenArgs),
}

/// Arguments of `ninetrix a2a token`.
#[derive(Debug, Args)]
pub struct A2aTokenArgs {
    /// The pool whose agents it may call (required; also accepted before `a2a`).
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// Who holds it (a partner, a system): its tasks and cancels are recorded as `a2a:NAME`.
    #[arg(long, value_name = "NAME", value_parser = holder_name)]
    pub name: String,
    /// How long it works: `30d`, `12h`, `90m`, or seconds (1m to 365d).
    #[arg(long, default_value = "30d", value_name = "TTL", value_parser = parse_ttl)]
    pub ttl: u64,
}

/// Most characters of a holder's name (the API's bound).
const MAX_NAME: usize = 200;

/// A `--name` value: 1 to 200 characters, none of them control characters.
fn holder_name(value: &str) -> Result<String, String> {
    let n = value.chars().count();
    if value.trim().is_empty() || n > MAX_NAME || value.chars().any(char::is_control) {
        return Err(format!(
            "`--name` takes 1 to {MAX_NAME} characters without control characters, e.g. --name partner-crm"
        ));
    }
    Ok(value.to_string())
}

/// Runs `ninetrix a2a`.
pub(crate) async fn run(args: &A2aArgs) -> anyhow::Result<ExitCode> {
    match &args.command {
        A2aCommand::Token(token) => mint(token).await,
    }
}

/// `ninetrix a2a token`: mints the token; stdout gets the token alone.
async fn mint(args: &A2aTokenArgs) -> anyhow::Result<ExitCode> {
    let Some(pool) = args.pool.as_deref() else {
        bail!(
            "an A2A token is for one pool: name it with -p POOL (`ninetrix a2a token -p POOL --name NAME`)"
        );
    };
    let home = crate::home::agentfile_home()?;
    let api = Api::any(&home).await?;
    let request = A2aTokenRequest {
        pool: pool.to_string(),
        name: args.name.clone(),
        ttl_secs: Some(args.ttl),
    };
    let minted = api
        .client()
        .mint_a2a_token(&request)
        .await
        .map_err(|e| api.explain(e, &format!("minting an A2A token for pool {pool}")))?;
    outln!("{}", minted.token);
    eprintln!(
        "A2A token for {} in pool {}, valid for {}: expires {}",
        minted.name,
        minted.pool,
        crate::ui::exact_duration(args.ttl),
        minted
            .expires_at
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    );
    for url in card_urls(&api, pool).await {
        eprintln!("  agent card: {url}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The card URLs of the pool's agents the API serves over A2A, as far as it knows them: the
/// agents its threads are labelled with whose card answers. None when it cannot tell.
async fn card_urls(api: &Api, pool: &str) -> Vec<String> {
    let query = ThreadQuery {
        pool: Some(pool.to_string()),
        ..Default::default()
    };
    let Ok(threads) = api.client().list_threads(&query).await else {
        return Vec::new();
    };
    let agents: BTreeSet<String> = threads.into_iter().filter_map(|t| t.labels.agent).collect();
    let http = ninetrix_client::http_client();
    let mut urls = Vec::new();
    for agent in agents {
        let url = api.client().a2a_card_url(pool, &agent);
        let served = http
            .get(&url)
            .timeout(std::time::Duration::from_secs(5))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if served {
            urls.push(url);
        }
    }
    urls
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};

    #[test]
    fn a2a_token_takes_its_pool_before_or_after_and_a_name() {
        for args in [
            &[
                "ninetrix",
                "a2a",
                "token",
                "-p",
                "shop",
                "--name",
                "partner-crm",
            ][..],
            &[
                "ninetrix",
                "-p",
                "shop",
                "a2a",
                "token",
                "--name",
                "partner-crm",
            ],
        ] {
            let cli = Cli::parse_from_args(args.iter().copied()).unwrap();
            let Command::A2a(a) = cli.command else {
                panic!("{args:?}")
            };
            let A2aCommand::Token(t) = a.command;
            assert_eq!(t.pool.as_deref(), Some("shop"), "{args:?}");
            assert_eq!(t.name, "partner-crm");
            assert_eq!(t.ttl, 30 * 86_400);
        }
        assert!(Cli::parse_from_args(["ninetrix", "a2a", "token", "-p", "shop"]).is_err());
        assert!(
            Cli::parse_from_args([
                "ninetrix", "a2a", "token", "-p", "shop", "--name", "x", "--ttl", "2y"
            ])
            .is_err()
        );
        assert!(holder_name("a\u{7}b").is_err() && holder_name(" ").is_err());
    }
}
