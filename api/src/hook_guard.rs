//! What a stranger who knows a webhook's URL, and not its secret, may cost this server (issue 33).
//!
//! This module owns the cheap refusals of `POST /v1/hooks/{pool}/{path}` and nothing else:
//! - [`PeerGate`]: at most N deliveries in flight per source address (a sender trickling bodies
//!   on many connections cannot fill `--max-connections`);
//! - [`RefusalSampler`]: refusals of deliveries that did not prove they hold the secret are
//!   counted in memory and at most one per trigger per interval is written to the history,
//!   carrying the count it stands for (a flood costs no durable write per request);
//! - [`media_type_ok`]: which `Content-Type` a delivery may have;
//! - [`read_body`]: the body read in bounded chunks into a buffer of at most `max_body` bytes,
//!   sized from `Content-Length`, under one deadline for the whole body.
//!
//! The decisions take the clock as an argument and do no I/O, except [`read_body`], which only
//! reads the request.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderMap, header};
use futures_util::StreamExt as _;

/// Default number of deliveries one source address may have in flight at once.
pub const DEFAULT_HOOK_REQUESTS_PER_PEER: usize = 16;

/// Default deadline for a whole webhook body, from the end of the request head.
pub const DEFAULT_HOOK_BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// How often, at most, a refusal of an unproven delivery is written to a trigger's history.
pub(crate) const REFUSAL_RECORD_INTERVAL: Duration = Duration::from_secs(60);

/// The source address of a request, put in its extensions by the listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Peer(pub(crate) IpAddr);

/// Deliveries in flight per source address, capped.
#[derive(Debug)]
pub(crate) struct PeerGate {
    limit: usize,
    in_flight: Mutex<HashMap<IpAddr, usize>>,
}

/// One delivery in flight from an address; leaving it (drop) frees its place.
#[derive(Debug)]
pub(crate) struct PeerPass {
    gate: Arc<PeerGate>,
    ip: IpAddr,
}

impl PeerGate {
    /// A gate that lets `limit` deliveries per address in at once (at least 1).
    pub(crate) fn new(limit: usize) -> PeerGate {
        PeerGate {
            limit: limit.max(1),
            in_flight: Mutex::new(HashMap::new()),
        }
    }

    /// The limit per address.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// A place for one delivery from `ip`, or `None` when it already has `limit` in flight.
    pub(crate) fn enter(self: &Arc<Self>, ip: IpAddr) -> Option<PeerPass> {
        let mut in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let count = in_flight.entry(ip).or_insert(0);
        if *count >= self.limit {
            return None;
        }
        *count += 1;
        Some(PeerPass {
            gate: Arc::clone(self),
            ip,
        })
    }

    /// Deliveries in flight from `ip`.
    #[cfg(test)]
    fn count(&self, ip: IpAddr) -> usize {
        let in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        in_flight.get(&ip).copied().unwrap_or(0)
    }
}

impl Drop for PeerPass {
    fn drop(&mut self) {
        let mut in_flight = self
            .gate
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = in_flight.get_mut(&self.ip) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                // No entry outlives its last delivery: the map is as large as the addresses
                // with a delivery in flight.
                in_flight.remove(&self.ip);
            }
        }
    }
}

/// One trigger's refusals since its last recorded one.
#[derive(Clone, Copy, Debug)]
struct Sample {
    recorded_at: Instant,
    unrecorded: u64,
}

/// Refusals of unproven deliveries, per trigger: at most one recorded per interval.
#[derive(Debug)]
pub(crate) struct RefusalSampler {
    interval: Duration,
    samples: Mutex<HashMap<(String, String), Sample>>,
}

impl Default for RefusalSampler {
    fn default() -> Self {
        RefusalSampler::new(REFUSAL_RECORD_INTERVAL)
    }
}

impl RefusalSampler {
    /// A sampler recording at most one refusal per trigger per `interval`.
    pub(crate) fn new(interval: Duration) -> RefusalSampler {
        RefusalSampler {
            interval,
            samples: Mutex::new(HashMap::new()),
        }
    }

    /// Counts a refusal of trigger (pool, name) at `now`. `Some(n)`: record this one, standing
    /// for `n` refusals (itself and the `n - 1` counted since the last recorded one); `None`:
    /// counted only.
    pub(crate) fn refuse(&self, pool: &str, name: &str, now: Instant) -> Option<u64> {
        let mut samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (pool.to_owned(), name.to_owned());
        match samples.get_mut(&key) {
            Some(sample) if now.saturating_duration_since(sample.recorded_at) < self.interval => {
                sample.unrecorded = sample.unrecorded.saturating_add(1);
                None
            }
            Some(sample) => {
                let stands_for = sample.unrecorded.saturating_add(1);
                *sample = Sample {
                    recorded_at: now,
                    unrecorded: 0,
                };
                Some(stands_for)
            }
            None => {
                samples.insert(
                    key,
                    Sample {
                        recorded_at: now,
                        unrecorded: 0,
                    },
                );
                Some(1)
            }
        }
    }
}

/// Whether a delivery's `Content-Type` is JSON: `application/json` or `application/<x>+json`,
/// any parameters (`charset=utf-8`) allowed, case-insensitive. A missing one is refused too:
/// GitHub, Svix and the Standard Webhooks libraries always send `application/json` (GitHub's
/// other choice, `application/x-www-form-urlencoded`, wraps the JSON in a form field, which this
/// server does not unwrap).
pub(crate) fn media_type_ok(headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match essence.split_once('/') {
        Some(("application", "json")) => true,
        Some(("application", sub)) => sub.ends_with("+json") && sub.len() > "+json".len(),
        _ => false,
    }
}

/// Why a body could not be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BodyError {
    /// More than the limit arrived.
    #[error("the body is larger than {0} bytes")]
    TooLarge(u64),
    /// The whole body did not arrive within the deadline.
    #[error("the body did not arrive within {0:?}")]
    Timeout(Duration),
    /// The connection failed (or a single read stalled past `--body-timeout`).
    #[error("the body could not be read: {0}")]
    Failed(String),
}

/// The capacity to reserve for a body: what `Content-Length` declares, never more than `limit`;
/// a small start when it declares nothing (a chunked body grows as it arrives).
pub(crate) fn initial_capacity(declared: Option<u64>, limit: u64) -> usize {
    const CHUNKED_START: u64 = 16 * 1024;
    let wanted = declared.unwrap_or(CHUNKED_START).min(limit);
    usize::try_from(wanted).unwrap_or(usize::MAX)
}

/// Reads a body of at most `limit` bytes, all of it within `deadline`, into one buffer reserved
/// from `declared` (the `Content-Length`), so a body costs its own size once — not a growing
/// copy — and is freed when the delivery ends.
pub(crate) async fn read_body(
    body: Body,
    declared: Option<u64>,
    limit: u64,
    deadline: Duration,
) -> Result<Vec<u8>, BodyError> {
    let read = async {
        let mut buffer = Vec::with_capacity(initial_capacity(declared, limit));
        let mut chunks = body.into_data_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|e| BodyError::Failed(e.to_string()))?;
            if (buffer.len() as u64).saturating_add(chunk.len() as u64) > limit {
                return Err(BodyError::TooLarge(limit));
            }
            buffer.extend_from_slice(&chunk);
        }
        Ok(buffer)
    };
    tokio::time::timeout(deadline, read)
        .await
        .map_err(|_| BodyError::Timeout(deadline))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 2));

    #[test]
    fn an_address_gets_its_limit_and_its_places_back() {
        let gate = Arc::new(PeerGate::new(2));
        let first = gate.enter(A).expect("first");
        let second = gate.enter(A).expect("second");
        assert!(gate.enter(A).is_none(), "a third from the same address");
        let other = gate.enter(B).expect("another address has its own places");
        drop(first);
        let third = gate.enter(A).expect("a place came back");
        drop((second, third, other));
        assert_eq!(gate.count(A), 0);
        assert!(gate.in_flight.lock().unwrap().is_empty(), "no entry left");
        assert_eq!(PeerGate::new(0).limit(), 1);
    }

    #[test]
    fn one_refusal_per_interval_is_recorded_with_the_count_it_stands_for() {
        let sampler = RefusalSampler::new(Duration::from_secs(60));
        let t0 = Instant::now();
        assert_eq!(sampler.refuse("p", "t", t0), Some(1));
        for s in 1..=41 {
            assert_eq!(sampler.refuse("p", "t", t0 + Duration::from_secs(s)), None);
        }
        // Another trigger is sampled on its own.
        assert_eq!(sampler.refuse("p", "u", t0), Some(1));
        assert_eq!(
            sampler.refuse("p", "t", t0 + Duration::from_secs(60)),
            Some(42)
        );
        assert_eq!(sampler.refuse("p", "t", t0 + Duration::from_secs(61)), None);
        assert_eq!(
            sampler.refuse("p", "t", t0 + Duration::from_secs(200)),
            Some(2)
        );
    }

    #[test]
    fn only_json_media_types_are_taken() {
        let with = |value: Option<&str>| {
            let mut map = HeaderMap::new();
            if let Some(v) = value {
                map.insert(header::CONTENT_TYPE, HeaderValue::from_str(v).unwrap());
            }
            media_type_ok(&map)
        };
        for good in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/cloudevents+json",
            " application/json ;charset=UTF-8",
        ] {
            assert!(with(Some(good)), "{good}");
        }
        for bad in [
            None,
            Some(""),
            Some("application/x-www-form-urlencoded"),
            Some("text/plain"),
            Some("application/+json"),
            Some("application/jsonx"),
            Some("json"),
        ] {
            assert!(!with(bad), "{bad:?}");
        }
    }

    #[test]
    fn the_buffer_is_sized_from_content_length_and_never_past_the_limit() {
        assert_eq!(initial_capacity(Some(100), 1 << 20), 100);
        assert_eq!(initial_capacity(Some(u64::MAX), 1 << 20), 1 << 20);
        assert_eq!(initial_capacity(None, 1 << 20), 16 * 1024);
        assert_eq!(initial_capacity(None, 10), 10);
    }

    #[tokio::test]
    async fn a_body_over_the_limit_or_late_is_refused() {
        let body = Body::from(vec![7u8; 100]);
        assert_eq!(
            read_body(body, None, 99, Duration::from_secs(5)).await,
            Err(BodyError::TooLarge(99))
        );
        let body = Body::from(vec![7u8; 100]);
        assert_eq!(
            read_body(body, Some(100), 100, Duration::from_secs(5))
                .await
                .map(|b| b.len()),
            Ok(100)
        );
        let never = Body::from_stream(futures_util::stream::pending::<
            Result<Vec<u8>, std::io::Error>,
        >());
        assert_eq!(
            read_body(never, Some(10), 100, Duration::from_millis(50)).await,
            Err(BodyError::Timeout(Duration::from_millis(50)))
        );
    }
}
