//! The sessions a replica serves beside its own thread (issue 15): it asks the API for the
//! agent's sessions it owns that have work (`GET /v1/runners/pools/{pool}/agents/{agent}/sessions`,
//! a long-poll, with the agent token), and runs each one — claim, restore, resume, answer its
//! messages — with the runner token that comes with it, in a task of its own, until the session
//! is idle; then the session leaves memory. At most `execution.max_concurrent_sessions` run at
//! once; the rest wait in the API, where their messages are.
//!
//! Ownership is the API's answer (rendezvous hashing over the agent's recorded replica count), so
//! when the count changes the new owner of a moved session simply finds it in its feed and claims
//! its thread; the new epoch fences the old owner's copy at its next write. A session whose task
//! failed rests (0.5 s doubling to a minute) before it is taken again, so a broken one cannot
//! spin.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use ninetrix_client::{Client, Token};
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::SessionWork;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::config::{ApiAccess, Config, SecretValue};
use crate::driver::{self, Exit};

/// How long one poll of the work feed waits.
const POLL: Duration = Duration::from_secs(30);
/// How long a session whose task failed rests before it is taken again: 0.5 s doubling, at most
/// a minute.
const SESSION_REST: crate::backoff::Schedule = crate::backoff::Schedule {
    first: Duration::from_millis(500),
    cap: Duration::from_secs(60),
};

/// A replica's session service.
pub struct Service {
    config: Config,
    http: reqwest::Client,
    /// The API with the agent token.
    feed: Client,
    url: String,
    pool: String,
    replica: u32,
    max: usize,
    /// The replica's health: its sessions' waits for a model slot show there.
    health: crate::health::Health,
}

impl Service {
    /// The service of this replica, if it serves sessions: a durable agent run by `up` (pool
    /// and replica known) with the checkpoint API and the agent token.
    pub fn new(
        config: &Config,
        http: &reqwest::Client,
        health: &crate::health::Health,
    ) -> Option<Service> {
        let token = config.agent_token.as_ref()?;
        let api = config.api.as_ref()?;
        if !config.spec.execution.durability {
            return None;
        }
        let (Some(pool), Some(replica)) = (config.pool.clone(), config.replica) else {
            tracing::warn!(
                "an agent token is set but AGENTFILE_POOL or AGENTFILE_REPLICA is not; this replica serves no sessions"
            );
            return None;
        };
        Some(Service {
            feed: Client::new(http.clone(), &api.url, Some(Token::new(token.expose()))),
            url: api.url.clone(),
            http: http.clone(),
            config: config.clone(),
            pool,
            replica,
            max: config.spec.execution.max_concurrent_sessions.max(1) as usize,
            health: health.clone(),
        })
    }

    /// Serves sessions until `stop`; then waits for the running ones to stop (they see `stop`
    /// too and end at a consistent checkpoint).
    pub async fn serve(self, stop: CancellationToken) {
        let agent = self.config.spec.name.clone();
        let mut tasks: JoinSet<(ThreadId, Exit)> = JoinSet::new();
        let mut active: HashSet<ThreadId> = HashSet::new();
        let mut resting: HashMap<ThreadId, Rest> = HashMap::new();
        let mut feed_failures = 0u32;
        tracing::info!(
            "serving the sessions replica {} of `{agent}` owns (at most {} at once)",
            self.replica,
            self.max
        );
        loop {
            let now = Instant::now();
            let wake = next_wake(resting.values(), now);
            let excluded: Vec<ThreadId> = active
                .iter()
                .copied()
                .chain(
                    resting
                        .iter()
                        .filter(|(_, r)| r.until > now)
                        .map(|(id, _)| *id),
                )
                .collect();
            let room = active.len() < self.max;
            let feed = self.feed.session_work(
                &self.pool,
                &agent,
                self.replica,
                &excluded,
                if feed_failures == 0 {
                    POLL
                } else {
                    Duration::ZERO
                },
            );
            tokio::select! {
                Some(joined) = tasks.join_next(), if !tasks.is_empty() => {
                    let Ok((id, exit)) = joined else { continue };
                    active.remove(&id);
                    match exit {
                        Exit::Ok | Exit::Purged(_) => {
                            resting.remove(&id);
                        }
                        Exit::Failure(why) | Exit::Config(why) => {
                            let rest = resting.entry(id).or_insert(Rest { until: now, failures: 0 });
                            rest.failures += 1;
                            rest.until = Instant::now() + SESSION_REST.delay(rest.failures, crate::backoff::jitter());
                            tracing::warn!(thread_id = %id, "a session stopped: {why}; taken again in {:?}", rest.until - Instant::now());
                        }
                        Exit::TurnFailed => {}
                    }
                }
                work = feed, if room => match work {
                    Ok(work) => {
                        feed_failures = 0;
                        for w in work {
                            if active.len() >= self.max || active.contains(&w.thread_id) {
                                continue;
                            }
                            if resting.get(&w.thread_id).is_some_and(|r| r.until > Instant::now()) {
                                continue;
                            }
                            active.insert(w.thread_id);
                            self.start(&mut tasks, w, stop.clone());
                        }
                    }
                    Err(e) => {
                        feed_failures += 1;
                        let wait = crate::backoff::API.delay(feed_failures, crate::backoff::jitter());
                        tracing::warn!("cannot read the sessions' work: {e}; trying again in {wait:?}");
                        tokio::select! {
                            () = tokio::time::sleep(wait) => {}
                            () = stop.cancelled() => break,
                        }
                    }
                },
                () = sleep_until(wake), if wake.is_some() => {}
                () = stop.cancelled() => break,
            }
        }
        while let Some(joined) = tasks.join_next().await {
            if let Ok((id, Exit::Failure(why))) = joined {
                tracing::warn!(thread_id = %id, "a session stopped: {why}");
            }
        }
    }

    /// Runs session `w` in a task of its own: the replica's configuration with the session's
    /// thread, token and key, and a workspace of its own (sessions never share files).
    fn start(
        &self,
        tasks: &mut JoinSet<(ThreadId, Exit)>,
        w: SessionWork,
        stop: CancellationToken,
    ) {
        let mut config = self.config.clone();
        config.thread_id = w.thread_id;
        config.api = Some(ApiAccess {
            url: self.url.clone(),
            token: SecretValue::new(w.token),
        });
        config.session = Some(w.key.clone());
        config.agent_token = None;
        config.workspace = self
            .config
            .workspace
            .join(crate::config::SESSIONS_DIR)
            .join(w.thread_id.to_string());
        let http = self.http.clone();
        let health = self.health.clone();
        let id = w.thread_id;
        let span = tracing::info_span!("session", key = %w.key);
        tasks.spawn(
            async move {
                if let Err(e) = std::fs::create_dir_all(&config.workspace) {
                    return (
                        id,
                        Exit::Failure(format!(
                            "cannot create the session's workspace {}: {e}",
                            config.workspace.display()
                        )),
                    );
                }
                (id, driver::run_session(config, http, health, stop).await)
            }
            .instrument(span),
        );
    }
}

/// A session resting after a failure.
struct Rest {
    until: Instant,
    failures: u32,
}

/// When the next rest ends: ended rests keep their failure count but wake nothing (a failed
/// session with no work left would otherwise wake the loop at once, forever).
fn next_wake<'a>(rests: impl Iterator<Item = &'a Rest>, now: Instant) -> Option<Instant> {
    rests.map(|r| r.until).filter(|until| *until > now).min()
}

/// Sleeps until `at` (forever when `None`; the caller's `select!` guards that branch).
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_rests_still_running_wake_the_loop() {
        let now = Instant::now();
        let rest = |secs: i64| Rest {
            until: if secs >= 0 {
                now + Duration::from_secs(secs as u64)
            } else {
                now - Duration::from_secs((-secs) as u64)
            },
            failures: 1,
        };
        assert_eq!(next_wake([rest(-5)].iter(), now), None);
        assert_eq!(
            next_wake([rest(-5), rest(9), rest(3)].iter(), now),
            Some(now + Duration::from_secs(3))
        );
        assert_eq!(next_wake([].iter(), now), None);
    }
}
