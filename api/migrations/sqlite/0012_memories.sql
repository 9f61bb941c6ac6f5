-- An agent's memory (issue 36): files under /memories that outlive a conversation, one memory
-- per (pool, agent, scope, session) — `session` is '' for the agent's own memory, the session key
-- (or, for a thread that is not a session's, its thread ID) for a session's.
CREATE TABLE memories (
    pool       TEXT NOT NULL,
    agent      TEXT NOT NULL,
    scope      TEXT NOT NULL,
    session    TEXT NOT NULL,
    path       TEXT NOT NULL,
    content    TEXT NOT NULL,
    size       BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (pool, agent, scope, session, path)
);

-- One row per memory: what a command locks (FOR UPDATE on Postgres) before it reads the files,
-- so two commands on one memory never interleave.
CREATE TABLE memory_spaces (
    pool       TEXT NOT NULL,
    agent      TEXT NOT NULL,
    scope      TEXT NOT NULL,
    session    TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (pool, agent, scope, session)
);

-- Each command a runner's `memory` call applied, by the call's ledger key: the same key again
-- answers `result` without applying the command again. `digest` is the SHA-256 of the command,
-- so a key reused for another command is refused.
CREATE TABLE memory_ops (
    thread_id  TEXT NOT NULL,
    op_key     TEXT NOT NULL,
    pool       TEXT NOT NULL,
    agent      TEXT NOT NULL,
    digest     TEXT NOT NULL,
    result     TEXT NOT NULL,
    is_error   BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (thread_id, op_key)
);
CREATE INDEX memory_ops_by_pool ON memory_ops (pool, agent);
