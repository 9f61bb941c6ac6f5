-- Requests to a person (issue 14): one per gated call (keyed by its ledger key) or ask_human
-- question, stored in the same transaction as the model response that made the call. `status`
-- is what was recorded (pending, approved, rejected, answered, or expired once a late decision
-- found it so); a pending request past `expires_at` reads as expired.
CREATE TABLE approvals (
    id           TEXT PRIMARY KEY NOT NULL,
    thread_id    TEXT NOT NULL,
    key          TEXT NOT NULL,
    call_id      TEXT NOT NULL,
    epoch        BIGINT NOT NULL,
    turn_seq     BIGINT NOT NULL,
    kind         TEXT NOT NULL,
    tool         TEXT NOT NULL,
    args         TEXT NOT NULL,
    args_hash    TEXT NOT NULL,
    status       TEXT NOT NULL,
    requested_at BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL,
    decided_at   BIGINT,
    decided_by   TEXT,
    reason       TEXT,
    answer       TEXT
);
CREATE UNIQUE INDEX approvals_by_call ON approvals (thread_id, key);
CREATE INDEX approvals_by_turn ON approvals (thread_id, turn_seq);
CREATE INDEX approvals_by_status ON approvals (status, expires_at);
