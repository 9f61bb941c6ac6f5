-- Going back in a conversation (issue 41): forks, turn ends with their workspace snapshots, and
-- the content-addressed objects those snapshots are made of.
--
-- A fork's history is shared, not copied: it starts with the first `base_len` messages of
-- `base_thread`'s history as of `base_version` (the end of the forked turn, in the thread that
-- ran it), and its own rows in `messages` start at position `base_len` (or lower, after a cut
-- below it). The three are written once, when the fork is made. `fork_parent` and `fork_turn`
-- are what the user forked (`ThreadSummary.forked_from`).
ALTER TABLE threads ADD COLUMN fork_parent TEXT;
ALTER TABLE threads ADD COLUMN fork_turn BIGINT;
ALTER TABLE threads ADD COLUMN base_thread TEXT;
ALTER TABLE threads ADD COLUMN base_version BIGINT;
ALTER TABLE threads ADD COLUMN base_len BIGINT;
CREATE INDEX threads_by_fork_parent ON threads (fork_parent) WHERE fork_parent IS NOT NULL;
CREATE INDEX threads_by_base ON threads (base_thread) WHERE base_thread IS NOT NULL;

-- One row per ended turn, written by the commit that carries `turn_end`: the version that ended
-- it, the history's length and last message ID then (whether its end is still part of the
-- current history), and the workspace's snapshot (`snapshot_root` holds one reference to its
-- root object while `snapshot_dropped` is 0), or why it has none though its agent takes them
-- (`snapshot_skipped`: going back to it is refused).
CREATE TABLE turns (
    thread_id        TEXT NOT NULL,
    turn_seq         BIGINT NOT NULL,
    version          BIGINT NOT NULL,
    history_len      BIGINT NOT NULL,
    last_message_id  TEXT,
    snapshot_root    TEXT,
    snapshot_files   BIGINT,
    snapshot_bytes   BIGINT,
    snapshot_dropped BIGINT NOT NULL DEFAULT 0,
    snapshot_skipped TEXT,
    ended_at         BIGINT NOT NULL,
    PRIMARY KEY (thread_id, turn_seq)
);

-- Snapshot objects, named by the SHA-256 of their bytes and scoped by pool (the thread's pool
-- label, '' without one): a runner never reads or learns of another pool's objects. `refs`
-- counts the nodes and turns that refer to one; at 0 it is deleted (with what it refers to),
-- and one left at 0 for an hour (an upload a crash abandoned) is deleted when snapshots of its
-- pool are dropped.
CREATE TABLE objects (
    pool       TEXT NOT NULL,
    id         TEXT NOT NULL,
    kind       TEXT NOT NULL,
    size       BIGINT NOT NULL,
    refs       BIGINT NOT NULL DEFAULT 0,
    data       BLOB NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (pool, id)
);
CREATE INDEX objects_unreferenced ON objects (pool, created_at) WHERE refs = 0;

-- The turn a `rewind` control goes back to.
ALTER TABLE inbox ADD COLUMN to_turn BIGINT;
