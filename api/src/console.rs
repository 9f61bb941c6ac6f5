//! The web console (issue 18), served by `ninetrix api` at `/console`: three static files
//! embedded in the binary (no Node, no build step) and the sign-in: a person's token makes a
//! server-side session (`console_sessions`) whose random ID is kept in an HttpOnly,
//! SameSite=Strict cookie; signing out ends it. The page then calls the same `/v1/…` routes as
//! the CLI — the cookie authenticates them (`auth::console_token`), and every request that
//! changes something must carry `X-Ninetrix-Console: 1`, which another site's page cannot send.
//! Only the admin token and approver tokens sign in. Every page is served with a strict Content
//! Security Policy (scripts and styles from this origin only, no framing).

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};

use crate::auth::{CONSOLE_COOKIE, Caller};
use crate::error::ApiError;
use crate::extract::ApiJson;
use crate::state::App;

const INDEX: &str = include_str!("../console/index.html");
const APP_JS: &str = include_str!("../console/app.js");
const APP_CSS: &str = include_str!("../console/app.css");

/// The console's routes.
pub(crate) fn router() -> Router<App> {
    Router::new()
        .route("/console", get(index))
        .route("/console/", get(index))
        .route("/console/app.js", get(app_js))
        .route("/console/app.css", get(app_css))
        .route(
            "/console/session",
            get(whoami).post(sign_in).delete(sign_out),
        )
}

/// Headers every console page and file is served with.
fn hardened(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn file(content_type: &'static str, body: &'static str) -> Response {
    hardened(([(header::CONTENT_TYPE, content_type)], body).into_response())
}

async fn index() -> Response {
    file("text/html; charset=utf-8", INDEX)
}

async fn app_js() -> Response {
    file("text/javascript; charset=utf-8", APP_JS)
}

async fn app_css() -> Response {
    file("text/css; charset=utf-8", APP_CSS)
}

/// `POST /console/session`: a person's token, checked like a bearer token.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SignIn {
    token: String,
}

/// Who is signed in.
#[derive(Serialize)]
struct Whoami {
    /// `admin`, `approver`, or `none` (not signed in).
    kind: &'static str,
    /// An approver's pool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pool: Option<String>,
    /// An approver's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
}

fn whoami_of(caller: &Caller) -> Result<Whoami, ApiError> {
    match caller {
        Caller::Admin => Ok(Whoami {
            kind: "admin",
            pool: None,
            name: None,
        }),
        Caller::Approver { pool, name } => Ok(Whoami {
            kind: "approver",
            pool: Some(pool.clone()),
            name: Some(name.clone()),
        }),
        Caller::Runner { .. } | Caller::Agent { .. } | Caller::A2a { .. } => {
            Err(ApiError::Unauthorized)
        }
    }
}

/// The cookie that keeps session ID `token` (or, with `None`, the one that removes it).
fn cookie(token: Option<&str>, secure: bool) -> Result<HeaderValue, ApiError> {
    let secure = if secure { "; Secure" } else { "" };
    let text = match token {
        Some(t) => format!("{CONSOLE_COOKIE}={t}; Path=/; HttpOnly; SameSite=Strict{secure}"),
        None => format!("{CONSOLE_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{secure}"),
    };
    HeaderValue::from_str(&text).map_err(|_| ApiError::Unauthorized)
}

/// Whether the request came over TLS (a proxy in front says so): then the cookie is `Secure`.
fn over_tls(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|p| p.eq_ignore_ascii_case("https"))
}

async fn sign_in(
    State(app): State<App>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<SignIn>,
) -> Result<Response, ApiError> {
    let token = body.token.trim();
    // A token is visible ASCII: anything else cannot be one, and must not reach a header.
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic() && b != b';') {
        return Err(ApiError::Unauthorized);
    }
    let caller = app.auth.caller(Some(&format!("Bearer {token}")))?;
    let who = whoami_of(&caller)?;
    let session = app
        .auth
        .console
        .start(token, std::time::Instant::now())
        .map_err(|e| ApiError::Internal(format!("no randomness for a console session: {e}")))?;
    tracing::info!(kind = who.kind, "console sign-in");
    let mut response = (StatusCode::OK, axum::Json(who)).into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        cookie(Some(&session), over_tls(&headers))?,
    );
    Ok(hardened(response))
}

/// Who is signed in: `{"kind": "none"}` (a 200, so a page that is not signed in yet logs no
/// failed request) when nobody is.
async fn whoami(caller: Result<Caller, ApiError>) -> Response {
    let who = caller.and_then(|c| whoami_of(&c)).unwrap_or(Whoami {
        kind: "none",
        pool: None,
        name: None,
    });
    hardened(axum::Json(who).into_response())
}

/// Ends the session the cookie names — for every copy of that cookie — and removes the cookie.
async fn sign_out(State(app): State<App>, headers: HeaderMap) -> Result<Response, ApiError> {
    if !crate::auth::console_header_ok(&headers) {
        return Err(ApiError::Forbidden(
            "signing out of the console needs the header X-Ninetrix-Console: 1",
        ));
    }
    if let Some(session) = crate::auth::console_token(&headers, &axum::http::Method::DELETE)? {
        app.auth.console.end(&session);
    }
    let mut response = StatusCode::NO_CONTENT.into_response();
    response
        .headers_mut()
        .insert(header::SET_COOKIE, cookie(None, over_tls(&headers))?);
    Ok(hardened(response))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_is_http_only_and_strict_and_secure_behind_tls() {
        let c = cookie(Some("tok"), false).unwrap();
        assert_eq!(
            c.to_str().unwrap(),
            "ninetrix_console=tok; Path=/; HttpOnly; SameSite=Strict"
        );
        let s = cookie(Some("tok"), true).unwrap();
        assert!(s.to_str().unwrap().ends_with("; Secure"));
        let gone = cookie(None, false).unwrap();
        assert!(gone.to_str().unwrap().contains("Max-Age=0"));
    }

    #[test]
    fn only_people_sign_in() {
        assert_eq!(whoami_of(&Caller::Admin).unwrap().kind, "admin");
        assert!(
            whoami_of(&Caller::Runner {
                thread: ninetrix_proto::ThreadId::new_v7(),
                labels: Default::default()
            })
            .is_err()
        );
    }

    #[test]
    fn the_page_has_no_inline_script_and_inserts_no_html() {
        assert!(
            !INDEX.contains("<script>"),
            "scripts come from app.js only (CSP)"
        );
        assert!(
            !APP_JS.contains("innerHTML"),
            "text goes in with textContent only"
        );
        assert!(
            !APP_JS.contains("localStorage"),
            "the token is never in the page"
        );
    }
}
