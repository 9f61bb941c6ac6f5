-- ninetrix checkpoint store, SQLite. Times are Unix milliseconds; JSON is stored as text.

CREATE TABLE threads (
    thread_id   TEXT PRIMARY KEY NOT NULL,
    pool        TEXT,
    agent       TEXT,
    replica     BIGINT,
    epoch       BIGINT NOT NULL DEFAULT 0,
    boot_count  BIGINT NOT NULL DEFAULT 0,
    version     BIGINT NOT NULL DEFAULT 0,
    history_len BIGINT NOT NULL DEFAULT 0,
    status      TEXT NOT NULL DEFAULT 'idle',
    inbox_seq   BIGINT NOT NULL DEFAULT 0,
    event_seq   BIGINT NOT NULL DEFAULT 0,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);
CREATE INDEX threads_by_labels ON threads (pool, agent, replica);

-- One row per checkpoint version: the chain. Never updated.
CREATE TABLE versions (
    thread_id      TEXT NOT NULL,
    version        BIGINT NOT NULL,
    parent_version BIGINT NOT NULL,
    epoch          BIGINT NOT NULL,
    truncate_to    BIGINT,
    appended       BIGINT NOT NULL,
    history_len    BIGINT NOT NULL,
    state          TEXT NOT NULL,
    created_at     BIGINT NOT NULL,
    PRIMARY KEY (thread_id, version)
);

-- Every message ever appended, once. A truncation marks the messages it cut with the version
-- that cut them; the live history is the unmarked rows in position order.
CREATE TABLE messages (
    thread_id     TEXT NOT NULL,
    version       BIGINT NOT NULL,
    position      BIGINT NOT NULL,
    superseded_by BIGINT,
    body          TEXT NOT NULL,
    PRIMARY KEY (thread_id, version, position)
);
CREATE INDEX messages_live ON messages (thread_id, position) WHERE superseded_by IS NULL;

CREATE TABLE tool_calls (
    thread_id       TEXT NOT NULL,
    key             TEXT NOT NULL,
    turn_seq        BIGINT NOT NULL,
    tool            TEXT NOT NULL,
    args            TEXT NOT NULL,
    effect          TEXT NOT NULL,
    status          TEXT NOT NULL,
    result          TEXT,
    intent_epoch    BIGINT NOT NULL,
    completed_epoch BIGINT,
    created_at      BIGINT NOT NULL,
    completed_at    BIGINT,
    PRIMARY KEY (thread_id, key)
);

CREATE TABLE inbox (
    thread_id  TEXT NOT NULL,
    seq        BIGINT NOT NULL,
    content    TEXT NOT NULL,
    dedupe_key TEXT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (thread_id, seq)
);
CREATE UNIQUE INDEX inbox_dedupe ON inbox (thread_id, dedupe_key) WHERE dedupe_key IS NOT NULL;

CREATE TABLE events (
    thread_id  TEXT NOT NULL,
    seq        BIGINT NOT NULL,
    kind       TEXT NOT NULL,
    data       TEXT NOT NULL,
    epoch      BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (thread_id, seq)
);
