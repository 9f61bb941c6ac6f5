//! Which model of the chain a model call tries: the primary (`runtime`), then each
//! `runtime.fallback` entry in order (docs/runner.md, "Limits, budgets and fallback"). Pure: the
//! time is an argument, and [`Chain`] only remembers each model's run of failures.
//!
//! The rules:
//! - a model that has failed continuously (transient failures only — connection errors,
//!   timeouts, cut or idle streams, 408/429/529/5xx — with no answer between them) for
//!   `fallback_after` is *left*: the call goes on with the next model at once;
//! - a model left is skipped by later calls for `fallback_after` from when it was left; then it
//!   is tried again, so a primary that recovered comes back. One that fails again is left again
//!   at once (its run of failures never ended);
//! - an attempt that starts more than `fallback_after` after the model's previous failure
//!   starts a new run (an agent idle meanwhile has not seen it fail); a run is measured from the
//!   start of its first failed attempt, so attempts slower than `fallback_after` (a connect
//!   timeout) leave the model at their first failure;
//! - the wait before retrying a model that may still be left is never longer than what is left
//!   of its `fallback_after` ([`Chain::wait_cap`]): a backoff longer than it cannot keep the call
//!   from its fallback;
//! - the last model is never left or skipped: it retries as a model without a fallback does;
//! - an answer ends the model's run: it is the chain's own again.
//!
//! A failure that names the request (`Fatal`, `ContextTooLong`) never reaches this module: it
//! ends the call whichever model gave it.

use std::time::Duration;

use tokio::time::Instant;

/// What to do after a model's failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Try the same model again, after the usual backoff.
    Retry,
    /// Leave it: try model `to` now.
    Leave {
        /// The model to try next.
        to: usize,
    },
}

/// One model's run of failures.
#[derive(Clone, Debug, Default)]
struct Run {
    /// When its current run of failures started (no answer since).
    since: Option<Instant>,
    /// Its last failure: when, and what it said.
    last: Option<(Instant, String)>,
    /// When calls last left it.
    left_at: Option<Instant>,
}

/// The chain of models with each one's run of failures.
#[derive(Clone, Debug)]
pub struct Chain {
    after: Duration,
    runs: Vec<Run>,
}

impl Chain {
    /// A chain of `len` models (at least one) whose models are left after `after` of failures.
    pub fn new(len: usize, after: Duration) -> Chain {
        Chain {
            after,
            runs: vec![Run::default(); len.max(1)],
        }
    }

    /// How long a model may keep failing before it is left (`runtime.fallback_after`).
    pub fn after(&self) -> Duration {
        self.after
    }

    fn is_last(&self, i: usize) -> bool {
        i + 1 >= self.runs.len()
    }

    fn skipped(&self, i: usize, now: Instant) -> bool {
        !self.is_last(i)
            && self.runs[i]
                .left_at
                .is_some_and(|at| now.saturating_duration_since(at) < self.after)
    }

    /// The model to try at `now`: the first one that is not skipped.
    pub fn pick(&self, now: Instant) -> usize {
        (0..self.runs.len())
            .find(|&i| !self.skipped(i, now))
            .unwrap_or(self.runs.len() - 1)
    }

    /// Model `i`'s attempt that started at `started` failed at `now` with `why` (transient):
    /// whether to retry it or leave it.
    pub fn failed(&mut self, i: usize, started: Instant, now: Instant, why: &str) -> Step {
        let after = self.after;
        let last = self.is_last(i);
        let run = &mut self.runs[i];
        let continues = run.left_at.is_some()
            || run
                .last
                .as_ref()
                .is_some_and(|(at, _)| started.saturating_duration_since(*at) <= after);
        let since = match run.since {
            Some(since) if continues => since,
            _ => started.min(now),
        };
        run.since = Some(since);
        run.last = Some((now, why.to_string()));
        if last || now.saturating_duration_since(since) < after {
            return Step::Retry;
        }
        run.left_at = Some(now);
        Step::Leave { to: self.pick(now) }
    }

    /// The longest wait before retrying model `i` at `now`: what is left of its
    /// `fallback_after` in its run of failures (`None`: no cap — the last model, or no run).
    pub fn wait_cap(&self, i: usize, now: Instant) -> Option<Duration> {
        if self.is_last(i) {
            return None;
        }
        let since = self.runs[i].since?;
        Some((since + self.after).saturating_duration_since(now))
    }

    /// Model `i` answered: its run of failures is over.
    pub fn answered(&mut self, i: usize) {
        self.runs[i] = Run::default();
    }

    /// For an answer by model `i`: the model the call fell back from (the nearest one before
    /// it that failed) and its last failure. `None` for the primary.
    pub fn fell_back_from(&self, i: usize) -> Option<(usize, String)> {
        (0..i.min(self.runs.len()))
            .rev()
            .find_map(|j| self.runs[j].last.as_ref().map(|(_, why)| (j, why.clone())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AFTER: Duration = Duration::from_secs(30);

    fn secs(t0: Instant, s: u64) -> Instant {
        t0 + Duration::from_secs(s)
    }

    #[test]
    fn a_primary_failing_for_fallback_after_is_left_for_the_next_model() {
        let t0 = Instant::now();
        let mut c = Chain::new(2, AFTER);
        assert_eq!(c.pick(t0), 0);
        for s in [0, 5, 15, 29] {
            assert_eq!(
                c.failed(0, secs(t0, s), secs(t0, s), "refused"),
                Step::Retry,
                "at {s} s"
            );
            assert_eq!(c.pick(secs(t0, s)), 0);
        }
        assert_eq!(
            c.failed(0, secs(t0, 30), secs(t0, 30), "refused"),
            Step::Leave { to: 1 }
        );
        assert_eq!(c.pick(secs(t0, 31)), 1);
        c.answered(1);
        assert_eq!(
            c.fell_back_from(1),
            Some((0, "refused".to_string())),
            "the answer says what it fell back from"
        );
        assert_eq!(c.fell_back_from(0), None);
    }

    #[test]
    fn a_left_model_is_skipped_for_fallback_after_then_tried_again_and_comes_back() {
        let t0 = Instant::now();
        let mut c = Chain::new(2, AFTER);
        c.failed(0, t0, t0, "down");
        assert_eq!(
            c.failed(0, secs(t0, 30), secs(t0, 30), "down"),
            Step::Leave { to: 1 }
        );
        // Later calls go straight to the fallback while the primary is skipped.
        assert_eq!(c.pick(secs(t0, 45)), 1);
        assert_eq!(c.pick(secs(t0, 59)), 1);
        // Then the primary is tried again; still failing, it is left again at once.
        assert_eq!(c.pick(secs(t0, 60)), 0);
        assert_eq!(
            c.failed(0, secs(t0, 60), secs(t0, 60), "down"),
            Step::Leave { to: 1 }
        );
        assert_eq!(c.pick(secs(t0, 61)), 1);
        // Recovered: it answers and is the chain's own again.
        assert_eq!(c.pick(secs(t0, 90)), 0);
        c.answered(0);
        assert_eq!(c.pick(secs(t0, 91)), 0);
        assert_eq!(
            c.failed(0, secs(t0, 95), secs(t0, 95), "blip"),
            Step::Retry,
            "a new run of failures starts from nothing"
        );
    }

    #[test]
    fn failures_far_apart_are_not_one_run() {
        let t0 = Instant::now();
        let mut c = Chain::new(2, AFTER);
        assert_eq!(c.failed(0, t0, t0, "429"), Step::Retry);
        // The call was cut short (shutdown, an interrupt); the agent was idle for ten minutes.
        assert_eq!(
            c.failed(0, secs(t0, 600), secs(t0, 600), "429"),
            Step::Retry
        );
        assert_eq!(
            c.failed(0, secs(t0, 620), secs(t0, 620), "429"),
            Step::Retry
        );
        assert_eq!(
            c.failed(0, secs(t0, 630), secs(t0, 630), "429"),
            Step::Leave { to: 1 }
        );
    }

    #[test]
    fn the_last_model_is_never_left_and_a_left_fallback_goes_back_to_a_primary_that_may_have_recovered()
     {
        let t0 = Instant::now();
        let mut c = Chain::new(3, AFTER);
        c.failed(0, t0, t0, "a down");
        assert_eq!(
            c.failed(0, secs(t0, 30), secs(t0, 30), "a down"),
            Step::Leave { to: 1 }
        );
        c.failed(1, secs(t0, 31), secs(t0, 31), "b down");
        // The primary is still skipped when the first fallback is left: the second is next.
        assert_eq!(
            c.failed(1, secs(t0, 59), secs(t0, 59), "b down"),
            Step::Retry,
            "b's run started at 31 s"
        );
        assert_eq!(
            c.failed(1, secs(t0, 61), secs(t0, 61), "b down"),
            Step::Leave { to: 0 }
        );
        // The primary fails again at once: the last model, never left.
        assert_eq!(
            c.failed(0, secs(t0, 61), secs(t0, 61), "a down"),
            Step::Leave { to: 2 }
        );
        for s in [62, 200, 10_000] {
            assert_eq!(c.failed(2, secs(t0, s), secs(t0, s), "c down"), Step::Retry);
        }
        assert_eq!(c.pick(secs(t0, 70)), 2);
        c.answered(2);
        assert_eq!(
            c.fell_back_from(2),
            Some((1, "b down".to_string())),
            "the nearest model before it"
        );
    }

    #[test]
    fn attempts_slower_than_fallback_after_leave_the_model_at_their_first_failure() {
        let t0 = Instant::now();
        let mut c = Chain::new(2, Duration::from_secs(5));
        // A connect timeout of 10 s: the attempt that started at 0 fails at 10.
        assert_eq!(
            c.failed(0, t0, secs(t0, 10), "timed out connecting"),
            Step::Leave { to: 1 }
        );
    }

    #[test]
    fn a_backoff_longer_than_fallback_after_is_cut_to_what_is_left_of_it() {
        let t0 = Instant::now();
        let mut c = Chain::new(2, Duration::from_secs(1));
        assert_eq!(c.wait_cap(0, t0), None, "no run yet");
        assert_eq!(c.failed(0, t0, t0, "refused"), Step::Retry);
        let at = t0 + Duration::from_millis(600);
        assert_eq!(c.failed(0, at, at, "refused"), Step::Retry);
        assert_eq!(c.wait_cap(0, at), Some(Duration::from_millis(400)));
        // Retried when its time is up, it is left.
        let at = t0 + Duration::from_secs(1);
        assert_eq!(c.failed(0, at, at, "refused"), Step::Leave { to: 1 });
        assert_eq!(c.wait_cap(1, at), None, "the last model has no cap");
    }

    #[test]
    fn a_chain_of_one_always_retries_its_model() {
        let t0 = Instant::now();
        let mut c = Chain::new(1, AFTER);
        for s in [0, 30, 600] {
            assert_eq!(c.failed(0, secs(t0, s), secs(t0, s), "down"), Step::Retry);
            assert_eq!(c.pick(secs(t0, s)), 0);
        }
    }
}
