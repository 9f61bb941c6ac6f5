//! Checkpoint API benchmark: write latency and throughput over loopback HTTP at 1, 8 and 32
//! concurrent threads (SQLite, and Postgres when `NINETRIX_TEST_POSTGRES_URL` is set), `latest`
//! for a 1,000-turn thread, and the floor: the same row committed straight into SQLite with the
//! same pragmas by rusqlite (no async bridge), and by sqlx for comparison. Prints a Markdown table for BENCHMARKS.md.
//!
//! Run: `cargo bench -p ninetrix-api --bench checkpoint`

use std::time::{Duration, Instant};

use ninetrix_api::store::StoreOptions;
use ninetrix_api::{AuthConfig, Config, Server};
use ninetrix_client::Client;
use ninetrix_proto::api::{CheckpointRequest, CheckpointState, ThreadStatus};
use ninetrix_proto::{Message, Role, ThreadId};
use sqlx::Connection as _;

/// Bytes of text in each checkpoint's message (~2 KB per checkpoint with the JSON around it).
const PAYLOAD: usize = 1900;
/// Checkpoints written per run of each concurrency level.
const WRITES: usize = 4000;
const LATEST_TURNS: u64 = 1000;
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
        },
    }
}

async fn start(
    url: &str,
) -> (
    String,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let mut config = Config::new(url, AuthConfig::InsecureDev);
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.store = StoreOptions {
        max_batch: 256,
        max_connections: 8,
        ..StoreOptions::default()
    };
    let server = Server::bind(config).await.expect("server starts");
    let base = format!("http://{}", server.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        server
            .run(async move {
                let _ = rx.await;
            })
            .await
            .unwrap();
    });
    (base, tx, task)
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

/// The floor: one row of the same size per transaction, committed straight into SQLite by
/// rusqlite on this thread — no async bridge, no worker-thread hop (WAL, synchronous=FULL, as the
/// store). What a checkpoint write is measured against.
fn rusqlite_floor(dir: &std::path::Path) -> (Vec<Duration>, Duration) {
    let mut conn = rusqlite::Connection::open(dir.join("floor.db")).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "synchronous", "FULL").unwrap();
    conn.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
    conn.execute_batch("CREATE TABLE rows (thread_id TEXT NOT NULL, version BIGINT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (thread_id, version))").unwrap();
    let body = serde_json::to_string(&checkpoint_body(1, 0)).unwrap();
    let thread = ThreadId::new_v7().to_string();
    let mut samples = Vec::new();
    let started = Instant::now();
    for v in 0..WRITES as i64 {
        let t0 = Instant::now();
        let tx = conn.transaction().unwrap();
        tx.prepare_cached("INSERT INTO rows (thread_id, version, body) VALUES (?1, ?2, ?3)")
            .unwrap()
            .execute(rusqlite::params![thread, v, body])
            .unwrap();
        tx.commit().unwrap();
        samples.push(t0.elapsed());
    }
    (samples, started.elapsed())
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

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(64)
            .build()
            .unwrap();
        let mut rows = Vec::new();

        let dir = tempfile::tempdir().unwrap();
        let floor_dir = dir.path().to_path_buf();
        let (raw, elapsed) = tokio::task::spawn_blocking(move || rusqlite_floor(&floor_dir))
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
        for (label, url, cleanup) in backends {
            let (base, stop, task) = start(&url).await;
            let api = Client::new(http.clone(), &base, None);
            for concurrency in [1, 8, 32] {
                let (samples, elapsed) = writes(&api, concurrency).await;
                rows.push(summarize(
                    format!(
                        "{label}: checkpoint write over HTTP, {concurrency} concurrent thread(s)"
                    ),
                    samples,
                    elapsed,
                ));
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
            if let Some((admin, name)) = cleanup {
                let mut c = sqlx::PgConnection::connect(&admin).await.unwrap();
                let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .execute(&mut c)
                .await;
            }
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
    });
}
