//! How long to wait before the next attempt at a failing dependency: exponential, capped, with a
//! little jitter so a hundred replicas that lost the same API do not all knock at once. Pure; the
//! jitter is an argument ([`jitter`] draws one).

use std::hash::{BuildHasher as _, Hasher as _};
use std::time::Duration;

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
}
