//! Pool-wide model limits and budgets over real HTTP (issue 38), on SQLite and Postgres: a
//! limiter's `max_in_flight` under many concurrent requesters, its requests and tokens per minute,
//! a provider's 429 backing off every requester, slots freed by a re-claim and by expiry, renewal,
//! a release counted once, fencing and refusals, the session's, the agent's and the pool's day
//! budgets with raises through budget approvals, the calendar day of a time zone — and two API
//! servers on one Postgres database sharing one limiter.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone, Utc};
use ninetrix_proto::{ApprovalId, ThreadId};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::Connection as _;

use crate::support::{ADMIN, Backend, TestApi, TestDb, both_backends, checkpoint, message};

both_backends!(
    max_in_flight_holds_under_thirty_concurrent_requesters,
    the_sixth_call_of_five_a_minute_waits_until_the_first_leaves_the_window,
    tokens_per_minute_count_what_calls_used_and_what_running_ones_estimate,
    a_429_backs_off_every_requester_of_the_limiter,
    a_re_claim_frees_the_older_epochs_lease_at_once,
    an_expired_lease_frees_its_slot_and_still_records_its_spend,
    a_renewal_keeps_the_slot_past_the_first_expiry,
    a_release_twice_counts_its_spend_once,
    fenced_purged_and_malformed_requests_are_refused,
    budgets_of_the_session_the_agents_day_and_the_pools_day,
    raises_are_budget_approvals_and_only_approved_ones_count,
    the_day_is_the_calendar_day_of_the_time_zone,
);

const LIMITER: &str = "openai@api.openai.com#0123456789ab";

/// A runner of a thread labelled with pool and agent, claimed.
#[derive(Clone)]
struct Runner {
    thread: ThreadId,
    token: String,
    epoch: u64,
}

async fn runner(api: &TestApi, pool: &str, agent: &str) -> Runner {
    let thread = ThreadId::new_v7();
    let (status, body) = api
        .mint(thread, json!({"pool": pool, "agent": agent}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let token = body["token"].as_str().unwrap().to_string();
    let epoch = api.claim(thread, &token).await;
    Runner {
        thread,
        token,
        epoch,
    }
}

/// A lease request of `r` on [`LIMITER`].
fn ask(r: &Runner, limits: Value, wait_ms: u64) -> Value {
    json!({"epoch": r.epoch, "limiter": LIMITER, "provider": "openai", "limits": limits, "wait_ms": wait_ms})
}

async fn try_lease(api: &TestApi, r: &Runner, body: Value) -> (StatusCode, Value) {
    api.call(
        Method::POST,
        format!("/v1/runners/threads/{}/model-leases", r.thread),
        Some(&r.token),
        Some(body),
    )
    .await
}

/// The `200` answer to a lease request.
async fn lease(api: &TestApi, r: &Runner, body: Value) -> Value {
    let (status, answer) = try_lease(api, r, body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    answer
}

/// A lease granted to `r` now: its ID and answer.
async fn granted(api: &TestApi, r: &Runner, limits: Value) -> (String, Value) {
    let answer = lease(api, r, ask(r, limits, 0)).await;
    assert_eq!(answer["status"], "granted", "{answer}");
    (answer["lease_id"].as_str().unwrap().to_string(), answer)
}

async fn release(api: &TestApi, r: &Runner, lease: &str, body: Value) -> (StatusCode, Value) {
    api.call(
        Method::POST,
        format!(
            "/v1/runners/threads/{}/model-leases/{lease}/release",
            r.thread
        ),
        Some(&r.token),
        Some(body),
    )
    .await
}

async fn renew(api: &TestApi, r: &Runner, lease: &str) -> (StatusCode, Value) {
    api.call(
        Method::POST,
        format!(
            "/v1/runners/threads/{}/model-leases/{lease}/renew",
            r.thread
        ),
        Some(&r.token),
        None,
    )
    .await
}

async fn spend(api: &TestApi, thread: ThreadId, timezone: &str) -> Value {
    let (status, body) = api
        .admin(
            Method::GET,
            format!("/v1/threads/{thread}/spend?timezone={timezone}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

fn at(v: &Value) -> DateTime<Utc> {
    v.as_str()
        .unwrap_or_else(|| panic!("not a time: {v}"))
        .parse()
        .unwrap()
}

/// When a lease was granted: its expiry less the lease time.
fn granted_at(answer: &Value) -> DateTime<Utc> {
    at(&answer["expires_at"]) - chrono::Duration::milliseconds(answer["ttl_ms"].as_i64().unwrap())
}

/// The most leases of `limiter` that were live at one moment, from the stored rows: each lives
/// from its grant to its release (or its expiry).
async fn most_live_at_once(db_url: &str, limiter: &str) -> usize {
    const SQL: &str =
        "SELECT granted_at, COALESCE(released_at, expires_at) FROM model_leases WHERE limiter = $1";
    let rows: Vec<(i64, i64)> = if db_url.starts_with("sqlite:") {
        let mut c = sqlx::SqliteConnection::connect(db_url).await.unwrap();
        sqlx::query_as(SQL)
            .bind(limiter)
            .fetch_all(&mut c)
            .await
            .unwrap()
    } else {
        let mut c = sqlx::PgConnection::connect(db_url).await.unwrap();
        sqlx::query_as(SQL)
            .bind(limiter)
            .fetch_all(&mut c)
            .await
            .unwrap()
    };
    // An end sorts before a start at the same millisecond: a slot freed and taken again then.
    let mut edges: Vec<(i64, i32)> = rows
        .iter()
        .flat_map(|&(start, end)| [(start, 1), (end, -1)])
        .collect();
    edges.sort();
    let (mut live, mut most) = (0i32, 0i32);
    for (_, step) in edges {
        live += step;
        most = most.max(live);
    }
    usize::try_from(most).unwrap()
}

/// Runs a SQL statement on the test's database straight (a side connection).
async fn sql(db_url: &str, statement: &str, args: &[i64], text: &[&str]) {
    let statement = sqlx::AssertSqlSafe(statement.to_string());
    if db_url.starts_with("sqlite:") {
        let mut c = sqlx::SqliteConnection::connect(db_url).await.unwrap();
        let mut q = sqlx::query(statement);
        for t in text {
            q = q.bind(t.to_string());
        }
        for a in args {
            q = q.bind(*a);
        }
        q.execute(&mut c).await.unwrap();
    } else {
        let mut c = sqlx::PgConnection::connect(db_url).await.unwrap();
        let mut q = sqlx::query(statement);
        for t in text {
            q = q.bind(t.to_string());
        }
        for a in args {
            q = q.bind(*a);
        }
        q.execute(&mut c).await.unwrap();
    }
}

/// `n` requesters, each a thread of pool `p` on `api` (alternating between the servers given),
/// each asking for one lease of `limits` until granted, holding it a moment and releasing it.
/// Returns the most leases they held at once, as they saw it.
async fn requesters(apis: &[&TestApi], n: usize, limits: Value, max_in_flight: u64) -> usize {
    let mut runners = Vec::new();
    for i in 0..n {
        runners.push((apis[i % apis.len()], runner(apis[0], "p", "a").await));
    }
    let held = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let granted_all = futures_util::future::join_all(runners.iter().map(|(api, r)| {
        let (held, peak, limits) = (held.clone(), peak.clone(), limits.clone());
        async move {
            loop {
                let answer = lease(api, r, ask(r, limits.clone(), 10_000)).await;
                match answer["status"].as_str() {
                    Some("granted") => {
                        // Counted from the answer to the release: inside the lease's life.
                        let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        held.fetch_sub(1, Ordering::SeqCst);
                        let lease = answer["lease_id"].as_str().unwrap();
                        let (status, body) = release(api, r, lease, json!({})).await;
                        assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
                        return;
                    }
                    Some("wait") => {
                        assert_eq!(answer["reason"], "in_flight", "{answer}");
                        assert!(
                            answer["in_flight"].as_u64().unwrap() <= max_in_flight,
                            "{answer}"
                        );
                    }
                    _ => panic!("{answer}"),
                }
            }
        }
    }));
    tokio::time::timeout(Duration::from_secs(120), granted_all)
        .await
        .expect("every requester got its lease");
    peak.load(Ordering::SeqCst)
}

async fn max_in_flight_holds_under_thirty_concurrent_requesters(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let peak = requesters(&[&api], 30, json!({"max_in_flight": 3}), 3).await;
    assert!((1..=3).contains(&peak), "{peak} held at once");
    let most = most_live_at_once(&api.db.url, LIMITER).await;
    assert!(
        (2..=3).contains(&most),
        "the store had {most} live leases at once"
    );
    api.stop().await;
}

/// Two API servers on one Postgres database: 20 requesters split across them never hold more
/// than `max_in_flight: 3` live leases, and all are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_api_servers_on_postgres_share_one_limiter() {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    let other = TestDb::beside(&db);
    let a = TestApi::start_on(db, |_| {}).await;
    let b = TestApi::start_on(other, |_| {}).await;
    let peak = requesters(&[&a, &b], 20, json!({"max_in_flight": 3}), 3).await;
    assert!((1..=3).contains(&peak), "{peak} held at once");
    let most = most_live_at_once(&a.db.url, LIMITER).await;
    assert!(
        (2..=3).contains(&most),
        "the store had {most} live leases at once"
    );
    b.stop().await;
    a.stop().await;
}

async fn the_sixth_call_of_five_a_minute_waits_until_the_first_leaves_the_window(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let r = runner(&api, "p", "a").await;
    let limits = json!({"requests_per_minute": 5});
    let mut first = None;
    for _ in 0..5 {
        let (id, answer) = granted(&api, &r, limits.clone()).await;
        first.get_or_insert(granted_at(&answer));
        // Released at once: a call started counts in the window all the same.
        assert_eq!(
            release(&api, &r, &id, json!({})).await.0,
            StatusCode::NO_CONTENT
        );
    }
    let sixth = lease(&api, &r, ask(&r, limits, 0)).await;
    assert_eq!(
        (
            &sixth["status"],
            &sixth["reason"],
            &sixth["requests_per_minute"]
        ),
        (&json!("wait"), &json!("requests_per_minute"), &json!(5)),
        "{sixth}"
    );
    assert_eq!(
        at(&sixth["until"]),
        first.unwrap() + chrono::Duration::milliseconds(61_000),
        "the first call leaves the window then"
    );
    let retry = sixth["retry_in_ms"].as_u64().unwrap();
    assert!((50_000..=61_000).contains(&retry), "{sixth}");
    api.stop().await;
}

async fn tokens_per_minute_count_what_calls_used_and_what_running_ones_estimate(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let r = runner(&api, "p", "a").await;
    let limits = json!({"tokens_per_minute": 1000});
    let with_estimate = |tokens: u64, wait_ms: u64| {
        let mut body = ask(&r, limits.clone(), wait_ms);
        body["estimated_tokens"] = tokens.into();
        body
    };
    let first = lease(&api, &r, with_estimate(600, 0)).await;
    assert_eq!(first["status"], "granted", "{first}");
    // Its estimate counts while it runs: 600 + 600 > 1000.
    let refused = lease(&api, &r, with_estimate(600, 0)).await;
    assert_eq!(refused["reason"], "tokens_per_minute", "{refused}");
    // It used 400: now 400 + 600 fits.
    let id = first["lease_id"].as_str().unwrap();
    let (status, _) = release(
        &api,
        &r,
        id,
        json!({"input_tokens": 300, "output_tokens": 100}),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let second = lease(&api, &r, with_estimate(600, 0)).await;
    assert_eq!(second["status"], "granted", "{second}");
    // The window is full (1000): one more token waits until the first call's 400 leave.
    let third = lease(&api, &r, with_estimate(1, 0)).await;
    assert_eq!(
        (&third["reason"], &third["tokens_per_minute"]),
        (&json!("tokens_per_minute"), &json!(1000)),
        "{third}"
    );
    assert_eq!(
        at(&third["until"]),
        granted_at(&first) + chrono::Duration::milliseconds(61_000)
    );
    // An estimate above the whole limit waits for an empty window: the second call's leaving.
    let huge = lease(&api, &r, with_estimate(5000, 0)).await;
    assert_eq!(
        at(&huge["until"]),
        granted_at(&second) + chrono::Duration::milliseconds(61_000),
        "{huge}"
    );
    api.stop().await;
}

async fn a_429_backs_off_every_requester_of_the_limiter(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (a, b, c) = (
        runner(&api, "p", "a").await,
        runner(&api, "p", "a").await,
        runner(&api, "p", "b").await,
    );
    let (id, _) = granted(&api, &a, json!({})).await;
    let (status, body) = release(
        &api,
        &a,
        &id,
        json!({"rate_limited": {"retry_after_ms": 1500}}),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    // Every requester of the limiter, another agent's too, waits out the back-off.
    let mut ends = Vec::new();
    for r in [&a, &b, &c] {
        let answer = lease(&api, r, ask(r, json!({}), 0)).await;
        assert_eq!(
            (&answer["status"], &answer["reason"]),
            (&json!("wait"), &json!("rate_limited")),
            "{answer}"
        );
        assert!(answer["retry_in_ms"].as_u64().unwrap() <= 1500, "{answer}");
        ends.push(at(&answer["until"]));
    }
    assert!(
        ends.windows(2).all(|w| w[0] == w[1]),
        "one back-off: {ends:?}"
    );
    // Held (in arrival order) until it ends, then each granted.
    let (gb, gc) = tokio::join!(
        lease(&api, &b, ask(&b, json!({}), 10_000)),
        lease(&api, &c, ask(&c, json!({}), 10_000)),
    );
    for answer in [gb, gc] {
        assert_eq!(answer["status"], "granted", "{answer}");
        assert!(
            granted_at(&answer) >= ends[0],
            "{answer} before {}",
            ends[0]
        );
    }
    // Another limiter of the pool is not backed off.
    let mut other = ask(&a, json!({}), 0);
    other["limiter"] = "anthropic@api.anthropic.com#fedcba987654".into();
    assert_eq!(lease(&api, &a, other).await["status"], "granted");
    api.stop().await;
}

async fn a_re_claim_frees_the_older_epochs_lease_at_once(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let limits = json!({"max_in_flight": 1});
    let (mut a, b) = (runner(&api, "p", "a").await, runner(&api, "p", "a").await);
    let (id, _) = granted(&api, &a, limits.clone()).await;
    let refused = lease(&api, &b, ask(&b, limits.clone(), 0)).await;
    assert_eq!(
        (
            &refused["reason"],
            &refused["in_flight"],
            &refused["max_in_flight"]
        ),
        (&json!("in_flight"), &json!(1), &json!(1)),
        "{refused}"
    );
    // `a` dies holding its lease; its replacement claims the thread, and the waiting `b` gets
    // the slot at once — not a lease time (60 s) later.
    let started = Instant::now();
    let (answer, epoch) = tokio::join!(lease(&api, &b, ask(&b, limits, 30_000)), async {
        api.claim(a.thread, &a.token).await
    });
    assert_eq!(answer["status"], "granted", "{answer}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    // The old lease is no longer live, so it cannot be renewed; its late release still records
    // what its call cost.
    a.epoch = epoch;
    assert_eq!(renew(&api, &a, &id).await.0, StatusCode::NOT_FOUND);
    let (status, body) = release(&api, &a, &id, json!({"cost_usd": 0.25})).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert_eq!(spend(&api, a.thread, "UTC").await["thread_usd"], 0.25);
    api.stop().await;
}

async fn an_expired_lease_frees_its_slot_and_still_records_its_spend(backend: Backend) {
    let Some(api) = TestApi::start_with(backend, |c| {
        c.model_lease_ttl = Duration::from_secs(1);
    })
    .await
    else {
        return;
    };
    let limits = json!({"max_in_flight": 1});
    let (a, b) = (runner(&api, "p", "a").await, runner(&api, "p", "a").await);
    let (id, held) = granted(&api, &a, limits.clone()).await;
    assert_eq!(held["ttl_ms"], 1000);
    // `a` never renews nor releases: `b`, waiting, gets the slot when the lease expires.
    let answer = lease(&api, &b, ask(&b, limits, 10_000)).await;
    assert_eq!(answer["status"], "granted", "{answer}");
    assert!(granted_at(&answer) >= at(&held["expires_at"]), "{answer}");
    assert_eq!(renew(&api, &a, &id).await.0, StatusCode::NOT_FOUND);
    let (status, _) = release(&api, &a, &id, json!({"cost_usd": 0.5})).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(spend(&api, a.thread, "UTC").await["thread_usd"], 0.5);
    api.stop().await;
}

async fn a_renewal_keeps_the_slot_past_the_first_expiry(backend: Backend) {
    let Some(api) = TestApi::start_with(backend, |c| {
        c.model_lease_ttl = Duration::from_secs(2);
    })
    .await
    else {
        return;
    };
    let limits = json!({"max_in_flight": 1});
    let (a, b) = (runner(&api, "p", "a").await, runner(&api, "p", "a").await);
    let (id, held) = granted(&api, &a, limits.clone()).await;
    let first_expiry = at(&held["expires_at"]);
    let started = Instant::now();
    // Renewed every half second (a third of the lease time or less), past its first expiry.
    let mut expiry = first_expiry;
    while Utc::now() < first_expiry + chrono::Duration::milliseconds(500) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (status, renewed) = renew(&api, &a, &id).await;
        assert_eq!(status, StatusCode::OK, "{renewed}");
        let next = at(&renewed["expires_at"]);
        assert!(next > expiry, "{next} after {expiry}");
        expiry = next;
        assert!(started.elapsed() < Duration::from_secs(10));
    }
    let refused = lease(&api, &b, ask(&b, limits.clone(), 0)).await;
    assert_eq!(refused["reason"], "in_flight", "still held: {refused}");
    assert_eq!(
        release(&api, &a, &id, json!({})).await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        renew(&api, &a, &id).await.0,
        StatusCode::NOT_FOUND,
        "released"
    );
    assert_eq!(
        lease(&api, &b, ask(&b, limits, 0)).await["status"],
        "granted"
    );
    api.stop().await;
}

async fn a_release_twice_counts_its_spend_once(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    // A session's thread: its spend shows in the session listing too.
    let (status, session) = api
        .admin(
            Method::POST,
            "/v1/sessions",
            Some(json!({"pool": "shop", "agent": "clerk", "key": "customer-7"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{session}");
    let thread: ThreadId = session["thread_id"].as_str().unwrap().parse().unwrap();
    let token = api.token_of(thread).await;
    let epoch = api.claim(thread, &token).await;
    let r = Runner {
        thread,
        token,
        epoch,
    };
    for _ in 0..2 {
        let (id, _) = granted(&api, &r, json!({})).await;
        let body = json!({"input_tokens": 10, "output_tokens": 5, "cost_usd": 0.125});
        for _ in 0..2 {
            let (status, answer) = release(&api, &r, &id, body.clone()).await;
            assert_eq!(status, StatusCode::NO_CONTENT, "{answer}");
        }
    }
    let spent = spend(&api, thread, "UTC").await;
    assert_eq!(
        (
            &spent["thread_usd"],
            &spent["agent_today_usd"],
            &spent["pool_today_usd"]
        ),
        (&json!(0.25), &json!(0.25), &json!(0.25)),
        "{spent}"
    );
    assert_eq!(spent["day"], Utc::now().format("%Y-%m-%d").to_string());
    let (_, summary) = api
        .admin(Method::GET, format!("/v1/threads/{thread}"), None)
        .await;
    assert_eq!(summary["spent_usd"], 0.25, "{summary}");
    let (_, sessions) = api.admin(Method::GET, "/v1/sessions?pool=shop", None).await;
    assert_eq!(sessions[0]["spent_usd"], 0.25, "{sessions}");
    // Another thread of the agent adds to the agent's and the pool's day, not to this thread.
    let other = runner(&api, "shop", "clerk").await;
    let (id, _) = granted(&api, &other, json!({})).await;
    release(&api, &other, &id, json!({"cost_usd": 1.0})).await;
    let spent = spend(&api, thread, "UTC").await;
    assert_eq!(
        (&spent["thread_usd"], &spent["agent_today_usd"]),
        (&json!(0.25), &json!(1.25)),
        "{spent}"
    );
    api.stop().await;
}

async fn fenced_purged_and_malformed_requests_are_refused(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let mut r = runner(&api, "p", "a").await;
    let stale = r.clone();
    r.epoch = api.claim(r.thread, &r.token).await;
    let (status, body) = try_lease(&api, &stale, ask(&stale, json!({}), 0)).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("fenced")),
        "{body}"
    );
    let refusals = [
        (json!({"limiter": "a\u{7}b"}), "`limiter`"),
        (json!({"limiter": ""}), "`limiter`"),
        (json!({"provider": "x".repeat(65)}), "`provider`"),
        (
            json!({"limits": {"max_in_flight": 0}}),
            "`limits.max_in_flight`",
        ),
        (
            json!({"budgets": {"per_day_usd": 1.0, "timezone": "Mars/Olympus"}}),
            "`budgets.timezone`",
        ),
        (
            json!({"budgets": {"per_session_usd": -1.0, "timezone": "UTC"}}),
            "`budgets.per_session_usd`",
        ),
    ];
    for (change, named) in refusals {
        let mut body = ask(&r, json!({}), 0);
        for (k, v) in change.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (status, answer) = try_lease(&api, &r, body).await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_body")),
            "{answer}"
        );
        assert!(
            answer["message"].as_str().unwrap().contains(named),
            "{answer}"
        );
    }
    let (id, _) = granted(&api, &r, json!({})).await;
    let (status, answer) = release(&api, &r, &id, json!({"cost_usd": -0.5})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert!(answer["message"].as_str().unwrap().contains("cost_usd"));
    let unknown = ninetrix_proto::LeaseId::new_v7().to_string();
    assert_eq!(
        release(&api, &r, &unknown, json!({})).await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(renew(&api, &r, &unknown).await.0, StatusCode::NOT_FOUND);
    let (status, answer) = api
        .admin(
            Method::GET,
            format!("/v1/threads/{}/spend?timezone=Mars/Olympus", r.thread),
            None,
        )
        .await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_query")),
        "{answer}"
    );
    assert!(answer["message"].as_str().unwrap().contains("Mars/Olympus"));
    // The admin may ask for a thread's runner; an unknown thread is 404.
    let nobody = Runner {
        thread: ThreadId::new_v7(),
        token: ADMIN.into(),
        epoch: 1,
    };
    assert_eq!(
        try_lease(&api, &nobody, ask(&nobody, json!({}), 0)).await.0,
        StatusCode::NOT_FOUND
    );
    let admin = Runner {
        token: ADMIN.into(),
        ..r.clone()
    };
    assert_eq!(
        lease(&api, &admin, ask(&admin, json!({}), 0)).await["status"],
        "granted"
    );
    // A purge deletes its leases: every route of the thread is 410 after it.
    let (status, _) = api
        .admin(Method::DELETE, format!("/v1/threads/{}", r.thread), None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(most_live_at_once(&api.db.url, LIMITER).await, 0);
    for (status, body) in [
        try_lease(&api, &r, ask(&r, json!({}), 0)).await,
        renew(&api, &r, &id).await,
        release(&api, &r, &id, json!({})).await,
        api.admin(Method::GET, format!("/v1/threads/{}/spend", r.thread), None)
            .await,
    ] {
        assert_eq!(
            (status, body["code"].as_str()),
            (StatusCode::GONE, Some("purged")),
            "{body}"
        );
    }
    api.stop().await;
}

/// A thread's lease request with these budgets (UTC days).
fn with_budgets(r: &Runner, limits: Value, budgets: Value) -> Value {
    let mut body = ask(r, limits, 0);
    body["budgets"] = budgets;
    body["budgets"]["timezone"] = "UTC".into();
    body
}

/// Leases one call of `r` and releases it with `cost_usd`.
async fn spent(api: &TestApi, r: &Runner, cost_usd: f64) {
    let (id, _) = granted(api, r, json!({})).await;
    let (status, body) = release(api, r, &id, json!({"cost_usd": cost_usd})).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
}

fn today() -> String {
    Utc::now().format("%Y-%m-%d").to_string()
}

async fn budgets_of_the_session_the_agents_day_and_the_pools_day(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (a, b, c) = (
        runner(&api, "p", "writer").await,
        runner(&api, "p", "writer").await,
        runner(&api, "p", "editor").await,
    );
    spent(&api, &a, 0.75).await;
    let session = json!({"per_session_usd": 1.0});
    let room = lease(&api, &a, with_budgets(&a, json!({}), session.clone())).await;
    assert_eq!(room["status"], "granted", "{room}");
    let (status, _) = release(
        &api,
        &a,
        room["lease_id"].as_str().unwrap(),
        json!({"cost_usd": 0.25}),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let over = lease(&api, &a, with_budgets(&a, json!({}), session.clone())).await;
    assert_eq!(
        over,
        json!({"status": "over_budget", "scope": "session", "limit_usd": 1.0, "spent_usd": 1.0, "raised_usd": 0.0})
    );
    // A spent budget never waits, even on a limiter with every slot taken.
    let (held, _) = granted(&api, &b, json!({"max_in_flight": 1})).await;
    let over = lease(
        &api,
        &a,
        with_budgets(&a, json!({"max_in_flight": 1}), session),
    )
    .await;
    assert_eq!(over["status"], "over_budget", "{over}");
    // Nor behind requests waiting their turn for the slot.
    let waiting = runner(&api, "p", "editor").await;
    let started = Instant::now();
    let (queued, over) = tokio::join!(
        lease(
            &api,
            &waiting,
            ask(&waiting, json!({"max_in_flight": 1}), 1_500)
        ),
        async {
            // Likely behind `waiting` in the queue; either way it must not wait.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let answer = lease(
                &api,
                &a,
                with_budgets(
                    &a,
                    json!({"max_in_flight": 1}),
                    json!({"per_session_usd": 1.0}),
                ),
            )
            .await;
            (answer, started.elapsed())
        }
    );
    assert_eq!(queued["reason"], "in_flight", "{queued}");
    assert_eq!(over.0["status"], "over_budget", "{}", over.0);
    assert!(
        over.1 < Duration::from_millis(1_400),
        "answered after {:?}",
        over.1
    );
    release(&api, &b, &held, json!({"cost_usd": 0.5})).await;
    // The agent's day: `a`'s 1.0 and `b`'s 0.5 together.
    let day = json!({"per_day_usd": 1.5});
    let over = lease(&api, &b, with_budgets(&b, json!({}), day)).await;
    assert_eq!(
        over,
        json!({"status": "over_budget", "scope": "agent_day", "day": today(), "limit_usd": 1.5, "spent_usd": 1.5, "raised_usd": 0.0})
    );
    assert_eq!(
        lease(
            &api,
            &b,
            with_budgets(&b, json!({}), json!({"per_day_usd": 1.6}))
        )
        .await["status"],
        "granted"
    );
    // Another agent of the pool: its own day is empty, the pool's day is 1.5.
    assert_eq!(
        lease(
            &api,
            &c,
            with_budgets(&c, json!({}), json!({"per_day_usd": 0.1}))
        )
        .await["status"],
        "granted"
    );
    let over = lease(
        &api,
        &c,
        with_budgets(&c, json!({}), json!({"pool_per_day_usd": 1.5})),
    )
    .await;
    assert_eq!(
        (&over["scope"], &over["day"], &over["spent_usd"]),
        (&json!("pool_day"), &json!(today()), &json!(1.5)),
        "{over}"
    );
    // Another pool's agent of the same name spends from its own day.
    let elsewhere = runner(&api, "q", "writer").await;
    assert_eq!(
        lease(
            &api,
            &elsewhere,
            with_budgets(
                &elsewhere,
                json!({}),
                json!({"per_day_usd": 0.1, "pool_per_day_usd": 0.1})
            )
        )
        .await["status"],
        "granted"
    );
    api.stop().await;
}

/// Commits (as `r`'s first version) a budget request with `raise`; returns its ID.
async fn ask_for_raise(
    api: &TestApi,
    r: &Runner,
    key: &str,
    raise: Value,
) -> (StatusCode, Value, ApprovalId) {
    let id = ApprovalId::new_v7();
    let (_, thread) = api
        .admin(Method::GET, format!("/v1/threads/{}", r.thread), None)
        .await;
    let version = thread["version"].as_u64().unwrap();
    let mut body = checkpoint(
        r.epoch,
        version,
        None,
        vec![message("user", key)],
        version + 1,
    );
    body["approvals"] = json!([{"id": id, "key": key, "call_id": format!("call-{key}"), "turn_seq": 1, "kind": "budget",
        "tool": "raise_budget", "args": {}, "args_hash": "h", "timeout_secs": 3600, "raise": raise}]);
    let (status, answer) = api
        .call(
            Method::POST,
            format!("/v1/runners/threads/{}/commit", r.thread),
            Some(&r.token),
            Some(body),
        )
        .await;
    (status, answer, id)
}

async fn raises_are_budget_approvals_and_only_approved_ones_count(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (a, b) = (
        runner(&api, "p", "writer").await,
        runner(&api, "p", "writer").await,
    );
    spent(&api, &a, 1.0).await;
    let day = json!({"per_day_usd": 1.0, "per_session_usd": 1.0});
    let over = lease(&api, &a, with_budgets(&a, json!({}), day.clone())).await;
    assert_eq!(over["scope"], "session", "{over}");
    // The session's raise: approved, it counts for this thread only.
    let (status, body, session_raise) = ask_for_raise(
        &api,
        &a,
        "r1",
        json!({"scope": "session", "amount_usd": 2.0}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, decided) = api
        .admin(
            Method::POST,
            format!("/v1/approvals/{session_raise}/decision"),
            Some(json!({"decision": "approve"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{decided}");
    assert_eq!(
        decided["raise"],
        json!({"scope": "session", "amount_usd": 2.0}),
        "{decided}"
    );
    let over = lease(&api, &a, with_budgets(&a, json!({}), day.clone())).await;
    assert_eq!(
        over,
        json!({"status": "over_budget", "scope": "agent_day", "day": today(), "limit_usd": 1.0, "spent_usd": 1.0, "raised_usd": 0.0}),
        "the session has room now; the agent's day has not"
    );
    // A rejected raise of the agent's day does not count; an approved one does, for every
    // thread of the agent.
    let (_, _, rejected) = ask_for_raise(
        &api,
        &a,
        "r2",
        json!({"scope": "agent_day", "day": today(), "amount_usd": 50.0}),
    )
    .await;
    let (status, _) = api
        .admin(
            Method::POST,
            format!("/v1/approvals/{rejected}/decision"),
            Some(json!({"decision": "reject", "reason": "too much"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        lease(
            &api,
            &b,
            with_budgets(&b, json!({}), json!({"per_day_usd": 1.0}))
        )
        .await["scope"],
        "agent_day"
    );
    let (_, _, approved) = ask_for_raise(
        &api,
        &a,
        "r3",
        json!({"scope": "agent_day", "day": today(), "amount_usd": 0.5}),
    )
    .await;
    let (status, answered) = api
        .admin(
            Method::POST,
            format!("/v1/approvals/{approved}/decision"),
            Some(json!({"decision": "answer", "answer": "yes"})),
        )
        .await;
    assert_eq!(
        (status, answered["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_decision")),
        "a budget request is approved or rejected: {answered}"
    );
    let (status, _) = api
        .admin(
            Method::POST,
            format!("/v1/approvals/{approved}/decision"),
            Some(json!({"decision": "approve"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        lease(
            &api,
            &b,
            with_budgets(&b, json!({}), json!({"per_day_usd": 1.0}))
        )
        .await["status"],
        "granted"
    );
    let (_, listed) = api
        .admin(Method::GET, format!("/v1/approvals/{approved}"), None)
        .await;
    assert_eq!(
        (
            &listed["kind"],
            &listed["status"],
            &listed["raise"]["scope"],
            &listed["raise"]["amount_usd"]
        ),
        (
            &json!("budget"),
            &json!("approved"),
            &json!("agent_day"),
            &json!(0.5)
        ),
        "{listed}"
    );
    // A raise of the day is raised_usd in the refusal once spent again.
    spent(&api, &b, 0.5).await;
    let over = lease(
        &api,
        &b,
        with_budgets(&b, json!({}), json!({"per_day_usd": 1.0})),
    )
    .await;
    assert_eq!(
        (&over["limit_usd"], &over["spent_usd"], &over["raised_usd"]),
        (&json!(1.5), &json!(1.5), &json!(0.5)),
        "{over}"
    );
    // A budget request needs its raise; other kinds may not carry one; the day must be a day.
    for (kind, raise, named) in [
        ("budget", Value::Null, "approvals[0].raise"),
        (
            "approval",
            json!({"scope": "session", "amount_usd": 1.0}),
            "approvals[0].raise",
        ),
        (
            "budget",
            json!({"scope": "pool_day", "day": "2026-02-30", "amount_usd": 1.0}),
            "approvals[0].raise.day",
        ),
        (
            "budget",
            json!({"scope": "session", "amount_usd": 0.0}),
            "approvals[0].raise.amount_usd",
        ),
    ] {
        let (_, thread) = api
            .admin(Method::GET, format!("/v1/threads/{}", a.thread), None)
            .await;
        let version = thread["version"].as_u64().unwrap();
        let mut body = checkpoint(
            a.epoch,
            version,
            None,
            vec![message("user", "x")],
            version + 1,
        );
        let mut request = json!({"id": ApprovalId::new_v7(), "key": "bad", "call_id": "c", "turn_seq": 1, "kind": kind,
            "tool": "t", "args": {}, "args_hash": "h", "timeout_secs": 60});
        if !raise.is_null() {
            request["raise"] = raise;
        }
        body["approvals"] = json!([request]);
        let (status, answer) = api
            .call(
                Method::POST,
                format!("/v1/runners/threads/{}/commit", a.thread),
                Some(&a.token),
                Some(body),
            )
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{kind}: {answer}");
        assert!(
            answer["message"].as_str().unwrap().contains(named),
            "{named}: {answer}"
        );
    }
    api.stop().await;
}

async fn the_day_is_the_calendar_day_of_the_time_zone(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let r = runner(&api, "p", "writer").await;
    // Kiritimati is UTC+14: its day starts at 10:00 UTC the day before.
    let zone = chrono_tz::Pacific::Kiritimati;
    let local = Utc::now().with_timezone(&zone).date_naive();
    let start = zone
        .from_local_datetime(&local.and_hms_opt(0, 0, 0).unwrap())
        .unwrap()
        .timestamp_millis();
    // $0.40 in the day's first quarter hour, $10 in the quarter hour before it (yesterday there).
    let insert =
        "INSERT INTO model_spend (pool, agent, bucket, cost_nanos) VALUES ($1, $2, $3, $4)";
    sql(&api.db.url, insert, &[start, 400_000_000], &["p", "writer"]).await;
    sql(
        &api.db.url,
        insert,
        &[start - 15 * 60_000, 10_000_000_000],
        &["p", "writer"],
    )
    .await;
    let there = spend(&api, r.thread, "Pacific/Kiritimati").await;
    assert_eq!(
        (
            &there["day"],
            &there["agent_today_usd"],
            &there["pool_today_usd"]
        ),
        (
            &json!(local.format("%Y-%m-%d").to_string()),
            &json!(0.4),
            &json!(0.4)
        ),
        "{there}"
    );
    let mut ask_there = ask(&r, json!({}), 0);
    ask_there["budgets"] = json!({"per_day_usd": 0.4, "timezone": "Pacific/Kiritimati"});
    let over = lease(&api, &r, ask_there.clone()).await;
    assert_eq!(
        (&over["scope"], &over["day"], &over["spent_usd"]),
        (&json!("agent_day"), &there["day"], &json!(0.4)),
        "{over}"
    );
    ask_there["budgets"]["per_day_usd"] = json!(0.5);
    assert_eq!(lease(&api, &r, ask_there).await["status"], "granted");
    // In UTC the day is another range: the same rows count as they fall in it.
    let utc_start = Utc::now()
        .date_naive()
        .and_hms_opt(0, 0, 0)
        .unwrap()
        .and_utc()
        .timestamp_millis();
    let utc_end = utc_start + 86_400_000;
    let expected: f64 = [(start, 0.4), (start - 15 * 60_000, 10.0)]
        .iter()
        .filter(|(bucket, _)| (utc_start..utc_end).contains(bucket))
        .map(|(_, usd)| usd)
        .sum();
    let utc = spend(&api, r.thread, "UTC").await;
    assert_eq!(utc["agent_today_usd"].as_f64().unwrap(), expected, "{utc}");
    api.stop().await;
}
