//! The accept loop and what one client may cost the server (issue 20): the connection cap, the
//! per-connection timeouts (request head, request body, idle keep-alive), the refusal of an
//! oversized `Content-Length` before the body is read, and the bounded drain at shutdown.
//!
//! Connections are served by hyper's HTTP/1 server directly (not `axum::serve`, which sets no
//! timeout at all). hyper's own `header_read_timeout` is not used: its clock starts as soon as a
//! connection is ready for a request, so it would also be the idle timeout, and an idle
//! keep-alive connection would be cut after 10 s. Instead each connection has a watchdog
//! ([`Activity`]) with the semantics of Go's `net/http` `IdleTimeout` / `ReadHeaderTimeout`:
//! - no request in flight and no byte since the last response (or the accept): the connection
//!   is idle and closed after the idle timeout;
//! - the first byte of a request head arrived: the whole head must arrive within the header
//!   timeout of it;
//! - a request in flight (from its complete head until its response body is fully handed to
//!   hyper): no connection timeout at all — long-polls and event streams are long on purpose. A
//!   stalled request body is caught per read instead ([`ReadTimeout`], answered 408).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::TokioIo;
use ninetrix_proto::api::ErrorCode;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

use crate::error::ApiError;
use crate::hook_guard::Peer;

/// What one connection may cost, and how long the drain at shutdown may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// From the first byte of a request head to its end.
    pub(crate) header_timeout: Duration,
    /// Between two reads of a request body that is still expected.
    pub(crate) body_timeout: Duration,
    /// A connection with no request in flight and no byte of the next one.
    pub(crate) idle_timeout: Duration,
    /// Connections served at once; past it the server stops accepting until one ends.
    pub(crate) max_connections: usize,
    /// How long in-flight requests get to finish after the shutdown signal.
    pub(crate) shutdown_grace: Duration,
}

/// How often, at most, the server logs that it is at its connection cap.
const CAP_WARNING_EVERY: Duration = Duration::from_secs(60);

/// How long the accept loop pauses after an accept error that is not about one connection (out
/// of file descriptors, say), so it does not spin; the connections that end meanwhile free some.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_secs(1);

/// Accepts and serves connections until `drain` is cancelled; then stops accepting (the
/// listening socket is closed), lets each connection finish the request it is on (idle ones and
/// half-sent request heads are closed at once), and after `limits.shutdown_grace` drops whatever
/// is still open.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    drain: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let mut connections = JoinSet::new();
    let mut last_cap_warning: Option<Instant> = None;
    loop {
        // Reap the connections that ended, so the set holds only live ones (and their panics,
        // if any, are not kept).
        while connections.try_join_next().is_some() {}
        let permit = match Arc::clone(&permits).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                if last_cap_warning.is_none_or(|at| at.elapsed() >= CAP_WARNING_EVERY) {
                    last_cap_warning = Some(Instant::now());
                    tracing::warn!(
                        max_connections = limits.max_connections,
                        "at the connection limit (--max-connections): new connections wait in \
                         the listen backlog until one ends"
                    );
                }
                tokio::select! {
                    permit = Arc::clone(&permits).acquire_owned() => match permit {
                        Ok(permit) => permit,
                        Err(_) => break, // never closed
                    },
                    () = drain.cancelled() => break,
                }
            }
        };
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    tracing::error!("cannot accept a connection: {e}");
                    tokio::select! {
                        () = tokio::time::sleep(ACCEPT_ERROR_PAUSE) => continue,
                        () = drain.cancelled() => break,
                    }
                }
            },
            () = drain.cancelled() => break,
        };
        // Small writes (SSE events, long-poll answers) go out at once: without TCP_NODELAY,
        // Nagle's algorithm holds a write until the previous one is acknowledged, and the
        // peer's delayed ACK makes that ~40 ms.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY on an accepted connection: {e}");
        }
        connections.spawn(serve_connection(
            tcp,
            peer,
            router.clone(),
            limits,
            drain.clone(),
            permit,
        ));
    }
    // Stop taking connections: a client that connects now is refused, not left in the backlog.
    drop(listener);
    let drained = tokio::time::timeout(limits.shutdown_grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            open = connections.len(),
            "connections still open {:?} after the shutdown signal (--shutdown-grace); closing them",
            limits.shutdown_grace
        );
        connections.shutdown().await;
    }
}

/// Errors of one connection that was reset before it was accepted; the next accept works.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(
        e.kind(),
        ErrorKind::ConnectionRefused | ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset
    )
}

/// Serves one connection until it ends, a timeout closes it, or the drain does.
async fn serve_connection(
    tcp: TcpStream,
    peer: SocketAddr,
    router: Router,
    limits: Limits,
    drain: CancellationToken,
    _permit: OwnedSemaphorePermit,
) {
    let activity = Arc::new(Activity::new(Instant::now()));
    let io = TokioIo::new(Watched {
        inner: tcp,
        activity: Arc::clone(&activity),
        rewrite: None,
    });
    let service = {
        let activity = Arc::clone(&activity);
        hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            // hyper calls the service once the head is complete: the request is in flight
            // until its response body is dropped (fully written, or the connection is gone).
            let busy = Busy::start(Arc::clone(&activity));
            handle(request, peer, router.clone(), limits.body_timeout, busy)
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    // The watchdog below keeps the head's clock (see the module documentation).
    builder.header_read_timeout(None);
    let connection = builder.serve_connection(io, service);
    let mut connection = std::pin::pin!(connection);
    let mut draining = false;
    loop {
        // Armed before the phase is read: a change after the read still wakes this loop.
        let changed = activity.changed.notified();
        let deadline = activity.deadline(&limits, draining);
        if let Some((at, why)) = deadline
            && at <= Instant::now()
        {
            tracing::debug!(%peer, "closing the connection: {why}");
            return;
        }
        tokio::select! {
            served = connection.as_mut() => {
                if let Err(e) = served {
                    tracing::debug!(%peer, "connection ended with an error: {e}");
                }
                return;
            }
            () = drain.cancelled(), if !draining => {
                draining = true;
                // Closes an idle connection, and one in flight once its response is out.
                connection.as_mut().graceful_shutdown();
            }
            () = changed => {}
            () = sleep_until(deadline.map(|(at, _)| at)) => {}
        }
    }
}

/// Sleeps until `at`, or forever.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// One request, from its complete head to its response: its body gets the per-read timeout,
/// and a request whose body stalled is answered 408 whatever the handler made of the failed
/// read. The peer's address goes into the request's extensions ([`Peer`]: the webhook route
/// caps deliveries in flight per address).
async fn handle(
    request: hyper::Request<Incoming>,
    peer: SocketAddr,
    router: Router,
    body_timeout: Duration,
    busy: Busy,
) -> Result<Response<Tracked>, Infallible> {
    let stalled = Arc::new(AtomicBool::new(false));
    let mut request =
        request.map(|body| Body::new(ReadTimeout::new(body, body_timeout, Arc::clone(&stalled))));
    request.extensions_mut().insert(Peer(peer.ip()));
    let response = match router.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    let response = if stalled.load(Ordering::Acquire) {
        request_timeout(body_timeout)
    } else {
        response
    };
    Ok(response.map(|body| Tracked { body, _busy: busy }))
}

/// The 408 for a stalled body. The connection is closed after it: the rest of the body may
/// still come and would be read as the next request.
fn request_timeout(body_timeout: Duration) -> Response {
    let mut response = ApiError::Rejected {
        status: StatusCode::REQUEST_TIMEOUT,
        code: ErrorCode::RequestTimeout,
        message: format!(
            "the request body stalled: no bytes for {} s",
            body_timeout.as_secs_f64()
        ),
    }
    .into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Middleware: answers `413 too_large` to a request whose `Content-Length` is over `limit`
/// before reading any of its body (the body limit of the routes only stops reading once the
/// limit is reached, after the client has sent that much), and closes the connection, which
/// would otherwise have to skip the whole body.
pub(crate) async fn refuse_oversized(
    State(limit): State<usize>,
    request: Request,
    next: Next,
) -> Response {
    let limit = limit_for(request.method(), request.uri().path(), limit);
    match declared_length(&request) {
        Some(length) if length > limit as u64 => {
            let mut response = ApiError::Rejected {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                code: ErrorCode::TooLarge,
                message: format!(
                    "the body is {length} bytes; the server takes at most {limit} (--body-limit)"
                ),
            }
            .into_response();
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            response
        }
        _ => next.run(request).await,
    }
}

/// The body limit of a request: `--body-limit`, but for the upload of a snapshot object
/// (`PUT /v1/runners/threads/{id}/objects/{object}`), whose limit is an object's.
pub(crate) fn limit_for(method: &axum::http::Method, path: &str, limit: usize) -> usize {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let upload = method == axum::http::Method::PUT
        && matches!(parts.as_slice(), ["v1", "runners", "threads", _, "objects", object] if *object != "missing");
    if upload {
        ninetrix_proto::snapshots::MAX_OBJECT_BYTES as usize
    } else {
        limit
    }
}

/// The request's `Content-Length`, if it has a valid one (hyper refuses a malformed one before
/// the request gets here).
fn declared_length(request: &Request) -> Option<u64> {
    request
        .headers()
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Where a connection is between requests, for its watchdog.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// No request in flight, no byte of the next one since `since`.
    Idle { since: Instant },
    /// The first byte of a request head arrived at `since`; the head is not complete.
    Head { since: Instant },
    /// Requests in flight (one on HTTP/1; a count, so a late drop cannot underflow).
    Busy { requests: usize },
}

/// Why the watchdog closes a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expiry {
    Idle(Duration),
    Head(Duration),
    Draining,
}

impl std::fmt::Display for Expiry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expiry::Idle(after) => write!(f, "idle for {after:?} (--idle-timeout)"),
            Expiry::Head(after) => {
                write!(
                    f,
                    "no complete request head within {after:?} (--header-timeout)"
                )
            }
            Expiry::Draining => f.write_str("shutting down with a request head half sent"),
        }
    }
}

/// The watchdog's view of one connection, updated by its reads ([`Watched`]) and by its
/// requests ([`Busy`]).
struct Activity {
    phase: Mutex<Phase>,
    /// Told on every change of phase, so the watchdog moves its deadline.
    changed: Notify,
}

impl Activity {
    fn new(now: Instant) -> Activity {
        Activity {
            phase: Mutex::new(Phase::Idle { since: now }),
            changed: Notify::new(),
        }
    }

    fn phase(&self) -> Phase {
        *self
            .phase
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Moves to the phase `step` gives for the current one; tells the watchdog if it changed.
    fn update(&self, step: impl FnOnce(Phase) -> Phase) {
        let mut phase = self
            .phase
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let next = step(*phase);
        if next != *phase {
            *phase = next;
            drop(phase);
            // `notify_one` keeps the wake-up if the watchdog is not waiting at this moment.
            self.changed.notify_one();
        }
    }

    /// Bytes arrived. Between requests, they start the next head (its clock starts now); during
    /// a request they are its body (or a pipelined request, which the idle clock bounds).
    fn bytes_read(&self, now: Instant) {
        self.update(|phase| match phase {
            Phase::Idle { .. } => Phase::Head { since: now },
            other => other,
        });
    }

    fn request_started(&self) {
        self.update(|phase| match phase {
            Phase::Busy { requests } => Phase::Busy {
                requests: requests.saturating_add(1),
            },
            _ => Phase::Busy { requests: 1 },
        });
    }

    fn request_ended(&self, now: Instant) {
        self.update(|phase| match phase {
            Phase::Busy { requests } if requests > 1 => Phase::Busy {
                requests: requests - 1,
            },
            Phase::Busy { .. } => Phase::Idle { since: now },
            other => other,
        });
    }

    fn deadline(&self, limits: &Limits, draining: bool) -> Option<(Instant, Expiry)> {
        deadline(self.phase(), limits, draining)
    }
}

/// When a connection in `phase` is to be closed, and why (`None`: not while it stays in it).
/// While draining, a half-sent head is closed at once: its request was never started, and
/// waiting for it would hold the shutdown; idle connections are closed by hyper's graceful
/// shutdown, busy ones when their response is out.
fn deadline(phase: Phase, limits: &Limits, draining: bool) -> Option<(Instant, Expiry)> {
    match phase {
        Phase::Head { since } if draining => Some((since, Expiry::Draining)),
        // `checked_add`: a timeout too large to add is no timeout, not a panic.
        Phase::Head { since } => since
            .checked_add(limits.header_timeout)
            .map(|at| (at, Expiry::Head(limits.header_timeout))),
        Phase::Idle { since } => since
            .checked_add(limits.idle_timeout)
            .map(|at| (at, Expiry::Idle(limits.idle_timeout))),
        Phase::Busy { .. } => None,
    }
}

/// A request in flight: ends when dropped (with the response body, or with the connection).
struct Busy {
    activity: Arc<Activity>,
}

impl Busy {
    fn start(activity: Arc<Activity>) -> Busy {
        activity.request_started();
        Busy { activity }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.activity.request_ended(Instant::now());
    }
}

/// A response body that keeps its request in flight until hyper has taken all of it.
struct Tracked {
    body: Body,
    _busy: Busy,
}

impl hyper::body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The socket, telling the watchdog when bytes arrive, and giving hyper's own refusals a JSON
/// body ([`refusal`]).
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
    /// hyper's refusal being replaced: the JSON response still to write, and what hyper is told
    /// was written once it is out.
    rewrite: Option<Rewrite>,
}

struct Rewrite {
    bytes: Vec<u8>,
    sent: usize,
}

/// When hyper refuses a request head it cannot parse (400), a target too long (414) or a head
/// too large (431), it writes its own response — `connection: close`, `content-length: 0`, no
/// body — without calling the service. Every refusal of this server is `{code, message}` JSON, so
/// that response is replaced, byte for byte, with one that has the same status and a JSON body.
/// `head` is what hyper writes while no request is in flight; anything but such a refusal gives
/// `None` (it is written as it is).
fn refusal(head: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(head).ok()?;
    let rest = text.strip_prefix("HTTP/1.1 ")?;
    let lower = text.to_ascii_lowercase();
    if !(lower.contains("\r\ncontent-length: 0\r\n")
        && lower.contains("\r\nconnection: close\r\n")
        && text.ends_with("\r\n\r\n"))
    {
        return None;
    }
    let status = rest.get(..3)?.parse::<u16>().ok()?;
    let (code, message) = match status {
        400 => (
            ErrorCode::MalformedRequest,
            "the request is not HTTP/1.1 this server can read: a malformed request line or header (a space or control character in the target, a header without a colon, an invalid Content-Length)",
        ),
        414 => (
            ErrorCode::TooLarge,
            "the request target is longer than this server reads: send long parameters in a body",
        ),
        431 => (
            ErrorCode::TooLarge,
            "the request head is larger than this server reads: send fewer or shorter headers",
        ),
        _ => return None,
    };
    let reason = StatusCode::from_u16(status).ok()?.canonical_reason()?;
    let body = serde_json::to_vec(&ninetrix_proto::api::ErrorBody {
        code,
        message: message.to_string(),
        running: None,
    })
    .ok()?;
    let mut bytes = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    bytes.extend_from_slice(&body);
    Some(bytes)
}

impl Watched {
    /// Writes the replacement of hyper's refusal; `Ready(Ok(claimed))` once it is all out (hyper
    /// is told its `claimed` bytes were written).
    fn poll_rewrite(
        &mut self,
        cx: &mut Context<'_>,
        claimed: usize,
    ) -> Poll<std::io::Result<usize>> {
        while let Some(rewrite) = &mut self.rewrite {
            if rewrite.sent == rewrite.bytes.len() {
                return Poll::Ready(Ok(claimed));
            }
            let n = std::task::ready!(
                Pin::new(&mut self.inner).poll_write(cx, &rewrite.bytes[rewrite.sent..])
            )?;
            if n == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            rewrite.sent += n;
        }
        Poll::Ready(Ok(claimed))
    }

    /// Whether `buf`, written now, is hyper's refusal: then the rewrite starts.
    fn intercept(&mut self, buf: &[u8]) -> bool {
        if self.rewrite.is_some() {
            return true;
        }
        if matches!(self.activity.phase(), Phase::Busy { .. }) {
            return false;
        }
        match refusal(buf) {
            Some(bytes) => {
                self.rewrite = Some(Rewrite { bytes, sent: 0 });
                true
            }
            None => false,
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.bytes_read(Instant::now());
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.intercept(buf) {
            return self.poll_rewrite(cx, buf.len());
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let refusal_like = bufs
            .iter()
            .find(|b| !b.is_empty())
            .is_some_and(|b| b.starts_with(b"HTTP/1.1 4"));
        if self.rewrite.is_some() || refusal_like {
            let joined: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
            if self.intercept(&joined) {
                return self.poll_rewrite(cx, joined.len());
            }
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.rewrite.is_some() {
            std::task::ready!(self.poll_rewrite(cx, 0))?;
        }
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.rewrite.is_some() {
            std::task::ready!(self.poll_rewrite(cx, 0))?;
        }
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A request body read that waited longer than the body timeout.
#[derive(Debug, thiserror::Error)]
#[error("the request body stalled: no bytes for {0:?}")]
struct BodyStalled(Duration);

/// A request body whose every read must make progress within `timeout`: the clock starts when
/// a read finds nothing to return and stops at the next frame, so a slow but steady upload is
/// fine and a stalled one fails (and flags `stalled`, for the 408).
struct ReadTimeout<B> {
    inner: B,
    timeout: Duration,
    /// Armed while a read is waiting.
    sleep: Option<Pin<Box<Sleep>>>,
    stalled: Arc<AtomicBool>,
}

impl<B> ReadTimeout<B> {
    fn new(inner: B, timeout: Duration, stalled: Arc<AtomicBool>) -> ReadTimeout<B> {
        ReadTimeout {
            inner,
            timeout,
            sleep: None,
            stalled,
        }
    }
}

impl<B> hyper::body::Body for ReadTimeout<B>
where
    B: hyper::body::Body + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = B::Data;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.sleep = None;
                Poll::Ready(frame.map(|frame| frame.map_err(Into::into)))
            }
            Poll::Pending => {
                let timeout = this.timeout;
                let sleep = this
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                match sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        this.sleep = None;
                        this.stalled.store(true, Ordering::Release);
                        Poll::Ready(Some(Err(BodyStalled(timeout).into())))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::body::Body as _;

    fn limits() -> Limits {
        Limits {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(120),
            max_connections: 4,
            shutdown_grace: Duration::from_secs(5),
        }
    }

    #[test]
    fn only_hypers_own_refusals_are_given_a_json_body() {
        let hyper_400 =
            b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\ndate: Fri, 27 Nov 2026 20:05:04 GMT\r\n\r\n";
        let replaced = String::from_utf8(refusal(hyper_400).unwrap()).unwrap();
        assert!(
            replaced.starts_with("HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n")
        );
        let (_, body) = replaced.split_once("\r\n\r\n").unwrap();
        let body: ninetrix_proto::api::ErrorBody = serde_json::from_str(body).unwrap();
        assert_eq!(body.code, ErrorCode::MalformedRequest);
        let hyper_414 =
            b"HTTP/1.1 414 URI Too Long\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
        assert!(
            String::from_utf8(refusal(hyper_414).unwrap())
                .unwrap()
                .contains("too_large")
        );
        // The server's own answers, a body chunk, or a refusal with a body are left alone.
        for other in [
            &b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n[]"[..],
            b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 40\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 12\r\n\r\n",
            b"{\"code\":\"x\"}",
            b"HTTP/1.1 505 HTTP Version Not Supported\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
        ] {
            assert_eq!(refusal(other), None, "{}", String::from_utf8_lossy(other));
        }
    }

    #[test]
    fn an_idle_connection_runs_on_the_idle_clock_and_a_started_head_on_the_header_clock() {
        let t0 = Instant::now();
        let activity = Activity::new(t0);
        assert_eq!(
            activity.deadline(&limits(), false),
            Some((
                t0 + Duration::from_secs(120),
                Expiry::Idle(Duration::from_secs(120))
            ))
        );
        let t1 = t0 + Duration::from_secs(50);
        activity.bytes_read(t1);
        assert_eq!(
            activity.deadline(&limits(), false),
            Some((
                t1 + Duration::from_secs(10),
                Expiry::Head(Duration::from_secs(10))
            ))
        );
        // More header lines do not restart the head's clock.
        activity.bytes_read(t1 + Duration::from_secs(5));
        assert_eq!(activity.phase(), Phase::Head { since: t1 });
    }

    #[test]
    fn a_request_in_flight_has_no_deadline_and_its_end_restarts_the_idle_clock() {
        let t0 = Instant::now();
        let activity = Arc::new(Activity::new(t0));
        activity.bytes_read(t0);
        let busy = Busy::start(Arc::clone(&activity));
        assert_eq!(activity.deadline(&limits(), false), None);
        // Body bytes read during the request change nothing.
        activity.bytes_read(t0 + Duration::from_secs(1));
        assert_eq!(activity.phase(), Phase::Busy { requests: 1 });
        assert_eq!(
            activity.deadline(&limits(), true),
            None,
            "not cut by the drain"
        );
        drop(busy);
        let Phase::Idle { since } = activity.phase() else {
            panic!("idle after the response: {:?}", activity.phase());
        };
        assert!(since >= t0);
    }

    #[test]
    fn the_drain_closes_a_half_sent_head_at_once_and_leaves_idle_ones_to_hyper() {
        let t0 = Instant::now();
        let head = deadline(Phase::Head { since: t0 }, &limits(), true);
        assert_eq!(head, Some((t0, Expiry::Draining)));
        let idle = deadline(Phase::Idle { since: t0 }, &limits(), true);
        assert_eq!(
            idle,
            Some((
                t0 + Duration::from_secs(120),
                Expiry::Idle(Duration::from_secs(120))
            ))
        );
    }

    #[test]
    fn a_timeout_too_large_to_add_is_no_deadline_not_a_panic() {
        let huge = Limits {
            header_timeout: Duration::MAX,
            idle_timeout: Duration::MAX,
            ..limits()
        };
        let t0 = Instant::now();
        assert_eq!(deadline(Phase::Idle { since: t0 }, &huge, false), None);
        assert_eq!(deadline(Phase::Head { since: t0 }, &huge, false), None);
    }

    #[test]
    fn a_change_of_phase_wakes_the_watchdog_even_if_it_was_not_waiting_yet() {
        let activity = Activity::new(Instant::now());
        activity.bytes_read(Instant::now());
        let woken = activity.changed.notified();
        let mut woken = std::pin::pin!(woken);
        let waker = std::task::Waker::noop();
        assert!(
            woken
                .as_mut()
                .poll(&mut Context::from_waker(waker))
                .is_ready()
        );
    }

    #[test]
    fn only_an_object_upload_has_the_limit_of_an_object() {
        use axum::http::Method;
        let object = ninetrix_proto::snapshots::MAX_OBJECT_BYTES as usize;
        let path = "/v1/runners/threads/0193/objects/ab12";
        assert_eq!(limit_for(&Method::PUT, path, 100), object);
        assert_eq!(limit_for(&Method::POST, path, 100), 100);
        assert_eq!(
            limit_for(
                &Method::PUT,
                "/v1/runners/threads/0193/objects/missing",
                100
            ),
            100
        );
        assert_eq!(
            limit_for(&Method::PUT, "/v1/runners/threads/0193/tool-calls/k", 100),
            100
        );
    }

    #[test]
    fn the_declared_length_is_read_from_content_length() {
        let request = |value: Option<&str>| {
            let mut builder = axum::http::Request::builder();
            if let Some(value) = value {
                builder = builder.header(header::CONTENT_LENGTH, value);
            }
            builder.body(Body::empty()).expect("a valid request")
        };
        assert_eq!(
            declared_length(&request(Some("99999999999"))),
            Some(99_999_999_999)
        );
        assert_eq!(declared_length(&request(Some("12"))), Some(12));
        assert_eq!(declared_length(&request(Some("twelve"))), None);
        assert_eq!(declared_length(&request(None)), None);
    }

    #[tokio::test]
    async fn a_body_that_stalls_fails_after_the_timeout_and_flags_it() {
        let timeout = Duration::from_millis(100);
        let stalled = Arc::new(AtomicBool::new(false));
        let mut body = ReadTimeout::new(never::Pending, timeout, Arc::clone(&stalled));
        let started = Instant::now();
        let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        assert!(matches!(frame, Some(Err(_))));
        assert!(stalled.load(Ordering::Acquire));
        assert!(started.elapsed() >= timeout);
    }

    /// A body that never yields a frame.
    mod never {
        use super::*;

        pub(super) struct Pending;

        impl hyper::body::Body for Pending {
            type Data = axum::body::Bytes;
            type Error = Infallible;

            fn poll_frame(
                self: Pin<&mut Self>,
                _cx: &mut Context<'_>,
            ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
                Poll::Pending
            }
        }
    }
}
