-- Session owners (issue 33): which replica serves each session, stored with the replica count it
-- was computed for, so a replica's long-poll for work reads only its own sessions with work (one
-- range of `threads_session_work`) instead of every session of the agent, hashed for each call.
-- `session_replicas` 0 (rows from before) is never an agent's count: such rows are computed when
-- read, and stored by the next `PUT /v1/pools/{pool}/agents/{agent}`.
ALTER TABLE threads ADD COLUMN session_replicas BIGINT NOT NULL DEFAULT 0;
ALTER TABLE threads ADD COLUMN session_replica BIGINT NOT NULL DEFAULT 0;
CREATE INDEX threads_session_work ON threads (pool, agent, session_replicas, session_replica)
    WHERE session IS NOT NULL AND (inbox_seq > inbox_cursor OR status IN ('in_turn', 'waiting'));
CREATE INDEX threads_session_owner ON threads (pool, agent, session_replicas)
    WHERE session IS NOT NULL;
