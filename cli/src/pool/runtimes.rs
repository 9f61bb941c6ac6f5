//! The preflight of `runtime.isolation`: every runtime the agents ask for must be one the Docker
//! engine has registered (`docker info`'s `Runtimes`), or `up` and `run` refuse before creating
//! anything. Never a fallback to `runc`: an agent that asked for a sandbox runs in one or not
//! at all. The decision is pure ([`missing`]); [`check`] asks the engine.

use bollard::Docker;
use ninetrix_agentfile::AgentSpec;

/// An agent whose runtime the engine lacks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Missing {
    /// The agent.
    pub(crate) agent: String,
    /// The runtime it asked for.
    pub(crate) runtime: String,
}

/// The agents among `agents` whose `runtime.isolation` is not in `have`.
pub(crate) fn missing<'a>(
    agents: impl IntoIterator<Item = &'a AgentSpec>,
    have: &[String],
) -> Vec<Missing> {
    agents
        .into_iter()
        .filter_map(|a| {
            let runtime = a.runtime.isolation.as_ref()?;
            (!have.contains(runtime)).then(|| Missing {
                agent: a.name.clone(),
                runtime: runtime.clone(),
            })
        })
        .collect()
}

/// The refusal for `missing` (not empty), with the engine's runtimes and how to add one.
pub(crate) fn refusal(missing: &[Missing], have: &[String]) -> String {
    let asks: Vec<String> = missing
        .iter()
        .map(|m| format!("agent `{}` asks for `{}`", m.agent, m.runtime))
        .collect();
    let first = &missing[0].runtime;
    format!(
        "{} (runtime.isolation), which this Docker engine does not have (it has: {}); nothing \
         was created. Install the runtime and register it in /etc/docker/daemon.json \
         (`\"runtimes\": {{\"{first}\": {{\"path\": \"/usr/local/bin/{first}\"}}}}`), then \
         restart dockerd — for gVisor see https://gvisor.dev/docs/user_guide/install/, for Kata \
         https://katacontainers.io/docs/. ninetrix never falls back to runc; remove \
         `runtime.isolation` to run under the engine's default.",
        asks.join(", "),
        have.join(", ")
    )
}

/// Refuses unless the engine has every runtime `agents` ask for.
pub(crate) async fn check<'a>(
    docker: &Docker,
    agents: impl IntoIterator<Item = &'a AgentSpec>,
) -> anyhow::Result<()> {
    let agents: Vec<&AgentSpec> = agents.into_iter().collect();
    if agents.iter().all(|a| a.runtime.isolation.is_none()) {
        return Ok(());
    }
    let info = docker
        .info()
        .await
        .map_err(|e| anyhow::anyhow!("cannot ask the Docker engine for its runtimes: {e}"))?;
    let mut have: Vec<String> = info.runtimes.unwrap_or_default().into_keys().collect();
    have.sort();
    let missing = missing(agents, &have);
    if missing.is_empty() {
        Ok(())
    } else {
        anyhow::bail!("{}", refusal(&missing, &have))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agents(yaml: &str) -> Vec<AgentSpec> {
        ninetrix_agentfile::parse("agentfile.yaml", yaml)
            .unwrap()
            .agentfile
            .agents
    }

    #[test]
    fn a_runtime_the_engine_lacks_is_refused_naming_the_agent_and_what_it_has() {
        let af = agents(
            "agents:\n  a:\n    runtime: { provider: scripted, script: [hi], isolation: runsc }\n  \
             b:\n    runtime: { provider: scripted, script: [hi] }\n  \
             c:\n    runtime: { provider: scripted, script: [hi], isolation: kata }\n",
        );
        let have = vec!["runc".to_string(), "kata".to_string()];
        let m = missing(&af, &have);
        assert_eq!(
            m,
            [Missing {
                agent: "a".into(),
                runtime: "runsc".into()
            }]
        );
        let text = refusal(&m, &have);
        assert!(text.contains("agent `a` asks for `runsc`"), "{text}");
        assert!(text.contains("it has: runc, kata"), "{text}");
        assert!(text.contains("nothing was created"), "{text}");
        assert!(missing(&af, &["runsc".into(), "kata".into()]).is_empty());
    }
}
