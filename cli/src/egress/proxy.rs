//! The egress proxy's server: accepts clients (at most [`Limits::max_connections`] at once),
//! reads each one's request head, asks the allow-list, and then tunnels (`CONNECT`) or forwards
//! (absolute-form plain HTTP) to the destination — or answers 403 (not on the list), 400 (not a
//! proxy request), 408 (no head in time) or 502 (the destination cannot be reached) and closes.
//! Every allow-list decision is logged and counted ([`super::status`]).

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ninetrix_agentfile::egress::{self, EgressRule};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, Semaphore};
use tokio::task::JoinSet;

use super::request::{self, Answer, Request};
use ninetrix_runner::health::{Activity, Health};

use super::status::{self, Attempt, Decision, EgressStatus};
use super::upstream::{self, Resolver};

/// The proxy's bounds.
#[derive(Clone, Debug)]
pub(crate) struct Limits {
    /// Largest request head, blank line included.
    pub(crate) max_head: usize,
    /// How long a client has to send its head.
    pub(crate) head_timeout: Duration,
    /// How long resolving and connecting to the destination may take.
    pub(crate) connect_timeout: Duration,
    /// Most clients served at once; more are closed as soon as they are accepted.
    pub(crate) max_connections: usize,
}

impl Default for Limits {
    /// 16 KiB heads arriving within 10 s, 10 s to connect, 1,024 clients.
    fn default() -> Limits {
        Limits {
            max_head: 16 * 1024,
            head_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            max_connections: 1024,
        }
    }
}

/// After an error answer, how long (and how much) the proxy reads and discards what the client
/// still sends, so closing does not reset the connection before the client reads the answer.
const LINGER: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 64 * 1024;

/// How often the health report is rewritten (`ps` calls one older than 30 s stale).
const HEARTBEAT: Duration = Duration::from_secs(5);

/// Serves on `listener` with the default [`Limits`] until `shutdown` completes (see
/// [`serve_with`]).
pub(crate) async fn serve(
    listener: TcpListener,
    rules: Vec<EgressRule>,
    status_file: Option<PathBuf>,
    health: Option<Health>,
    shutdown: impl Future<Output = ()>,
) {
    serve_with(
        listener,
        rules,
        status_file,
        health,
        Limits::default(),
        shutdown,
    )
    .await;
}

/// Serves on `listener` until `shutdown` completes, allowing what `rules` allow. The status
/// file, if any, is written at start, after each refusal and at shutdown; the health report, if
/// any, every [`HEARTBEAT`] (what `ps` shows on the proxy's line); at shutdown the connections
/// still open are dropped.
pub(crate) async fn serve_with(
    listener: TcpListener,
    rules: Vec<EgressRule>,
    status_file: Option<PathBuf>,
    health: Option<Health>,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let shared = Arc::new(Shared {
        rules,
        limits,
        books: Books {
            status: Mutex::new(EgressStatus::default()),
            file: status_file,
        },
        resolver: Resolver::default(),
    });
    shared.books.save(&EgressStatus::default()).await;
    let mut clients = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    let mut heartbeat = tokio::time::interval(HEARTBEAT);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            _ = heartbeat.tick(), if health.is_some() => {
                if let Some(health) = &health {
                    let status = shared.books.status.lock().await.clone();
                    health.set(Activity::Proxying { line: status.line() });
                    health.heartbeat();
                }
            }
            Some(_) = clients.join_next(), if !clients.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
                        tracing::warn!(
                            from = %peer,
                            max = shared.limits.max_connections,
                            "egress proxy: too many connections; closing this one"
                        );
                        continue;
                    };
                    let shared = Arc::clone(&shared);
                    clients.spawn(async move {
                        client(&shared, stream, peer).await;
                        drop(slot);
                    });
                }
                Err(error) => {
                    // Out of file descriptors, mostly: give the clients a moment to finish.
                    tracing::warn!(%error, "egress proxy: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
    clients.shutdown().await;
    let last = shared.books.status.lock().await.clone();
    shared.books.save(&last).await;
}

/// What every client task shares.
struct Shared {
    rules: Vec<EgressRule>,
    limits: Limits,
    books: Books,
    resolver: Resolver,
}

/// The counts and the file they are written to.
struct Books {
    /// Held while the file is written, so writes never interleave and the newest count is
    /// written last.
    status: Mutex<EgressStatus>,
    file: Option<PathBuf>,
}

impl Books {
    /// Counts and logs a decision; a refusal also rewrites the status file.
    async fn record(&self, decision: Decision, attempt: Attempt) {
        let mut status = self.status.lock().await;
        status::log(decision, &attempt);
        match decision {
            Decision::Allowed => status.record_allowed(),
            Decision::Refused => {
                status.record_refusal(attempt);
                self.save(&status).await;
            }
        }
    }

    async fn save(&self, status: &EgressStatus) {
        if let Some(path) = &self.file
            && let Err(error) = status.write(path).await
        {
            tracing::warn!(%error, "egress proxy: status file not written");
        }
    }
}

/// Why no request head was read.
#[derive(Debug, thiserror::Error)]
enum HeadError {
    /// The client closed (or failed) before sending anything.
    #[error("the client closed before sending a request")]
    Gone,
    /// The client closed part way through the head.
    #[error("the request head ended early")]
    Truncated,
    /// The head is over the limit.
    #[error("the request head is over {0} bytes")]
    TooLarge(usize),
    /// The head did not arrive in time.
    #[error("no complete request head within {} s", .0.as_secs())]
    Timeout(Duration),
}

/// Serves one client to the end.
async fn client(shared: &Shared, mut stream: TcpStream, peer: SocketAddr) {
    let limits = &shared.limits;
    let (head, early) = match read_head(&mut stream, limits).await {
        Ok(read) => read,
        Err(HeadError::Gone) => return,
        Err(e @ (HeadError::Truncated | HeadError::TooLarge(_))) => {
            return answer(stream, Answer::BadRequest, &e.to_string()).await;
        }
        Err(e @ HeadError::Timeout(_)) => {
            return answer(stream, Answer::Timeout, &e.to_string()).await;
        }
    };
    let request = match request::parse(&head) {
        Ok(request) => request,
        Err(e) => return answer(stream, Answer::BadRequest, &e.to_string()).await,
    };
    let target = request.target();
    let mut attempt = Attempt {
        host: target.host.clone(),
        port: target.port,
        from: client_ip(peer).to_string(),
        container: None,
        at_ms: now_ms(),
    };
    if !egress::allows(&shared.rules, &target.host, target.port) {
        attempt.container = shared.resolver.container_of(client_ip(peer)).await;
        shared.books.record(Decision::Refused, attempt).await;
        return answer(stream, Answer::Forbidden, &request::refusal(target)).await;
    }
    shared.books.record(Decision::Allowed, attempt).await;
    let mut upstream =
        match upstream::connect(&shared.resolver, target, limits.connect_timeout).await {
            Ok(upstream) => upstream,
            Err(error) => {
                tracing::warn!(%error, from = %peer, "egress proxy: destination unreachable");
                return answer(stream, Answer::BadGateway, &error.to_string()).await;
            }
        };
    let _ = stream.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let opened = match &request {
        Request::Connect(_) => stream.write_all(request::ESTABLISHED).await,
        Request::Forward { head, .. } => upstream.write_all(head).await,
    };
    if opened.is_err() || upstream.write_all(&early).await.is_err() {
        return;
    }
    // Either side closing or failing ends the splice; there is nothing to report by then.
    let _ = tokio::io::copy_bidirectional(&mut stream, &mut upstream).await;
}

/// Reads the request head: returns it (blank line included) and whatever arrived after it.
async fn read_head(
    stream: &mut TcpStream,
    limits: &Limits,
) -> Result<(Vec<u8>, Vec<u8>), HeadError> {
    let mut buf = Vec::with_capacity(1024);
    let read = async {
        let mut chunk = [0u8; 4096];
        loop {
            let room = limits
                .max_head
                .saturating_sub(buf.len())
                .clamp(1, chunk.len());
            let n = match stream.read(&mut chunk[..room]).await {
                Ok(0) | Err(_) if buf.is_empty() => return Err(HeadError::Gone),
                Ok(0) | Err(_) => return Err(HeadError::Truncated),
                Ok(n) => n,
            };
            let from = buf.len().saturating_sub(3);
            buf.extend_from_slice(&chunk[..n]);
            if let Some(end) = request::head_end(&buf, from) {
                return Ok(end);
            }
            if buf.len() >= limits.max_head {
                return Err(HeadError::TooLarge(limits.max_head));
            }
        }
    };
    let end = tokio::time::timeout(limits.head_timeout, read)
        .await
        .map_err(|_| HeadError::Timeout(limits.head_timeout))??;
    let early = buf.split_off(end);
    Ok((buf, early))
}

/// Sends one of the proxy's answers and closes: the write side first, then whatever the client
/// still sends is read and discarded for a moment, so the answer is not lost to a reset.
async fn answer(mut stream: TcpStream, answer: Answer, message: &str) {
    if stream.write_all(&answer.render(message)).await.is_err() {
        return;
    }
    let _ = stream.shutdown().await;
    let drain = async {
        let mut sink = [0u8; 4096];
        let mut total = 0;
        while total < LINGER_BYTES {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}

/// The client's address as the agent's container has it (an IPv4 client of a dual-stack
/// listener shows as IPv4).
fn client_ip(peer: SocketAddr) -> IpAddr {
    peer.ip().to_canonical()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
