//! The web console's sign-ins, kept on the server: signing in with a person's token makes a
//! random session ID (256 bits, the cookie's only content) that stands for that token in this
//! process until it is signed out, it expires ([`SESSION_TTL`]), or the process ends. The token
//! never goes back to the browser, signing out ends the session for every copy of the cookie, and
//! the token is checked again at every request (an approver token's expiry and a rotated secret
//! still apply).
//!
//! Sessions are this process's: behind several API replicas, route `/console` to one of them (or
//! sign in again on another); a restart signs everybody out. At most [`MAX_SESSIONS`] live at once
//! (the oldest is ended to make room).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

use crate::secret::Secret;

/// How long a console sign-in lasts.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Most sign-ins alive at once.
pub const MAX_SESSIONS: usize = 10_000;

struct Entry {
    token: Secret,
    expires: Instant,
}

/// The live sign-ins, by the SHA-256 of their session ID (the ID itself is not kept).
#[derive(Default)]
pub struct ConsoleSessions {
    live: Mutex<HashMap<[u8; 32], Entry>>,
}

impl std::fmt::Debug for ConsoleSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConsoleSessions(<redacted>)")
    }
}

fn digest(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

impl ConsoleSessions {
    /// Starts a session for `token` at `now`: its new ID (the cookie's value). Fails only when
    /// the OS has no randomness to give.
    pub fn start(&self, token: &str, now: Instant) -> Result<String, getrandom::Error> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)?;
        let id = URL_SAFE_NO_PAD.encode(bytes);
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.retain(|_, e| e.expires > now);
        if live.len() >= MAX_SESSIONS
            && let Some(oldest) = live.iter().min_by_key(|(_, e)| e.expires).map(|(k, _)| *k)
        {
            live.remove(&oldest);
        }
        live.insert(
            digest(&id),
            Entry {
                token: Secret::new(token.as_bytes().to_vec()),
                expires: now + SESSION_TTL,
            },
        );
        Ok(id)
    }

    /// The token session `id` stands for at `now`, if it is live.
    pub fn token(&self, id: &str, now: Instant) -> Option<String> {
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.get(&digest(id))
            .filter(|e| e.expires > now)
            .and_then(|e| String::from_utf8(e.token.expose().to_vec()).ok())
    }

    /// Ends session `id` (nothing when it is not live).
    pub fn end(&self, id: &str) {
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&digest(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_stands_for_its_token_until_it_ends_or_expires() {
        let sessions = ConsoleSessions::default();
        let t0 = Instant::now();
        let id = sessions.start("admin-token", t0).unwrap();
        assert_eq!(id.len(), 43, "256 random bits, base64url");
        assert!(!id.contains("admin"));
        assert_eq!(sessions.token(&id, t0).as_deref(), Some("admin-token"));
        assert_eq!(sessions.token("guess", t0), None);
        assert_eq!(sessions.token(&id, t0 + SESSION_TTL), None, "expired");
        let other = sessions.start("admin-token", t0).unwrap();
        assert_ne!(other, id, "every sign-in is a session of its own");
        sessions.end(&id);
        assert_eq!(sessions.token(&id, t0), None, "signed out");
        assert!(sessions.token(&other, t0).is_some(), "the other stays");
    }

    #[test]
    fn the_oldest_session_makes_room() {
        let sessions = ConsoleSessions::default();
        let t0 = Instant::now();
        let first = sessions.start("t", t0).unwrap();
        for i in 1..MAX_SESSIONS {
            sessions
                .start("t", t0 + Duration::from_millis(i as u64))
                .unwrap();
        }
        let now = t0 + Duration::from_secs(1);
        assert!(sessions.token(&first, now).is_some());
        sessions.start("t", now).unwrap();
        assert_eq!(sessions.token(&first, now), None);
        assert_eq!(sessions.live.lock().unwrap().len(), MAX_SESSIONS);
    }

    #[test]
    fn sessions_do_not_print_their_tokens() {
        let sessions = ConsoleSessions::default();
        sessions.start("hunter2", Instant::now()).unwrap();
        assert!(!format!("{sessions:?}").contains("hunter2"));
    }
}
