//! Running a replay (issue 42): [`run_replay`] serves a replay's scratch thread in process — the
//! way `ninetrix replay` runs it — until every recorded turn's input in its inbox is answered.
//! What the runner answers from is [`Replay`] (in `recording`, below the engine and the driver,
//! which read it); what the engine does with each call in replay mode is in docs/runner.md,
//! "Replay mode".

use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::driver::{self, Exit};
use crate::health::Health;

pub use crate::recording::{REPLAY_AFTER_TURN, REPLAY_MID_TURN, Replay};

/// Serves the replay's thread (`config.thread_id`, with a runner token minted for its pool and
/// agent labels, no replica and no session) until its inbox is served and no turn is left, as a
/// session's runner does: claim, restore (the files of the turn before the first replayed one,
/// at first boot), resume an interrupted replayed turn, answer each input with the candidate
/// agent in replay mode. It refuses (`Exit::Config`) a configuration without a replay, or
/// without the checkpoint API, or one that names a replica or a session (a replay thread has
/// neither: its claim would be refused).
pub async fn run_replay(config: Config, shutdown: CancellationToken) -> Exit {
    if let Some(why) = refused(&config) {
        return Exit::Config(why);
    }
    let http = ninetrix_client::http_client();
    driver::run_session(config, http, Health::new(None), shutdown).await
}

/// Why `config` cannot run a replay, if it cannot.
fn refused(config: &Config) -> Option<String> {
    let thread = config.thread_id;
    if config.replay.is_none() {
        return Some(format!(
            "thread {thread}: run_replay needs the recorded turns (Config.replay is not set); \
             `ninetrix replay` sets it from the source thread's turns"
        ));
    }
    if config.api.is_none() {
        return Some(format!(
            "thread {thread}: a replay needs the checkpoint API (AGENTFILE_API_URL and a runner \
             token for the replay thread)"
        ));
    }
    if config.replica.is_some() || config.session.is_some() {
        return Some(format!(
            "thread {thread}: a replay thread has no replica and no session; leave both unset \
             (its labels are its source's pool and agent only)"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;
    use std::time::Duration;

    use ninetrix_proto::ThreadId;

    use super::*;
    use crate::config::{ApiAccess, SecretValue};

    fn config(replay: Option<Replay>) -> Config {
        let text = "agents:\n  a:\n    runtime:\n      provider: scripted\n      script:\n        - text: Done.\n    execution: { durability: true }\n";
        let spec = ninetrix_agentfile::parse("t.yaml", text)
            .unwrap_or_else(|r| panic!("{r:?}"))
            .agentfile
            .agents
            .remove(0);
        Config {
            spec,
            thread_id: ThreadId::new_v7(),
            api: Some(ApiAccess {
                url: "http://127.0.0.1:9".into(),
                token: SecretValue::new("t"),
            }),
            pool: Some("p".into()),
            replica: None,
            workspace: std::env::temp_dir(),
            task: None,
            secrets: HashMap::new(),
            stream_idle_timeout: Duration::from_secs(120),
            api_patience: None,
            turn_restarts: crate::engine::TURN_RESTARTS,
            health_file: std::env::temp_dir().join("health"),
            agent_token: None,
            session: None,
            instance: None,
            created: None,
            telemetry: None,
            jobs_url: None,
            replay: replay.map(Arc::new),
        }
    }

    fn some_replay() -> Replay {
        Replay {
            recorded: Vec::new(),
            live_reads: false,
        }
    }

    #[tokio::test]
    async fn a_configuration_that_cannot_be_a_replay_is_refused_before_anything_runs() {
        let exit = run_replay(config(None), CancellationToken::new()).await;
        let Exit::Config(why) = &exit else {
            panic!("{exit:?}")
        };
        assert!(
            why.contains("Config.replay") && why.contains("ninetrix replay"),
            "{why}"
        );
        assert_eq!(exit.code(), 2);

        let mut no_api = config(Some(some_replay()));
        no_api.api = None;
        let Exit::Config(why) = run_replay(no_api, CancellationToken::new()).await else {
            panic!("a replay without the API ran")
        };
        assert!(why.contains("checkpoint API"), "{why}");

        for (replica, session) in [(Some(0), None), (None, Some("k".to_string()))] {
            let mut labelled = config(Some(some_replay()));
            labelled.replica = replica;
            labelled.session = session;
            let Exit::Config(why) = run_replay(labelled, CancellationToken::new()).await else {
                panic!("a replay with a replica or a session ran")
            };
            assert!(why.contains("no replica and no session"), "{why}");
        }
    }

    #[test]
    fn a_replay_is_accepted_with_its_pool_and_agent_only() {
        assert_eq!(refused(&config(Some(some_replay()))), None);
    }

    #[test]
    fn each_inbox_seq_finds_its_recorded_turn() {
        let turn = |n: u64| ninetrix_proto::api::RecordedTurn {
            turn_seq: n,
            live: true,
            input: format!("input {n}"),
            messages: Vec::new(),
            calls: Vec::new(),
            answer: String::new(),
            ok: true,
            usage: Default::default(),
            latency_ms: None,
            model: None,
        };
        let replay = Replay {
            recorded: vec![turn(7), turn(9)],
            live_reads: false,
        };
        assert_eq!(replay.turn_for(1).map(|t| t.turn_seq), Some(7));
        assert_eq!(replay.turn_for(2).map(|t| t.turn_seq), Some(9));
        assert_eq!(replay.turn_for(0), None);
        assert_eq!(replay.turn_for(3), None);
    }
}
