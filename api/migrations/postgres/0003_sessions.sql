-- Sessions (issue 15): many conversations per agent. A session is a thread labelled with its key,
-- unique per (pool, agent); the agent's replica count decides which replica owns it. The stored
-- inbox cursor (until now only inside each version's state) becomes a column, so the work of an
-- agent's sessions — messages after the cursor — is one indexed read.
ALTER TABLE threads ADD COLUMN session TEXT;
ALTER TABLE threads ADD COLUMN inbox_cursor BIGINT NOT NULL DEFAULT 0;
UPDATE threads SET inbox_cursor = COALESCE(
    (SELECT (v.state::json ->> 'inbox_cursor')::bigint FROM versions v
     WHERE v.thread_id = threads.thread_id AND v.version = threads.version), 0)
WHERE version > 0;
CREATE UNIQUE INDEX threads_by_session ON threads (pool, agent, session) WHERE session IS NOT NULL;

CREATE TABLE agents (
    pool       TEXT NOT NULL,
    agent      TEXT NOT NULL,
    replicas   BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (pool, agent)
);
