//! How long to wait before the next attempt at a failing dependency: exponential, capped, with a
//! little jitter so a hundred replicas that lost the same API do not all knock at once. The
//! schedule and the patience rule ([`gives_up`]) are pure; the jitter is an argument ([`jitter`]
//! draws one). [`patiently`] is the one retry loop built on them (the checkpoint store's calls,
//! a replica's lookup of its thread).

use std::future::Future;
use std::hash::{BuildHasher as _, Hasher as _};
use std::time::Duration;

use tokio::time::Instant;

/// The checkpoint API: 100 ms doubling, at most a minute.
pub const API: Schedule = Schedule {
    first: Duration::from_millis(100),
    cap: Duration::from_secs(60),
};

/// The model: 500 ms doubling, at most a minute.
pub const MODEL: Schedule = Schedule {
    first: Duration::from_millis(500),
    cap: Duration::from_secs(60),
};

/// A backoff schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// The wait after the first failure.
    pub first: Duration,
    /// The longest wait (before jitter).
    pub cap: Duration,
}

impl Schedule {
    /// The wait after `failures` failures in a row (from 1), stretched by `jitter` in `[0, 1)`
    /// by up to 10 %.
    pub fn delay(&self, failures: u32, jitter: f64) -> Duration {
        let doublings = failures.saturating_sub(1).min(30);
        let base = self.first.saturating_mul(1u32 << doublings).min(self.cap);
        base.mul_f64(1.0 + 0.1 * jitter.clamp(0.0, 1.0))
    }
}

/// A jitter value in `[0, 1)`, from the process's random hasher keys (no RNG dependency).
pub fn jitter() -> f64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// Whether a call failing for `outage` so far, with the next try `delay` away, gives up: only
/// with a patience, and only when the next try would come after it has run out.
pub fn gives_up(outage: Duration, delay: Duration, patience: Option<Duration>) -> bool {
    patience.is_some_and(|patience| outage + delay > patience)
}

/// Why [`patiently`] ended without an answer (`S`: what its `stop` future gives).
#[derive(Debug)]
pub enum GaveUp<E, S> {
    /// The call failed in a way no retry fixes (`transient` said so): its error.
    Failed(E),
    /// It was still failing when the patience ran out: the last error.
    Patience(E),
    /// `stop` completed during a wait (a caller that never stops passes
    /// `std::future::pending::<Infallible>()`, and this cannot happen).
    Stopped(S),
}

/// Runs `call` until it answers, retrying the failures `transient` accepts after `schedule`'s
/// delay (with jitter), until the next try would come after `patience` — counted from the first
/// failure, not from when the call was sent: a long-poll that waited 30 s and then lost its
/// connection has been failing for no time at all — or until `stop` completes during a wait.
/// Before each wait, `on_retry(error, delay)` is told (to log it, to mark a dependency down).
pub async fn patiently<T, E, S, F, Fut>(
    schedule: Schedule,
    patience: Option<Duration>,
    stop: impl Future<Output = S>,
    transient: impl Fn(&E) -> bool,
    mut on_retry: impl FnMut(&E, Duration),
    call: F,
) -> Result<T, GaveUp<E, S>>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    tokio::pin!(stop);
    let mut outage: Option<Instant> = None;
    let mut failures = 0;
    loop {
        let e = match call().await {
            Ok(v) => return Ok(v),
            Err(e) if transient(&e) => e,
            Err(e) => return Err(GaveUp::Failed(e)),
        };
        failures += 1;
        let delay = schedule.delay(failures, jitter());
        let since = *outage.get_or_insert_with(Instant::now);
        if gives_up(since.elapsed(), delay, patience) {
            return Err(GaveUp::Patience(e));
        }
        on_retry(&e, delay);
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            s = &mut stop => return Err(GaveUp::Stopped(s)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap() {
        let ms = |n| API.delay(n, 0.0).as_millis();
        assert_eq!(
            (1..=12).map(ms).collect::<Vec<_>>(),
            [
                100, 200, 400, 800, 1600, 3200, 6400, 12800, 25600, 51200, 60000, 60000
            ]
        );
        assert_eq!(API.delay(u32::MAX, 0.0), Duration::from_secs(60));
        assert_eq!(MODEL.delay(1, 0.0), Duration::from_millis(500));
        assert_eq!(MODEL.delay(8, 0.0), Duration::from_secs(60));
    }

    #[test]
    fn jitter_stretches_by_at_most_a_tenth() {
        assert_eq!(API.delay(1, 0.5), Duration::from_millis(105));
        assert_eq!(API.delay(20, 1.0), Duration::from_secs(66));
        assert_eq!(API.delay(1, 7.0), Duration::from_millis(110));
        for _ in 0..100 {
            let j = jitter();
            assert!((0.0..1.0).contains(&j), "{j}");
        }
    }

    #[test]
    fn patience_is_counted_from_the_first_failure() {
        let s = Duration::from_secs;
        assert!(!gives_up(s(3600), s(30), None), "no patience: never");
        assert!(!gives_up(s(0), s(1), Some(s(20))));
        assert!(
            !gives_up(s(19), s(1), Some(s(20))),
            "the last try still fits"
        );
        assert!(gives_up(s(19), s(2), Some(s(20))));
    }

    use std::sync::Arc;
    use std::sync::atomic::AtomicU32;

    /// A failure: (whether it is transient, the call's number).
    type Failure = (bool, u32);

    /// A call failing `failures` times (transiently, or for good when `fatal`), then answering
    /// with its number; and the count of calls.
    fn flaky(
        failures: u32,
        fatal: bool,
    ) -> (
        Arc<AtomicU32>,
        impl Fn() -> std::future::Ready<Result<u32, Failure>>,
    ) {
        let calls = Arc::new(AtomicU32::new(0));
        let counter = calls.clone();
        let call = move || {
            let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            std::future::ready(if n > failures {
                Ok(n)
            } else {
                Err((!fatal, n))
            })
        };
        (calls, call)
    }

    fn never() -> std::future::Pending<std::convert::Infallible> {
        std::future::pending()
    }

    #[tokio::test(start_paused = true)]
    async fn patiently_retries_transient_failures_until_an_answer() {
        let (_, call) = flaky(3, false);
        let mut told = Vec::new();
        let answer = patiently(
            API,
            None,
            never(),
            |e| e.0,
            |e, d| told.push((e.1, d)),
            call,
        )
        .await;
        assert!(matches!(answer, Ok(4)), "{answer:?}");
        assert_eq!(told.iter().map(|t| t.0).collect::<Vec<_>>(), [1, 2, 3]);
        assert!(told[1].1 >= Duration::from_millis(200), "the waits double");
    }

    #[tokio::test(start_paused = true)]
    async fn patiently_stops_at_a_lasting_failure_at_once() {
        let (calls, call) = flaky(1, true);
        let answer = patiently(API, None, never(), |e| e.0, |_, _| {}, call).await;
        assert!(
            matches!(answer, Err(GaveUp::Failed((false, 1)))),
            "{answer:?}"
        );
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn patiently_gives_up_when_the_next_try_would_pass_the_patience() {
        let (calls, call) = flaky(u32::MAX, false);
        let patience = Some(Duration::from_secs(1));
        let answer = patiently(API, patience, never(), |e| e.0, |_, _| {}, call).await;
        assert!(matches!(answer, Err(GaveUp::Patience(_))), "{answer:?}");
        // 100 + 200 + 400 ms of waits fit in a second (with jitter); the next 800 ms do not.
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn patiently_ends_when_stopped_during_a_wait() {
        let (calls, call) = flaky(u32::MAX, false);
        let stop = tokio::time::sleep(Duration::from_millis(250));
        let answer = patiently(API, None, stop, |e| e.0, |_, _| {}, call).await;
        assert!(matches!(answer, Err(GaveUp::Stopped(()))), "{answer:?}");
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
}
