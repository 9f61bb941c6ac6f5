-- Fewer pages per commit (issue 12, goal 2). Every write appends a message row and a version row,
-- and each b-tree page it changes is written to the WAL (4 KB each) before the commit's fsync,
-- whose time grows with the bytes. So:
-- - messages are keyed (thread_id, position, version): the primary key itself serves the live
--   history in position order and a truncation's range, and the partial index messages_live
--   (one more page per write) goes. Rows of one position are a live one and the ones a
--   truncation cut, so reading through the dead ones costs little.
-- - versions are WITHOUT ROWID: a version row lives in its primary key's b-tree, one page per
--   write instead of a table page and an index page.
CREATE TABLE messages_by_position (
    thread_id     TEXT NOT NULL,
    version       BIGINT NOT NULL,
    position      BIGINT NOT NULL,
    superseded_by BIGINT,
    body          TEXT NOT NULL,
    PRIMARY KEY (thread_id, position, version)
);
INSERT INTO messages_by_position (thread_id, version, position, superseded_by, body)
    SELECT thread_id, version, position, superseded_by, body FROM messages
    ORDER BY thread_id, position, version;
DROP TABLE messages;
ALTER TABLE messages_by_position RENAME TO messages;

CREATE TABLE versions_clustered (
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
) WITHOUT ROWID;
INSERT INTO versions_clustered
    SELECT thread_id, version, parent_version, epoch, truncate_to, appended, history_len, state, created_at
    FROM versions;
DROP TABLE versions;
ALTER TABLE versions_clustered RENAME TO versions;
