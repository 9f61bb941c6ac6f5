-- Triggers (issue 17): schedules and webhooks that the API owns. `up` registers a pool's whole
-- set (`spec` is the resolved TriggerSpec as JSON; `secret` a webhook's signing secret, never
-- returned by any route; `digest` tells a changed registration from an unchanged one). The
-- scheduler fires a schedule when `next_fire_at` (Unix ms) has come, deciding every instant up to
-- `planned_to`; `buffered_at` is a fire held back by `overlap: buffer_one`; `last_thread_id` and
-- `last_inbox_seq` are the previous fire's message, whose turn the overlap rule waits for. Each
-- trigger's history is numbered by `history_seq` and outlives the trigger's removal.
CREATE TABLE triggers (
    pool           TEXT NOT NULL,
    name           TEXT NOT NULL,
    agent          TEXT NOT NULL,
    kind           TEXT NOT NULL,
    path           TEXT,
    spec           TEXT NOT NULL,
    secret         TEXT,
    digest         TEXT NOT NULL,
    next_fire_at   BIGINT,
    planned_to     BIGINT NOT NULL,
    buffered_at    BIGINT,
    last_thread_id TEXT,
    last_inbox_seq BIGINT,
    history_seq    BIGINT NOT NULL DEFAULT 0,
    created_at     BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL,
    PRIMARY KEY (pool, name)
);
CREATE UNIQUE INDEX triggers_by_path ON triggers (pool, path) WHERE path IS NOT NULL;
CREATE INDEX triggers_due ON triggers (next_fire_at) WHERE next_fire_at IS NOT NULL;

CREATE TABLE trigger_history (
    pool         TEXT NOT NULL,
    name         TEXT NOT NULL,
    seq          BIGINT NOT NULL,
    at           BIGINT NOT NULL,
    source       TEXT NOT NULL,
    outcome      TEXT NOT NULL,
    reason       TEXT,
    scheduled_at BIGINT,
    delivery_id  TEXT,
    session      TEXT,
    thread_id    TEXT,
    inbox_seq    BIGINT,
    detail       TEXT,
    PRIMARY KEY (pool, name, seq)
);
