-- How full a thread's model context is (issue 36): the latest version's `state.context`, kept on
-- the thread's row so listings (the console's gauge, `trace`) need not read a version.
ALTER TABLE threads ADD COLUMN context TEXT;
