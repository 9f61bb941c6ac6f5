//! Handoffs between agents (issue 16): the pure rules both sides of a handoff share — the name of
//! the tool that asks a collaborator, the keys a handoff is delivered under, the text the
//! collaborator receives, and the delegation chain's depth rule.
//!
//! A call of `ask_<agent>` is a `write` whose ledger key fixes everything else: the API files the
//! task in the collaborator's session `handoff:<caller thread>:<ledger key>` (so delegated work
//! never mixes with the agent's other conversations) under the inbox dedupe key
//! `handoff:<ledger key>`, so a caller that crashed and calls again re-attaches to the same
//! delegated conversation instead of starting a second one.

use crate::ids::ThreadId;

/// What an agent's handoff tools are called: `ask_<agent>`.
pub const TOOL_PREFIX: &str = "ask_";

/// The longest ledger key a handoff accepts (a runner's are 64 hex digits), so that the keys
/// derived from it fit the session key (200) and the dedupe key (128) limits.
pub const MAX_KEY_LEN: usize = 64;

/// The longest tool name both providers accept (Anthropic and OpenAI: 64 characters).
pub const MAX_TOOL_NAME_LEN: usize = 64;

/// The longest agent name a collaborator may have: `ask_` + the name must be a valid tool name.
pub const MAX_AGENT_NAME_LEN: usize = MAX_TOOL_NAME_LEN - TOOL_PREFIX.len();

/// Most agents in a chain the API accepts (whatever each agent's own depth limit says).
pub const MAX_CHAIN_LEN: usize = 64;

/// The tool that hands a task to `agent`.
pub fn tool_name(agent: &str) -> String {
    format!("{TOOL_PREFIX}{agent}")
}

/// The session of the collaborator that one call (by its ledger key) of the caller's thread
/// delegates to.
pub fn session_key(caller: ThreadId, ledger_key: &str) -> String {
    format!("handoff:{caller}:{ledger_key}")
}

/// The inbox dedupe key of a handoff's task: the same for every retry of the same call.
pub fn delivery_key(ledger_key: &str) -> String {
    format!("handoff:{ledger_key}")
}

/// Whether `key` can be a handoff's ledger key: 1 to [`MAX_KEY_LEN`] characters without control
/// characters or `:`.
pub fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.chars().count() > MAX_KEY_LEN {
        return Err(format!(
            "a handoff's ledger key must be 1 to {MAX_KEY_LEN} characters"
        ));
    }
    if key.chars().any(|c| c.is_control() || c == ':') {
        return Err("a handoff's ledger key must not hold control characters or `:`".into());
    }
    Ok(())
}

/// The message a collaborator receives: the task, then the context when there is one, with who
/// asked.
pub fn task_message(from_agent: &str, task: &str, context: Option<&str>) -> String {
    let mut text = format!("Task from agent `{from_agent}`:\n{task}");
    if let Some(context) = context.map(str::trim).filter(|c| !c.is_empty()) {
        text.push_str("\n\nContext:\n");
        text.push_str(context);
    }
    text
}

/// `a → b → c`.
pub fn chain_text(chain: &[String]) -> String {
    chain.join(" → ")
}

/// Whether a turn working in `chain` (the agents from the first caller to this one, inclusive)
/// may hand work to `next` under a depth limit of `max`: `Err` with the reason, naming the
/// chain the call would make, when it would be handoff number `max + 1` or more.
pub fn check_depth(chain: &[String], next: &str, max: u32) -> Result<(), String> {
    let hops = chain.len();
    if hops as u64 <= u64::from(max) {
        return Ok(());
    }
    let mut would = chain.to_vec();
    would.push(next.to_string());
    Err(format!(
        "Not run: handing this task to `{next}` would make the delegation chain {} ({hops} handoff{}), deeper than execution.max_delegation_depth ({max}). Do the work yourself or answer with what you have.",
        chain_text(&would),
        if hops == 1 { "" } else { "s" }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn keys_are_derived_from_the_caller_and_the_ledger_key() {
        let t: ThreadId = "0190f0e4-5b6c-7d8e-9f00-112233445566".parse().unwrap();
        let key = "a".repeat(64);
        assert_eq!(session_key(t, "k1"), format!("handoff:{t}:k1"));
        assert_eq!(delivery_key("k1"), "handoff:k1");
        assert!(session_key(t, &key).len() <= 200);
        assert!(delivery_key(&key).len() <= 128);
        assert!(crate::sessions::check_key(&session_key(t, &key)).is_ok());
        assert!(check_key(&key).is_ok());
        assert!(check_key(&"a".repeat(65)).is_err());
        assert!(check_key("").is_err());
        assert!(check_key("a:b").is_err());
        assert!(check_key("a\nb").is_err());
    }

    #[test]
    fn the_depth_limit_counts_handoffs_and_names_the_chain() {
        assert!(check_depth(&chain(&["a"]), "b", 1).is_ok());
        assert!(check_depth(&chain(&["a", "b", "c", "d"]), "e", 4).is_ok());
        let err = check_depth(&chain(&["a", "b", "a", "b", "a"]), "b", 4).unwrap_err();
        assert!(err.contains("a → b → a → b → a → b (5 handoffs)"), "{err}");
        assert!(err.contains("execution.max_delegation_depth (4)"), "{err}");
        let err = check_depth(&chain(&["a"]), "b", 0).unwrap_err();
        assert!(err.contains("a → b (1 handoff)"), "{err}");
    }

    #[test]
    fn the_task_message_names_who_asked_and_keeps_the_context() {
        assert_eq!(
            task_message("a", "sum 2 and 2", None),
            "Task from agent `a`:\nsum 2 and 2"
        );
        assert_eq!(
            task_message("a", "t", Some("  ")),
            "Task from agent `a`:\nt"
        );
        assert_eq!(
            task_message("a", "t", Some("c")),
            "Task from agent `a`:\nt\n\nContext:\nc"
        );
    }
}
