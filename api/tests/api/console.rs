//! The web console's sign-in over real HTTP: the cookie is a server-side session, not the token;
//! signing out ends it for every copy of the cookie; a request that changes something needs
//! `X-Ninetrix-Console: 1` exactly.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{ADMIN, Backend, TestApi};

/// The `ninetrix_console` cookie's value from a sign-in answer.
fn session_cookie(resp: &reqwest::Response) -> String {
    let set = resp.headers()["set-cookie"].to_str().unwrap().to_string();
    let value = set
        .strip_prefix("ninetrix_console=")
        .and_then(|rest| rest.split(';').next())
        .unwrap_or_else(|| panic!("no console cookie in {set}"));
    value.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cookie_is_a_session_that_signing_out_ends() {
    let api = TestApi::start(Backend::Sqlite).await.unwrap();
    let url = |path: &str| format!("{}{path}", api.url);
    let resp = api
        .client
        .post(url("/console/session"))
        .json(&json!({"token": ADMIN}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let session = session_cookie(&resp);
    assert!(
        !session.contains(ADMIN) && session.len() >= 43,
        "the cookie holds a random session ID, never the token: {session}"
    );
    let with_cookie = |method: Method, path: &str, header: Option<&str>| {
        let mut req = api
            .client
            .request(method, url(path))
            .header("cookie", format!("ninetrix_console={session}"));
        if let Some(value) = header {
            req = req.header("x-ninetrix-console", value);
        }
        req.send()
    };
    let resp = with_cookie(Method::GET, "/console/session", None)
        .await
        .unwrap();
    let who: Value = resp.json().await.unwrap();
    assert_eq!(who["kind"], "admin");
    assert_eq!(
        with_cookie(Method::GET, "/v1/threads", None)
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    // A change riding on the cookie needs the header with its one value.
    for wrong in ["0", "true", "anything"] {
        let resp = with_cookie(Method::PUT, "/v1/pools/p/agents/a", Some(wrong))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::FORBIDDEN, "{wrong}");
    }
    // The token itself in the cookie is not a session.
    let resp = api
        .client
        .get(url("/v1/threads"))
        .header("cookie", format!("ninetrix_console={ADMIN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    // Signing out ends the session: the same cookie, kept by anyone, no longer signs in.
    let resp = with_cookie(Method::DELETE, "/console/session", Some("1"))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    assert!(
        resp.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    let resp = with_cookie(Method::GET, "/v1/threads", None).await.unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["code"], "unauthorized");
    let who: Value = with_cookie(Method::GET, "/console/session", None)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(who["kind"], "none");
    api.stop().await;
}

/// The console's eval pieces (issue 42), as served: the Evals view in the navigation, the
/// thread page's "Add to eval suite" form posting a member and showing the API's answer, what a
/// replay thread replays, and a suite's members (Remove) and last run's table — all through the
/// admin routes, with no token in the page. (The browser test in `tests/` drives the console's
/// other views in Chromium; these are checked here, as served.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_serves_the_eval_views_and_no_token() {
    let api = TestApi::start(Backend::Sqlite).await.unwrap();
    let get = |path: &'static str| {
        let url = format!("{}{path}", api.url);
        let client = api.client.clone();
        async move { client.get(url).send().await.unwrap().text().await.unwrap() }
    };
    let index = get("/console/").await;
    assert!(
        index.contains(r##"href="#/evals" data-view="evals""##),
        "{index}"
    );
    let app = get("/console/app.js").await;
    for piece in [
        "Add to eval suite",
        "`/v1/evals/${encodeURIComponent(suite.value)}/members`",
        "t.replay_of",
        "replay of thread ",
        "`${path}/members/${m.id}`",
        "\"divergent turns\", \"failed checks\"",
        "s.last_run",
        "parts[0] === \"evals\"",
    ] {
        assert!(app.contains(piece), "app.js lacks {piece}");
    }
    for page in [&index, &app] {
        assert!(!page.contains(ADMIN), "no token in a page");
    }
    api.stop().await;
}
