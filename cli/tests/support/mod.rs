//! What the CLI's API tests share: a real checkpoint API in this process (SQLite in a temp
//! directory, admin and runner tokens) and the `ninetrix` binary pointed at it with
//! `AGENTFILE_API_URL` — no Docker is needed, and none is started.

#![allow(dead_code)]

use assert_cmd::Command;
use ninetrix_api::{AuthConfig, Config, Secret, Server};
use ninetrix_client::{Client, Token};

/// The API's admin token.
pub(crate) const ADMIN: &str = "cli-test-admin-token-0123456789";

/// A running API and the runtime serving it (the binary's runs block this thread).
pub(crate) struct TestApi {
    pub(crate) url: String,
    pub(crate) runtime: tokio::runtime::Runtime,
    pub(crate) home: tempfile::TempDir,
    _db: tempfile::TempDir,
}

impl TestApi {
    pub(crate) fn start() -> TestApi {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let db = tempfile::tempdir().unwrap();
        let mut config = Config::new(
            format!("sqlite://{}", db.path().join("api.db").display()),
            AuthConfig::Tokens {
                secret: Secret::new(b"cli-test-secret-for-runner-tokens".to_vec()),
                admin_token: Secret::new(ADMIN.as_bytes().to_vec()),
            },
        );
        config.listen = "127.0.0.1:0".parse().unwrap();
        let server = runtime
            .block_on(Server::bind(config))
            .expect("server starts");
        let url = format!("http://{}", server.local_addr().unwrap());
        runtime.spawn(async move {
            server
                .run(std::future::pending::<()>())
                .await
                .expect("server runs");
        });
        TestApi {
            url,
            runtime,
            home: tempfile::tempdir().unwrap(),
            _db: db,
        }
    }

    /// A client of the API with `token`.
    pub(crate) fn client(&self, token: &str) -> Client {
        Client::new(
            ninetrix_client::http_client(),
            &self.url,
            Some(Token::new(token)),
        )
    }

    /// `ninetrix` in a home of its own, on this API as the admin, with plain fixed-width output.
    pub(crate) fn ninetrix(&self) -> Command {
        let mut cmd = Command::new(assert_cmd::cargo::cargo_bin!("ninetrix"));
        cmd.current_dir(self.home.path())
            .env("AGENTFILE_HOME", self.home.path())
            .env("AGENTFILE_API_URL", &self.url)
            .env("AGENTFILE_ADMIN_TOKEN", ADMIN)
            .env("USER", "tester")
            .env("COLUMNS", "200")
            .env("NO_COLOR", "1")
            .env_remove("CLICOLOR_FORCE");
        cmd
    }
}
