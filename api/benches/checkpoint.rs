//! Checkpoint API benchmark: write latency and throughput over loopback HTTP at 1, 8 and 32
//! concurrent threads (SQLite, and Postgres when `NINETRIX_TEST_POSTGRES_URL` is set), `latest`
//! for a 1,000-turn thread, and the floor: the same row committed straight into SQLite with the
//! same pragmas by rusqlite (no async bridge), and by sqlx for comparison. Prints a Markdown table for BENCHMARKS.md.
//!
//! It also splits one write's time (issue 12, goal 2): the floor, the store's own write in
//! process (hand-off to the writer thread, statements, commit), an HTTP round trip that does no
//! work (`/healthz`) and the checkpoint over HTTP, measured interleaved round by round so a busy
//! machine slows them alike; the writer's own counters (statements vs `COMMIT`, writes per
//! commit); and the CPU cost of the JSON and the token check in a loop.
//!
//! And the cost of a pool-wide model lease per model call (issue 38): a lease granted on a
//! limiter with room, then its release with what the call used, through the store in process and
//! over HTTP with each runner's own token (as a runner asks: authenticated, its pool read from
//! its token) — one runner, then 8 at once on one limiter — and the same lease with a session's
//! and a day's budget to check.
//!
//! Run: `cargo bench -p ninetrix-api --bench checkpoint` (`-- leases` for the leases alone)

use std::time::{Duration, Instant};

use ninetrix_api::store::{Store, StoreOptions, WriterStats};
use ninetrix_api::{AuthConfig, Config, Secret, Server};
use ninetrix_client::{Client, Token};
use ninetrix_proto::api::{
    BudgetPolicy, CheckpointRequest, CheckpointState, LeaseRelease, LeaseRequest, LeaseResponse,
    ModelLimits, RunnerTokenRequest, ThreadStatus,
};
use ninetrix_proto::{Message, Role, ThreadId};
use sqlx::Connection as _;

/// Bytes of text in each checkpoint's message (~2 KB per checkpoint with the JSON around it).
const PAYLOAD: usize = 1900;
/// Checkpoints written per run of each concurrency level.
const WRITES: usize = 4000;
/// Rounds of the interleaved split of one write.
const SPLIT_ROUNDS: usize = 1500;
const LATEST_TURNS: u64 = 1000;
/// Lease + release pairs per run of the lease measurements.
const LEASES: usize = 2000;
const LATEST_READS: usize = 200;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

struct Row {
    what: String,
    n: usize,
    p50: Duration,
    p99: Duration,
    per_sec: f64,
}

fn summarize(what: String, mut samples: Vec<Duration>, elapsed: Duration) -> Row {
    samples.sort();
    Row {
        what,
        n: samples.len(),
        p50: percentile(&samples, 0.5),
        p99: percentile(&samples, 0.99),
        per_sec: samples.len() as f64 / elapsed.as_secs_f64(),
    }
}

fn checkpoint_body(epoch: u64, parent: u64) -> CheckpointRequest {
    CheckpointRequest {
        epoch,
        parent_version: parent,
        truncate_to: None,
        append: vec![Message::text(Role::Assistant, "x".repeat(PAYLOAD))],
        state: CheckpointState {
            turn_seq: parent,
            turn_start_history_len: parent,
            status: ThreadStatus::InTurn,
            inbox_cursor: 0,
            usage: Default::default(),
            handoff: None,
            attempt: None,
            context: None,
            ..Default::default()
        },
    }
}

/// The admin token of the server the lease rows run against.
const BENCH_ADMIN: &str = "bench-admin-token-0123456789";

async fn start(
    url: &str,
) -> (
    String,
    Store,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    start_as(url, AuthConfig::InsecureDev).await
}

async fn start_as(
    url: &str,
    auth: AuthConfig,
) -> (
    String,
    Store,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let mut config = Config::new(url, auth);
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.store = StoreOptions {
        max_batch: 256,
        max_connections: 8,
        ..StoreOptions::default()
    };
    let server = Server::bind(config).await.expect("server starts");
    let base = format!("http://{}", server.local_addr().unwrap());
    let store = server.store().clone();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        server
            .run(async move {
                let _ = rx.await;
            })
            .await
            .unwrap();
    });
    (base, store, tx, task)
}

async fn writes(client: &Client, concurrency: usize) -> (Vec<Duration>, Duration) {
    let per = WRITES / concurrency;
    let mut threads = Vec::new();
    for _ in 0..concurrency {
        let t = ThreadId::new_v7();
        let claim = client.claim(t, &Default::default()).await.unwrap();
        threads.push((t, claim.epoch));
    }
    let started = Instant::now();
    let tasks: Vec<_> = threads
        .into_iter()
        .map(|(t, epoch)| {
            let client = client.clone();
            tokio::spawn(async move {
                let mut samples = Vec::with_capacity(per);
                for parent in 0..per as u64 {
                    let body = checkpoint_body(epoch, parent);
                    let t0 = Instant::now();
                    client.append_checkpoint(t, &body).await.unwrap();
                    samples.push(t0.elapsed());
                }
                samples
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    (all, started.elapsed())
}

async fn latest(
    client: &Client,
    http: &reqwest::Client,
    base: &str,
) -> (ThreadId, Vec<Duration>, Duration, usize) {
    let t = ThreadId::new_v7();
    let epoch = client.claim(t, &Default::default()).await.unwrap().epoch;
    for parent in 0..LATEST_TURNS {
        client
            .append_checkpoint(t, &checkpoint_body(epoch, parent))
            .await
            .unwrap();
    }
    let mut samples = Vec::new();
    let mut bytes = 0;
    let started = Instant::now();
    for _ in 0..LATEST_READS {
        // Timed as raw bytes on purpose: this row measures the server and the wire, not a
        // client's JSON parsing of 2 MB.
        let t0 = Instant::now();
        let body = http
            .get(format!("{base}/v1/runners/threads/{t}/latest"))
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        samples.push(t0.elapsed());
        bytes = body.len();
    }
    (t, samples, started.elapsed(), bytes)
}

/// `latest` straight from the store (no HTTP), on the database the server used.
async fn latest_in_process(url: &str, thread: ThreadId) -> (Vec<Duration>, Duration) {
    let store = ninetrix_api::store::Store::open(url, &StoreOptions::default())
        .await
        .unwrap();
    let mut samples = Vec::new();
    let started = Instant::now();
    for _ in 0..LATEST_READS {
        let t0 = Instant::now();
        let json = store.latest_json(thread).await.unwrap().unwrap();
        assert!(json.len() > 1_000_000);
        samples.push(t0.elapsed());
    }
    let elapsed = started.elapsed();
    store.close().await;
    (samples, elapsed)
}

/// The floor's database: one row of the same size per transaction, committed straight into
/// SQLite by rusqlite on the calling thread — no async bridge, no worker-thread hop (WAL,
/// synchronous=FULL, as the store). What a checkpoint write is measured against.
struct Floor {
    conn: rusqlite::Connection,
    body: String,
    thread: String,
    next: i64,
}

impl Floor {
    fn open(path: &std::path::Path) -> Floor {
        let conn = rusqlite::Connection::open(path).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.pragma_update(None, "synchronous", "FULL").unwrap();
        conn.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        conn.execute_batch("CREATE TABLE rows (thread_id TEXT NOT NULL, version BIGINT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (thread_id, version))").unwrap();
        Floor {
            conn,
            body: serde_json::to_string(&checkpoint_body(1, 0)).unwrap(),
            thread: ThreadId::new_v7().to_string(),
            next: 0,
        }
    }

    /// One insert + commit; its duration.
    fn commit(&mut self) -> Duration {
        let t0 = Instant::now();
        let tx = self.conn.transaction().unwrap();
        tx.prepare_cached("INSERT INTO rows (thread_id, version, body) VALUES (?1, ?2, ?3)")
            .unwrap()
            .execute(rusqlite::params![self.thread, self.next, self.body])
            .unwrap();
        tx.commit().unwrap();
        self.next += 1;
        t0.elapsed()
    }
}

/// The floor's run, and what its commits wrote to the WAL (never checkpointed here, so the
/// WAL's length is every frame written).
fn rusqlite_floor(dir: &std::path::Path) -> (Vec<Duration>, Duration, WriterStats) {
    let path = dir.join("floor.db");
    let mut floor = Floor::open(&path);
    let started = Instant::now();
    let samples = (0..WRITES).map(|_| floor.commit()).collect();
    let elapsed = started.elapsed();
    let page_size: i64 = floor
        .conn
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .unwrap();
    let page_size = page_size as u64;
    let wal = std::fs::metadata(dir.join("floor.db-wal")).unwrap().len();
    let header = 32;
    let stats = WriterStats {
        commits: WRITES as u64,
        writes: WRITES as u64,
        wal_frames: (wal - header) / (page_size + 24),
        page_size,
        ..WriterStats::default()
    };
    (samples, elapsed, stats)
}

/// One write's time taken apart, SQLite, one writer: each round commits the floor's row, a
/// checkpoint through the store in process, an HTTP request that does no work, and a checkpoint
/// over HTTP, so all four see the same machine. Returns the four rows and the writer's counters
/// over the two kinds of checkpoint.
async fn split_one_write(
    dir: &std::path::Path,
    store: &Store,
    api: &Client,
) -> (Vec<Row>, WriterStats) {
    let mut floor = Floor::open(&dir.join("split-floor.db"));
    let (direct, direct_epoch) = claimed(api).await;
    let (http, http_epoch) = claimed(api).await;
    let mut samples: [Vec<Duration>; 4] = Default::default();
    let mut elapsed = [Duration::ZERO; 4];
    let before = store.writer_stats().unwrap_or_default();
    for round in 0..SPLIT_ROUNDS as u64 {
        let d = floor.commit();
        samples[0].push(d);
        elapsed[0] += d;

        let body = checkpoint_body(direct_epoch, round);
        let t0 = Instant::now();
        store.append_checkpoint(direct, body).await.unwrap();
        let d = t0.elapsed();
        samples[1].push(d);
        elapsed[1] += d;

        let t0 = Instant::now();
        api.healthz().await.unwrap();
        let d = t0.elapsed();
        samples[2].push(d);
        elapsed[2] += d;

        let body = checkpoint_body(http_epoch, round);
        let t0 = Instant::now();
        api.append_checkpoint(http, &body).await.unwrap();
        let d = t0.elapsed();
        samples[3].push(d);
        elapsed[3] += d;
    }
    let stats = store.writer_stats().unwrap_or_default().since(&before);
    let names = [
        "split: floor (rusqlite insert + commit of the same row)",
        "split: checkpoint through the store in process (no HTTP)",
        "split: HTTP round trip that does no work (GET /healthz)",
        "split: checkpoint over HTTP",
    ];
    let rows = names
        .into_iter()
        .zip(samples)
        .zip(elapsed)
        .map(|((name, s), e)| summarize(name.into(), s, e))
        .collect();
    (rows, stats)
}

/// `LEASES` model calls' leases from `concurrency` runners at once on one limiter with room for
/// all of them (`max_in_flight` = the runners, requests and tokens per minute far above what
/// the run asks, so the window is read and counted but never full): each runner asks for a
/// lease, then releases it with the tokens and cost of a call. Returns the acquire and the
/// release samples and the elapsed time.
async fn leases(
    admin: &Client,
    http: &reqwest::Client,
    base: &str,
    concurrency: usize,
    budgets: bool,
) -> (Vec<Duration>, Vec<Duration>, Duration) {
    let per = LEASES / concurrency;
    let limiter = format!(
        "openai@api.openai.com#{}",
        &ThreadId::new_v7().as_uuid().simple().to_string()[..12]
    );
    let mut runners = Vec::new();
    for _ in 0..concurrency {
        let thread = ThreadId::new_v7();
        let minted = admin
            .mint_runner_token(&RunnerTokenRequest {
                thread_id: thread,
                pool: Some("bench".into()),
                agent: Some("writer".into()),
                replica: None,
            })
            .await
            .unwrap();
        let runner = Client::new(http.clone(), base, Some(Token::new(minted.token)));
        let epoch = runner
            .claim(thread, &Default::default())
            .await
            .unwrap()
            .epoch;
        runners.push((runner, thread, epoch));
    }
    let started = Instant::now();
    let tasks: Vec<_> = runners
        .into_iter()
        .map(|(api, t, epoch)| {
            let request = LeaseRequest {
                epoch,
                limiter: limiter.clone(),
                provider: "openai".into(),
                limits: ModelLimits {
                    max_in_flight: Some(concurrency as u32),
                    requests_per_minute: Some(1_000_000),
                    tokens_per_minute: Some(1_000_000_000),
                },
                budgets: budgets.then(|| BudgetPolicy {
                    per_session_usd: Some(1_000.0),
                    per_day_usd: Some(10_000.0),
                    pool_per_day_usd: None,
                    timezone: "Europe/Paris".into(),
                }),
                estimated_tokens: 1_200,
                wait_ms: 10_000,
            };
            let release = LeaseRelease {
                input_tokens: 1_150,
                output_tokens: 240,
                cost_usd: 0.0042,
                rate_limited: None,
            };
            tokio::spawn(async move {
                let (mut acquire, mut free) = (Vec::with_capacity(per), Vec::with_capacity(per));
                for _ in 0..per {
                    let t0 = Instant::now();
                    let answer = api.lease_model(t, &request).await.unwrap();
                    acquire.push(t0.elapsed());
                    let LeaseResponse::Granted { lease_id, .. } = answer else {
                        panic!("not granted: {answer:?}");
                    };
                    let t0 = Instant::now();
                    api.release_model_lease(t, lease_id, &release)
                        .await
                        .unwrap();
                    free.push(t0.elapsed());
                }
                (acquire, free)
            })
        })
        .collect();
    let (mut acquire, mut free) = (Vec::new(), Vec::new());
    for task in tasks {
        let (a, f) = task.await.unwrap();
        acquire.extend(a);
        free.extend(f);
    }
    (acquire, free, started.elapsed())
}

/// `LEASES` leases and releases through the store in process (no HTTP), one runner: what the
/// transactions cost alone.
async fn store_leases(store: &Store, api: &Client) -> (Vec<Duration>, Vec<Duration>, Duration) {
    let (t, epoch) = claimed(api).await;
    let request = LeaseRequest {
        epoch,
        limiter: "openai@api.openai.com#in0process000".into(),
        provider: "openai".into(),
        limits: ModelLimits {
            max_in_flight: Some(1),
            requests_per_minute: Some(1_000_000),
            tokens_per_minute: Some(1_000_000_000),
        },
        budgets: None,
        estimated_tokens: 1_200,
        wait_ms: 0,
    };
    let release = LeaseRelease {
        input_tokens: 1_150,
        output_tokens: 240,
        cost_usd: 0.0042,
        rate_limited: None,
    };
    let (mut acquire, mut free) = (Vec::new(), Vec::new());
    let started = Instant::now();
    for _ in 0..LEASES {
        let t0 = Instant::now();
        let outcome = store
            .lease(t, request.clone(), 60_000, |_| {})
            .await
            .unwrap();
        acquire.push(t0.elapsed());
        let ninetrix_api::store::LeaseOutcome::Granted { lease, .. } = outcome else {
            panic!("not granted: {outcome:?}");
        };
        let t0 = Instant::now();
        store
            .release_lease(t, lease, release.clone(), |_| {})
            .await
            .unwrap();
        free.push(t0.elapsed());
    }
    (acquire, free, started.elapsed())
}

/// The lease rows of one backend (a server of their own, with tokens).
async fn lease_rows(label: &str, url: &str, http: &reqwest::Client) -> Vec<Row> {
    let auth = AuthConfig::Tokens {
        secret: Secret::new(b"bench-secret-for-runner-tokens".to_vec()),
        admin_token: Secret::new(BENCH_ADMIN.as_bytes().to_vec()),
    };
    let (base, store, stop, task) = start_as(url, auth).await;
    let admin = Client::new(http.clone(), &base, Some(Token::new(BENCH_ADMIN)));
    let mut rows = Vec::new();
    let (acquire, free, elapsed) = store_leases(&store, &admin).await;
    rows.push(summarize(
        format!("{label}: model lease acquire through the store in process, 1 runner"),
        acquire,
        elapsed,
    ));
    rows.push(summarize(
        format!("{label}: model lease release through the store in process, 1 runner"),
        free,
        elapsed,
    ));
    for (concurrency, budgets) in [(1, false), (1, true), (8, false)] {
        let (acquire, free, elapsed) = leases(&admin, http, &base, concurrency, budgets).await;
        let with = if budgets {
            " with a session's and a day's budget"
        } else {
            ""
        };
        rows.push(summarize(
            format!("{label}: model lease acquire (granted){with}, {concurrency} runner(s)"),
            acquire,
            elapsed,
        ));
        rows.push(summarize(
            format!("{label}: model lease release (tokens, cost){with}, {concurrency} runner(s)"),
            free,
            elapsed,
        ));
    }
    let _ = stop.send(());
    task.await.unwrap();
    rows
}

async fn claimed(api: &Client) -> (ThreadId, u64) {
    let t = ThreadId::new_v7();
    let epoch = api.claim(t, &Default::default()).await.unwrap().epoch;
    (t, epoch)
}

/// Checkpoints through the store in process from `concurrency` tasks at once: the group
/// commit's throughput without HTTP.
async fn store_writes(
    store: &Store,
    api: &Client,
    concurrency: usize,
) -> (Vec<Duration>, Duration) {
    let per = WRITES / concurrency;
    let mut threads = Vec::new();
    for _ in 0..concurrency {
        threads.push(claimed(api).await);
    }
    let started = Instant::now();
    let tasks: Vec<_> = threads
        .into_iter()
        .map(|(t, epoch)| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut samples = Vec::with_capacity(per);
                for parent in 0..per as u64 {
                    let body = checkpoint_body(epoch, parent);
                    let t0 = Instant::now();
                    store.append_checkpoint(t, body).await.unwrap();
                    samples.push(t0.elapsed());
                }
                samples
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    (all, started.elapsed())
}

/// Mean CPU time of the per-request work that is neither SQL nor the network: decoding the
/// request body as the server does, encoding the message and the state as the store does,
/// encoding the answer, and checking a runner token.
fn cpu_costs() -> Vec<(String, Duration)> {
    const N: u32 = 20_000;
    let request = checkpoint_body(3, 7);
    let bytes = serde_json::to_vec(&request).unwrap();
    let auth = ninetrix_api::auth::Authenticator::new(ninetrix_api::AuthConfig::Tokens {
        secret: ninetrix_api::Secret::new(b"bench-secret".to_vec()),
        admin_token: ninetrix_api::Secret::new(b"bench-admin".to_vec()),
    });
    let labels = ninetrix_proto::api::ThreadLabels {
        pool: Some("bench".into()),
        agent: Some("agent".into()),
        replica: Some(1),
        session: None,
    };
    let header = format!("Bearer {}", auth.runner_token(ThreadId::new_v7(), &labels));
    let mean = |f: &mut dyn FnMut()| {
        let t0 = Instant::now();
        for _ in 0..N {
            f();
        }
        t0.elapsed() / N
    };
    vec![
        (
            format!("client: encode the request body ({} bytes)", bytes.len()),
            mean(&mut || {
                std::hint::black_box(serde_json::to_vec(&request).unwrap());
            }),
        ),
        (
            "server: decode the request body".into(),
            mean(&mut || {
                std::hint::black_box(serde_json::from_slice::<CheckpointRequest>(&bytes).unwrap());
            }),
        ),
        (
            "store: encode the message and the state".into(),
            mean(&mut || {
                std::hint::black_box(serde_json::to_string(&request.append[0]).unwrap());
                std::hint::black_box(serde_json::to_string(&request.state).unwrap());
            }),
        ),
        (
            "server: check a runner token".into(),
            mean(&mut || {
                std::hint::black_box(auth.caller(Some(&header)).unwrap());
            }),
        ),
    ]
}

fn per_write(d: Duration, n: u64) -> String {
    format!("{:.0}", d.as_secs_f64() * 1e6 / n.max(1) as f64)
}

/// One line about what the writer did during a run.
fn writer_line(what: &str, s: &WriterStats) -> String {
    format!(
        "| {what} | {} | {} | {:.1} | {:.1} | {:.1} | {} | {} |",
        s.writes,
        s.commits,
        s.writes as f64 / s.commits.max(1) as f64,
        s.wal_frames as f64 / s.writes.max(1) as f64,
        s.wal_bytes() as f64 / 1024.0 / s.writes.max(1) as f64,
        per_write(s.statements, s.writes),
        per_write(s.commit, s.commits),
    )
}

/// The same row through sqlx's SQLite driver (its worker thread between the caller and SQLite).
async fn sqlx_sqlite(dir: &std::path::Path) -> (Vec<Duration>, Duration) {
    let opts: sqlx::sqlite::SqliteConnectOptions =
        format!("sqlite://{}", dir.join("raw.db").display())
            .parse()
            .unwrap();
    let opts = opts
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .synchronous(sqlx::sqlite::SqliteSynchronous::Full)
        .pragma("wal_autocheckpoint", "0");
    let mut conn = sqlx::SqliteConnection::connect_with(&opts).await.unwrap();
    sqlx::query("CREATE TABLE rows (thread_id TEXT NOT NULL, version BIGINT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (thread_id, version))").execute(&mut conn).await.unwrap();
    let body = serde_json::to_string(&checkpoint_body(1, 0)).unwrap();
    let thread = ThreadId::new_v7().to_string();
    let mut samples = Vec::new();
    let started = Instant::now();
    for v in 0..WRITES as i64 {
        let t0 = Instant::now();
        let mut tx = conn.begin().await.unwrap();
        sqlx::query("INSERT INTO rows (thread_id, version, body) VALUES ($1, $2, $3)")
            .bind(&thread)
            .bind(v)
            .bind(&body)
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        samples.push(t0.elapsed());
    }
    (samples, started.elapsed())
}

/// Drops the Postgres database a run made (`(admin URL, name)`), if any.
async fn drop_database(cleanup: Option<(String, String)>) {
    if let Some((admin, name)) = cleanup {
        let mut c = sqlx::PgConnection::connect(&admin).await.unwrap();
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .execute(&mut c)
        .await;
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // `cargo bench … -- leases`: the lease rows alone.
    let only_leases = std::env::args().any(|a| a == "leases");
    rt.block_on(async {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(64)
            .build()
            .unwrap();
        let mut rows = Vec::new();

        let dir = tempfile::tempdir().unwrap();
        let floor_dir = dir.path().to_path_buf();
        let (raw, elapsed, floor_wal) =
            tokio::task::spawn_blocking(move || rusqlite_floor(&floor_dir))
                .await
                .unwrap();
        let floor = summarize(
            "floor: rusqlite insert + commit of the same row, 1 writer".into(),
            raw,
            elapsed,
        );
        let (floor_p50, floor_p99) = (floor.p50, floor.p99);
        rows.push(floor);
        let (raw, elapsed) = sqlx_sqlite(dir.path()).await;
        rows.push(summarize(
            "sqlx SQLite insert + commit of the same row, 1 writer".into(),
            raw,
            elapsed,
        ));

        let mut backends = vec![(
            "SQLite".to_string(),
            format!("sqlite://{}", dir.path().join("api.db").display()),
            None,
        )];
        if let Some(admin) = std::env::var("NINETRIX_TEST_POSTGRES_URL")
            .ok()
            .filter(|u| !u.is_empty())
        {
            let name = format!("nt_bench_{}", ThreadId::new_v7().as_uuid().simple());
            let mut c = sqlx::PgConnection::connect(&admin).await.unwrap();
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .execute(&mut c)
                .await
                .unwrap();
            let base = admin
                .rsplit_once('/')
                .map_or(admin.as_str(), |(b, _)| b)
                .to_string();
            backends.push((
                "Postgres".into(),
                format!("{base}/{name}"),
                Some((admin.clone(), name)),
            ));
        }
        let mut writer_lines = vec![writer_line(
            "floor: rusqlite insert + commit of the same row (no statement or COMMIT times)",
            &floor_wal,
        )];
        let mut split_rows = Vec::new();
        for (label, url, cleanup) in backends {
            rows.extend(lease_rows(&label, &url, &http).await);
            if only_leases {
                drop_database(cleanup).await;
                continue;
            }
            let (base, store, stop, task) = start(&url).await;
            let api = Client::new(http.clone(), &base, None);
            for concurrency in [1, 8, 32] {
                let before = store.writer_stats();
                let (samples, elapsed) = writes(&api, concurrency).await;
                let what =
                    format!("{label}: checkpoint write over HTTP, {concurrency} concurrent thread(s)");
                if let (Some(b), Some(a)) = (before, store.writer_stats()) {
                    writer_lines.push(writer_line(&what, &a.since(&b)));
                }
                rows.push(summarize(what, samples, elapsed));
            }
            for concurrency in [1, 32] {
                let before = store.writer_stats();
                let (samples, elapsed) = store_writes(&store, &api, concurrency).await;
                let what = format!(
                    "{label}: checkpoint through the store in process, {concurrency} concurrent thread(s)"
                );
                if let (Some(b), Some(a)) = (before, store.writer_stats()) {
                    writer_lines.push(writer_line(&what, &a.since(&b)));
                }
                rows.push(summarize(what, samples, elapsed));
            }
            if label == "SQLite" {
                let (split, stats) = split_one_write(dir.path(), &store, &api).await;
                split_rows = split;
                writer_lines.push(writer_line("split: both checkpoint rows", &stats));
            }
            let (thread, samples, elapsed, bytes) = latest(&api, &http, &base).await;
            rows.push(summarize(
                format!(
                    "{label}: GET latest, 1,000-turn thread ({:.1} MB)",
                    bytes as f64 / 1e6
                ),
                samples,
                elapsed,
            ));
            let _ = stop.send(());
            task.await.unwrap();
            let (samples, elapsed) = latest_in_process(&url, thread).await;
            rows.push(summarize(
                format!("{label}: store.latest_json in process, same thread"),
                samples,
                elapsed,
            ));
            drop_database(cleanup).await;
        }

        println!("| measurement | n | p50 ms | p99 ms | per second | p99 ÷ floor p99 |");
        println!("|---|---:|---:|---:|---:|---:|");
        for r in &rows {
            println!(
                "| {} | {} | {} | {} | {:.0} | {:.2} |",
                r.what,
                r.n,
                ms(r.p50),
                ms(r.p99),
                r.per_sec,
                r.p99.as_secs_f64() / floor_p99.as_secs_f64()
            );
        }
        println!(
            "\ntargets (one writer over HTTP): p50 ≤ 2 × floor p50 = {} ms; p99 ≤ 2 × floor p99 + 1 ms = {} ms",
            ms(floor_p50 * 2),
            ms(floor_p99 * 2 + Duration::from_millis(1))
        );

        println!("\nOne write taken apart (SQLite, one writer, {SPLIT_ROUNDS} interleaved rounds):\n");
        println!("| measurement | n | p50 ms | p99 ms | per second |");
        println!("|---|---:|---:|---:|---:|");
        for r in &split_rows {
            println!(
                "| {} | {} | {} | {} | {:.0} |",
                r.what,
                r.n,
                ms(r.p50),
                ms(r.p99),
                r.per_sec
            );
        }

        println!("\nSQLite's writer thread during each run:\n");
        println!("| run | writes | commits | writes per commit | WAL pages per write | WAL KiB per write | statements µs per write | COMMIT µs per commit |");
        println!("|---|---:|---:|---:|---:|---:|---:|---:|");
        for line in &writer_lines {
            println!("{line}");
        }

        println!("\nCPU per request outside SQL and the network (mean of a loop):\n");
        println!("| work | µs |");
        println!("|---|---:|");
        for (what, d) in cpu_costs() {
            println!("| {what} | {:.1} |", d.as_secs_f64() * 1e6);
        }
    });
}
