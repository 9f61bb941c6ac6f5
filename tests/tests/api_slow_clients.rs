//! `ninetrix api` against slow and greedy clients (issue 20): a request head dribbled line by
//! line, a body that never arrives, an oversized `Content-Length`, an idle keep-alive
//! connection, SIGTERM while such clients hold connections, and the connection cap. The clients
//! are raw TCP sockets, so the test controls every byte and every pause.
//!
//! The timeouts are configured short (2 s) so the tests are quick; each bound asserted is a
//! deadline with slack (3x the timeout), not a measure of speed.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ninetrix_e2e::ApiProcess;
use ninetrix_proto::ThreadId;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// The admin token the API under test is started with.
const ADMIN_TOKEN: &str = "slow-clients-admin-token-0123456789";

/// A `ninetrix api` process with a secret and an admin token (not `--insecure-dev`: the slow
/// clients are unauthenticated, as an attacker would be).
struct Api {
    process: ApiProcess,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

fn start(flags: &[&str]) -> Api {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    let admin = dir.path().join("admin-token");
    std::fs::write(&secret, "slow-clients-secret-0123456789abcdef").unwrap();
    std::fs::write(&admin, ADMIN_TOKEN).unwrap();
    let db = format!("sqlite://{}", dir.path().join("api.db").display());
    let (secret, admin) = (secret.display().to_string(), admin.display().to_string());
    let mut args = vec![
        "--database",
        &db,
        "--secret-file",
        &secret,
        "--admin-token-file",
        &admin,
    ];
    args.extend_from_slice(flags);
    let process = ApiProcess::start(&args);
    let addr = process
        .url
        .trim_start_matches("http://")
        .parse()
        .expect("the API logs a socket address");
    Api {
        process,
        addr,
        _dir: dir,
    }
}

/// What a client read from the server.
#[derive(Debug)]
enum Read {
    /// The server closed (or reset) the connection before a whole response.
    Closed,
    /// A whole response.
    Response { status: u16, body: String },
}

/// Reads one response (its head and a `Content-Length` body), or the end of the connection;
/// fails the test if neither comes `within`.
async fn read_response(stream: &mut (impl AsyncRead + Unpin), within: Duration) -> Read {
    let read = async {
        let mut bytes = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&bytes[..end]).to_string();
                let status = head
                    .split_whitespace()
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or_else(|| panic!("a status line: {head}"));
                let length: usize = head
                    .lines()
                    .find_map(|l| {
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse().ok())?
                    })
                    .unwrap_or(0);
                if bytes.len() >= end + 4 + length {
                    let body = String::from_utf8_lossy(&bytes[end + 4..end + 4 + length]);
                    return Read::Response {
                        status,
                        body: body.to_string(),
                    };
                }
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return Read::Closed,
                Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            }
        }
    };
    tokio::time::timeout(within, read)
        .await
        .unwrap_or_else(|_| panic!("neither answered nor closed within {within:?}"))
}

/// Whether the server sent anything (or closed) within `within`.
async fn heard_within(stream: &TcpStream, within: Duration) -> bool {
    let mut byte = [0u8; 1];
    tokio::time::timeout(within, stream.peek(&mut byte))
        .await
        .is_ok()
}

fn sigterm(api: &Api) {
    assert!(ninetrix_e2e::signal(api.process.child.id(), "-TERM"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_dribbled_a_line_a_second_is_cut_at_the_header_timeout() {
    let api = start(&["--header-timeout", "2"]);
    let stream = TcpStream::connect(api.addr).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let started = Instant::now();
    writer
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\n")
        .await
        .unwrap();
    // The client's pace (one more header line a second), not a wait for the server.
    let dribble = tokio::spawn(async move {
        let mut every_second = tokio::time::interval(Duration::from_secs(1));
        for line in 0.. {
            every_second.tick().await;
            let header = format!("X-Slow-{line}: still coming\r\n");
            if writer.write_all(header.as_bytes()).await.is_err() {
                break;
            }
        }
    });
    let read = read_response(&mut reader, Duration::from_secs(6)).await;
    let elapsed = started.elapsed();
    dribble.abort();
    assert!(
        matches!(read, Read::Closed | Read::Response { status: 408, .. }),
        "{read:?}"
    );
    assert!(
        elapsed >= Duration::from_secs(2),
        "cut by the header timeout, not before: {elapsed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_never_arrives_is_answered_408_at_the_body_timeout() {
    let api = start(&["--body-timeout", "2"]);
    let mut stream = TcpStream::connect(api.addr).await.unwrap();
    let started = Instant::now();
    let head = format!(
        "POST /v1/tokens/runner HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let read = read_response(&mut stream, Duration::from_secs(6)).await;
    match read {
        Read::Response { status, body } => {
            assert_eq!(status, 408, "{body}");
            let body: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert_eq!(body["code"], "request_timeout", "{body}");
        }
        Read::Closed => {}
    }
    assert!(started.elapsed() >= Duration::from_secs(2));
    // The connection is closed after the 408 (the rest of the body could still come).
    assert!(matches!(
        read_response(&mut stream, Duration::from_secs(6)).await,
        Read::Closed
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_content_length_is_refused_before_any_body_is_sent() {
    let api = start(&["--body-limit", "1024"]);
    let mut stream = TcpStream::connect(api.addr).await.unwrap();
    let head = format!(
        "POST /v1/tokens/runner HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: 99999999999\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // No byte of the body is sent: the answer cannot depend on reading it.
    let Read::Response { status, body } = read_response(&mut stream, Duration::from_secs(5)).await
    else {
        panic!("answered 413, not closed");
    };
    assert_eq!(status, 413, "{body}");
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["code"], "too_large", "{body}");
    assert!(body["message"].as_str().unwrap().contains("1024"), "{body}");
    // The server does not wait for the 99999999999 bytes: it closes the connection.
    assert!(matches!(
        read_response(&mut stream, Duration::from_secs(5)).await,
        Read::Closed
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let api = start(&["--idle-timeout", "2"]);
    let mut stream = TcpStream::connect(api.addr).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    let read = read_response(&mut stream, Duration::from_secs(5)).await;
    assert!(
        matches!(read, Read::Response { status: 200, .. }),
        "{read:?}"
    );
    // Kept alive, then idle: closed by the idle timeout.
    let idle_since = Instant::now();
    let read = read_response(&mut stream, Duration::from_secs(6)).await;
    assert!(matches!(read, Read::Closed), "{read:?}");
    assert!(
        idle_since.elapsed() >= Duration::from_secs(1),
        "kept alive for a while first: {:?}",
        idle_since.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_outlasting_every_timeout_is_answered_not_cut() {
    let api = start(&[
        "--idle-timeout",
        "1",
        "--header-timeout",
        "1",
        "--body-timeout",
        "1",
    ]);
    let mut stream = TcpStream::connect(api.addr).await.unwrap();
    let started = Instant::now();
    let poll = format!(
        "GET /v1/runners/threads/{}/inbox?wait=4 HTTP/1.1\r\nHost: test\r\n\
         Authorization: Bearer {ADMIN_TOKEN}\r\n\r\n",
        ThreadId::new_v7()
    );
    stream.write_all(poll.as_bytes()).await.unwrap();
    let read = read_response(&mut stream, Duration::from_secs(15)).await;
    assert!(
        matches!(read, Read::Response { status: 200, .. }),
        "{read:?}"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "the poll waited its 4 s: {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_a_half_sent_head_and_a_long_poll_exits_zero_within_the_grace() {
    // A header timeout longer than the test: only the drain may close the half-sent head.
    let mut api = start(&["--header-timeout", "300", "--shutdown-grace", "3"]);
    // An unauthenticated client holds a half-sent request head.
    let mut half_head = TcpStream::connect(api.addr).await.unwrap();
    half_head
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\nX-Never-Ends: ")
        .await
        .unwrap();
    // An admin long-poll, in the server's hands.
    let mut long_poll = TcpStream::connect(api.addr).await.unwrap();
    let poll = format!(
        "GET /v1/runners/threads/{}/inbox?wait=60 HTTP/1.1\r\nHost: test\r\n\
         Authorization: Bearer {ADMIN_TOKEN}\r\n\r\n",
        ThreadId::new_v7()
    );
    long_poll.write_all(poll.as_bytes()).await.unwrap();
    api.process
        .wait_for_log("started processing request", Duration::from_secs(10));
    // A request in flight: its head and half its body are in; the rest comes after SIGTERM.
    let body = format!(r#"{{"thread_id":"{}"}}"#, ThreadId::new_v7());
    let (first, rest) = body.split_at(body.len() / 2);
    let mut in_flight = TcpStream::connect(api.addr).await.unwrap();
    let head = format!(
        "POST /v1/tokens/runner HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{first}",
        body.len()
    );
    in_flight.write_all(head.as_bytes()).await.unwrap();
    api.process
        .wait_for_log("started processing request", Duration::from_secs(10));

    let signalled = Instant::now();
    sigterm(&api);
    api.process
        .wait_for_log("shutting down", Duration::from_secs(10));
    in_flight.write_all(rest.as_bytes()).await.unwrap();

    let read = read_response(&mut in_flight, Duration::from_secs(10)).await;
    assert!(
        matches!(read, Read::Response { status: 201, .. }),
        "the request in flight finished: {read:?}"
    );
    let read = read_response(&mut long_poll, Duration::from_secs(10)).await;
    assert!(
        matches!(read, Read::Response { status: 200, .. }),
        "the long-poll was answered, not cut: {read:?}"
    );
    let read = read_response(&mut half_head, Duration::from_secs(10)).await;
    assert!(matches!(read, Read::Closed), "{read:?}");
    let status = api
        .process
        .wait_exit(Duration::from_secs(3 + 7))
        .expect("the server exits within the grace period and some slack");
    assert_eq!(status.code(), Some(0));
    assert!(signalled.elapsed() < Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drops_a_request_that_outlasts_the_grace_and_still_exits_zero() {
    // The body timeout is longer than the test: only the grace deadline may end this request.
    let mut api = start(&["--body-timeout", "300", "--shutdown-grace", "2"]);
    let mut stuck = TcpStream::connect(api.addr).await.unwrap();
    let head = format!(
        "POST /v1/tokens/runner HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
    );
    stuck.write_all(head.as_bytes()).await.unwrap();
    api.process
        .wait_for_log("started processing request", Duration::from_secs(10));
    let signalled = Instant::now();
    sigterm(&api);
    let status = api
        .process
        .wait_exit(Duration::from_secs(2 + 8))
        .expect("the server exits once the grace period is over");
    assert_eq!(status.code(), Some(0));
    assert!(
        signalled.elapsed() >= Duration::from_secs(2),
        "the request in flight had its grace period: {:?}",
        signalled.elapsed()
    );
    api.process
        .wait_for_log("--shutdown-grace", Duration::from_secs(5));
    assert!(matches!(
        read_response(&mut stuck, Duration::from_secs(5)).await,
        Read::Closed
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_connection_cap_a_connection_waits_until_one_ends() {
    let api = start(&["--max-connections", "2"]);
    let get = b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n";
    // Two connections, each served once and kept alive: both slots taken.
    let mut first = TcpStream::connect(api.addr).await.unwrap();
    let mut second = TcpStream::connect(api.addr).await.unwrap();
    for stream in [&mut first, &mut second] {
        stream.write_all(get).await.unwrap();
        let read = read_response(stream, Duration::from_secs(5)).await;
        assert!(
            matches!(read, Read::Response { status: 200, .. }),
            "{read:?}"
        );
    }
    // The third connects (the kernel's backlog takes it) but is not served.
    let mut third = TcpStream::connect(api.addr).await.unwrap();
    third.write_all(get).await.unwrap();
    api.process
        .wait_for_log("at the connection limit", Duration::from_secs(10));
    assert!(
        !heard_within(&third, Duration::from_millis(500)).await,
        "the third connection is not served while two are open"
    );
    // One ends: the third is served.
    drop(first);
    let read = read_response(&mut third, Duration::from_secs(5)).await;
    assert!(
        matches!(read, Read::Response { status: 200, .. }),
        "{read:?}"
    );
    // And the second still works.
    second.write_all(get).await.unwrap();
    let read = read_response(&mut second, Duration::from_secs(5)).await;
    assert!(
        matches!(read, Read::Response { status: 200, .. }),
        "{read:?}"
    );
}

#[test]
fn a_zero_timeout_or_cap_is_refused_with_a_clear_error() {
    for flag in [
        "--header-timeout",
        "--body-timeout",
        "--idle-timeout",
        "--shutdown-grace",
        "--max-connections",
    ] {
        let out = std::process::Command::new(ninetrix_e2e::ninetrix_bin())
            .args(["api", "--insecure-dev", flag, "0"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag} 0");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(flag) && stderr.contains("at least 1"),
            "{flag}: {stderr}"
        );
    }
}
