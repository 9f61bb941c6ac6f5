-- A2A (issue 43, docs/a2a.md): the API serves a pool's agents as A2A agents.
--
-- `agents.card` is the JSON of the agent's AgentCardInfo as `up` recorded it (NULL: no card is
-- served for the agent).
ALTER TABLE agents ADD COLUMN card TEXT;

-- A task is one inbox message of a context's session thread and the turn that takes it:
-- (thread_id, seq). `event_after` is the thread's last event seq when the message was filed, so
-- the task's state is read from the events after it. `caller` is the A2A token's holder
-- (`admin` for the admin token).
CREATE TABLE a2a_tasks (
    task_id     TEXT PRIMARY KEY NOT NULL,
    pool        TEXT NOT NULL,
    agent       TEXT NOT NULL,
    context_id  TEXT NOT NULL,
    thread_id   TEXT NOT NULL,
    seq         BIGINT NOT NULL,
    event_after BIGINT NOT NULL,
    caller      TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);
CREATE INDEX a2a_tasks_by_agent ON a2a_tasks (pool, agent, task_id);
CREATE INDEX a2a_tasks_by_thread ON a2a_tasks (thread_id);

-- Every message a task took: its first and each answer to INPUT_REQUIRED, once per messageId
-- per agent (a resent messageId finds its task and files nothing). `message` is the A2A Message
-- as received (JSON), for the task's history.
CREATE TABLE a2a_messages (
    pool        TEXT NOT NULL,
    agent       TEXT NOT NULL,
    message_id  TEXT NOT NULL,
    task_id     TEXT NOT NULL,
    message     TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (pool, agent, message_id)
);
CREATE INDEX a2a_messages_by_task ON a2a_messages (task_id, created_at);

-- A task's webhooks. `last_state` is the last state delivered (or given up on after the last
-- attempt); `attempts` the failed attempts at delivering the state after it, the next one not
-- before `next_attempt_at` (Unix ms).
CREATE TABLE a2a_push_configs (
    task_id          TEXT NOT NULL,
    id               TEXT NOT NULL,
    url              TEXT NOT NULL,
    token            TEXT,
    auth_scheme      TEXT,
    auth_credentials TEXT,
    last_state       TEXT,
    attempts         BIGINT NOT NULL DEFAULT 0,
    next_attempt_at  BIGINT NOT NULL DEFAULT 0,
    created_at       BIGINT NOT NULL,
    PRIMARY KEY (task_id, id)
);
