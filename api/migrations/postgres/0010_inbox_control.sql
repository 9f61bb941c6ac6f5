-- Instructions to a thread's runner queued in its inbox like messages (issue 36: `ninetrix
-- compact`): carried out between turns, once, in inbox order. NULL for work for the model.
ALTER TABLE inbox ADD COLUMN control TEXT;
