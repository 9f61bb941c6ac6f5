-- Webhooks a stranger cannot abuse (issue 33). A verified delivery is remembered per trigger
-- (not per session) under `id:<delivery id>` and, for GitHub (whose delivery id is not signed),
-- `sha256:<hex of the body>`, with the message it put in its session; a later delivery with the
-- same id (within a week) or the same body (within the trigger's tolerance) is a duplicate.
CREATE TABLE trigger_deliveries (
    pool      TEXT NOT NULL,
    name      TEXT NOT NULL,
    key       TEXT NOT NULL,
    at        BIGINT NOT NULL,
    session   TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    inbox_seq BIGINT NOT NULL,
    PRIMARY KEY (pool, name, key)
);
CREATE INDEX trigger_deliveries_by_age ON trigger_deliveries (pool, name, at);

-- A refusal of an unproven delivery stands for the refusals counted (not written) since the
-- previous recorded one.
ALTER TABLE trigger_history ADD COLUMN refusals BIGINT;
