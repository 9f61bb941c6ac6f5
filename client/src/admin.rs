//! The admin routes (`/v1/threads…`, `/v1/tokens/…`) and the approval routes (`/v1/approvals…`):
//! listing and reading threads, the ledger and events (paged, or as a Server-Sent Events stream),
//! the inbox, purge, minting runner and approver tokens, and listing and deciding requests to
//! people. Called with the admin token (the approval routes also with an approver token).

use std::collections::VecDeque;

use futures_util::{Stream, StreamExt as _};
use ninetrix_proto::api::{
    AgentCardInfo, AgentReplicas, AgentTokenRequest, AgentTokenResponse, Approval, ApprovalStatus,
    ApproverTokenRequest, ApproverTokenResponse, CancelRequest, CancelResponse, DecisionRequest,
    EnqueueRequest, EnqueueResponse, Event, Handoff, RunnerTokenRequest, RunnerTokenResponse,
    SessionRequest, ThreadStatus, ThreadSummary, ToolCallRecord, VersionDetail, VersionSummary,
};
use reqwest::Method;

use ninetrix_proto::{ApprovalId, ThreadId};

use crate::sse::SseDecoder;

/// What a watched thread's stream carries.
#[derive(Clone, Debug, PartialEq)]
pub enum Watched {
    /// A stored trace event.
    Event(Event),
    /// Reply text the model is streaming (not stored).
    Delta(ninetrix_proto::deltas::Delta),
}
use crate::{Client, ClientError, Limit};

/// Filters of `GET /v1/threads`; every field optional.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadQuery {
    /// Only threads of this pool.
    pub pool: Option<String>,
    /// Only threads of this agent.
    pub agent: Option<String>,
    /// Only threads in this status.
    pub status: Option<ThreadStatus>,
    /// At most this many (the server's default and cap apply when `None`).
    pub limit: Option<u32>,
    /// Skip this many.
    pub offset: Option<u32>,
}

impl ThreadQuery {
    fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut q = Vec::new();
        if let Some(p) = &self.pool {
            q.push(("pool", p.clone()));
        }
        if let Some(a) = &self.agent {
            q.push(("agent", a.clone()));
        }
        if let Some(s) = self.status {
            q.push(("status", s.as_str().to_string()));
        }
        if let Some(l) = self.limit {
            q.push(("limit", l.to_string()));
        }
        if let Some(o) = self.offset {
            q.push(("offset", o.to_string()));
        }
        q
    }
}

/// Filters of `GET /v1/approvals`; every field optional.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApprovalQuery {
    /// Only requests of this pool.
    pub pool: Option<String>,
    /// Only requests of this agent.
    pub agent: Option<String>,
    /// Only requests of this thread.
    pub thread: Option<ThreadId>,
    /// Only requests standing so; `None`: every status (the server's own default is pending).
    pub status: Option<ApprovalStatus>,
    /// At most this many (the server's default and cap apply when `None`).
    pub limit: Option<u32>,
    /// Skip this many.
    pub offset: Option<u32>,
}

impl ApprovalQuery {
    fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut q = Vec::new();
        if let Some(p) = &self.pool {
            q.push(("pool", p.clone()));
        }
        if let Some(a) = &self.agent {
            q.push(("agent", a.clone()));
        }
        if let Some(t) = self.thread {
            q.push(("thread_id", t.to_string()));
        }
        q.push((
            "status",
            self.status.map_or("all", |s| s.as_str()).to_string(),
        ));
        if let Some(l) = self.limit {
            q.push(("limit", l.to_string()));
        }
        if let Some(o) = self.offset {
            q.push(("offset", o.to_string()));
        }
        q
    }
}

fn path(thread: ThreadId, rest: &str) -> String {
    format!("/v1/threads/{thread}{rest}")
}

impl Client {
    /// `GET /v1/threads`: one page of threads matching `query`.
    pub async fn list_threads(
        &self,
        query: &ThreadQuery,
    ) -> Result<Vec<ThreadSummary>, ClientError> {
        self.call::<(), _>(Method::GET, "/v1/threads", &query.pairs(), None, None)
            .await
    }

    /// `GET /v1/threads/{id}`: one thread; `None` if it does not exist.
    pub async fn thread(&self, thread: ThreadId) -> Result<Option<ThreadSummary>, ClientError> {
        self.call_optional::<(), _>(Method::GET, &path(thread, ""), &[], None, None)
            .await
    }

    /// `DELETE /v1/threads/{id}`: deletes everything of the thread; its ID is never used again.
    /// `false` if there was nothing to delete (no such thread, or purged before).
    pub async fn purge(&self, thread: ThreadId) -> Result<bool, ClientError> {
        match self
            .send::<()>(Method::DELETE, &path(thread, ""), &[], None, Limit::Default)
            .await
        {
            Ok(_) => Ok(true),
            Err(ClientError::Api {
                code: crate::ErrorCode::NotFound | crate::ErrorCode::Purged,
                ..
            }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `GET /v1/threads/{id}/checkpoints`: the version chain.
    pub async fn versions(&self, thread: ThreadId) -> Result<Vec<VersionSummary>, ClientError> {
        self.call::<(), _>(Method::GET, &path(thread, "/checkpoints"), &[], None, None)
            .await
    }

    /// `GET /v1/threads/{id}/checkpoints/{version}`: one version with the history as of it.
    pub async fn version(
        &self,
        thread: ThreadId,
        version: u64,
    ) -> Result<VersionDetail, ClientError> {
        let p = path(thread, &format!("/checkpoints/{version}"));
        self.call::<(), _>(Method::GET, &p, &[], None, None).await
    }

    /// `GET /v1/threads/{id}/tool-calls`: the thread's ledger.
    pub async fn tool_calls(&self, thread: ThreadId) -> Result<Vec<ToolCallRecord>, ClientError> {
        self.call::<(), _>(Method::GET, &path(thread, "/tool-calls"), &[], None, None)
            .await
    }

    /// `POST /v1/threads/{id}/messages`: puts a message in the thread's inbox (a repeated
    /// `dedupe_key` answers the original seq). A message whose mode is `reject` (its own or the
    /// agent's) that finds the thread in a turn is refused with [`ErrorCode::Busy`], the turn in
    /// [`ClientError::running`].
    ///
    /// [`ErrorCode::Busy`]: crate::ErrorCode::Busy
    pub async fn enqueue(
        &self,
        thread: ThreadId,
        request: &EnqueueRequest,
    ) -> Result<EnqueueResponse, ClientError> {
        let p = path(thread, "/messages");
        self.call(Method::POST, &p, &[], Some(request), None).await
    }

    /// `POST /v1/threads/{id}/cancel`: cancels the thread's turn — a `cancel` in its inbox, and
    /// at once the turn's pending requests to people and the thread's pending handoffs settled
    /// `cancelled` (collaborators' turns on those tasks cancelled too). A repeated `dedupe_key`
    /// answers the first cancel (`duplicate: true`).
    pub async fn cancel(
        &self,
        thread: ThreadId,
        request: &CancelRequest,
    ) -> Result<CancelResponse, ClientError> {
        let p = path(thread, "/cancel");
        self.call(Method::POST, &p, &[], Some(request), None).await
    }

    /// `GET /v1/threads/{id}/events`: one page of events after `after` (at most `limit`, within
    /// the server's cap).
    pub async fn events_page(
        &self,
        thread: ThreadId,
        after: u64,
        limit: Option<u32>,
    ) -> Result<Vec<Event>, ClientError> {
        let mut query = vec![("after", after.to_string())];
        if let Some(l) = limit {
            query.push(("limit", l.to_string()));
        }
        self.call::<(), _>(Method::GET, &path(thread, "/events"), &query, None, None)
            .await
    }

    /// Every event after `after`, paging until the server has no more (no assumption about its
    /// page size).
    pub async fn events_after(
        &self,
        thread: ThreadId,
        mut after: u64,
    ) -> Result<Vec<Event>, ClientError> {
        let mut all = Vec::new();
        loop {
            let page = self.events_page(thread, after, None).await?;
            let Some(last) = page.last() else {
                return Ok(all);
            };
            after = last.seq;
            all.extend(page);
        }
    }

    /// `GET /v1/threads/{id}/events/stream?deltas=true`: the stored events after `after` and,
    /// between them, the reply text the model streams ([`Watched::Delta`], ephemeral: a
    /// reconnection gets the stored events again, never the deltas).
    pub async fn watch(
        &self,
        thread: ThreadId,
        after: u64,
    ) -> Result<impl Stream<Item = Result<Watched, ClientError>> + Send + use<>, ClientError> {
        let query = [("after", after.to_string()), ("deltas", "true".into())];
        self.sse(thread, &query, |sse| {
            if sse.event.as_deref() == Some("delta") {
                serde_json::from_str(&sse.data).map(Watched::Delta)
            } else {
                serde_json::from_str(&sse.data).map(Watched::Event)
            }
        })
        .await
    }

    /// `GET /v1/threads/{id}/events/stream`: the events after `after` as they are stored, until
    /// the thread is purged or the server shuts down. Reconnect with the last seq seen to resume
    /// with no gap and no duplicate.
    pub async fn event_stream(
        &self,
        thread: ThreadId,
        after: u64,
    ) -> Result<impl Stream<Item = Result<Event, ClientError>> + Send + use<>, ClientError> {
        self.sse(thread, &[("after", after.to_string())], |sse| {
            serde_json::from_str(&sse.data)
        })
        .await
    }

    /// A thread's event stream with `query`, each Server-Sent Event read by `parse` (an event
    /// it cannot read ends the stream with `BadResponse`).
    async fn sse<T: Send + 'static>(
        &self,
        thread: ThreadId,
        query: &[(&str, String)],
        parse: fn(&crate::sse::SseEvent) -> Result<T, serde_json::Error>,
    ) -> Result<impl Stream<Item = Result<T, ClientError>> + Send + use<T>, ClientError> {
        let p = path(thread, "/events/stream");
        let resp = self
            .send::<()>(Method::GET, &p, query, None, Limit::Never)
            .await?;
        let base = self.base.clone();
        let what = format!("GET {p}");
        let chunks = resp.bytes_stream();
        let state = (chunks.boxed(), SseDecoder::default(), VecDeque::<T>::new());
        Ok(futures_util::stream::unfold(
            state,
            move |(mut chunks, mut decoder, mut ready)| {
                let (base, what) = (base.clone(), what.clone());
                async move {
                    loop {
                        if let Some(item) = ready.pop_front() {
                            return Some((Ok(item), (chunks, decoder, ready)));
                        }
                        match chunks.next().await? {
                            Err(e) => {
                                let err = ClientError::unreachable(&base, &e);
                                return Some((Err(err), (chunks, decoder, ready)));
                            }
                            Ok(bytes) => {
                                for sse in decoder.push(&bytes) {
                                    match parse(&sse) {
                                        Ok(item) => ready.push_back(item),
                                        Err(e) => {
                                            let err = ClientError::BadResponse {
                                                what: what.clone(),
                                                status: 200,
                                                reason: e.to_string(),
                                            };
                                            return Some((Err(err), (chunks, decoder, ready)));
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            },
        ))
    }

    /// `GET /v1/handoffs`: one page of handoffs, oldest first — those `thread` made, or the one
    /// delivered to `target`, in `pool`.
    pub async fn list_handoffs(
        &self,
        pool: Option<&str>,
        thread: Option<ThreadId>,
        target: Option<ThreadId>,
    ) -> Result<Vec<Handoff>, ClientError> {
        let mut pairs = vec![("limit", "1000".to_string())];
        if let Some(pool) = pool {
            pairs.push(("pool", pool.to_string()));
        }
        if let Some(thread) = thread {
            pairs.push(("thread_id", thread.to_string()));
        }
        if let Some(target) = target {
            pairs.push(("target_thread_id", target.to_string()));
        }
        self.call::<(), _>(Method::GET, "/v1/handoffs", &pairs, None, None)
            .await
    }

    /// `GET /v1/approvals`: one page of requests to people matching `query`, oldest first.
    pub async fn list_approvals(
        &self,
        query: &ApprovalQuery,
    ) -> Result<Vec<Approval>, ClientError> {
        self.call::<(), _>(Method::GET, "/v1/approvals", &query.pairs(), None, None)
            .await
    }

    /// `GET /v1/approvals/{id}`: one request; `None` if there is none (or it is another pool's).
    pub async fn approval(&self, id: ApprovalId) -> Result<Option<Approval>, ClientError> {
        self.call_optional::<(), _>(Method::GET, &format!("/v1/approvals/{id}"), &[], None, None)
            .await
    }

    /// `POST /v1/approvals/{id}/decision`: decides a request. The same decision again answers
    /// the record; a different one, or one after the expiry, is a 409 (`already_decided`,
    /// `approval_expired`) whose message names the decision that stands.
    pub async fn decide_approval(
        &self,
        id: ApprovalId,
        decision: &DecisionRequest,
    ) -> Result<Approval, ClientError> {
        let p = format!("/v1/approvals/{id}/decision");
        self.call(Method::POST, &p, &[], Some(decision), None).await
    }

    /// `POST /v1/tokens/approver`: mints a token that lists and decides one pool's requests.
    pub async fn mint_approver_token(
        &self,
        request: &ApproverTokenRequest,
    ) -> Result<ApproverTokenResponse, ClientError> {
        self.call(
            Method::POST,
            "/v1/tokens/approver",
            &[],
            Some(request),
            None,
        )
        .await
    }

    /// `POST /v1/sessions`: the thread of session `key` of (pool, agent), created on first use.
    pub async fn open_session(
        &self,
        pool: &str,
        agent: &str,
        key: &str,
    ) -> Result<ThreadSummary, ClientError> {
        let request = SessionRequest {
            pool: pool.to_string(),
            agent: agent.to_string(),
            key: key.to_string(),
        };
        self.call(Method::POST, "/v1/sessions", &[], Some(&request), None)
            .await
    }

    /// `GET /v1/sessions`: one page of sessions' threads (pool and agent filters as for threads;
    /// `key`: only that session).
    pub async fn list_sessions(
        &self,
        query: &ThreadQuery,
        key: Option<&str>,
    ) -> Result<Vec<ThreadSummary>, ClientError> {
        let mut pairs = query.pairs();
        pairs.retain(|(k, _)| *k != "status");
        if let Some(key) = key {
            pairs.push(("key", key.to_string()));
        }
        self.call::<(), _>(Method::GET, "/v1/sessions", &pairs, None, None)
            .await
    }

    /// `PUT /v1/pools/{pool}/agents/{agent}`: records how many replicas the agent runs, the
    /// agents it may hand work to, and its A2A card (`card`: what the agentfile says of it;
    /// `None` serves no card, so the agent is not an A2A agent).
    pub async fn set_replicas(
        &self,
        pool: &str,
        agent: &str,
        replicas: u32,
        collaborators: &[String],
        card: Option<&AgentCardInfo>,
    ) -> Result<(), ClientError> {
        let path = format!("/v1/pools/{pool}/agents/{agent}");
        self.send(
            Method::PUT,
            &path,
            &[],
            Some(&AgentReplicas {
                replicas,
                collaborators: collaborators.to_vec(),
                card: card.cloned(),
            }),
            Limit::Default,
        )
        .await
        .map(drop)
    }

    /// `POST /v1/tokens/agent`: mints the token an agent's replicas find their sessions with.
    pub async fn mint_agent_token(
        &self,
        pool: &str,
        agent: &str,
    ) -> Result<AgentTokenResponse, ClientError> {
        let request = AgentTokenRequest {
            pool: pool.to_string(),
            agent: agent.to_string(),
        };
        self.call(Method::POST, "/v1/tokens/agent", &[], Some(&request), None)
            .await
    }

    /// `POST /v1/tokens/runner`: mints the runner token of a thread (creating the thread and
    /// recording its labels).
    pub async fn mint_runner_token(
        &self,
        request: &RunnerTokenRequest,
    ) -> Result<RunnerTokenResponse, ClientError> {
        self.call(Method::POST, "/v1/tokens/runner", &[], Some(request), None)
            .await
    }
}
