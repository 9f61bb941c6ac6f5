-- Pool-wide model limits and budgets (issue 38).
--
-- `model_limiters`: one provider key at one endpoint, shared by every thread of a pool naming it
-- (`pool` is the thread's pool label, '' without one). Its numbers are the latest lease
-- request's; `backoff_until` is the end of a provider's 429 back-off (Unix ms, 0: none);
-- `pruned_at` when its old leases were last deleted. A lease's transaction locks this row.
CREATE TABLE model_limiters (
    pool          TEXT NOT NULL,
    limiter       TEXT NOT NULL,
    provider      TEXT NOT NULL,
    max_in_flight BIGINT,
    rpm           BIGINT,
    tpm           BIGINT,
    backoff_until BIGINT NOT NULL DEFAULT 0,
    pruned_at     BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (pool, limiter)
);
-- `model_leases`: one permit for one model call, tied to its thread's epoch. Live while
-- `released_at` is NULL and `expires_at` is ahead; `released_at` is set by its release or by the
-- claim of a newer epoch; `reported_at` once its runner reported what it used (the spend is
-- counted then, once). Rows stay an hour after they end (the 60 s window, and a release retried
-- after an outage finds its lease), then the limiter's next grant deletes them.
CREATE TABLE model_leases (
    id               TEXT PRIMARY KEY NOT NULL,
    pool             TEXT NOT NULL,
    limiter          TEXT NOT NULL,
    thread_id        TEXT NOT NULL,
    epoch            BIGINT NOT NULL,
    granted_at       BIGINT NOT NULL,
    expires_at       BIGINT NOT NULL,
    estimated_tokens BIGINT NOT NULL,
    used_tokens      BIGINT,
    released_at      BIGINT,
    reported_at      BIGINT,
    cost_nanos       BIGINT NOT NULL DEFAULT 0
);
-- The window's counts read this index alone (it covers the tokens too).
CREATE INDEX model_leases_window ON model_leases (pool, limiter, granted_at, estimated_tokens, used_tokens);
CREATE INDEX model_leases_live ON model_leases (pool, limiter, expires_at) WHERE released_at IS NULL;
CREATE INDEX model_leases_by_thread ON model_leases (thread_id, epoch);
-- `model_spend`: what an agent's model calls cost, in nano-dollars, per 15-minute UTC bucket, so
-- the calendar day of any time zone is a sum of at most 100 buckets.
CREATE TABLE model_spend (
    pool       TEXT NOT NULL,
    agent      TEXT NOT NULL,
    bucket     BIGINT NOT NULL,
    cost_nanos BIGINT NOT NULL,
    PRIMARY KEY (pool, agent, bucket)
);
CREATE INDEX model_spend_by_pool ON model_spend (pool, bucket);
-- A thread's own spend, ever.
ALTER TABLE threads ADD COLUMN spent_nanos BIGINT NOT NULL DEFAULT 0;
-- A budget approval's raise: its scope (`session`, `agent_day`, `pool_day`), day, amount, and
-- the pool and agent of the thread that asked (what an agent's or pool's day sums by).
ALTER TABLE approvals ADD COLUMN raise_scope TEXT;
ALTER TABLE approvals ADD COLUMN raise_day TEXT;
ALTER TABLE approvals ADD COLUMN raise_nanos BIGINT;
ALTER TABLE approvals ADD COLUMN raise_pool TEXT;
ALTER TABLE approvals ADD COLUMN raise_agent TEXT;
CREATE INDEX approvals_by_raise ON approvals (raise_pool, raise_scope, raise_day);
