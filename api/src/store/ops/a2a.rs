//! A2A tasks (issue 43, docs/a2a.md): a task is one inbox message of a context's session and the
//! turn that takes it. Sending files the message in one transaction — the dedupe by `messageId`,
//! the session (`open_session`, as `POST /v1/sessions` opens it), the inbox message (the inbox's
//! own insert, dedupe key `a2a:<messageId>`), the task and its message rows, and the webhook the
//! message names. A task's state is read from its thread's events after it was filed, page by
//! page, stopping at its turn's end (`a2a_rules::PhaseReader`). An answer to a task waiting for
//! input is the approvals' own decision, with the message's row in the same transaction. Also a
//! task's webhooks and where their deliveries stand, and the agents' recorded cards.

use a2a::{AuthenticationInfo, Message, TaskPushNotificationConfig, TaskState};
use ninetrix_proto::api::{AgentCardInfo, DecisionRequest, MessageMode};
use ninetrix_proto::{ApprovalId, ThreadId};

use crate::a2a_rules::{Phase, PhaseReader, final_state_name, state_name};
use crate::store::codec::{corrupt, encode, parse_id, time, to_i64, to_u64};
use crate::store::conn::{AssertSqlSafe, Conn, query, query_as, rsq};
use crate::store::{StoreError, StoreResult};

use super::approvals::{Decided, decide};
use super::events::events_after;
use super::inbox::{NewMessage, Wake};
use super::sessions::open_session;
use super::turn_control::deliver;

/// Events read per page while looking for a task's state.
const EVENTS_PAGE: u32 = 256;
/// Webhook deliveries one dispatcher round looks at.
const PUSH_ROUND: i64 = 100;

/// The columns every read of `a2a_tasks` selects.
const TASK_COLUMNS: &str =
    "task_id, pool, agent, context_id, thread_id, seq, event_after, caller, created_at";

/// A row of `a2a_tasks`.
#[derive(sqlx::FromRow)]
pub(crate) struct TaskRow {
    task_id: String,
    pool: String,
    agent: String,
    context_id: String,
    thread_id: String,
    seq: i64,
    event_after: i64,
    caller: String,
    created_at: i64,
}

impl rsq::FromRow for TaskRow {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(TaskRow {
            task_id: row.get("task_id")?,
            pool: row.get("pool")?,
            agent: row.get("agent")?,
            context_id: row.get("context_id")?,
            thread_id: row.get("thread_id")?,
            seq: row.get("seq")?,
            event_after: row.get("event_after")?,
            caller: row.get("caller")?,
            created_at: row.get("created_at")?,
        })
    }
}

/// A task as stored, with its messages and where it stands.
#[derive(Clone, Debug)]
pub struct A2aTask {
    /// The task's ID (a UUID).
    pub task_id: String,
    /// The pool of the agent it was sent to.
    pub pool: String,
    /// The agent.
    pub agent: String,
    /// Its context (the session `a2a:<context_id>`).
    pub context_id: String,
    /// The context's thread.
    pub thread_id: ThreadId,
    /// The inbox seq of its message.
    pub seq: u64,
    /// Who sent it (`a2a:<token name>`).
    pub caller: String,
    /// When it was filed.
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// The user's messages it took, oldest first.
    pub messages: Vec<Message>,
    /// Where it stands.
    pub phase: Phase,
}

impl A2aTask {
    /// The A2A task answering for it now, its history the last `history_length` messages.
    pub fn to_a2a(&self, history_length: Option<i32>) -> a2a::Task {
        let facts = crate::a2a_rules::TaskFacts {
            task_id: &self.task_id,
            context_id: &self.context_id,
            thread_id: self.thread_id,
            seq: self.seq,
            messages: &self.messages,
            at: chrono::Utc::now(),
        };
        crate::a2a_rules::task(&facts, &self.phase, history_length)
    }
}

/// What a message for a new task files.
#[derive(Clone, Debug)]
pub struct NewTask {
    /// The pool.
    pub pool: String,
    /// The agent.
    pub agent: String,
    /// Its context (a new one when the message named none).
    pub context_id: String,
    /// The message as received.
    pub message: Message,
    /// Its text, as the inbox files it.
    pub text: String,
    /// Who sends it (`a2a:<token name>`).
    pub caller: String,
    /// A webhook for the task's updates, from the message's configuration.
    pub push: Option<TaskPushNotificationConfig>,
}

/// What an answer to a task waiting for input did.
#[derive(Debug)]
pub enum Answered {
    /// The `messageId` was taken before: nothing was done again.
    Repeated,
    /// The decision, as the approvals' store op made it (the message's row is stored unless
    /// the decision was refused), and the request's thread.
    Decided(ThreadId, Box<Decided>),
}

/// An answer to a task waiting for input: the message, and the decision it makes on the
/// request the task waits on.
#[derive(Clone, Debug)]
pub struct TaskAnswer {
    /// The pool.
    pub pool: String,
    /// The agent.
    pub agent: String,
    /// The task.
    pub task_id: String,
    /// The message as received.
    pub message: Message,
    /// The request it answers.
    pub approval: ApprovalId,
    /// What it decides.
    pub decision: DecisionRequest,
    /// Who answers (`a2a:<token name>`).
    pub by: String,
}

/// Which tasks a listing returns.
#[derive(Clone, Debug, Default)]
pub struct TaskFilter {
    /// Only this context's.
    pub context_id: Option<String>,
    /// Only those in this state.
    pub state: Option<TaskState>,
    /// Tasks older than this one (the page token's).
    pub after: Option<String>,
    /// At most this many.
    pub limit: u32,
}

/// One page of an agent's tasks, newest first.
#[derive(Clone, Debug)]
pub struct TaskPage {
    /// The tasks.
    pub tasks: Vec<A2aTask>,
    /// How many match the filter, all pages together.
    pub total: u64,
    /// The last task of the page, when more follow.
    pub more_after: Option<String>,
}

/// A webhook of a task and where its deliveries stand.
#[derive(Clone, Debug)]
pub struct PushTarget {
    /// The config as given (its ID filled in).
    pub config: TaskPushNotificationConfig,
    /// The last state delivered (or given up on).
    pub last_state: Option<String>,
    /// Failed attempts at delivering the state after it.
    pub attempts: u32,
}

/// What became of one delivery attempt.
#[derive(Clone, Debug)]
pub struct PushResult {
    /// The task.
    pub task_id: String,
    /// The config.
    pub id: String,
    /// The state it delivered.
    pub state: String,
    /// `None`: delivered or given up (the state is recorded as the last one); `Some((n, at))`:
    /// failed attempt `n`, the next not before `at` (Unix ms).
    pub retry: Option<(u32, i64)>,
}

/// The card `up` recorded for (pool, agent): `None` when the agent was not recorded,
/// `Some(None)` when it was, without a card.
pub(crate) async fn a2a_card<C: Conn>(
    c: &mut C,
    pool: &str,
    agent: &str,
) -> StoreResult<Option<Option<AgentCardInfo>>> {
    let row: Option<(Option<String>,)> =
        query_as("SELECT card FROM agents WHERE pool = $1 AND agent = $2")
            .bind(pool)
            .bind(agent)
            .fetch_optional(&mut *c)
            .await?;
    row.map(|(card,)| {
        card.map(|j| serde_json::from_str(&j).map_err(|e| corrupt("agent card", &e.to_string())))
            .transpose()
    })
    .transpose()
}

/// The phase of the task of inbox seq `seq` on `thread` filed after event `after`: its events
/// read a page at a time until its turn's end (never the thread's whole log).
async fn phase_of<C: Conn>(
    c: &mut C,
    thread: ThreadId,
    seq: u64,
    mut after: u64,
    now: i64,
) -> StoreResult<Phase> {
    let mut reader = PhaseReader::new(seq);
    loop {
        let page = events_after(c, thread, after, EVENTS_PAGE).await?;
        let full = page.len() == EVENTS_PAGE as usize;
        for event in &page {
            after = event.seq;
            if reader.feed(event) {
                return Ok(reader.phase(time(now)));
            }
        }
        if !full {
            return Ok(reader.phase(time(now)));
        }
    }
}

/// A task row with its messages and phase.
async fn load<C: Conn>(c: &mut C, row: TaskRow, now: i64) -> StoreResult<A2aTask> {
    let bodies: Vec<(String,)> = query_as(
        "SELECT message FROM a2a_messages WHERE task_id = $1 ORDER BY created_at, message_id",
    )
    .bind(&row.task_id)
    .fetch_all(&mut *c)
    .await?;
    let messages = bodies
        .into_iter()
        .map(|(m,)| serde_json::from_str(&m).map_err(|e| corrupt("a2a message", &e.to_string())))
        .collect::<StoreResult<Vec<Message>>>()?;
    let thread_id = parse_id(&row.thread_id)?;
    let seq = to_u64(row.seq);
    let phase = phase_of(c, thread_id, seq, to_u64(row.event_after), now).await?;
    Ok(A2aTask {
        task_id: row.task_id,
        pool: row.pool,
        agent: row.agent,
        context_id: row.context_id,
        thread_id,
        seq,
        caller: row.caller,
        created_at: time(row.created_at),
        messages,
        phase,
    })
}

/// The task `task_id` of (pool, agent), if it has one.
pub(crate) async fn a2a_task<C: Conn>(
    c: &mut C,
    pool: &str,
    agent: &str,
    task_id: &str,
    now: i64,
) -> StoreResult<Option<A2aTask>> {
    let sql = format!(
        "SELECT {TASK_COLUMNS} FROM a2a_tasks WHERE task_id = $1 AND pool = $2 AND agent = $3"
    );
    let row: Option<TaskRow> = query_as(AssertSqlSafe(sql))
        .bind(task_id)
        .bind(pool)
        .bind(agent)
        .fetch_optional(&mut *c)
        .await?;
    match row {
        Some(row) => load(c, row, now).await.map(Some),
        None => Ok(None),
    }
}

/// The task a `messageId` of (pool, agent) made or answered, if any.
async fn task_of_message<C: Conn>(
    c: &mut C,
    pool: &str,
    agent: &str,
    message_id: &str,
) -> StoreResult<Option<String>> {
    let row: Option<(String,)> = query_as(
        "SELECT task_id FROM a2a_messages WHERE pool = $1 AND agent = $2 AND message_id = $3",
    )
    .bind(pool)
    .bind(agent)
    .bind(message_id)
    .fetch_optional(&mut *c)
    .await?;
    Ok(row.map(|(t,)| t))
}

/// Stores a message's row: it belongs to `task`, once per `messageId` of the agent.
async fn insert_message<C: Conn>(
    c: &mut C,
    pool: &str,
    agent: &str,
    task: &str,
    message: &Message,
    now: i64,
) -> StoreResult<()> {
    query("INSERT INTO a2a_messages (pool, agent, message_id, task_id, message, created_at) VALUES ($1, $2, $3, $4, $5, $6)")
        .bind(pool)
        .bind(agent)
        .bind(message.message_id.as_str())
        .bind(task)
        .bind(encode(message)?)
        .bind(now)
        .execute(&mut *c)
        .await?;
    Ok(())
}

/// Files a message as a new task, in one transaction: a `messageId` the agent took before
/// answers its task and files nothing (`false`); otherwise the context's session is opened,
/// the message put in its inbox (mode `queue`: a context's tasks are turns in the order sent)
/// under the dedupe key `a2a:<messageId>`, and the task, its message and its webhook stored
/// (`true`). `crash` is called before the commit of a task made now (`a2a_send_before_commit`).
/// Returns the task, whom to wake, and whether it was made now.
pub(crate) async fn a2a_send<C: Conn>(
    c: &mut C,
    new: &NewTask,
    now: i64,
    crash: fn(&str),
) -> StoreResult<(A2aTask, Wake, bool)> {
    let (pool, agent) = (new.pool.as_str(), new.agent.as_str());
    if let Some(task) = task_of_message(c, pool, agent, &new.message.message_id).await? {
        let found = a2a_task(c, pool, agent, &task, now)
            .await?
            .ok_or(StoreError::NotFound("a2a task"))?;
        return Ok((found, Wake::default(), false));
    }
    let key = format!("a2a:{}", new.context_id);
    let (thread, _) = open_session(c, pool, agent, &key, now).await?;
    let dedupe = format!("a2a:{}", new.message.message_id);
    let message = NewMessage {
        dedupe_key: Some(&dedupe),
        ..NewMessage::work(&new.text, Some(MessageMode::Queue), true)
    };
    let (filed, wake) = deliver(c, thread.thread_id, &message, now).await?;
    let task_id = uuid::Uuid::now_v7().to_string();
    let sql = format!(
        "INSERT INTO a2a_tasks ({TASK_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
    );
    query(AssertSqlSafe(sql))
        .bind(task_id.as_str())
        .bind(pool)
        .bind(agent)
        .bind(new.context_id.as_str())
        .bind(thread.thread_id.to_string())
        .bind(to_i64(filed.seq, "seq")?)
        .bind(to_i64(thread.event_seq, "event_seq")?)
        .bind(new.caller.as_str())
        .bind(now)
        .execute(&mut *c)
        .await?;
    insert_message(c, pool, agent, &task_id, &new.message, now).await?;
    if let Some(push) = &new.push {
        insert_push(c, &task_id, push, now).await?;
    }
    let task = a2a_task(c, pool, agent, &task_id, now)
        .await?
        .ok_or(StoreError::NotFound("a2a task"))?;
    crash("a2a_send_before_commit");
    Ok((task, wake, true))
}

/// Records the answer's message to its task (which waits for the answer's request), decided
/// through the approvals' own op by `by`, with the message's row in the same
/// transaction — unless its `messageId` was taken before (then nothing is done) or the decision
/// was refused (another decision stands, or the request expired: no row, so a corrected answer
/// may follow under the same ID).
pub(crate) async fn a2a_answer<C: Conn>(
    c: &mut C,
    a: &TaskAnswer,
    now: i64,
) -> StoreResult<Answered> {
    let (pool, agent) = (a.pool.as_str(), a.agent.as_str());
    if task_of_message(c, pool, agent, &a.message.message_id)
        .await?
        .is_some()
    {
        return Ok(Answered::Repeated);
    }
    let (thread, decided) = decide(c, a.approval, &a.decision, &a.by, Some(pool), now).await?;
    if matches!(decided, Decided::Recorded(_) | Decided::Repeated(_)) {
        insert_message(c, pool, agent, &a.task_id, &a.message, now).await?;
    }
    Ok(Answered::Decided(thread, Box::new(decided)))
}

/// One page of the agent's tasks, newest first (see [`TaskFilter`]). A state filter reads the
/// state of every task of the agent (in the context, when one is given): states are read from
/// events, not stored.
pub(crate) async fn a2a_list<C: Conn>(
    c: &mut C,
    pool: &str,
    agent: &str,
    filter: &TaskFilter,
    now: i64,
) -> StoreResult<TaskPage> {
    let sql = format!(
        "SELECT {TASK_COLUMNS} FROM a2a_tasks WHERE pool = $1 AND agent = $2 AND ($3 IS NULL OR context_id = $3) \
         AND ($4 IS NULL OR task_id < $4) ORDER BY task_id DESC LIMIT $5"
    );
    let count = |after: Option<&str>, limit: i64| {
        query_as::<TaskRow>(AssertSqlSafe(sql.clone()))
            .bind(pool)
            .bind(agent)
            .bind(filter.context_id.as_deref())
            .bind(after.map(str::to_string))
            .bind(limit)
    };
    let Some(state) = &filter.state else {
        let (total,): (i64,) = query_as(
            "SELECT COUNT(*) FROM a2a_tasks WHERE pool = $1 AND agent = $2 AND ($3 IS NULL OR context_id = $3)",
        )
        .bind(pool)
        .bind(agent)
        .bind(filter.context_id.as_deref())
        .fetch_one(&mut *c)
        .await?;
        let mut rows: Vec<TaskRow> = count(filter.after.as_deref(), i64::from(filter.limit) + 1)
            .fetch_all(&mut *c)
            .await?;
        let more = rows.len() > filter.limit as usize;
        rows.truncate(filter.limit as usize);
        let more_after = more
            .then(|| rows.last().map(|r| r.task_id.clone()))
            .flatten();
        let mut tasks = Vec::with_capacity(rows.len());
        for row in rows {
            tasks.push(load(c, row, now).await?);
        }
        return Ok(TaskPage {
            tasks,
            total: to_u64(total),
            more_after,
        });
    };
    let rows: Vec<TaskRow> = count(None, i64::MAX).fetch_all(&mut *c).await?;
    let mut matching = Vec::new();
    for row in rows {
        let task = load(c, row, now).await?;
        if task.phase.state() == *state {
            matching.push(task);
        }
    }
    let total = matching.len() as u64;
    let start = filter.after.as_deref().map_or(0, |after| {
        matching
            .iter()
            .position(|t| t.task_id.as_str() < after)
            .unwrap_or(matching.len())
    });
    let mut tasks: Vec<A2aTask> = matching.into_iter().skip(start).collect();
    let more = tasks.len() > filter.limit as usize;
    tasks.truncate(filter.limit as usize);
    let more_after = more
        .then(|| tasks.last().map(|t| t.task_id.clone()))
        .flatten();
    Ok(TaskPage {
        tasks,
        total,
        more_after,
    })
}

/// Stores a webhook of a task (its ID given or made), replacing one of the same ID.
async fn insert_push<C: Conn>(
    c: &mut C,
    task_id: &str,
    config: &TaskPushNotificationConfig,
    now: i64,
) -> StoreResult<TaskPushNotificationConfig> {
    let id = config
        .id
        .clone()
        .filter(|i| !i.is_empty())
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let auth = config.authentication.as_ref();
    query("DELETE FROM a2a_push_configs WHERE task_id = $1 AND id = $2")
        .bind(task_id)
        .bind(id.as_str())
        .execute(&mut *c)
        .await?;
    query("INSERT INTO a2a_push_configs (task_id, id, url, token, auth_scheme, auth_credentials, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)")
        .bind(task_id)
        .bind(id.as_str())
        .bind(config.url.as_str())
        .bind(config.token.as_deref())
        .bind(auth.map(|a| a.scheme.as_str()))
        .bind(auth.and_then(|a| a.credentials.as_deref()))
        .bind(now)
        .execute(&mut *c)
        .await?;
    Ok(TaskPushNotificationConfig {
        id: Some(id),
        task_id: task_id.to_string(),
        tenant: None,
        ..config.clone()
    })
}

/// Stores a webhook of task `task_id` (the caller found the task); returns it with its ID.
pub(crate) async fn a2a_put_push<C: Conn>(
    c: &mut C,
    task_id: &str,
    config: &TaskPushNotificationConfig,
    now: i64,
) -> StoreResult<TaskPushNotificationConfig> {
    insert_push(c, task_id, config, now).await
}

type PushColumns = (
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// A `a2a_push_configs` row's config.
fn push_config(
    (task_id, id, url, token, scheme, credentials): PushColumns,
) -> TaskPushNotificationConfig {
    TaskPushNotificationConfig {
        url,
        id: Some(id),
        task_id,
        token,
        authentication: scheme.map(|scheme| AuthenticationInfo {
            scheme,
            credentials,
        }),
        tenant: None,
    }
}

/// The webhooks of a task (`id`: only that one), oldest first.
pub(crate) async fn a2a_push_configs<C: Conn>(
    c: &mut C,
    task_id: &str,
    id: Option<String>,
) -> StoreResult<Vec<TaskPushNotificationConfig>> {
    let rows: Vec<PushColumns> = query_as(
        "SELECT task_id, id, url, token, auth_scheme, auth_credentials FROM a2a_push_configs \
         WHERE task_id = $1 AND ($2 IS NULL OR id = $2) ORDER BY created_at, id",
    )
    .bind(task_id)
    .bind(id)
    .fetch_all(&mut *c)
    .await?;
    Ok(rows.into_iter().map(push_config).collect())
}

/// Removes a webhook of a task; `true` when it was there.
pub(crate) async fn a2a_delete_push<C: Conn>(
    c: &mut C,
    task_id: &str,
    id: &str,
) -> StoreResult<bool> {
    Ok(
        query("DELETE FROM a2a_push_configs WHERE task_id = $1 AND id = $2")
            .bind(task_id)
            .bind(id)
            .execute(&mut *c)
            .await?
            .rows_affected()
            == 1,
    )
}

/// The webhooks with a state to deliver at `now`: their task's state is not the last one
/// delivered (nor given up on), and no back-off holds them. Each with its task as it stands.
pub(crate) async fn a2a_push_due<C: Conn>(
    c: &mut C,
    now: i64,
) -> StoreResult<Vec<(PushTarget, A2aTask)>> {
    let rows: Vec<(String, String, Option<String>, i64)> = query_as(
        "SELECT task_id, id, last_state, attempts FROM a2a_push_configs WHERE next_attempt_at <= $1 \
         ORDER BY next_attempt_at, task_id, id LIMIT $2",
    )
    .bind(now)
    .bind(PUSH_ROUND)
    .fetch_all(&mut *c)
    .await?;
    let mut due = Vec::new();
    for (task_id, id, last_state, attempts) in rows {
        if last_state.as_deref().is_some_and(final_state_name) {
            continue;
        }
        let sql = format!("SELECT {TASK_COLUMNS} FROM a2a_tasks WHERE task_id = $1");
        let Some(row) = query_as::<TaskRow>(AssertSqlSafe(sql))
            .bind(task_id.as_str())
            .fetch_optional(&mut *c)
            .await?
        else {
            continue;
        };
        let task = load(c, row, now).await?;
        if last_state.as_deref() == Some(state_name(&task.phase.state()).as_str()) {
            continue;
        }
        let config = a2a_push_configs(c, &task_id, Some(id))
            .await?
            .pop()
            .ok_or(StoreError::NotFound("push config"))?;
        due.push((
            PushTarget {
                config,
                last_state,
                attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
            },
            task,
        ));
    }
    Ok(due)
}

/// Records what became of a delivery attempt (see [`PushResult`]).
pub(crate) async fn a2a_push_record<C: Conn>(c: &mut C, r: &PushResult) -> StoreResult<()> {
    // A final state delivered (or given up on) is the webhook's last: it is never due again, so
    // finished tasks' webhooks never fill a round and keep newer ones waiting.
    let (last, attempts, next) = match r.retry {
        None if final_state_name(&r.state) => (Some(r.state.as_str()), 0, i64::MAX),
        None => (Some(r.state.as_str()), 0, 0),
        Some((n, at)) => (None, i64::from(n), at),
    };
    query(
        "UPDATE a2a_push_configs SET last_state = COALESCE($3, last_state), attempts = $4, next_attempt_at = $5 \
         WHERE task_id = $1 AND id = $2",
    )
    .bind(r.task_id.as_str())
    .bind(r.id.as_str())
    .bind(last)
    .bind(attempts)
    .bind(next)
    .execute(&mut *c)
    .await?;
    Ok(())
}

/// Deletes the tasks of a purged thread, with their messages and webhooks.
pub(super) async fn purge_tasks<C: Conn>(c: &mut C, thread: &str) -> StoreResult<()> {
    for sql in [
        "DELETE FROM a2a_push_configs WHERE task_id IN (SELECT task_id FROM a2a_tasks WHERE thread_id = $1)",
        "DELETE FROM a2a_messages WHERE task_id IN (SELECT task_id FROM a2a_tasks WHERE thread_id = $1)",
        "DELETE FROM a2a_tasks WHERE thread_id = $1",
    ] {
        query(sql).bind(thread).execute(&mut *c).await?;
    }
    Ok(())
}
