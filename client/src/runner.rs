//! The runner routes (`/v1/runners/threads/{id}/…`): claim, identity, latest, checkpoints, commit, the ledger, the
//! inbox long-poll, the requests-to-people long-poll and trace events. Called with the thread's runner token (or the admin token).

use std::time::Duration;

use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    Approval, CheckpointCreated, CheckpointRequest, ClaimRequest, ClaimResponse, CommitRequest,
    CommitResponse, EventsAppended, EventsRequest, Handoff, HandoffRequest, InboxMessage,
    ReplicaThread, SessionWork, ThreadLabels, ThreadState, ToolCallCompletion, ToolCallIntent,
    ToolCallRecord,
};
use reqwest::Method;

use crate::{Client, ClientError};

fn path(thread: ThreadId, rest: &str) -> String {
    format!("/v1/runners/threads/{thread}{rest}")
}

/// A pool, agent or trigger name as one path segment: unreserved characters as they are, every other byte
/// percent-encoded (agentfile names are `[a-z0-9-]`, so this only guards against one that is not).
pub(crate) fn segment(name: &str) -> String {
    name.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

impl Client {
    /// `POST …/claim`: a new epoch for `thread` (created if new), recording its labels.
    pub async fn claim(
        &self,
        thread: ThreadId,
        labels: &ClaimRequest,
    ) -> Result<ClaimResponse, ClientError> {
        self.call(
            Method::POST,
            &path(thread, "/claim"),
            &[],
            Some(labels),
            None,
        )
        .await
    }

    /// `GET …/latest`: the thread at its latest version; `None` for a thread with no checkpoint.
    pub async fn latest(&self, thread: ThreadId) -> Result<Option<ThreadState>, ClientError> {
        self.call_optional::<(), _>(Method::GET, &path(thread, "/latest"), &[], None, None)
            .await
    }

    /// `GET …/identity`: the thread's labels (pool, agent, replica, session key) as stored when
    /// it was created. With a runner token, this says whom the token stands for.
    pub async fn thread_identity(&self, thread: ThreadId) -> Result<ThreadLabels, ClientError> {
        self.call::<(), _>(Method::GET, &path(thread, "/identity"), &[], None, None)
            .await
    }

    /// `POST …/checkpoints`: appends one version (fenced by epoch, chained by parent version).
    pub async fn append_checkpoint(
        &self,
        thread: ThreadId,
        request: &CheckpointRequest,
    ) -> Result<CheckpointCreated, ClientError> {
        let p = path(thread, "/checkpoints");
        self.call(Method::POST, &p, &[], Some(request), None).await
    }

    /// `POST …/commit`: one durable step in one transaction — a checkpoint version, ledger
    /// intents and outcomes (fenced by epoch, chained by parent version; all or nothing).
    pub async fn commit(
        &self,
        thread: ThreadId,
        request: &CommitRequest,
    ) -> Result<CommitResponse, ClientError> {
        let p = path(thread, "/commit");
        self.call(Method::POST, &p, &[], Some(request), None).await
    }

    /// `GET …/tool-calls?turn_seq=N`: the ledger records of one turn, oldest first.
    pub async fn turn_tool_calls(
        &self,
        thread: ThreadId,
        turn_seq: u64,
    ) -> Result<Vec<ToolCallRecord>, ClientError> {
        let p = path(thread, "/tool-calls");
        let query = [("turn_seq", turn_seq.to_string())];
        self.call::<(), _>(Method::GET, &p, &query, None, None)
            .await
    }

    /// `GET …/approvals?turn_seq=N`: the requests to people of one turn, as they stand. With a
    /// `wait`, the API holds the answer until more than `settled` of them are settled, none is
    /// pending, or the wait ends.
    pub async fn turn_approvals(
        &self,
        thread: ThreadId,
        turn_seq: u64,
        settled: u64,
        wait: Duration,
    ) -> Result<Vec<Approval>, ClientError> {
        self.turn_wait(thread, "/approvals", turn_seq, settled, wait)
            .await
    }

    /// One turn's items of a runner long-poll (`…/approvals`, `…/handoffs`): `?turn_seq&settled
    /// &wait`, with the request's timeout past the wait.
    async fn turn_wait<T: serde::de::DeserializeOwned>(
        &self,
        thread: ThreadId,
        rest: &str,
        turn_seq: u64,
        settled: u64,
        wait: Duration,
    ) -> Result<Vec<T>, ClientError> {
        let query = [
            ("turn_seq", turn_seq.to_string()),
            ("settled", settled.to_string()),
            ("wait", wait.as_secs().to_string()),
        ];
        let timeout = wait + Duration::from_secs(15);
        self.call::<(), _>(
            Method::GET,
            &path(thread, rest),
            &query,
            None,
            Some(timeout),
        )
        .await
    }

    /// `POST …/handoffs`: hands one call's task to a collaborator (its session for the call is
    /// opened and the task filed under the call's delivery key); the same call again returns
    /// the handoff it made.
    pub async fn open_handoff(
        &self,
        thread: ThreadId,
        request: &HandoffRequest,
    ) -> Result<Handoff, ClientError> {
        let p = path(thread, "/handoffs");
        self.call(Method::POST, &p, &[], Some(request), None).await
    }

    /// `GET …/handoffs?turn_seq=N&settled=K&wait=S`: the handoffs of one turn, as they stand;
    /// with a `wait`, held until more than `settled` of them are settled (or none is pending).
    pub async fn turn_handoffs(
        &self,
        thread: ThreadId,
        turn_seq: u64,
        settled: u64,
        wait: Duration,
    ) -> Result<Vec<Handoff>, ClientError> {
        self.turn_wait(thread, "/handoffs", turn_seq, settled, wait)
            .await
    }

    /// `POST /v1/runners/pools/{pool}/agents/{agent}/replicas/{replica}` (agent token): the
    /// thread of that replica, made on first use (or after a purge) and the same ever after,
    /// with its runner token.
    pub async fn replica_thread(
        &self,
        pool: &str,
        agent: &str,
        replica: u32,
    ) -> Result<ReplicaThread, ClientError> {
        let path = format!(
            "/v1/runners/pools/{}/agents/{}/replicas/{replica}",
            segment(pool),
            segment(agent)
        );
        self.call::<(), _>(Method::POST, &path, &[], None, None)
            .await
    }

    /// `GET /v1/runners/pools/{pool}/agents/{agent}/sessions`: the sessions replica `replica`
    /// owns that have work, other than `active`, each with its thread's runner token; with a
    /// `wait`, held until there is some (called with the agent token).
    pub async fn session_work(
        &self,
        pool: &str,
        agent: &str,
        replica: u32,
        active: &[ThreadId],
        wait: Duration,
    ) -> Result<Vec<SessionWork>, ClientError> {
        let active: Vec<String> = active.iter().map(ToString::to_string).collect();
        let mut query = vec![
            ("replica", replica.to_string()),
            ("wait", wait.as_secs().to_string()),
        ];
        if !active.is_empty() {
            query.push(("active", active.join(",")));
        }
        let path = format!(
            "/v1/runners/pools/{}/agents/{}/sessions",
            segment(pool),
            segment(agent)
        );
        let timeout = wait + Duration::from_secs(15);
        self.call::<(), _>(Method::GET, &path, &query, None, Some(timeout))
            .await
    }

    /// `POST …/tool-calls`: records a tool call's intent, or returns the existing record.
    pub async fn record_intent(
        &self,
        thread: ThreadId,
        intent: &ToolCallIntent,
    ) -> Result<ToolCallRecord, ClientError> {
        let p = path(thread, "/tool-calls");
        self.call(Method::POST, &p, &[], Some(intent), None).await
    }

    /// `PUT …/tool-calls/{key}`: records a tool call's outcome (idempotent for the same one).
    pub async fn complete_tool_call(
        &self,
        thread: ThreadId,
        key: &str,
        done: &ToolCallCompletion,
    ) -> Result<ToolCallRecord, ClientError> {
        let p = path(thread, &format!("/tool-calls/{key}"));
        self.call(Method::PUT, &p, &[], Some(done), None).await
    }

    /// `GET …/inbox`: up to `limit` messages after `after`, waiting up to `wait` for the first.
    /// The request's own timeout is `wait` plus a margin.
    pub async fn inbox(
        &self,
        thread: ThreadId,
        after: u64,
        wait: Duration,
        limit: u32,
    ) -> Result<Vec<InboxMessage>, ClientError> {
        let query = [
            ("after", after.to_string()),
            ("wait", wait.as_secs().to_string()),
            ("limit", limit.to_string()),
        ];
        let timeout = wait + Duration::from_secs(15);
        self.call::<(), _>(
            Method::GET,
            &path(thread, "/inbox"),
            &query,
            None,
            Some(timeout),
        )
        .await
    }

    /// `POST …/events`: appends a batch of trace events (fenced by epoch).
    pub async fn append_events(
        &self,
        thread: ThreadId,
        request: &EventsRequest,
        timeout: Duration,
    ) -> Result<EventsAppended, ClientError> {
        let p = path(thread, "/events");
        self.call(Method::POST, &p, &[], Some(request), Some(timeout))
            .await
    }

    /// `POST …/deltas`: hands text the model is streaming to the thread's watchers (not stored;
    /// best effort — a caller drops a batch that fails rather than retry it).
    pub async fn publish_deltas(
        &self,
        thread: ThreadId,
        batch: &ninetrix_proto::deltas::DeltaBatch,
        timeout: Duration,
    ) -> Result<(), ClientError> {
        let p = path(thread, "/deltas");
        self.send(
            Method::POST,
            &p,
            &[],
            Some(batch),
            crate::Limit::After(timeout),
        )
        .await
        .map(drop)
    }
}
