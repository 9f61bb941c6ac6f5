-- Handoffs between agents (issue 16). A call of `ask_<agent>` files its task in a session of the
-- collaborator dedicated to that call; this table links the caller's call (thread, ledger key) to
-- that session's thread and holds the reply the collaborator's final commit stores. The task's
-- inbox row carries where it came from (`origin`, JSON), so the collaborator's runner knows whom
-- to answer. `up` records each agent's collaborators beside its replica count, and a runner may
-- hand work only to its own agent's. Money is in nano-dollars (integers, as everything else).
ALTER TABLE inbox ADD COLUMN origin TEXT;
ALTER TABLE agents ADD COLUMN collaborators TEXT NOT NULL DEFAULT '[]';

CREATE TABLE handoffs (
    thread_id        TEXT NOT NULL,
    key              TEXT NOT NULL,
    pool             TEXT NOT NULL,
    from_agent       TEXT NOT NULL,
    epoch            BIGINT NOT NULL,
    turn_seq         BIGINT NOT NULL,
    call_id          TEXT NOT NULL,
    agent            TEXT NOT NULL,
    session          TEXT NOT NULL,
    target_thread_id TEXT NOT NULL,
    inbox_seq        BIGINT NOT NULL,
    task             TEXT NOT NULL,
    context          TEXT,
    chain            TEXT NOT NULL,
    status           TEXT NOT NULL,
    reply            TEXT,
    cost_nano_usd    BIGINT NOT NULL DEFAULT 0,
    created_at       BIGINT NOT NULL,
    expires_at       BIGINT NOT NULL,
    replied_at       BIGINT,
    PRIMARY KEY (thread_id, key)
);
CREATE UNIQUE INDEX handoffs_by_target ON handoffs (target_thread_id);
CREATE INDEX handoffs_by_turn ON handoffs (thread_id, turn_seq);
