-- Replays and evals (issue 42).
--
-- A replay is a thread that re-runs recorded turns of another (`replay_source`) against a
-- candidate agent. Its history is shared with the source's as a fork's is (`base_*`), but it is
-- not a fork (`fork_parent` stays NULL). `replay_turns` is the JSON array of the recorded turns
-- it replays, in order (its inbox holds their inputs, seq 1..=n). `replay_key` makes a retry find
-- the same replay: unique per source.
ALTER TABLE threads ADD COLUMN replay_source TEXT;
ALTER TABLE threads ADD COLUMN replay_from BIGINT;
ALTER TABLE threads ADD COLUMN replay_to BIGINT;
ALTER TABLE threads ADD COLUMN replay_candidate TEXT;
ALTER TABLE threads ADD COLUMN replay_key TEXT;
ALTER TABLE threads ADD COLUMN replay_turns TEXT;
CREATE UNIQUE INDEX threads_by_replay_key ON threads (replay_source, replay_key)
    WHERE replay_source IS NOT NULL;

-- One row per suite ever named: the counters its members' and runs' IDs come from (the row is
-- locked while one is taken, so IDs are unique within a suite on every backend). A suite exists
-- for readers while it has members or runs.
CREATE TABLE eval_suites (
    name        TEXT PRIMARY KEY NOT NULL,
    member_seq  BIGINT NOT NULL DEFAULT 0,
    run_seq     BIGINT NOT NULL DEFAULT 0,
    created_at  BIGINT NOT NULL
);

-- Threads (and ranges of their turns) marked into a suite. A range bound left NULL means the
-- thread's first (or last) turn; marking the same (suite, thread, from, to) again is a no-op,
-- hence the unique index over the bounds with NULL read as 0 (NULLs are distinct in a plain
-- unique index). Purging a thread deletes its rows.
CREATE TABLE eval_members (
    suite      TEXT NOT NULL,
    id         BIGINT NOT NULL,
    thread_id  TEXT NOT NULL,
    from_turn  BIGINT,
    to_turn    BIGINT,
    added_at   BIGINT NOT NULL,
    PRIMARY KEY (suite, id)
);
CREATE UNIQUE INDEX eval_members_once ON eval_members
    (suite, thread_id, COALESCE(from_turn, 0), COALESCE(to_turn, 0));
CREATE INDEX eval_members_by_thread ON eval_members (thread_id);

-- Eval runs as `ninetrix eval` stored them: one per (suite, key); `cases` is the JSON array of
-- EvalCaseResult.
CREATE TABLE eval_runs (
    suite       TEXT NOT NULL,
    id          BIGINT NOT NULL,
    key         TEXT NOT NULL,
    candidate   TEXT NOT NULL,
    cases       TEXT NOT NULL,
    passed      BIGINT NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (suite, id)
);
CREATE UNIQUE INDEX eval_runs_by_key ON eval_runs (suite, key);
