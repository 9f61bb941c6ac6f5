//! `ninetrix init`: writes a commented starter agentfile that validates.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use ninetrix_agentfile::{self as agentfile, names};

use crate::cli::pool_name;
use crate::ui::style::Style;

/// The providers `init` can write a starter for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum InitProvider {
    /// An offline, scripted model: runs with no API key.
    Scripted,
    /// Anthropic's Claude (needs ANTHROPIC_API_KEY).
    Anthropic,
    /// OpenAI (needs OPENAI_API_KEY).
    Openai,
    /// A local Ollama server on the host, through the OpenAI protocol.
    Ollama,
}

/// Arguments of `ninetrix init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Where to write the agentfile.
    #[arg(short, long, default_value = "agentfile.yaml", value_name = "FILE")]
    pub file: PathBuf,
    /// The pool name (default: derived from the directory name).
    #[arg(short, long, value_name = "NAME", value_parser = pool_name)]
    pub name: Option<String>,
    /// The starter agent's provider.
    #[arg(long, value_enum, default_value_t = InitProvider::Scripted)]
    pub provider: InitProvider,
    /// Overwrite the file if it exists.
    #[arg(long)]
    pub force: bool,
}

/// Runs `ninetrix init`.
pub(crate) fn run(args: &InitArgs) -> anyhow::Result<ExitCode> {
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| default_pool_name(&args.file));
    let text = starter(&name, args.provider);
    // The starter must always validate: a broken template is a bug, caught here and in tests.
    agentfile::parse(&args.file.display().to_string(), &text).map_err(|report| {
        anyhow::anyhow!(
            "internal error: the starter agentfile is invalid:\n{}",
            report.render(false)
        )
    })?;

    let mut options = std::fs::OpenOptions::new();
    options.write(true);
    if args.force {
        options.create(true).truncate(true);
    } else {
        options.create_new(true);
    }
    let mut file = match options.open(&args.file) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => anyhow::bail!(
            "{} already exists; pass --force to overwrite it, or -f to write another file",
            args.file.display()
        ),
        Err(e) => return Err(e).with_context(|| format!("cannot write {}", args.file.display())),
    };
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", args.file.display()))?;

    let style = Style::stdout();
    outln!(
        "{} wrote {} (pool {}, agent `assistant`, provider {})",
        style.ok("✔"),
        args.file.display(),
        style.bold(&name),
        provider_name(args.provider)
    );
    let flag = if args.file.as_os_str() == "agentfile.yaml" {
        String::new()
    } else {
        format!(" -f {}", args.file.display())
    };
    outln!("next: ninetrix validate{flag}");
    if let Some(secret) = secret_for(args.provider) {
        outln!(
            "      and provide {secret} on the host (it is mounted into the container as a secret)"
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn default_pool_name(file: &std::path::Path) -> String {
    std::path::absolute(file)
        .ok()
        .and_then(|p| {
            p.parent()
                .and_then(|d| d.file_name())
                .and_then(|n| n.to_str())
                .and_then(names::normalize_name)
        })
        .unwrap_or_else(|| "my-pool".to_string())
}

fn provider_name(provider: InitProvider) -> &'static str {
    match provider {
        InitProvider::Scripted => "scripted",
        InitProvider::Anthropic => "anthropic",
        InitProvider::Openai => "openai",
        InitProvider::Ollama => "openai (Ollama on the host)",
    }
}

fn secret_for(provider: InitProvider) -> Option<&'static str> {
    match provider {
        InitProvider::Anthropic => Some("ANTHROPIC_API_KEY"),
        InitProvider::Openai => Some("OPENAI_API_KEY"),
        InitProvider::Scripted | InitProvider::Ollama => None,
    }
}

const RUNTIME_SCRIPTED: &str = r#"    runtime:
      # `scripted` is an offline stand-in model: it plays these responses in order (tool calls
      # included), so the agent runs with no API key. To use a real model instead:
      #   provider: anthropic            # and add `secrets: [ANTHROPIC_API_KEY]` below
      #   model: claude-sonnet-4-6
      provider: scripted
      script:
        - text: Let me note that down.
          tool_calls:
            - name: file_write
              args: { path: notes.md, content: "A note from my first turn.\n" }
        - text: Noted in notes.md.
"#;

const RUNTIME_ANTHROPIC: &str = r#"    runtime:
      provider: anthropic
      model: claude-sonnet-4-6
      temperature: 0.2
      max_tokens: 8192
"#;

const RUNTIME_OPENAI: &str = r#"    runtime:
      provider: openai             # or any OpenAI-compatible server: set base_url
      model: gpt-4o-mini
      temperature: 0.2
"#;

const RUNTIME_OLLAMA: &str = r#"    runtime:
      # Ollama speaks the OpenAI protocol; host.docker.internal is the host from inside the container.
      provider: openai
      model: llama3.2
      base_url: http://host.docker.internal:11434/v1
"#;

/// The starter agentfile text.
fn starter(name: &str, provider: InitProvider) -> String {
    let runtime = match provider {
        InitProvider::Scripted => RUNTIME_SCRIPTED,
        InitProvider::Anthropic => RUNTIME_ANTHROPIC,
        InitProvider::Openai => RUNTIME_OPENAI,
        InitProvider::Ollama => RUNTIME_OLLAMA,
    };
    let secrets = match secret_for(provider) {
        Some(secret) => format!(
            "    # Secret names only, never values: each is read on the host and mounted at\n    # /run/secrets/<NAME> in the container.\n    secrets: [{secret}]\n"
        ),
        None => "    # secrets: [ANTHROPIC_API_KEY]   # names only; values stay on the host\n"
            .to_string(),
    };
    format!(
        r#"# agentfile.yaml — written by `ninetrix init`. Reference: docs/agentfile.md
# Check it with `ninetrix validate`.

# The pool: containers are named ninetrix-{name}-<agent>-<n>.
name: {name}

agents:
  assistant:
    metadata:
      role: helpful assistant
      goal: Answer questions and keep notes in the workspace
      instructions: Keep answers short. Record anything worth remembering in notes.md.
{runtime}    tools:
      - file_read
      - file_write              # an overwrite is idempotent (safe to redo); an append a write (never twice)
    execution:
      durability: true          # false: a one-shot batch job that is never restarted
      replicas: 1               # warm pool size: one container and one thread per replica
      max_turns: 20             # most model rounds in one turn
    # governance:
    #   max_budget_per_run: 1.00  # US dollars one turn may spend on the model
    # env:
    #   LOG_LEVEL: info         # plain settings only
{secrets}"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_starter_validates_without_warnings() {
        for provider in [
            InitProvider::Scripted,
            InitProvider::Anthropic,
            InitProvider::Openai,
            InitProvider::Ollama,
        ] {
            let text = starter("demo", provider);
            let parsed = agentfile::parse("agentfile.yaml", &text)
                .unwrap_or_else(|r| panic!("{provider:?}:\n{}", r.render(false)));
            assert!(
                parsed.warnings.diagnostics.is_empty(),
                "{provider:?}: {}",
                parsed.warnings.render(false)
            );
            let agent = parsed.agentfile.agent("assistant").unwrap();
            assert_eq!(
                agent.secrets,
                secret_for(provider)
                    .into_iter()
                    .map(String::from)
                    .collect::<Vec<_>>()
            );
        }
    }
}
