-- Replica threads (issue 19): the thread of replica N of (pool, agent), kept by the API so a
-- runner anywhere in a cluster (a Swarm task in slot N, a pod) finds its thread by its replica
-- number alone. One row per replica; a purged thread is replaced by a new one in place.
CREATE TABLE replica_threads (
    pool       TEXT NOT NULL,
    agent      TEXT NOT NULL,
    replica    BIGINT NOT NULL,
    thread_id  TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (pool, agent, replica)
);
