-- Each message's ID beside its body, so a write can refuse a message whose ID the live history
-- already has (one index probe instead of reading the history).
ALTER TABLE messages ADD COLUMN message_id TEXT;
UPDATE messages SET message_id = body::json ->> 'id';
CREATE INDEX messages_by_id ON messages (thread_id, message_id) WHERE superseded_by IS NULL;
