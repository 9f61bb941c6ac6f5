-- Steer, interrupt, cancel (issue 37). `threads.on_busy`: the agent's
-- `execution.on_message_while_busy`, as its runner stated it in its last claim (NULL: never
-- stated, so `queue`) — the mode of a message sent without one. `inbox.mode`: what a message does
-- if it finds a turn running (`queue`, `steer`, `interrupt`; a refused `reject` is never stored).
-- `inbox.sender`: who sent a cancel.
ALTER TABLE threads ADD COLUMN on_busy TEXT;
ALTER TABLE inbox ADD COLUMN mode TEXT NOT NULL DEFAULT 'queue';
ALTER TABLE inbox ADD COLUMN sender TEXT;
