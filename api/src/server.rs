//! The server: configuration, building the shared state, binding, and graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use crate::hook_guard::{DEFAULT_HOOK_BODY_TIMEOUT, DEFAULT_HOOK_REQUESTS_PER_PEER};

use crate::auth::{AuthConfig, Authenticator};
use crate::hub::Hub;
use crate::state::App;
use crate::store::{Store, StoreError, StoreOptions};

/// Everything `ninetrix api` needs to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where to listen.
    pub listen: SocketAddr,
    /// `sqlite://PATH` or `postgres://…`.
    pub database_url: String,
    /// How requests are authenticated.
    pub auth: AuthConfig,
    /// Largest request body, in bytes.
    pub body_limit: usize,
    /// Longest long-poll wait a client may ask for.
    pub max_wait: Duration,
    /// Interval of SSE keep-alive comments.
    pub keep_alive: Duration,
    /// Store tuning.
    pub store: StoreOptions,
    /// How often the scheduler looks for due schedules (`None`: this process fires none — another
    /// replica does).
    pub scheduler_tick: Option<Duration>,
    /// Where the server spans of requests go (OpenTelemetry; `None`: no spans, no cost).
    pub telemetry: Option<crate::telemetry::Tracer>,
    /// From the first byte of a request head to its end; past it the connection is closed.
    pub header_timeout: Duration,
    /// Longest wait for the next bytes of a request body; past it the request is answered
    /// `408 request_timeout` and the connection closed. Per read, not for the whole body.
    pub body_timeout: Duration,
    /// How long a connection with no request in flight stays open. A request in flight (a
    /// long-poll, an event stream) is never cut by it.
    pub idle_timeout: Duration,
    /// Connections served at once; past it the server stops accepting until one ends (the
    /// others wait in the listen backlog).
    pub max_connections: usize,
    /// How long in-flight requests get to finish after the shutdown signal before the
    /// connections still open are dropped.
    pub shutdown_grace: Duration,
    /// The deadline for a whole webhook body (`POST /v1/hooks/…`), from the end of its head:
    /// much shorter than what `body_timeout` allows a steady upload, since a webhook body is
    /// small and its sender is a server.
    pub hook_body_timeout: Duration,
    /// Webhook deliveries one source address may have in flight at once; past it they are
    /// answered `429 too_many_in_flight` at once and the connection closed.
    pub hook_requests_per_peer: usize,
    /// How long a model lease lasts unless its runner renews it: a killed runner's permits come
    /// back within it. 1 s to an hour.
    pub model_lease_ttl: Duration,
    /// What callers outside reach the API by (`NINETRIX_PUBLIC_URL`, e.g.
    /// `https://agents.example.com`): the base of the URLs A2A agent cards give. `None`: `http://`
    /// and the request's `Host`.
    pub public_url: Option<String>,
}

/// Default [`Config::header_timeout`]: a real client sends its whole head in one write, so
/// 10 s is generous even on a bad link, and it bounds a client dribbling header lines.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default [`Config::body_timeout`]: 30 s without one byte of a body (at most `body_limit`,
/// 8 MiB by default) means the sender is gone; a slow but live upload is not cut.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Default [`Config::idle_timeout`]: longer than the 90 s for which reqwest (the client of the
/// runner and the CLI) keeps an idle connection, so the client closes first and never sends a
/// request on a connection the server is closing.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Default [`Config::max_connections`]: a runner holds one or two connections (its long-poll,
/// its writes) and a console or CLI a few, so 4096 serves thousands of them, while an idle
/// connection costs a file descriptor and some 10 KiB (raise `ulimit -n` above it).
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// Default [`Config::model_lease_ttl`]: a runner renews its lease every third of it, so a minute
/// rides out a few failed renewals, and a killed runner's slots come back within a minute.
pub const DEFAULT_MODEL_LEASE_TTL: Duration = Duration::from_secs(60);
/// The longest [`Config::model_lease_ttl`].
pub const MAX_MODEL_LEASE_TTL: Duration = Duration::from_secs(3600);
/// Default [`Config::shutdown_grace`]: long-polls and streams end at once on the signal and
/// other requests take milliseconds, so 5 s is plenty, and it leaves time to flush the store
/// before `docker stop` (10 s) or Kubernetes (30 s) send SIGKILL.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

impl Config {
    /// Defaults for everything but the database and auth.
    pub fn new(database_url: impl Into<String>, auth: AuthConfig) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            database_url: database_url.into(),
            auth,
            body_limit: 8 * 1024 * 1024,
            max_wait: Duration::from_secs(60),
            keep_alive: Duration::from_secs(15),
            store: StoreOptions::default(),
            scheduler_tick: Some(crate::scheduler::DEFAULT_TICK),
            telemetry: None,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            hook_body_timeout: DEFAULT_HOOK_BODY_TIMEOUT,
            hook_requests_per_peer: DEFAULT_HOOK_REQUESTS_PER_PEER,
            model_lease_ttl: DEFAULT_MODEL_LEASE_TTL,
            public_url: None,
        }
    }

    /// The connection limits, or why they are refused (a zero, or more connections than a
    /// semaphore can count).
    fn limits(&self) -> Result<crate::listener::Limits, ServeError> {
        let durations = [
            ("header_timeout", self.header_timeout),
            ("body_timeout", self.body_timeout),
            ("idle_timeout", self.idle_timeout),
            ("shutdown_grace", self.shutdown_grace),
            ("hook_body_timeout", self.hook_body_timeout),
        ];
        if let Some((name, _)) = durations.iter().find(|(_, d)| d.is_zero()) {
            return Err(ServeError::Config(format!("{name} must be more than 0")));
        }
        if self.model_lease_ttl < Duration::from_secs(1)
            || self.model_lease_ttl > MAX_MODEL_LEASE_TTL
        {
            return Err(ServeError::Config(format!(
                "model_lease_ttl must be 1 to {} seconds, not {:?}",
                MAX_MODEL_LEASE_TTL.as_secs(),
                self.model_lease_ttl
            )));
        }
        if let Some(url) = &self.public_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(ServeError::Config(format!(
                "the public URL must start with http:// or https://, not {url:?}"
            )));
        }
        if self.hook_requests_per_peer == 0 {
            return Err(ServeError::Config(
                "hook_requests_per_peer must be at least 1".into(),
            ));
        }
        if self.max_connections == 0 || self.max_connections > tokio::sync::Semaphore::MAX_PERMITS {
            return Err(ServeError::Config(format!(
                "max_connections must be between 1 and {}, not {}",
                tokio::sync::Semaphore::MAX_PERMITS,
                self.max_connections
            )));
        }
        Ok(crate::listener::Limits {
            header_timeout: self.header_timeout,
            body_timeout: self.body_timeout,
            idle_timeout: self.idle_timeout,
            max_connections: self.max_connections,
            shutdown_grace: self.shutdown_grace,
        })
    }
}

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The database could not be opened.
    #[error("cannot open the database")]
    Store(#[from] StoreError),
    /// The address could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Serving failed.
    #[error("the server failed")]
    Io(#[from] std::io::Error),
    /// A configuration that is refused.
    #[error("{0}")]
    Config(String),
}

/// A bound, not yet running server.
pub struct Server {
    listener: TcpListener,
    app: App,
    router: axum::Router,
    scheduler_tick: Option<Duration>,
    limits: crate::listener::Limits,
}

impl Server {
    /// Opens the store and binds the listener.
    pub async fn bind(config: Config) -> Result<Server, ServeError> {
        if matches!(config.auth, AuthConfig::InsecureDev) && !config.listen.ip().is_loopback() {
            return Err(ServeError::Config(format!(
                "--insecure-dev turns authentication off, so it only listens on a loopback address, not {}",
                config.listen
            )));
        }
        let limits = config.limits()?;
        let store = Store::open(&config.database_url, &config.store).await?;
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| ServeError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let app = App {
            store,
            auth: Arc::new(Authenticator::new(config.auth.clone())),
            hub: Arc::new(Hub::default()),
            hook_limits: Arc::default(),
            hook_peers: Arc::new(crate::hook_guard::PeerGate::new(
                config.hook_requests_per_peer,
            )),
            hook_refusals: Arc::default(),
            hook_body_timeout: config.hook_body_timeout,
            body_limit: config.body_limit,
            max_wait: config.max_wait,
            leases: Arc::default(),
            lease_ttl: config.model_lease_ttl,
            keep_alive: config.keep_alive,
            shutdown: CancellationToken::new(),
            public_url: config.public_url.clone(),
        };
        let router = crate::routes::router(app.clone(), config.body_limit, config.telemetry)
            // Outermost: an oversized `Content-Length` is refused before anything reads the body.
            .layer(axum::middleware::from_fn_with_state(
                config.body_limit,
                crate::listener::refuse_oversized,
            ));
        Ok(Server {
            listener,
            app,
            router,
            scheduler_tick: config.scheduler_tick,
            limits,
        })
    }

    /// The address it listens on (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The store the server writes to (shared: what it does shows in [`Store::writer_stats`]).
    pub fn store(&self) -> &Store {
        &self.app.store
    }

    /// The storage backend's name.
    pub fn backend(&self) -> &'static str {
        self.app.store.backend()
    }

    /// Serves until `shutdown` completes, then stops taking connections, ends long-polls and
    /// streams, lets in-flight requests finish (for up to [`Config::shutdown_grace`], then drops
    /// the connections still open), and flushes the store.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        // One token stops it all: the accept loop and every connection's drain, the long-polls
        // and event streams (they watch `App.shutdown`), and the scheduler.
        let cancel = self.app.shutdown.clone();
        let signal = async move {
            shutdown.await;
            tracing::info!("shutting down: no new connections; finishing requests in flight");
            cancel.cancel();
        };
        let scheduler = self
            .scheduler_tick
            .map(|every| tokio::spawn(crate::scheduler::run(self.app.clone(), every)));
        // The A2A push dispatcher runs with the scheduler and stops at the same signal.
        let pushes = tokio::spawn(crate::a2a_push::run(self.app.clone()));
        let serving = crate::listener::serve(
            self.listener,
            self.router,
            self.limits,
            self.app.shutdown.clone(),
        );
        let signal = tokio::spawn(signal);
        // `serve` returns once the token is cancelled and the connections drained.
        serving.await;
        signal.abort();
        // The scheduler stops at the same signal; its tick in flight finishes first.
        self.app.shutdown.cancel();
        if let Some(task) = scheduler {
            let _ = task.await;
        }
        let _ = pushes.await;
        self.app.store.close().await;
        Ok(())
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
