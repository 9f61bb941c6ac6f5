//! Where the runner keeps its thread: the [`Checkpoints`] seam, with the checkpoint API over HTTP
//! ([`HttpCheckpoints`], retrying transient failures for as long as it takes — or up to an opt-in
//! patience — and reporting the outage in the runner's health) and an in-memory
//! implementation ([`MemoryCheckpoints`]) for a batch job run without an API, which still goes
//! through the same claim, checkpoint and ledger logic.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ninetrix_proto::events::Dependency;

use crate::backoff::{self, GaveUp};
use crate::health::Health;
use crate::limits::{PermitError, PermitFuture, Permits};
use ninetrix_client::{Client, ClientError, ErrorCode};
use ninetrix_proto::api::{
    Approval, CheckpointState, ClaimRequest, ClaimResponse, CommitRequest, CommitResponse,
    EventsRequest, Handoff, HandoffRequest, InboxMessage, LeaseRelease, LeaseRenewed, LeaseRequest,
    LeaseResponse, MemoryOpRequest, MemoryOpResult, NewEvent, ThreadState, ToolCallRecord,
    ToolCallStatus, TurnEnd, TurnPoint, UndoneEffect, not_undone,
};
use ninetrix_proto::snapshots::{Node, ObjectId, ObjectKind, SnapshotRef};
use ninetrix_proto::{LeaseId, Message, ThreadId};

/// How many inbox messages one read takes (the API's most): enough to see an urgent message
/// (a steer, an interrupt, a cancel) behind those queued ahead of it.
const INBOX_BATCH: u32 = 100;

/// Why a checkpoint store call failed.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// Another runner claimed the thread: stop at once.
    #[error("fenced: another runner owns this thread now ({0})")]
    Fenced(String),
    /// The parent version is not the latest: the local state is stale.
    #[error("version conflict: {0}")]
    VersionConflict(String),
    /// The ledger entry already holds another outcome (a stale copy recorded it first).
    #[error("the ledger already holds another outcome: {0}")]
    AlreadyCompleted(String),
    /// The API could not be reached (or answered 5xx) for longer than the runner's opt-in
    /// patience (`AGENTFILE_API_PATIENCE`).
    #[error("the checkpoint API is unreachable: {0}")]
    Unreachable(String),
    /// The ledger has no entry for this key (an outcome before its intent).
    #[error("the ledger has no entry {0}")]
    NoLedgerEntry(String),
    /// The thread was purged (410 `purged`): its conversation is deleted and its ID is never
    /// used again, so this runner has nothing left to serve.
    #[error("thread purged: {0}")]
    Purged(String),
    /// The API refused the request.
    #[error("{0}")]
    Refused(ClientError),
    /// The store has no API behind it (a batch job run in memory) and this needs one.
    #[error("{0}")]
    NoApi(String),
    /// A snapshot names objects the store does not have (409 `missing_objects`): upload them
    /// and ask again. An answer, not an outage.
    #[error("objects missing from the store: {0}")]
    MissingObjects(String),
    /// The store has no such object or turn (404 `not_found`). An answer, not an outage.
    #[error("not found: {0}")]
    NotFound(String),
}

impl From<ClientError> for CheckpointError {
    fn from(e: ClientError) -> Self {
        let message = match &e {
            ClientError::Api { message, .. } => message.clone(),
            other => other.to_string(),
        };
        match e.code() {
            Some(ErrorCode::Fenced) => CheckpointError::Fenced(message),
            Some(ErrorCode::VersionConflict) => CheckpointError::VersionConflict(message),
            Some(ErrorCode::AlreadyCompleted) => CheckpointError::AlreadyCompleted(message),
            Some(ErrorCode::Purged) => CheckpointError::Purged(message),
            Some(ErrorCode::MissingObjects) => CheckpointError::MissingObjects(message),
            _ => CheckpointError::Refused(e),
        }
    }
}

/// The thread's durable store, as the driver uses it. Every call is safe to repeat: commits are
/// fenced by epoch and chained by version, and a ledger key keeps its first intent and outcome.
pub trait Checkpoints: Clone + Send + Sync + 'static {
    /// Claims the thread (restating its labels, stating the agent's busy policy): a new epoch.
    fn claim(
        &self,
        claim: &ClaimRequest,
    ) -> impl Future<Output = Result<ClaimResponse, CheckpointError>> + Send;
    /// The latest state; `None` for a fresh thread.
    fn latest(&self) -> impl Future<Output = Result<Option<ThreadState>, CheckpointError>> + Send;
    /// Commits one durable step: a checkpoint version, ledger intents and outcomes, all or
    /// nothing.
    fn commit(
        &self,
        request: &CommitRequest,
    ) -> impl Future<Output = Result<CommitResponse, CheckpointError>> + Send;
    /// The ledger records of one turn.
    fn turn_ledger(
        &self,
        turn_seq: u64,
    ) -> impl Future<Output = Result<Vec<ToolCallRecord>, CheckpointError>> + Send;
    /// The requests to people of one turn as they stand, waiting up to `wait` while no more than
    /// `settled` of them are settled and some are pending.
    fn approvals(
        &self,
        turn_seq: u64,
        settled: u64,
        wait: Duration,
    ) -> impl Future<Output = Result<Vec<Approval>, CheckpointError>> + Send;
    /// Hands one call's task to a collaborator (once per call: a repeat returns the handoff it
    /// made).
    fn open_handoff(
        &self,
        request: &HandoffRequest,
    ) -> impl Future<Output = Result<Handoff, CheckpointError>> + Send;
    /// The handoffs of one turn as they stand, waiting up to `wait` while no more than `settled`
    /// of them are settled and some are pending.
    fn handoffs(
        &self,
        turn_seq: u64,
        settled: u64,
        wait: Duration,
    ) -> impl Future<Output = Result<Vec<Handoff>, CheckpointError>> + Send;
    /// The inbox messages after `after` (up to a batch), waiting up to `wait` for the first.
    fn inbox(
        &self,
        after: u64,
        wait: Duration,
    ) -> impl Future<Output = Result<Vec<InboxMessage>, CheckpointError>> + Send;
    /// What a rewind to the end of turn `turn_seq` goes back to: its history, state and
    /// snapshot, and the later effects going back does not undo (`NotFound`: no such turn).
    fn turn_point(
        &self,
        turn_seq: u64,
    ) -> impl Future<Output = Result<TurnPoint, CheckpointError>> + Send;
    /// Which of `ids` (at most [`ninetrix_proto::snapshots::MAX_IDS_PER_REQUEST`]) the store
    /// lacks, in the order asked.
    fn missing_objects(
        &self,
        ids: Vec<ObjectId>,
    ) -> impl Future<Output = Result<Vec<ObjectId>, CheckpointError>> + Send;
    /// Stores one object (`id` is the SHA-256 of `bytes`; a node's objects are stored first,
    /// else `MissingObjects`). Storing one again is harmless.
    fn put_object(
        &self,
        id: &ObjectId,
        kind: ObjectKind,
        bytes: Vec<u8>,
    ) -> impl Future<Output = Result<(), CheckpointError>> + Send;
    /// One object's bytes (`NotFound`: the store does not have it).
    fn get_object(
        &self,
        id: &ObjectId,
    ) -> impl Future<Output = Result<Vec<u8>, CheckpointError>> + Send;
    /// Appends trace events: one attempt with a short timeout (events never hold up a turn).
    fn events(
        &self,
        epoch: u64,
        events: Vec<NewEvent>,
    ) -> impl Future<Output = Result<(), CheckpointError>> + Send;
    /// Runs one command of the `memory` tool on the thread's agent's (or session's) memory, once
    /// per `op_key`: the same key again answers the first result. A store without an API has no
    /// memory.
    fn memory(
        &self,
        request: &MemoryOpRequest,
    ) -> impl Future<Output = Result<MemoryOpResult, CheckpointError>> + Send {
        let _ = request;
        std::future::ready(Err(CheckpointError::NoApi(NO_API_MEMORY.into())))
    }
    /// Hands streamed reply text to the thread's watchers: one attempt, never retried (deltas are
    /// not stored). A store without watchers takes nothing.
    fn deltas(
        &self,
        batch: &ninetrix_proto::deltas::DeltaBatch,
    ) -> impl Future<Output = Result<(), CheckpointError>> + Send {
        let _ = batch;
        std::future::ready(Ok(()))
    }
}

/// The checkpoint API of one thread, over HTTP.
#[derive(Clone, Debug)]
pub struct HttpCheckpoints {
    client: Client,
    thread: ThreadId,
    /// The API's base URL, for the health line.
    url: String,
    /// How long transient failures are retried before giving up; `None`: for as long as it takes.
    patience: Option<Duration>,
    health: Health,
    /// With telemetry on, the sampler of its traces: commits then carry the turn attempt's
    /// `traceparent`.
    tracing: Option<ninetrix_telemetry::SamplerSetting>,
}

impl HttpCheckpoints {
    /// The thread's routes through `client` (whose base URL is `url`), reporting outages to
    /// `health`.
    pub fn new(
        client: Client,
        url: &str,
        thread: ThreadId,
        patience: Option<Duration>,
        health: Health,
    ) -> Self {
        Self {
            client,
            thread,
            url: url.to_string(),
            patience,
            health,
            tracing: None,
        }
    }

    /// The same store, sending each commit with the `traceparent` of its turn attempt's span
    /// (when `sampler` is given: telemetry is on), so the API's span of the commit joins the
    /// turn's trace.
    pub fn with_tracing(mut self, sampler: Option<ninetrix_telemetry::SamplerSetting>) -> Self {
        self.tracing = sampler;
        self
    }

    /// Runs `call`, retrying transient failures (no answer, 5xx, 429) with capped exponential
    /// backoff ([`backoff::API`]) until it answers or the opt-in patience runs out. While it fails
    /// the health says `checkpoint API unreachable: …`; its first answer afterwards ends the
    /// outage (an `outage` event).
    async fn retrying<T, F, Fut>(&self, call: F) -> Result<T, CheckpointError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        let on_retry = |e: &ClientError, delay: Duration| {
            let reason = api_failure_text(e);
            self.health.failed(
                Dependency::Api,
                &reason,
                format!("checkpoint API unreachable: {reason} ({})", self.url),
            );
            tracing::warn!(reason = %e, retry_in_ms = delay.as_millis() as u64, "checkpoint API call failed; retrying");
        };
        let answer = backoff::patiently(
            backoff::API,
            self.patience,
            std::future::pending::<Infallible>(),
            ClientError::is_transient,
            on_retry,
            call,
        )
        .await;
        match answer {
            Ok(v) => {
                self.health.answered(Dependency::Api);
                Ok(v)
            }
            Err(GaveUp::Patience(e)) => {
                let patience = self.patience.unwrap_or_default();
                Err(CheckpointError::Unreachable(format!(
                    "{e} (gave up after {} s: AGENTFILE_API_PATIENCE)",
                    patience.as_secs()
                )))
            }
            Err(GaveUp::Failed(e)) => {
                // It answered, if with a refusal: the API itself is up.
                self.health.answered(Dependency::Api);
                Err(e.into())
            }
            Err(GaveUp::Stopped(never)) => match never {},
        }
    }
}

impl HttpCheckpoints {
    /// The answer to `request` if the thread shows it stored: at `parent_version + 1`, with the
    /// thread still at the request's epoch. A thread claimed by a later epoch meanwhile means
    /// this runner is stale: fenced, as its write would have been.
    async fn stored_by_earlier_attempt(
        &self,
        request: &CommitRequest,
    ) -> Result<Option<CommitResponse>, CheckpointError> {
        let Some(latest) = self.latest().await? else {
            return Ok(None);
        };
        if latest.epoch > request.epoch {
            // Another runner claimed the thread while this one retried: this copy is stale.
            return Err(CheckpointError::Fenced(format!(
                "epoch {} is not the current epoch {}",
                request.epoch, latest.epoch
            )));
        }
        if !stored_by_this_epoch(request, latest.version, latest.epoch) {
            return Ok(None);
        }
        let mut records = Vec::with_capacity(request.intents.len());
        for intent in &request.intents {
            let turn = self.turn_ledger(intent.turn_seq).await?;
            match turn.into_iter().find(|r| r.key == intent.key) {
                Some(r) => records.push(r),
                None => return Ok(None),
            }
        }
        Ok(Some(CommitResponse {
            version: latest.version,
            history_len: latest.history.len() as u64,
            records,
        }))
    }
}

/// Whether a thread at `version` and `epoch` holds `request` as its latest version: only the
/// runner that holds the epoch writes at it, one commit at a time.
fn stored_by_this_epoch(request: &CommitRequest, version: u64, epoch: u64) -> bool {
    epoch == request.epoch && version == request.parent_version + 1
}

/// A short cause for a failed API call: `connection refused`, `DNS lookup failed`, `timed out`,
/// `HTTP 503: …`, else the innermost cause the HTTP stack gave.
pub fn api_failure_text(e: &ClientError) -> String {
    match e {
        ClientError::Unreachable { reason, .. } => {
            let lower = reason.to_lowercase();
            if lower.contains("connection refused") {
                "connection refused".into()
            } else if lower.contains("dns error")
                || lower.contains("failed to lookup address")
                || lower.contains("no record found")
            {
                "DNS lookup failed".into()
            } else if lower.contains("timed out") || lower.contains("timeout") {
                "timed out".into()
            } else if lower.contains("connection reset") {
                "connection reset".into()
            } else if lower.contains("no route to host") {
                "no route to host".into()
            } else {
                reason.rsplit(": ").next().unwrap_or(reason).to_string()
            }
        }
        ClientError::Api {
            status, message, ..
        } => format!("HTTP {status}: {message}"),
        other => other.to_string(),
    }
}

impl Checkpoints for HttpCheckpoints {
    async fn claim(&self, claim: &ClaimRequest) -> Result<ClaimResponse, CheckpointError> {
        self.retrying(|| self.client.claim(self.thread, claim))
            .await
    }

    async fn latest(&self) -> Result<Option<ThreadState>, CheckpointError> {
        self.retrying(|| self.client.latest(self.thread)).await
    }

    /// A commit retried after a failure may have been stored by an earlier attempt whose answer
    /// was lost (the API died after its COMMIT): the retry then meets `version_conflict`. Such a
    /// conflict is this runner's own write when the thread is at the next version and still at
    /// this runner's epoch — nobody else can write at that epoch — and its answer is rebuilt
    /// from the stored thread and ledger instead of ending the runner.
    async fn commit(&self, request: &CommitRequest) -> Result<CommitResponse, CheckpointError> {
        let attempts = std::sync::atomic::AtomicU32::new(0);
        let traceparent = self.tracing.map(|sampler| {
            crate::telemetry::traceparent(
                self.thread,
                request.state.turn_seq,
                request.epoch,
                sampler,
            )
        });
        let client = self.client.traced(traceparent);
        let result = self
            .retrying(|| {
                attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                client.commit(self.thread, request)
            })
            .await;
        match result {
            Err(CheckpointError::VersionConflict(why))
                if attempts.load(std::sync::atomic::Ordering::Relaxed) > 1 =>
            {
                match self.stored_by_earlier_attempt(request).await? {
                    Some(done) => {
                        tracing::info!(
                            version = done.version,
                            "a retried commit had been stored by its first attempt"
                        );
                        Ok(done)
                    }
                    None => Err(CheckpointError::VersionConflict(why)),
                }
            }
            other => other,
        }
    }

    async fn turn_ledger(&self, turn_seq: u64) -> Result<Vec<ToolCallRecord>, CheckpointError> {
        self.retrying(|| self.client.turn_tool_calls(self.thread, turn_seq))
            .await
    }

    async fn approvals(
        &self,
        turn_seq: u64,
        settled: u64,
        wait: Duration,
    ) -> Result<Vec<Approval>, CheckpointError> {
        self.retrying(|| {
            self.client
                .turn_approvals(self.thread, turn_seq, settled, wait)
        })
        .await
    }

    async fn open_handoff(&self, request: &HandoffRequest) -> Result<Handoff, CheckpointError> {
        self.retrying(|| self.client.open_handoff(self.thread, request))
            .await
    }

    async fn handoffs(
        &self,
        turn_seq: u64,
        settled: u64,
        wait: Duration,
    ) -> Result<Vec<Handoff>, CheckpointError> {
        self.retrying(|| {
            self.client
                .turn_handoffs(self.thread, turn_seq, settled, wait)
        })
        .await
    }

    async fn inbox(
        &self,
        after: u64,
        wait: Duration,
    ) -> Result<Vec<InboxMessage>, CheckpointError> {
        self.retrying(|| self.client.inbox(self.thread, after, wait, INBOX_BATCH))
            .await
    }

    async fn turn_point(&self, turn_seq: u64) -> Result<TurnPoint, CheckpointError> {
        self.retrying(|| self.client.turn_point(self.thread, turn_seq))
            .await
            .map_err(not_found)
    }

    async fn missing_objects(&self, ids: Vec<ObjectId>) -> Result<Vec<ObjectId>, CheckpointError> {
        self.retrying(|| self.client.missing_objects(self.thread, ids.clone()))
            .await
    }

    /// Retried like every other call: storing an object again is harmless.
    async fn put_object(
        &self,
        id: &ObjectId,
        kind: ObjectKind,
        bytes: Vec<u8>,
    ) -> Result<(), CheckpointError> {
        self.retrying(|| self.client.put_object(self.thread, id, kind, bytes.clone()))
            .await
    }

    async fn get_object(&self, id: &ObjectId) -> Result<Vec<u8>, CheckpointError> {
        self.retrying(|| self.client.get_object(self.thread, id))
            .await
            .map_err(not_found)
    }

    /// Retried like every other call: the API applies a command once per `op_key`, so a retry
    /// whose first attempt was applied (its answer lost) gets that attempt's result.
    async fn memory(&self, request: &MemoryOpRequest) -> Result<MemoryOpResult, CheckpointError> {
        self.retrying(|| self.client.memory_op(self.thread, request))
            .await
    }

    async fn deltas(
        &self,
        batch: &ninetrix_proto::deltas::DeltaBatch,
    ) -> Result<(), CheckpointError> {
        self.client
            .publish_deltas(self.thread, batch, Duration::from_secs(2))
            .await
            .map_err(CheckpointError::from)
    }

    async fn events(&self, epoch: u64, events: Vec<NewEvent>) -> Result<(), CheckpointError> {
        let request = EventsRequest { epoch, events };
        self.client
            .append_events(self.thread, &request, Duration::from_secs(5))
            .await
            .map(drop)
            .map_err(|e| match e {
                e if e.is_transient() => CheckpointError::Unreachable(e.to_string()),
                e => e.into(),
            })
    }
}

/// A 404 of a turn or an object as the answer it is.
fn not_found(e: CheckpointError) -> CheckpointError {
    match e {
        CheckpointError::Refused(e) if e.code() == Some(&ErrorCode::NotFound) => {
            CheckpointError::NotFound(api_failure_text(&e))
        }
        other => other,
    }
}

/// A lease request's refusal in the permit seam's terms: fenced and purged as for any write; a
/// 404 on the request itself is an API without lease routes (on a renewal: a lease it no longer
/// knows); a failure the patience gave up on is unreachable.
fn permit_error(e: CheckpointError, not_found: fn(String) -> PermitError) -> PermitError {
    match e {
        CheckpointError::Fenced(m) => PermitError::Fenced(m),
        CheckpointError::Purged(m) => PermitError::Purged(m),
        CheckpointError::Unreachable(m) => PermitError::Unreachable(m),
        CheckpointError::Refused(e) if e.code() == Some(&ErrorCode::NotFound) => {
            not_found(api_failure_text(&e))
        }
        CheckpointError::Refused(e) if e.is_transient() => {
            PermitError::Unreachable(api_failure_text(&e))
        }
        CheckpointError::Refused(e) => PermitError::Refused(api_failure_text(&e)),
        other => PermitError::Refused(other.to_string()),
    }
}

/// The checkpoint API's model leases for this thread: a request is retried with the same
/// patience as every other call (a wait for the API is a wait for a slot); a renewal and a
/// release are one attempt each (their callers try again).
impl Permits for HttpCheckpoints {
    fn acquire<'a>(&'a self, request: &'a LeaseRequest) -> PermitFuture<'a, LeaseResponse> {
        Box::pin(async move {
            self.retrying(|| self.client.lease_model(self.thread, request))
                .await
                .map_err(|e| permit_error(e, PermitError::Unsupported))
        })
    }

    fn renew(&self, lease: LeaseId) -> PermitFuture<'_, LeaseRenewed> {
        Box::pin(async move {
            self.client
                .renew_model_lease(self.thread, lease)
                .await
                .map_err(|e| permit_error(e.into(), PermitError::UnknownLease))
        })
    }

    fn release<'a>(&'a self, lease: LeaseId, release: &'a LeaseRelease) -> PermitFuture<'a, ()> {
        Box::pin(async move {
            self.client
                .release_model_lease(self.thread, lease, release)
                .await
                .map_err(|e| permit_error(e.into(), PermitError::UnknownLease))
        })
    }
}

/// Why a thread kept in memory cannot hand work over.
const NO_API_MEMORY: &str = "the memory tool needs the checkpoint API, which keeps the memory beyond this process; this runner has none (a batch job run without AGENTFILE_API_URL)";

const NO_API_HANDOFFS: &str = "handing a task to a collaborator needs the checkpoint API (collaborators work in their own sessions there)";

/// A thread kept in this process only: the same rules as the API (epochs fence, versions chain,
/// the ledger keeps the first outcome), nothing survives the process. For batch jobs run without
/// an API; its inbox is always empty and its events are only logged.
#[derive(Clone, Debug)]
pub struct MemoryCheckpoints {
    inner: Arc<Mutex<Memory>>,
}

#[derive(Debug)]
struct Memory {
    thread: ThreadId,
    epoch: u64,
    boot_count: u64,
    version: u64,
    history: Vec<Message>,
    state: CheckpointState,
    ledger: HashMap<String, ToolCallRecord>,
    /// Snapshot objects by ID.
    objects: HashMap<ObjectId, Vec<u8>>,
    /// Each ended turn (by its number), as its commit's `turn_end` recorded it.
    turns: std::collections::BTreeMap<u64, EndedTurn>,
}

/// A turn's end as the store keeps it: what a rewind to it goes back to.
#[derive(Clone, Debug)]
struct EndedTurn {
    history: Vec<Message>,
    state: CheckpointState,
    snapshot: Option<SnapshotRef>,
    dropped: bool,
    /// Why it has no snapshot though the agent takes them.
    skipped: Option<String>,
}

impl MemoryCheckpoints {
    /// An empty thread.
    pub fn new(thread: ThreadId) -> Self {
        let memory = Memory {
            thread,
            epoch: 0,
            boot_count: 0,
            version: 0,
            history: Vec::new(),
            state: CheckpointState::default(),
            ledger: HashMap::new(),
            objects: HashMap::new(),
            turns: std::collections::BTreeMap::new(),
        };
        Self {
            inner: Arc::new(Mutex::new(memory)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Memory> {
        // A panic while holding the lock cannot leave a half-applied write (every write is one
        // assignment sequence below), so a poisoned lock is still consistent.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Forgets a stored object, as the API's collection of dropped snapshots would (for tests
    /// of a commit whose snapshot lost an object meanwhile).
    pub fn drop_object(&self, id: &ObjectId) {
        self.lock().objects.remove(id);
    }

    /// The first object under `root` the store lacks, if any (a node that does not decode
    /// counts as missing: it cannot name what is below it).
    fn first_missing(m: &Memory, root: &ObjectId) -> Option<ObjectId> {
        let mut stack = vec![root.clone()];
        while let Some(id) = stack.pop() {
            let Some(bytes) = m.objects.get(&id) else {
                return Some(id);
            };
            match Node::decode(bytes) {
                Ok(Node::Leaf(files)) => {
                    if let Some(f) = files.iter().find(|f| !m.objects.contains_key(&f.blob)) {
                        return Some(f.blob.clone());
                    }
                }
                Ok(Node::Branch(children)) => stack.extend(children.into_iter().map(|c| c.id)),
                Err(_) => return Some(id),
            }
        }
        None
    }

    /// Records a turn's end (after its commit is applied) and drops the snapshots older than
    /// the last `keep_turns` turns that have one.
    fn end_turn(m: &mut Memory, end: &TurnEnd) {
        let ended = EndedTurn {
            history: m.history.clone(),
            state: m.state.clone(),
            snapshot: end.snapshot.clone(),
            dropped: false,
            skipped: end
                .snapshot_skipped
                .clone()
                .filter(|_| end.snapshot.is_none()),
        };
        m.turns.insert(end.turn_seq, ended);
        if let Some(keep) = end.keep_turns {
            let keep = keep as usize;
            let mut with: Vec<u64> = m
                .turns
                .iter()
                .filter(|(_, t)| t.snapshot.is_some() && !t.dropped)
                .map(|(n, _)| *n)
                .collect();
            with.reverse();
            for n in with.into_iter().skip(keep) {
                if let Some(t) = m.turns.get_mut(&n) {
                    t.dropped = true;
                }
            }
        }
    }

    fn fence(m: &Memory, epoch: u64) -> Result<(), CheckpointError> {
        if epoch == m.epoch {
            Ok(())
        } else {
            Err(CheckpointError::Fenced(format!(
                "epoch {epoch} is not the current epoch {}",
                m.epoch
            )))
        }
    }
}

impl Checkpoints for MemoryCheckpoints {
    async fn claim(&self, _claim: &ClaimRequest) -> Result<ClaimResponse, CheckpointError> {
        let mut m = self.lock();
        m.epoch += 1;
        m.boot_count += 1;
        Ok(ClaimResponse {
            epoch: m.epoch,
            boot_count: m.boot_count,
        })
    }

    async fn latest(&self) -> Result<Option<ThreadState>, CheckpointError> {
        let m = self.lock();
        Ok((m.version > 0).then(|| ThreadState {
            thread_id: m.thread,
            version: m.version,
            epoch: m.epoch,
            state: m.state.clone(),
            history: m.history.clone(),
        }))
    }

    /// The API's commit rules on a copy, swapped in only when every part is accepted.
    async fn commit(&self, request: &CommitRequest) -> Result<CommitResponse, CheckpointError> {
        let mut m = self.lock();
        Self::fence(&m, request.epoch)?;
        if request.parent_version != m.version {
            return Err(CheckpointError::VersionConflict(format!(
                "parent {} is not the latest version {}",
                request.parent_version, m.version
            )));
        }
        if let Some(root) = request
            .turn_end
            .as_ref()
            .and_then(|t| t.snapshot.as_ref())
            .map(|s| &s.root)
            && let Some(missing) = Self::first_missing(&m, root)
        {
            return Err(CheckpointError::MissingObjects(format!(
                "the snapshot {root} names {missing}, which is not stored"
            )));
        }
        let mut ledger = m.ledger.clone();
        for intent in &request.intents {
            ledger
                .entry(intent.key.clone())
                .or_insert_with(|| ToolCallRecord {
                    key: intent.key.clone(),
                    turn_seq: intent.turn_seq,
                    tool: intent.tool.clone(),
                    args: intent.args.clone(),
                    effect: intent.effect,
                    status: ToolCallStatus::Intent,
                    result: None,
                    intent_epoch: request.epoch,
                    completed_epoch: None,
                    created_at: chrono::Utc::now(),
                    completed_at: None,
                });
        }
        for outcome in &request.outcomes {
            let Some(record) = ledger.get_mut(&outcome.key) else {
                return Err(CheckpointError::NoLedgerEntry(outcome.key.clone()));
            };
            if record.status != ToolCallStatus::Intent {
                let same = (record.status == ToolCallStatus::Completed) == outcome.ok
                    && record.result.as_deref() == Some(outcome.result.as_str());
                if same {
                    continue;
                }
                return Err(CheckpointError::AlreadyCompleted(outcome.key.clone()));
            }
            record.status = if outcome.ok {
                ToolCallStatus::Completed
            } else {
                ToolCallStatus::Failed
            };
            record.result = Some(outcome.result.clone());
            record.completed_epoch = Some(request.epoch);
            record.completed_at = Some(chrono::Utc::now());
        }
        let records = request
            .intents
            .iter()
            .filter_map(|i| ledger.get(&i.key).cloned())
            .collect();
        if let Some(cut) = request.truncate_to {
            let cut = usize::try_from(cut).unwrap_or(usize::MAX);
            m.history.truncate(cut);
        }
        m.history.extend(request.append.iter().cloned());
        m.state = request.state.clone();
        m.ledger = ledger;
        m.version += 1;
        if let Some(end) = &request.turn_end {
            Self::end_turn(&mut m, end);
        }
        Ok(CommitResponse {
            version: m.version,
            history_len: m.history.len() as u64,
            records,
        })
    }

    async fn turn_ledger(&self, turn_seq: u64) -> Result<Vec<ToolCallRecord>, CheckpointError> {
        let m = self.lock();
        Ok(m.ledger
            .values()
            .filter(|r| r.turn_seq == turn_seq)
            .cloned()
            .collect())
    }

    /// The turn as its end was recorded, with the effects of every later turn (by number: turn
    /// numbers only grow) that going back does not undo.
    async fn turn_point(&self, turn_seq: u64) -> Result<TurnPoint, CheckpointError> {
        let m = self.lock();
        let Some(turn) = m.turns.get(&turn_seq) else {
            return Err(CheckpointError::NotFound(format!(
                "turn {turn_seq} has not ended in this thread"
            )));
        };
        let restored = turn.snapshot.is_some() && !turn.dropped;
        let mut later: Vec<&ToolCallRecord> = m
            .ledger
            .values()
            .filter(|r| r.turn_seq > turn_seq && not_undone(r, restored))
            .collect();
        later.sort_by_key(|r| (r.turn_seq, r.created_at));
        Ok(TurnPoint {
            turn_seq,
            history: turn.history.clone(),
            state: turn.state.clone(),
            snapshot: turn.snapshot.clone().filter(|_| !turn.dropped),
            snapshot_dropped: turn.dropped,
            snapshot_skipped: turn.skipped.clone(),
            undone: later.into_iter().map(UndoneEffect::of).collect(),
        })
    }

    async fn missing_objects(&self, ids: Vec<ObjectId>) -> Result<Vec<ObjectId>, CheckpointError> {
        let m = self.lock();
        Ok(ids
            .into_iter()
            .filter(|id| !m.objects.contains_key(id))
            .collect())
    }

    /// The API's rules: the ID is the bytes' SHA-256, a node decodes and names only stored
    /// objects.
    async fn put_object(
        &self,
        id: &ObjectId,
        kind: ObjectKind,
        bytes: Vec<u8>,
    ) -> Result<(), CheckpointError> {
        let mut m = self.lock();
        if ObjectId::of(&bytes) != *id {
            return Err(CheckpointError::Refused(ClientError::Api {
                status: 400,
                code: ErrorCode::Other("bad_object".into()),
                message: format!("object {id} is not the SHA-256 of its bytes"),
                running: None,
            }));
        }
        if kind == ObjectKind::Node {
            let node = Node::decode(&bytes).map_err(|why| {
                CheckpointError::Refused(ClientError::Api {
                    status: 400,
                    code: ErrorCode::Other("bad_object".into()),
                    message: why,
                    running: None,
                })
            })?;
            if let Some(missing) = node.refs().into_iter().find(|r| !m.objects.contains_key(r)) {
                return Err(CheckpointError::MissingObjects(format!(
                    "node {id} names {missing}, which is not stored"
                )));
            }
        }
        m.objects.insert(id.clone(), bytes);
        Ok(())
    }

    async fn get_object(&self, id: &ObjectId) -> Result<Vec<u8>, CheckpointError> {
        self.lock()
            .objects
            .get(id)
            .cloned()
            .ok_or_else(|| CheckpointError::NotFound(format!("object {id} is not stored")))
    }

    /// Nobody can decide a request without the API: a turn that asks a person cannot go on.
    async fn approvals(
        &self,
        _turn_seq: u64,
        _settled: u64,
        _wait: Duration,
    ) -> Result<Vec<Approval>, CheckpointError> {
        Err(CheckpointError::NoApi(
            "a call waits for a person's decision, which needs the checkpoint API (run the job with `ninetrix up`/`ninetrix run` against an API)".into(),
        ))
    }

    async fn open_handoff(&self, _request: &HandoffRequest) -> Result<Handoff, CheckpointError> {
        Err(CheckpointError::NoApi(NO_API_HANDOFFS.into()))
    }

    async fn handoffs(
        &self,
        _turn_seq: u64,
        _settled: u64,
        _wait: Duration,
    ) -> Result<Vec<Handoff>, CheckpointError> {
        Err(CheckpointError::NoApi(NO_API_HANDOFFS.into()))
    }

    async fn inbox(
        &self,
        _after: u64,
        _wait: Duration,
    ) -> Result<Vec<InboxMessage>, CheckpointError> {
        Ok(Vec::new())
    }

    /// Without an API the events are the runner's log lines only: nothing stores them.
    async fn events(&self, _epoch: u64, _events: Vec<NewEvent>) -> Result<(), CheckpointError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use ninetrix_proto::Role;
    use ninetrix_proto::api::{CommitIntent, CommitOutcome};
    use ninetrix_proto::effects::Effect;

    use super::*;

    fn write(epoch: u64, parent: u64) -> CommitRequest {
        CommitRequest {
            epoch,
            parent_version: parent,
            truncate_to: None,
            append: vec![Message::text(Role::User, "x")],
            state: CheckpointState::default(),
            intents: Vec::new(),
            outcomes: Vec::new(),
            events: Vec::new(),
            approvals: Vec::new(),
            handoff_reply: None,
            turn_end: None,
        }
    }

    fn intent(key: &str) -> CommitIntent {
        CommitIntent {
            key: key.into(),
            turn_seq: 1,
            tool: "file_write".into(),
            args: serde_json::json!({}),
            effect: Effect::Write,
        }
    }

    fn outcome(key: &str, result: &str) -> CommitOutcome {
        CommitOutcome {
            key: key.into(),
            ok: true,
            result: result.into(),
        }
    }

    #[test]
    fn only_the_next_version_at_the_same_epoch_is_a_lost_answer_of_ours() {
        let request = write(3, 7);
        assert!(stored_by_this_epoch(&request, 8, 3));
        assert!(
            !stored_by_this_epoch(&request, 8, 4),
            "another runner claimed since"
        );
        assert!(
            !stored_by_this_epoch(&request, 9, 3),
            "more than one version since"
        );
        assert!(!stored_by_this_epoch(&request, 7, 3), "nothing stored");
    }

    /// A long-poll that waited longer than the patience and then lost its connection (the API
    /// restarted) is retried: the outage has only begun.
    #[tokio::test]
    async fn a_long_poll_cut_after_the_patience_is_retried() {
        let store = HttpCheckpoints::new(
            Client::new(ninetrix_client::http_client(), "http://127.0.0.1:9", None),
            "http://127.0.0.1:9",
            ThreadId::new_v7(),
            Some(Duration::from_millis(200)),
            Health::new(None),
        );
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let answer = store
            .retrying(|| async {
                if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                    tokio::time::sleep(Duration::from_millis(400)).await;
                    return Err(ClientError::Unreachable {
                        url: "http://127.0.0.1:9".into(),
                        reason: "connection closed before message completed".into(),
                    });
                }
                Ok(7)
            })
            .await;
        assert_eq!(answer.unwrap(), 7);
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn memory_keeps_the_apis_rules() {
        let store = MemoryCheckpoints::new(ThreadId::new_v7());
        let labels = ClaimRequest::default();
        let first = store.claim(&labels).await.unwrap();
        assert_eq!((first.epoch, first.boot_count), (1, 1));
        assert!(store.latest().await.unwrap().is_none());
        assert_eq!(store.commit(&write(1, 0)).await.unwrap().version, 1);
        assert!(matches!(
            store.commit(&write(1, 0)).await,
            Err(CheckpointError::VersionConflict(_))
        ));
        let second = store.claim(&labels).await.unwrap();
        assert_eq!(second.epoch, 2);
        assert!(matches!(
            store.commit(&write(1, 1)).await,
            Err(CheckpointError::Fenced(_))
        ));
        let latest = store.latest().await.unwrap().unwrap();
        assert_eq!((latest.version, latest.history.len()), (1, 1));

        // An intent, then its outcome in a later commit.
        let mut step = write(2, 1);
        step.intents = vec![intent("k")];
        let done = store.commit(&step).await.unwrap();
        assert_eq!(done.records[0].status, ToolCallStatus::Intent);
        assert_eq!(done.records[0].intent_epoch, 2);
        let mut step = write(2, 2);
        step.outcomes = vec![outcome("k", "ok")];
        store.commit(&step).await.unwrap();
        // The same outcome again is harmless; another one refuses the whole commit; a
        // re-recorded intent returns the completed record.
        let mut step = write(2, 3);
        step.intents = vec![intent("k")];
        step.outcomes = vec![outcome("k", "ok")];
        let again = store.commit(&step).await.unwrap();
        assert_eq!(again.records[0].status, ToolCallStatus::Completed);
        let mut step = write(2, 4);
        step.intents = vec![intent("new")];
        step.outcomes = vec![outcome("k", "different")];
        assert!(matches!(
            store.commit(&step).await,
            Err(CheckpointError::AlreadyCompleted(_))
        ));
        let latest = store.latest().await.unwrap().unwrap();
        assert_eq!(latest.version, 4, "nothing of the refused commit was kept");
        let ledger = store.turn_ledger(1).await.unwrap();
        assert_eq!(ledger.len(), 1, "not even its new intent");
        // An outcome for a key with no intent is refused.
        let mut step = write(2, 4);
        step.outcomes = vec![outcome("missing", "x")];
        assert!(matches!(
            store.commit(&step).await,
            Err(CheckpointError::NoLedgerEntry(_))
        ));
    }

    #[tokio::test]
    async fn memory_keeps_objects_by_the_apis_rules_and_answers_turn_points() {
        use ninetrix_proto::snapshots::{FileEntry, build};
        let store = MemoryCheckpoints::new(ThreadId::new_v7());
        let tree = build(vec![FileEntry {
            path: "a".into(),
            mode: 0o644,
            size: 1,
            blob: ObjectId::of(b"x"),
        }]);
        let (root, node) = tree.nodes[0].clone();
        // A node before its blob, and bytes that are not their ID, are refused.
        assert!(matches!(
            store
                .put_object(&root, ObjectKind::Node, node.clone())
                .await,
            Err(CheckpointError::MissingObjects(_))
        ));
        assert!(matches!(
            store
                .put_object(&root, ObjectKind::Blob, b"y".to_vec())
                .await,
            Err(CheckpointError::Refused(_))
        ));
        let blob = ObjectId::of(b"x");
        assert_eq!(
            store
                .missing_objects(vec![blob.clone(), root.clone()])
                .await
                .unwrap(),
            [blob.clone(), root.clone()]
        );
        store
            .put_object(&blob, ObjectKind::Blob, b"x".to_vec())
            .await
            .unwrap();
        store
            .put_object(&root, ObjectKind::Node, node)
            .await
            .unwrap();
        assert!(
            store
                .missing_objects(vec![blob.clone(), root.clone()])
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(store.get_object(&blob).await.unwrap(), b"x");

        // A turn's end is recorded by its commit; one naming a lost object is refused whole.
        store.claim(&ClaimRequest::default()).await.unwrap();
        let mut end = write(1, 0);
        end.state.turn_seq = 1;
        end.turn_end = Some(TurnEnd {
            turn_seq: 1,
            snapshot: Some(tree.snapshot.clone()),
            snapshot_skipped: None,
            keep_turns: Some(1),
        });
        store.commit(&end).await.unwrap();
        let point = store.turn_point(1).await.unwrap();
        assert_eq!(point.snapshot, Some(tree.snapshot.clone()));
        assert_eq!(point.history.len(), 1);
        assert!(matches!(
            store.turn_point(2).await,
            Err(CheckpointError::NotFound(_))
        ));
        store.drop_object(&blob);
        let mut again = write(1, 1);
        again.turn_end = Some(TurnEnd {
            turn_seq: 2,
            ..end.turn_end.clone().unwrap()
        });
        assert!(matches!(
            store.commit(&again).await,
            Err(CheckpointError::MissingObjects(_))
        ));
        assert_eq!(store.latest().await.unwrap().unwrap().version, 1);
        // keep_turns: 1 drops turn 1's snapshot once turn 2 has one.
        store
            .put_object(&blob, ObjectKind::Blob, b"x".to_vec())
            .await
            .unwrap();
        store.commit(&again).await.unwrap();
        let point = store.turn_point(1).await.unwrap();
        assert!(point.snapshot_dropped && point.snapshot.is_none());
    }
}
