//! The store's operations, one module per resource, each an ordinary async function generic over
//! the connection it runs on ([`Conn`](super::conn::Conn)): Postgres for everything, SQLite's
//! readers for reads, and SQLite's writer thread for writes. Placeholders are `$n` (SQLite
//! accepts them too), integers are BIGINT, JSON is text and times are Unix milliseconds, so the
//! same text runs on both; a read that starts a write appends [`Conn::LOCK`](super::conn::Conn)
//! (`FOR UPDATE` on Postgres).
//!
//! Who calls whom: `threads` is the base (the fencing read every runner write starts with);
//! `sessions`, `events`, `checkpoints` and `ledger` build on it; `inbox` on `sessions`;
//! `approvals` on `events`; `memory` on `threads`; `limits` (model leases, spend, and the claim
//! that frees an older epoch's leases) on `threads` and `approvals`; `handoffs` on `sessions` and `inbox` (and the longest wait
//! `approvals` allows); `turn_control` (the admin's enqueue, interrupts and cancels, and what a
//! stopped turn waited for) on `inbox`, `approvals` and `handoffs`; `triggers` on `sessions` and
//! `turn_control`; `history` (where a history's rows are: a fork's shared prefix) on nothing;
//! `objects` (snapshot objects and their references) on `threads`; `turns` (ended turns, their
//! snapshots, the turn list, a turn's end, a diff) on `history`, `objects` and `ledger`; `purge` on
//! `threads` and `turns`; `forks`
//! on `turns`, `sessions`, `inbox` and `checkpoints`; `replays` (replay threads and recorded
//! turns) on `turns`, `history`, `ledger`, `approvals`, `inbox`, `events` and `checkpoints`;
//! `evals` (eval suites, members, runs) on `turns`; `a2a` (A2A tasks, their messages and
//! webhooks) on `sessions`, `turn_control`, `events` and `approvals`; `purge` on `a2a` too;
//! `commit` on all of the writes a runner's step makes.

/// The columns every read of `threads` selects, as a literal (for `concat!`).
macro_rules! thread_columns {
    () => {
        "thread_id, pool, agent, replica, session, epoch, boot_count, version, history_len, status, inbox_seq, inbox_cursor, event_seq, created_at, updated_at, context, spent_nanos, fork_parent, fork_turn, replay_source, replay_from, replay_to, replay_candidate"
    };
}

/// The status of a purged thread's row, as a literal (for `concat!`): the tombstone that keeps
/// its ID from being used again.
macro_rules! purged {
    () => {
        "purged"
    };
}

mod a2a;
mod approvals;
mod checkpoints;
mod commit;
mod evals;
mod events;
mod forks;
mod handoffs;
mod history;
mod inbox;
mod ledger;
mod limits;
mod memory;
mod objects;
mod purge;
mod replays;
mod sessions;
mod threads;
mod triggers;
mod turn_control;
mod turns;

pub use a2a::{
    A2aTask, Answered, NewTask, PushResult, PushTarget, TaskAnswer, TaskFilter, TaskPage,
};
pub(crate) use a2a::{
    a2a_answer, a2a_card, a2a_delete_push, a2a_list, a2a_push_configs, a2a_push_due,
    a2a_push_record, a2a_put_push, a2a_send, a2a_task,
};
pub use approvals::Decided;
pub(crate) use approvals::{approval, decide, list_approvals, turn_approvals};
pub(crate) use checkpoints::{append_checkpoint, latest_json, version, versions};
pub(crate) use commit::commit;
pub(crate) use evals::{
    add_eval_member, eval_suite, eval_suites, remove_eval_member, store_eval_run,
};
pub(crate) use events::{append_events, events_after};
pub(crate) use forks::{fork, rewind};
pub(crate) use handoffs::{list_handoffs, open_handoff, turn_handoffs};
pub(crate) use inbox::inbox_after;
pub use inbox::{SessionOf, Wake};
pub(crate) use ledger::{complete_tool_call, listed_tool_calls, record_intent, turn_tool_calls};
pub use limits::LeaseOutcome;
pub(crate) use limits::{claim_freeing, lease, lease_refusal, release_lease, renew_lease, spend};
pub use memory::{MemoryFilter, MemorySpace};
pub(crate) use memory::{
    edit_memory, list_memories, memory_file, memory_op, memory_view, purge_memories,
};
pub(crate) use objects::{get_object, missing_objects, put_object};
pub use purge::Purge;
pub(crate) use purge::purge;
pub(crate) use replays::{create_replay, recorded_turn};
pub(crate) use sessions::{open_session, replica_thread, replicas, session_work, set_replicas};
pub(crate) use threads::{ensure_thread, list_threads, thread};
pub(crate) use triggers::{
    deliver_hook, fire_due, fire_now, hook_target, list_triggers, note_trigger, put_triggers,
    trigger_history, triggers_due,
};
pub(crate) use turn_control::{cancel, enqueue};
pub(crate) use turns::{turn_diff, turn_point, turns};
