//! Signed webhook notifications, the rules both senders share: the runner's notifications of
//! requests to people (`governance.human_approval.notify_url`) and the API's A2A push
//! notifications (docs/a2a.md). The signature is HMAC-SHA256 over `"<timestamp>.<body>"`, sent as
//! `X-Ninetrix-Signature: sha256=<hex>` beside `X-Ninetrix-Timestamp` (Unix seconds); a delivery
//! is retried with backoff while the answer may change. Pure: no I/O, tested here.

use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Attempts per notification.
pub const MAX_ATTEMPTS: u32 = 8;

/// `sha256=<hex>`: HMAC-SHA256 of `"<timestamp>.<body>"` keyed by `secret`.
pub fn signature(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let tag = mac.finalize().into_bytes();
    let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

/// The wait after failed attempt `attempt` (from 1): 1 s, doubling, at most 64 s.
pub fn retry_delay(attempt: u32) -> Duration {
    Duration::from_secs(1u64 << attempt.saturating_sub(1).min(6))
}

/// Whether an HTTP answer is worth another attempt: server errors, 408 and 429. Any other 4xx
/// means the receiver refuses this notification; sending it again would not change that.
pub fn worth_retrying(status: u16) -> bool {
    status >= 500 || status == 408 || status == 429
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_hmac_sha256_of_timestamp_dot_body() {
        // Checked against `printf '1700000000.{"a":1}' | openssl dgst -sha256 -hmac whsec`.
        assert_eq!(
            signature(b"whsec", 1_700_000_000, br#"{"a":1}"#),
            "sha256=8ad37ba156048ae0e0a5533c75cdf26fee88b07f93cb57ee4c80adb053012032"
        );
        let a = signature(b"k", 1, b"body");
        assert_ne!(a, signature(b"k", 2, b"body"), "the timestamp is signed");
        assert_ne!(a, signature(b"k", 1, b"body!"), "the body is signed");
        assert_ne!(a, signature(b"k2", 1, b"body"), "the key matters");
        assert!(a.starts_with("sha256=") && a.len() == 7 + 64);
    }

    #[test]
    fn retries_back_off_from_one_second_and_stop_growing() {
        let waits: Vec<u64> = (1..=MAX_ATTEMPTS)
            .map(|a| retry_delay(a).as_secs())
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 64]);
    }

    #[test]
    fn only_answers_that_may_change_are_retried() {
        for s in [500, 502, 503, 408, 429] {
            assert!(worth_retrying(s), "{s}");
        }
        for s in [400, 401, 403, 404, 410, 422] {
            assert!(!worth_retrying(s), "{s}");
        }
    }
}
