//! Packaging for people who run ninetrix with their own tooling (docker/, docs/deployment.md):
//! `docker/compose.yaml` is a valid compose file, `docker/Dockerfile.binary` turns the built binary
//! into a working `FROM scratch` image offline (and `docker/Dockerfile` builds with the toolchain
//! the workspace declares), and the compose file's `api` service — its command, secrets and
//! healthcheck — serves the checkpoint API on a real Postgres. `postgres:17` cannot be pulled
//! offline, so that test runs only the `api` service, against the test Postgres
//! (`NINETRIX_TEST_POSTGRES_URL`, reached through a relay on the host's bridge address), with an
//! override file for the image and the secret files. Every image, container, volume and network
//! is named after the test and removed by a guard, even when the test fails; the test database is
//! dropped.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use ninetrix_e2e::ninetrix_bin;
use support::docker::{bridge_gateway, docker, inspect, text, wait_for};

/// The repository root (the e2e crate is `tests/`).
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn compose_file() -> PathBuf {
    repo().join("docker").join("compose.yaml")
}

/// Six random hex digits, for names of this run.
fn suffix() -> String {
    ninetrix_proto::ThreadId::new_v7()
        .as_uuid()
        .simple()
        .to_string()
        .chars()
        .rev()
        .take(6)
        .collect()
}

/// `docker-compose` (v1), or `None` when the test is skipped for want of it (a failure with
/// `NINETRIX_REQUIRE_DOCKER_COMPOSE=1`, as CI sets).
fn docker_compose() -> Option<Command> {
    ninetrix_testkit::require(ninetrix_testkit::Need::DockerCompose).map(Command::new)
}

/// An image built from the test's binary with docker/Dockerfile.binary (the classic builder, as
/// CI builds it), removed on drop.
struct Image {
    tag: String,
}

impl Image {
    fn build() -> Image {
        let tag = format!("ninetrix-test-packaging-{}:latest", suffix());
        let image = Image { tag };
        let ctx = tempfile::tempdir().unwrap();
        std::fs::copy(ninetrix_bin(), ctx.path().join("ninetrix")).unwrap();
        let out = Command::new("docker")
            .args(["build", "-q", "-f"])
            .arg(repo().join("docker").join("Dockerfile.binary"))
            .args(["-t", &image.tag])
            .arg(ctx.path())
            .env("DOCKER_BUILDKIT", "0")
            .output()
            .unwrap();
        assert!(out.status.success(), "docker build failed:\n{}", text(&out));
        image
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        docker(&["image", "rm", "-f", &self.tag]);
    }
}

#[test]
fn the_compose_file_is_valid() {
    let Some(mut compose) = docker_compose() else {
        return;
    };
    let out = compose
        .arg("-f")
        .arg(compose_file())
        .args(["config", "-q"])
        .output()
        .unwrap();
    assert!(out.status.success(), "compose config:\n{}", text(&out));
    // No secret value in the file: each comes from a file under docker/secrets/, and that
    // directory ignores everything but its .gitignore and README.
    let yaml = std::fs::read_to_string(compose_file()).unwrap();
    assert!(
        !yaml.contains("POSTGRES_PASSWORD:"),
        "a password in the file"
    );
    for name in [
        "postgres-password",
        "database-url",
        "api-secret",
        "admin-token",
    ] {
        assert!(
            yaml.contains(&format!("file: ./secrets/{name}")),
            "secret {name} is not a file under docker/secrets/"
        );
    }
    let ignore = std::fs::read_to_string(repo().join("docker/secrets/.gitignore")).unwrap();
    assert!(ignore.lines().any(|l| l.trim() == "*"), "{ignore}");
}

#[test]
fn the_image_from_the_binary_runs_the_binary() {
    let image = Image::build();
    let c = inspect(&image.tag);
    assert_eq!(c["Config"]["Entrypoint"], serde_json::json!(["/ninetrix"]));
    assert_eq!(c["RootFS"]["Layers"].as_array().map(Vec::len), Some(1));
    let out = Command::new("docker")
        .args(["run", "--rm", &image.tag, "--version"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let version = String::from_utf8_lossy(&out.stdout);
    assert!(
        version.contains(env!("CARGO_PKG_VERSION")),
        "--version in the image said {version}"
    );

    // The source build uses the toolchain the workspace declares, and both files end in the
    // same final stage.
    let cargo = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    let rust = cargo
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .unwrap()
        .trim_matches('"');
    let source = std::fs::read_to_string(repo().join("docker/Dockerfile")).unwrap();
    assert!(
        source.contains(&format!("FROM rust:{rust}-bookworm AS build")),
        "docker/Dockerfile does not build with rust {rust}"
    );
    assert!(source.contains("cargo build --release --locked -p ninetrix-cli"));
    let binary = std::fs::read_to_string(repo().join("docker/Dockerfile.binary")).unwrap();
    for file in [&source, &binary] {
        assert!(file.contains("FROM scratch\n"));
        assert!(file.contains("ENTRYPOINT [\"/ninetrix\"]"));
    }
}

/// The test Postgres, or `None` when the test is skipped for want of one (a failure with
/// `NINETRIX_REQUIRE_POSTGRES=1`).
fn postgres_url() -> Option<String> {
    ninetrix_testkit::require(ninetrix_testkit::Need::Postgres)
}

fn psql(url: &str, sql: &str) -> Output {
    Command::new("psql")
        .args([url, "-v", "ON_ERROR_STOP=1", "-qc", sql])
        .output()
        .expect("psql is installed where the test Postgres is")
}

/// A fresh database on the test Postgres, dropped on drop.
struct Database {
    admin_url: String,
    name: String,
}

impl Database {
    fn create(admin_url: &str) -> Database {
        let db = Database {
            admin_url: admin_url.to_string(),
            name: format!("nt_packaging_{}", suffix()),
        };
        let out = psql(admin_url, &format!("CREATE DATABASE {}", db.name));
        assert!(out.status.success(), "{}", text(&out));
        db
    }

    fn url(&self) -> String {
        let base = self
            .admin_url
            .rsplit_once('/')
            .map_or(self.admin_url.as_str(), |(b, _)| b);
        format!("{base}/{}", self.name)
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        psql(
            &self.admin_url,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}

/// A compose project of docker/compose.yaml plus an override file; `down -v` and a sweep by the
/// project label on drop.
struct Project {
    name: String,
    dir: tempfile::TempDir,
}

impl Project {
    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new("docker-compose");
        c.args(["-p", &self.name, "-f"])
            .arg(compose_file())
            .arg("-f")
            .arg(self.dir.path().join("override.yaml"))
            .args(args);
        c
    }

    fn compose(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        self.compose(&["down", "-v", "-t", "2"]);
        let label = format!("label=com.docker.compose.project={}", self.name);
        for id in docker(&["ps", "-aq", "--filter", &label]).split_whitespace() {
            docker(&["rm", "-f", id]);
        }
        for kind in ["volume", "network"] {
            for id in docker(&[kind, "ls", "-q", "--filter", &label]).split_whitespace() {
                docker(&[kind, "rm", id]);
            }
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The status of `GET url` (with a bearer token), or `None` when nothing answered.
fn get(rt: &tokio::runtime::Runtime, url: &str, token: Option<&str>) -> Option<u16> {
    rt.block_on(async {
        let client = reqwest::Client::new();
        let mut request = client.get(url).timeout(Duration::from_secs(5));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send().await.ok().map(|r| r.status().as_u16())
    })
}

/// Relays TCP connections from `gateway:<a free port>` to `target` (the test Postgres, which
/// listens on the host's loopback only) so a container on a compose network reaches it as
/// `host.docker.internal`. Returns the relay's port; it lives as long as the runtime.
fn relay(rt: &tokio::runtime::Runtime, gateway: &str, target: std::net::SocketAddr) -> u16 {
    let listener = rt
        .block_on(tokio::net::TcpListener::bind((gateway, 0)))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    rt.spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    port
}

#[test]
fn the_compose_api_serves_the_checkpoint_api_on_postgres() {
    let Some(admin_url) = postgres_url() else {
        return;
    };
    if docker_compose().is_none() {
        return;
    }
    let image = Image::build();
    let db = Database::create(&admin_url);
    let project = Project {
        name: format!("ntpackaging{}", suffix()),
        dir: tempfile::tempdir().unwrap(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // `postgres:17` cannot be pulled offline: the `api` service runs alone, against the test
    // Postgres through a relay on the host's bridge address.
    let pg = db.url();
    let pg_host = pg
        .split_once('@')
        .and_then(|(_, rest)| rest.split_once('/'))
        .map(|(host, _)| host.to_string())
        .unwrap();
    let target: std::net::SocketAddr = pg_host.parse().expect("the test Postgres URL has IP:port");
    let relay_port = relay(&rt, &bridge_gateway(), target);
    let in_container = pg.replacen(&pg_host, &format!("host.docker.internal:{relay_port}"), 1);

    let secrets = project.dir.path();
    let admin_token = format!("admin-{}", suffix().repeat(6));
    for (name, value) in [
        ("database-url", in_container.clone()),
        ("api-secret", format!("secret-{}", suffix().repeat(6))),
        ("admin-token", admin_token.clone()),
        ("postgres-password", "unused-by-the-api".into()),
    ] {
        std::fs::write(secrets.join(name), format!("{value}\n")).unwrap();
    }
    // The override changes only what the test must: the image, the secret files, a way to the
    // host, and a faster healthcheck interval (its command is the file's).
    let secret = |n: &str| secrets.join(n).display().to_string();
    let over = format!(
        "services:
  api:
    image: {image}
    extra_hosts: [\"host.docker.internal:host-gateway\"]
    healthcheck:
      interval: 1s
secrets:
  postgres-password: {{ file: \"{pw}\" }}
  database-url: {{ file: \"{db}\" }}
  api-secret: {{ file: \"{api}\" }}
  admin-token: {{ file: \"{admin}\" }}
",
        image = image.tag,
        pw = secret("postgres-password"),
        db = secret("database-url"),
        api = secret("api-secret"),
        admin = secret("admin-token"),
    );
    std::fs::write(secrets.join("override.yaml"), over).unwrap();

    // The file's own port variable: published on 127.0.0.1:<a free port>.
    let port = free_port();
    let out = project
        .command(&["up", "-d", "--no-deps", "--no-build", "api"])
        .env("NINETRIX_API_PORT", port.to_string())
        .env_remove("NINETRIX_API_BIND")
        .output()
        .unwrap();
    assert!(out.status.success(), "compose up:\n{}", text(&out));
    let container = docker(&[
        "ps",
        "-aq",
        "--filter",
        &format!("label=com.docker.compose.project={}", project.name),
        "--filter",
        "label=com.docker.compose.service=api",
    ])
    .trim()
    .to_string();
    assert!(!container.is_empty(), "no api container");
    let logs = || docker(&["logs", "--tail", "30", &container]);
    let c = inspect(&container);
    assert_eq!(
        c["HostConfig"]["PortBindings"]["8080/tcp"][0]["HostIp"], "127.0.0.1",
        "published on loopback only"
    );

    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(&rt, &format!("{base}/readyz"), None) != Some(200) {
        assert!(
            Instant::now() < deadline,
            "the API never became ready:\n{}",
            logs()
        );
        assert!(
            inspect(&container)["State"]["Running"] == true,
            "the API container stopped:\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let threads = format!("{base}/v1/threads");
    assert_eq!(get(&rt, &threads, Some(&admin_token)), Some(200));
    assert_eq!(get(&rt, &threads, None), Some(401));
    assert_eq!(get(&rt, &threads, Some("not-the-admin-token")), Some(401));
    // The schema is in the test's database: the API really runs on Postgres.
    let out = Command::new("psql")
        .args([
            &pg,
            "-Atc",
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'",
        ])
        .output()
        .unwrap();
    let tables: u32 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    assert!(tables > 0, "no tables in {}: {}", db.name, text(&out));

    // Docker's healthcheck (the binary itself: no shell in the image) says healthy.
    wait_for("the api healthcheck", Duration::from_secs(20), || {
        inspect(&container)["State"]["Health"]["Status"] == "healthy"
    });
    let c = inspect(&container);
    assert_eq!(c["HostConfig"]["RestartPolicy"]["Name"], "unless-stopped");
    // The secrets are files, not environment or arguments.
    let config = c["Config"].to_string();
    for value in [admin_token.as_str(), in_container.as_str()] {
        assert!(!config.contains(value), "a secret in the container config");
    }
    assert!(
        c["Mounts"]
            .to_string()
            .contains("/run/secrets/database-url"),
        "{}",
        c["Mounts"]
    );

    let out = project.compose(&["down", "-v", "-t", "5"]);
    assert!(out.status.success(), "compose down:\n{}", text(&out));
    assert!(inspect(&container).is_null(), "the container outlived down");
}
