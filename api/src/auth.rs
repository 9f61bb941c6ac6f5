//! Authentication: the admin token, runner tokens bound to one thread, and approver tokens bound
//! to one pool.
//!
//! A runner token is `nxr2.<claims>.<tag>`: the claims are its thread's ID and labels (pool,
//! agent, replica, session key — fixed when the thread was created) as base64url JSON, the tag an
//! HMAC-SHA256 over them with the server's secret. It needs no storage, cannot be moved to another
//! thread or relabelled, and is checked in constant time; every rule that trusts a runner's pool
//! or agent (a handoff's collaborators) reads them from the token, never from a request. Tokens of
//! the earlier `nxr1.<thread>.<tag>` form carried no labels and are refused (`ninetrix up` mints
//! new ones). An approver token (minted by the admin for a person) is `nxa1.<claims>.<tag>`:
//! the claims (pool, name, expiry) as base64url JSON, the tag an HMAC over them under another
//! context, so neither kind of token can pass for the other. It may list and decide its pool's
//! requests to people, nothing else; it stops working at its expiry (or when the server's
//! secret changes). An A2A token (`nxa2a1.<claims>.<tag>`, minted by the admin for a caller of
//! a pool's agents over A2A) has the same claims under a context of its own: it calls the A2A
//! endpoints of its pool's agents and nothing else. The admin token is compared in constant time
//! too. Tokens are never logged.

use std::sync::Arc;

use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::ThreadLabels;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::console_sessions::ConsoleSessions;
use crate::error::ApiError;
pub use crate::secret::Secret;

const RUNNER_PREFIX: &str = "nxr2";
const RUNNER_CONTEXT: &[u8] = b"ninetrix runner token v2\0";
const APPROVER_PREFIX: &str = "nxa1";
const APPROVER_CONTEXT: &[u8] = b"ninetrix approver token v1\0";
const A2A_PREFIX: &str = "nxa2a1";
const A2A_CONTEXT: &[u8] = b"ninetrix a2a token v1\0";
const AGENT_PREFIX: &str = "nxs1";
const AGENT_CONTEXT: &[u8] = b"ninetrix agent token v1\0";

/// What a runner token says: its thread and the thread's labels.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct RunnerClaims {
    /// The thread.
    t: uuid::Uuid,
    /// The pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    p: Option<String>,
    /// The agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    a: Option<String>,
    /// The replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    r: Option<u32>,
    /// The session key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    s: Option<String>,
}

/// What an agent token says: the pool and agent whose sessions its holder serves.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct AgentClaims {
    /// The pool.
    p: String,
    /// The agent.
    a: String,
}

/// What an approver token (or an A2A token) says about its holder.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct ApproverClaims {
    /// The pool.
    p: String,
    /// The holder's name.
    n: String,
    /// Expiry, Unix seconds.
    e: i64,
}

/// How requests are authenticated.
#[derive(Clone, Debug)]
pub enum AuthConfig {
    /// Bearer tokens: the admin token, and runner tokens signed with the secret.
    Tokens {
        /// Signs runner tokens.
        secret: Secret,
        /// The admin token.
        admin_token: Secret,
    },
    /// No authentication at all (`--insecure-dev`): every request is treated as admin.
    InsecureDev,
}

/// Checks tokens.
#[derive(Clone, Debug)]
pub struct Authenticator {
    config: AuthConfig,
    admin_digest: [u8; 32],
    /// The web console's sign-ins: a session ID (the cookie) → the token it stands for.
    pub(crate) console: Arc<ConsoleSessions>,
}

impl Authenticator {
    /// An authenticator for this configuration.
    pub fn new(config: AuthConfig) -> Self {
        let admin_digest = match &config {
            AuthConfig::Tokens { admin_token, .. } => Sha256::digest(admin_token.expose()).into(),
            AuthConfig::InsecureDev => [0; 32],
        };
        Self {
            config,
            admin_digest,
            console: Arc::default(),
        }
    }

    /// Mints the runner token of a thread with its labels — the thread's own, as stored (they
    /// are fixed when it is created). In insecure-dev mode tokens are not checked, and the tag is
    /// a placeholder.
    pub fn runner_token(&self, thread: ThreadId, labels: &ThreadLabels) -> String {
        let claims = RunnerClaims {
            t: *thread.as_uuid(),
            p: labels.pool.clone(),
            a: labels.agent.clone(),
            r: labels.replica,
            s: labels.session.clone(),
        };
        self.claims_token(RUNNER_PREFIX, RUNNER_CONTEXT, &claims)
    }

    /// Mints an approver token for `name` on `pool`, valid until `expires_at` (Unix seconds).
    pub fn approver_token(&self, pool: &str, name: &str, expires_at: i64) -> String {
        let claims = ApproverClaims {
            p: pool.to_string(),
            n: name.to_string(),
            e: expires_at,
        };
        self.claims_token(APPROVER_PREFIX, APPROVER_CONTEXT, &claims)
    }

    /// Mints an A2A token for `name` on `pool`, valid until `expires_at` (Unix seconds): it calls
    /// the A2A endpoints of the pool's agents, nothing else.
    pub fn a2a_token(&self, pool: &str, name: &str, expires_at: i64) -> String {
        let claims = ApproverClaims {
            p: pool.to_string(),
            n: name.to_string(),
            e: expires_at,
        };
        self.claims_token(A2A_PREFIX, A2A_CONTEXT, &claims)
    }

    /// Mints the token of an agent's replicas: it reads the agent's session work (and the runner
    /// tokens of those sessions' threads), nothing else.
    pub fn agent_token(&self, pool: &str, agent: &str) -> String {
        let claims = AgentClaims {
            p: pool.to_string(),
            a: agent.to_string(),
        };
        self.claims_token(AGENT_PREFIX, AGENT_CONTEXT, &claims)
    }

    /// `<prefix>.<claims as base64url JSON>.<HMAC of them under context>`.
    fn claims_token<T: serde::Serialize>(
        &self,
        prefix: &str,
        context: &[u8],
        claims: &T,
    ) -> String {
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(claims).unwrap_or_default());
        let tag = match &self.config {
            AuthConfig::Tokens { secret, .. } => {
                let mut mac = keyed(secret, context);
                mac.update(payload.as_bytes());
                URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
            }
            AuthConfig::InsecureDev => "insecure-dev".to_string(),
        };
        format!("{prefix}.{payload}.{tag}")
    }

    /// Who presents this `Authorization` header value.
    pub fn caller(&self, authorization: Option<&str>) -> Result<Caller, ApiError> {
        self.caller_at(authorization, chrono::Utc::now().timestamp())
    }

    /// [`Authenticator::caller`] at `now` (Unix seconds).
    fn caller_at(&self, authorization: Option<&str>, now: i64) -> Result<Caller, ApiError> {
        let secret = match &self.config {
            AuthConfig::InsecureDev => return Ok(Caller::Admin),
            AuthConfig::Tokens { secret, .. } => secret,
        };
        let token = authorization
            .and_then(|h| {
                h.strip_prefix("Bearer ")
                    .or_else(|| h.strip_prefix("bearer "))
            })
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or(ApiError::Unauthorized)?;
        if let Some(rest) = token
            .strip_prefix(RUNNER_PREFIX)
            .and_then(|r| r.strip_prefix('.'))
        {
            let claims: RunnerClaims = verified_claims(secret, RUNNER_CONTEXT, rest)?;
            return Ok(Caller::Runner {
                thread: claims.t.into(),
                labels: ThreadLabels {
                    pool: claims.p,
                    agent: claims.a,
                    replica: claims.r,
                    session: claims.s,
                },
            });
        }
        if let Some(rest) = token
            .strip_prefix(AGENT_PREFIX)
            .and_then(|r| r.strip_prefix('.'))
        {
            let claims: AgentClaims = verified_claims(secret, AGENT_CONTEXT, rest)?;
            return Ok(Caller::Agent {
                pool: claims.p,
                agent: claims.a,
            });
        }
        if let Some(rest) = token
            .strip_prefix(A2A_PREFIX)
            .and_then(|r| r.strip_prefix('.'))
        {
            let claims: ApproverClaims = verified_claims(secret, A2A_CONTEXT, rest)?;
            if now >= claims.e {
                return Err(ApiError::Unauthorized);
            }
            return Ok(Caller::A2a {
                pool: claims.p,
                name: claims.n,
            });
        }
        if let Some(rest) = token
            .strip_prefix(APPROVER_PREFIX)
            .and_then(|r| r.strip_prefix('.'))
        {
            let claims: ApproverClaims = verified_claims(secret, APPROVER_CONTEXT, rest)?;
            if now >= claims.e {
                return Err(ApiError::Unauthorized);
            }
            return Ok(Caller::Approver {
                pool: claims.p,
                name: claims.n,
            });
        }
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if bool::from(digest.ct_eq(&self.admin_digest)) {
            Ok(Caller::Admin)
        } else {
            Err(ApiError::Unauthorized)
        }
    }
}

/// The claims of `<payload>.<tag>`, if the tag is the payload's HMAC under `context`.
fn verified_claims<T: serde::de::DeserializeOwned>(
    secret: &Secret,
    context: &[u8],
    rest: &str,
) -> Result<T, ApiError> {
    let (payload, given) = rest.split_once('.').ok_or(ApiError::Unauthorized)?;
    let given = URL_SAFE_NO_PAD
        .decode(given)
        .map_err(|_| ApiError::Unauthorized)?;
    let mut mac = keyed(secret, context);
    mac.update(payload.as_bytes());
    mac.verify_slice(&given)
        .map_err(|_| ApiError::Unauthorized)?;
    URL_SAFE_NO_PAD
        .decode(payload)
        .ok()
        .and_then(|json| serde_json::from_slice(&json).ok())
        .ok_or(ApiError::Unauthorized)
}

/// An HMAC keyed by the server's secret, primed with a token kind's context.
fn keyed(secret: &Secret, context: &[u8]) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret.expose())
        .expect("HMAC takes keys of any length");
    mac.update(context);
    mac
}

/// Who made a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// The admin token (or insecure-dev mode).
    Admin,
    /// A runner token: bound to one thread, with that thread's labels.
    Runner {
        /// The thread.
        thread: ThreadId,
        /// Its labels, as they were when the token was minted (they never change).
        labels: ThreadLabels,
    },
    /// An approver token: a person who may list and decide one pool's requests.
    Approver {
        /// The pool.
        pool: String,
        /// The holder's name (recorded as who decided).
        name: String,
    },
    /// An agent token: the replicas of one agent, finding their sessions' work.
    Agent {
        /// The pool.
        pool: String,
        /// The agent.
        agent: String,
    },
    /// An A2A token: a caller of one pool's agents over A2A.
    A2a {
        /// The pool.
        pool: String,
        /// The holder's name (recorded as `a2a:<name>`).
        name: String,
    },
}

/// What an A2A token on any route but the A2A endpoints is told (403).
const A2A_ONLY: &str = "an A2A token only calls the A2A endpoints of its pool's agents (POST /a2a/{pool}/{agent}); use the admin token for this route";

impl Caller {
    /// Admits the admin only.
    pub fn require_admin(&self) -> Result<(), ApiError> {
        match self {
            Caller::Admin => Ok(()),
            Caller::Runner { .. } | Caller::Approver { .. } | Caller::Agent { .. } => {
                Err(ApiError::Forbidden("this route needs the admin token"))
            }
            Caller::A2a { .. } => Err(ApiError::Forbidden(A2A_ONLY)),
        }
    }

    /// Admits the admin and the runner of `thread`.
    pub fn require_thread(&self, thread: ThreadId) -> Result<(), ApiError> {
        match self {
            Caller::Admin => Ok(()),
            Caller::Runner { thread: own, .. } if *own == thread => Ok(()),
            Caller::Runner { .. } => Err(ApiError::Forbidden(
                "this runner token belongs to another thread",
            )),
            Caller::Approver { .. } => Err(ApiError::Forbidden(
                "an approver token may only list and decide requests to people",
            )),
            Caller::Agent { .. } => Err(ApiError::Forbidden(
                "an agent token only finds its sessions' work; a session is served with the runner token that comes with it",
            )),
            Caller::A2a { .. } => Err(ApiError::Forbidden(A2A_ONLY)),
        }
    }

    /// Admits the admin and approvers; for an approver, the pool its requests must belong to.
    /// A runner token never decides.
    pub fn require_approver(&self) -> Result<Option<&str>, ApiError> {
        match self {
            Caller::Admin => Ok(None),
            Caller::Approver { pool, .. } => Ok(Some(pool)),
            Caller::Runner { .. } | Caller::Agent { .. } => Err(ApiError::Forbidden(
                "a runner token cannot list or decide requests to people: use the admin token or an approver token",
            )),
            Caller::A2a { .. } => Err(ApiError::Forbidden(A2A_ONLY)),
        }
    }

    /// Admits the admin and the agent token of (pool, agent).
    pub fn require_agent(&self, pool: &str, agent: &str) -> Result<(), ApiError> {
        match self {
            Caller::Admin => Ok(()),
            Caller::Agent { pool: p, agent: a } if p == pool && a == agent => Ok(()),
            Caller::Agent { .. } => Err(ApiError::Forbidden(
                "this agent token belongs to another agent",
            )),
            Caller::Runner { .. } | Caller::Approver { .. } => Err(ApiError::Forbidden(
                "this route needs the agent's token (or the admin token)",
            )),
            Caller::A2a { .. } => Err(ApiError::Forbidden(A2A_ONLY)),
        }
    }

    /// Admits the admin and the A2A tokens of `pool`: the name a call is recorded under
    /// (`a2a:<name>`, `a2a:admin` for the admin token).
    pub fn require_a2a(&self, pool: &str) -> Result<String, ApiError> {
        match self {
            Caller::Admin => Ok("a2a:admin".to_string()),
            Caller::A2a { pool: p, name } if p == pool => Ok(format!("a2a:{name}")),
            Caller::A2a { .. } => Err(ApiError::Forbidden(
                "this A2A token is for another pool's agents",
            )),
            Caller::Runner { .. } | Caller::Approver { .. } | Caller::Agent { .. } => {
                Err(ApiError::Forbidden(
                    "the A2A endpoints take an A2A token of the pool (`ninetrix a2a token`) or the admin token",
                ))
            }
        }
    }
}

/// Any router state that holds the authenticator can extract the caller.
impl<S> FromRequestParts<S> for Caller
where
    S: Send + Sync,
    Arc<Authenticator>: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let auth = Arc::<Authenticator>::from_ref(state);
        let header = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        if header.is_some() {
            return auth.caller(header);
        }
        // The web console's sign-in cookie, for the same routes (docs/console.md): the session
        // it names stands for a token, checked again now.
        match console_token(&parts.headers, &parts.method)? {
            Some(session) => {
                let token = auth
                    .console
                    .token(&session, std::time::Instant::now())
                    .ok_or(ApiError::Unauthorized)?;
                let caller = auth.caller(Some(&format!("Bearer {token}")))?;
                match caller {
                    Caller::Admin | Caller::Approver { .. } => Ok(caller),
                    // Only a person's tokens sign in to the console.
                    Caller::Runner { .. } | Caller::Agent { .. } | Caller::A2a { .. } => {
                        Err(ApiError::Unauthorized)
                    }
                }
            }
            None => auth.caller(None),
        }
    }
}

/// The cookie the web console keeps its sign-in in (HttpOnly, SameSite=Strict): a session ID,
/// never the token (`console_sessions`).
pub const CONSOLE_COOKIE: &str = "ninetrix_console";
/// The header every console request that changes something carries, with the value
/// [`CONSOLE_HEADER_VALUE`]: a page of another site cannot send it (it would need a CORS
/// preflight this server never allows), so a forged form or `fetch` riding on the cookie is
/// refused.
pub const CONSOLE_HEADER: &str = "x-ninetrix-console";
/// The one value [`CONSOLE_HEADER`] is taken with.
pub const CONSOLE_HEADER_VALUE: &str = "1";

/// Whether the request carries `X-Ninetrix-Console: 1` (one such header, that value).
pub(crate) fn console_header_ok(headers: &axum::http::HeaderMap) -> bool {
    let mut values = headers.get_all(CONSOLE_HEADER).iter();
    matches!((values.next(), values.next()), (Some(v), None) if v.as_bytes() == CONSOLE_HEADER_VALUE.as_bytes())
}

/// The session ID of the console's cookie, when the request carries one: for reads (GET, HEAD)
/// the cookie alone; for anything else only with `X-Ninetrix-Console: 1`, else 403 (a
/// cross-site request riding on the cookie).
pub(crate) fn console_token(
    headers: &axum::http::HeaderMap,
    method: &axum::http::Method,
) -> Result<Option<String>, ApiError> {
    let token = headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == CONSOLE_COOKIE)
        .map(|(_, value)| value.trim().to_string())
        .filter(|v| !v.is_empty());
    let Some(token) = token else { return Ok(None) };
    let reads = matches!(*method, axum::http::Method::GET | axum::http::Method::HEAD);
    if !reads && !console_header_ok(headers) {
        return Err(ApiError::Forbidden(
            "a request signed in by the console's cookie that changes something must carry the header X-Ninetrix-Console: 1 (the console sends it; another site cannot)",
        ));
    }
    Ok(Some(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens() -> Authenticator {
        Authenticator::new(AuthConfig::Tokens {
            secret: Secret::new(b"s3cret".to_vec()),
            admin_token: Secret::new(b"admin-token-1234".to_vec()),
        })
    }

    #[test]
    fn the_console_cookie_signs_in_reads_and_writes_only_with_its_header() {
        use axum::http::{HeaderMap, HeaderValue, Method};
        let mut h = HeaderMap::new();
        assert_eq!(console_token(&h, &Method::POST).unwrap(), None);
        h.insert(
            axum::http::header::COOKIE,
            HeaderValue::from_static("theme=dark; ninetrix_console=admin-token-1234"),
        );
        assert_eq!(
            console_token(&h, &Method::GET).unwrap().as_deref(),
            Some("admin-token-1234")
        );
        assert!(matches!(
            console_token(&h, &Method::POST),
            Err(ApiError::Forbidden(_))
        ));
        // Any other value is a forgery's guess, not the console.
        for wrong in ["0", "yes", "", "1, 1"] {
            h.insert(CONSOLE_HEADER, HeaderValue::from_str(wrong).unwrap());
            assert!(console_token(&h, &Method::POST).is_err(), "{wrong:?}");
        }
        h.insert(CONSOLE_HEADER, HeaderValue::from_static("1"));
        assert!(console_token(&h, &Method::POST).unwrap().is_some());
        h.append(CONSOLE_HEADER, HeaderValue::from_static("1"));
        assert!(console_token(&h, &Method::POST).is_err(), "twice");
    }

    fn labels(pool: &str, agent: &str, replica: u32) -> ThreadLabels {
        ThreadLabels {
            pool: Some(pool.into()),
            agent: Some(agent.into()),
            replica: Some(replica),
            session: None,
        }
    }

    #[test]
    fn runner_tokens_are_bound_to_their_thread_and_its_labels() {
        let auth = tokens();
        let a = ThreadId::new_v7();
        let token = auth.runner_token(a, &labels("p", "a", 1));
        assert_eq!(
            auth.caller(Some(&format!("Bearer {token}"))).unwrap(),
            Caller::Runner {
                thread: a,
                labels: labels("p", "a", 1)
            }
        );
        // Claims edited — another thread, another pool — break the tag.
        let (_, rest) = token.split_once('.').unwrap();
        let (_, tag) = rest.split_once('.').unwrap();
        let b = ThreadId::new_v7();
        for claims in [
            format!(r#"{{"t":"{b}","p":"p","a":"a","r":1}}"#),
            format!(r#"{{"t":"{a}","p":"q","a":"a","r":1}}"#),
        ] {
            let forged = format!("nxr2.{}.{tag}", URL_SAFE_NO_PAD.encode(claims));
            assert!(auth.caller(Some(&format!("Bearer {forged}"))).is_err());
        }
        // Another server's secret does not verify.
        let other = Authenticator::new(AuthConfig::Tokens {
            secret: Secret::new(b"other".to_vec()),
            admin_token: Secret::new(b"x".to_vec()),
        });
        assert!(other.caller(Some(&format!("Bearer {token}"))).is_err());
    }

    #[test]
    fn tokens_of_the_first_form_carry_no_labels_and_are_refused() {
        // nxr1.<thread>.<HMAC over the thread ID>, as minted before labels were fixed.
        let auth = tokens();
        let thread = ThreadId::new_v7();
        let mut mac = keyed(
            &Secret::new(b"s3cret".to_vec()),
            b"ninetrix runner token v1\0",
        );
        mac.update(thread.to_string().as_bytes());
        let old = format!(
            "nxr1.{}.{}",
            thread.as_uuid().simple(),
            URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
        );
        assert!(matches!(
            auth.caller(Some(&format!("Bearer {old}"))),
            Err(ApiError::Unauthorized)
        ));
    }

    #[test]
    fn admin_and_garbage() {
        let auth = tokens();
        assert_eq!(
            auth.caller(Some("Bearer admin-token-1234")).unwrap(),
            Caller::Admin
        );
        for bad in [
            None,
            Some(""),
            Some("Bearer "),
            Some("Basic abc"),
            Some("Bearer admin-token-123"),
            Some("Bearer nxr1.zz.zz"),
        ] {
            assert!(
                matches!(auth.caller(bad), Err(ApiError::Unauthorized)),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn approver_tokens_carry_their_pool_and_name_and_expire() {
        let auth = tokens();
        let token = auth.approver_token("shop", "alice", 1_000);
        assert_eq!(
            auth.caller_at(Some(&format!("Bearer {token}")), 999)
                .unwrap(),
            Caller::Approver {
                pool: "shop".into(),
                name: "alice".into()
            }
        );
        // Expired.
        assert!(
            auth.caller_at(Some(&format!("Bearer {token}")), 1_000)
                .is_err()
        );
        // Claims edited (another pool, a later expiry) break the tag.
        let (_, rest) = token.split_once('.').unwrap();
        let (_, tag) = rest.split_once('.').unwrap();
        for claims in [
            r#"{"p":"bank","n":"alice","e":1000}"#,
            r#"{"p":"shop","n":"alice","e":99999999999}"#,
        ] {
            let forged = format!("nxa1.{}.{tag}", URL_SAFE_NO_PAD.encode(claims));
            assert!(
                auth.caller_at(Some(&format!("Bearer {forged}")), 0)
                    .is_err()
            );
        }
        // A runner token's tag does not make an approver token, nor the other way round.
        let thread = ThreadId::new_v7();
        let runner = auth.runner_token(thread, &ThreadLabels::default());
        let runner_tag = runner.rsplit('.').next().unwrap();
        let (payload, _) = rest.split_once('.').unwrap();
        let mixed = format!("nxa1.{payload}.{runner_tag}");
        assert!(auth.caller_at(Some(&format!("Bearer {mixed}")), 0).is_err());
        // Another server's secret does not verify.
        let other = Authenticator::new(AuthConfig::Tokens {
            secret: Secret::new(b"other".to_vec()),
            admin_token: Secret::new(b"x".to_vec()),
        });
        assert!(
            other
                .caller_at(Some(&format!("Bearer {token}")), 0)
                .is_err()
        );
    }

    #[test]
    fn a2a_tokens_carry_their_pool_and_name_expire_and_call_only_a2a() {
        let auth = tokens();
        let token = auth.a2a_token("shop", "partner-crm", 1_000);
        assert!(token.starts_with("nxa2a1."));
        let caller = auth
            .caller_at(Some(&format!("Bearer {token}")), 999)
            .unwrap();
        assert_eq!(
            caller,
            Caller::A2a {
                pool: "shop".into(),
                name: "partner-crm".into()
            }
        );
        assert_eq!(caller.require_a2a("shop").unwrap(), "a2a:partner-crm");
        assert!(caller.require_a2a("bank").is_err());
        assert_eq!(Caller::Admin.require_a2a("bank").unwrap(), "a2a:admin");
        // Refused everywhere else, saying what it is for.
        for refused in [
            caller.require_admin(),
            caller.require_thread(ThreadId::new_v7()),
            caller.require_approver().map(drop),
            caller.require_agent("shop", "clerk"),
        ] {
            let Err(ApiError::Forbidden(why)) = refused else {
                panic!("{refused:?}")
            };
            assert!(why.contains("A2A endpoints"), "{why}");
        }
        // Expired.
        assert!(
            auth.caller_at(Some(&format!("Bearer {token}")), 1_000)
                .is_err()
        );
        // Claims edited break the tag; an approver token's tag does not make an A2A token, nor
        // the other way round (another context).
        let (_, rest) = token.split_once('.').unwrap();
        let (payload, tag) = rest.split_once('.').unwrap();
        let forged = format!(
            "nxa2a1.{}.{tag}",
            URL_SAFE_NO_PAD.encode(r#"{"p":"bank","n":"partner-crm","e":1000}"#)
        );
        assert!(
            auth.caller_at(Some(&format!("Bearer {forged}")), 0)
                .is_err()
        );
        let approver = auth.approver_token("shop", "partner-crm", 1_000);
        assert_eq!(
            approver
                .split_once('.')
                .unwrap()
                .1
                .split_once('.')
                .unwrap()
                .0,
            payload
        );
        let approver_tag = approver.rsplit('.').next().unwrap();
        let mixed = format!("nxa2a1.{payload}.{approver_tag}");
        assert!(auth.caller_at(Some(&format!("Bearer {mixed}")), 0).is_err());
        let mixed = format!("nxa1.{payload}.{tag}");
        assert!(auth.caller_at(Some(&format!("Bearer {mixed}")), 0).is_err());
    }

    #[test]
    fn only_the_admin_and_approvers_decide() {
        let approver = Caller::Approver {
            pool: "shop".into(),
            name: "alice".into(),
        };
        assert_eq!(approver.require_approver().unwrap(), Some("shop"));
        assert_eq!(Caller::Admin.require_approver().unwrap(), None);
        assert!(
            Caller::Runner {
                thread: ThreadId::new_v7(),
                labels: ThreadLabels::default()
            }
            .require_approver()
            .is_err()
        );
        assert!(approver.require_admin().is_err());
        assert!(approver.require_thread(ThreadId::new_v7()).is_err());
    }

    #[test]
    fn secrets_do_not_print() {
        assert_eq!(
            format!("{:?}", Secret::new(b"hunter2".to_vec())),
            "Secret(<redacted>)"
        );
    }
}
