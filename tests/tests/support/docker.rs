//! Pools on the real Docker Engine, for the tests that drive `ninetrix up`: each [`Pool`] has its
//! own name, `$AGENTFILE_HOME`, local API container (`NINETRIX_API_CONTAINER`) and API port, and
//! cleans up by label even when its test fails. Docker is read through the `docker` CLI (the
//! product itself never shells out to it).

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use ninetrix_e2e::ninetrix_bin;
use serde_json::Value;

pub(crate) const SECRET: &str = "s3cr3t-value-for-the-test-4242";

pub(crate) struct Pool {
    pub(crate) name: String,
    pub(crate) dir: tempfile::TempDir,
    /// Whether the CLI derives the local API's name and port from the home itself (neither
    /// `NINETRIX_API_CONTAINER` nor `NINETRIX_API_PORT` set), as a user's machine does.
    pub(crate) derived_api: bool,
}

impl Pool {
    pub(crate) fn new(tag: &str) -> Pool {
        let suffix: String = ninetrix_proto::ThreadId::new_v7()
            .as_uuid()
            .simple()
            .to_string()
            .chars()
            .rev()
            .take(6)
            .collect();
        Pool {
            name: format!("t{tag}{suffix}"),
            dir: tempfile::tempdir().unwrap(),
            derived_api: false,
        }
    }

    /// A pool whose home gets the API container and port the CLI derives from it (no
    /// `NINETRIX_API_CONTAINER`, no `NINETRIX_API_PORT`); cleaned up by the home label.
    pub(crate) fn with_derived_api(tag: &str) -> Pool {
        let mut pool = Pool::new(tag);
        pool.derived_api = true;
        pool
    }

    /// The home as the API container's `dev.ninetrix.home` label carries it (absolute).
    pub(crate) fn home_label(&self) -> String {
        std::path::absolute(self.home())
            .unwrap()
            .to_string_lossy()
            .trim_end_matches('/')
            .to_string()
    }

    /// The local API container of this pool's home, found by its home label.
    pub(crate) fn api_container(&self) -> Option<String> {
        docker(&[
            "ps",
            "-a",
            "--filter",
            &format!("label=dev.ninetrix.home={}", self.home_label()),
            "--format",
            "{{.Names}}",
        ])
        .split_whitespace()
        .next()
        .map(str::to_string)
    }

    /// The environment the binary gets (the home, and the API's name and port unless derived).
    fn apply_env(&self, c: &mut Command) {
        c.env("AGENTFILE_HOME", self.home())
            .env("TEST_SECRET", SECRET)
            .env_remove("AGENTFILE_API_URL");
        if self.derived_api {
            c.env_remove("NINETRIX_API_CONTAINER")
                .env_remove("NINETRIX_API_PORT");
        } else {
            c.env(
                "NINETRIX_API_CONTAINER",
                format!("ninetrix-api-{}", self.name),
            )
            .env("NINETRIX_API_PORT", "0");
        }
    }

    pub(crate) fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// The admin client of the pool's local API (`api_container`, its published port), with the
    /// admin token from `$AGENTFILE_HOME/api/admin-token`.
    pub(crate) fn admin_client(&self, api_container: &str) -> ninetrix_client::Client {
        let port = api_port(api_container).expect("the API container publishes its port");
        let token = std::fs::read_to_string(self.home().join("api").join("admin-token")).unwrap();
        ninetrix_client::Client::new(
            ninetrix_client::http_client(),
            &format!("http://127.0.0.1:{port}"),
            Some(ninetrix_client::Token::new(token.trim().to_string())),
        )
    }

    pub(crate) fn file(&self) -> PathBuf {
        self.dir.path().join("agentfile.yaml")
    }

    pub(crate) fn write(&self, yaml: &str) {
        std::fs::write(self.file(), format!("name: {}\n{yaml}", self.name)).unwrap();
    }

    pub(crate) fn ninetrix(&self, args: &[&str]) -> Output {
        let mut c = Command::new(ninetrix_bin());
        c.args(args);
        self.apply_env(&mut c);
        c.output().unwrap()
    }

    pub(crate) fn up(&self, extra: &[&str]) -> String {
        let file = self.file();
        let mut args = vec!["up", "-f", file.to_str().unwrap()];
        args.extend_from_slice(extra);
        let out = self.ninetrix(&args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "up failed:\n{text}");
        text
    }

    /// The pool's state file (`$AGENTFILE_HOME/pools/<pool>.json`).
    pub(crate) fn state_file(&self) -> PathBuf {
        self.home()
            .join("pools")
            .join(format!("{}.json", self.name))
    }

    pub(crate) fn state(&self) -> Value {
        serde_json::from_slice(&std::fs::read(self.state_file()).unwrap()).unwrap()
    }

    pub(crate) fn container(&self, agent: &str, replica: u32) -> String {
        format!("ninetrix-{}-{agent}-{replica}", self.name)
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Found before `down` removes it (a derived name is found by its home label).
        let derived = self.derived_api.then(|| self.api_container()).flatten();
        let _ = self.ninetrix(&[
            "down",
            "-p",
            &self.name.clone(),
            "--purge",
            "--api",
            "--volumes",
            "-t",
            "2",
        ]);
        // Whatever is left, by label.
        let ids = docker(&[
            "ps",
            "-aq",
            "--filter",
            &format!("label=dev.ninetrix.pool={}", self.name),
        ]);
        // `-v`: with their anonymous volumes (`/run/secrets`).
        for id in ids.split_whitespace() {
            docker(&["rm", "-fv", id]);
        }
        docker(&["rm", "-fv", &format!("ninetrix-api-{}", self.name)]);
        docker(&["volume", "rm", &format!("ninetrix-api-{}-data", self.name)]);
        if let Some(api) = derived {
            docker(&["rm", "-fv", &api]);
            docker(&["volume", "rm", &format!("{api}-data")]);
        }
        for n in docker(&[
            "network",
            "ls",
            "-q",
            "--filter",
            &format!("label=dev.ninetrix.pool={}", self.name),
        ])
        .split_whitespace()
        {
            docker(&["network", "rm", n]);
        }
        for v in docker(&[
            "volume",
            "ls",
            "-q",
            "--filter",
            &format!("label=dev.ninetrix.pool={}", self.name),
        ])
        .split_whitespace()
        {
            docker(&["volume", "rm", v]);
        }
        for v in docker(&[
            "volume",
            "ls",
            "-q",
            "--filter",
            &format!("name=ninetrix-{}-", self.name),
        ])
        .split_whitespace()
        {
            docker(&["volume", "rm", v]);
        }
    }
}

/// A command's stdout and stderr, one after the other (for assertions and their messages).
pub(crate) fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

pub(crate) fn docker(args: &[&str]) -> String {
    let out = Command::new("docker")
        .args(args)
        .output()
        .expect("the docker CLI is installed for tests");
    String::from_utf8_lossy(&out.stdout).to_string()
}

pub(crate) fn inspect(name: &str) -> Value {
    let v: Value = serde_json::from_str(&docker(&["inspect", name])).unwrap_or(Value::Null);
    v[0].clone()
}

pub(crate) fn env_of(c: &Value, key: &str) -> Option<String> {
    c["Config"]["Env"]
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .find_map(|e| e.strip_prefix(&format!("{key}=")).map(str::to_string))
}

pub(crate) fn wait_for(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub(crate) fn kill_host_pid(container: &str) {
    let c = inspect(container);
    let pid = c["State"]["Pid"].as_i64().unwrap_or(0);
    assert!(
        pid > 0,
        "{container} is not running: {} restarts, state {}\nlogs:\n{}",
        c["RestartCount"],
        c["State"],
        docker(&["logs", "--tail", "20", container])
    );
    assert!(
        Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
}

impl Pool {
    /// `ninetrix invoke -p <pool> --agent <agent> -m <message> <extra…>` (replica 1 unless
    /// `extra` says otherwise).
    pub(crate) fn invoke(&self, agent: &str, message: &str, extra: &[&str]) -> Output {
        let mut args = vec!["invoke", "-p", &self.name, "--agent", agent, "-m", message];
        args.extend_from_slice(extra);
        self.ninetrix(&args)
    }

    /// The binary with this pool's environment, for a test that needs the `Command`.
    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(ninetrix_bin());
        c.args(args).env("NO_COLOR", "1");
        self.apply_env(&mut c);
        c
    }

    /// The trace of session `key` of `agent`, as JSON values (`trace --session KEY --json`).
    pub(crate) fn session_events(&self, agent: &str, key: &str) -> Vec<Value> {
        let out = self
            .command(&[
                "trace",
                "-p",
                &self.name,
                "--agent",
                agent,
                "--session",
                key,
                "--json",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The trace of an agent's first replica, as JSON values.
    pub(crate) fn events(&self, agent: &str) -> Vec<Value> {
        self.replica_events(agent, 1)
    }

    /// The trace of replica `n` of an agent, as JSON values.
    pub(crate) fn replica_events(&self, agent: &str, n: u32) -> Vec<Value> {
        let n = n.to_string();
        let out = self
            .command(&[
                "trace",
                "-p",
                &self.name,
                "--agent",
                agent,
                "--replica",
                &n,
                "--json",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

/// Builds the image a team would have for tests/src/bin/mcp_lines_server.rs: `FROM scratch` +
/// the static server, tagged `tag` (classic builder: offline).
pub(crate) fn lines_server_image(tag: &str) {
    let ctx = tempfile::tempdir().unwrap();
    std::fs::copy(
        env!("CARGO_BIN_EXE_mcp-lines-server"),
        ctx.path().join("mcp-lines-server"),
    )
    .unwrap();
    std::fs::write(
        ctx.path().join("Dockerfile"),
        "FROM scratch\nCOPY mcp-lines-server /mcp-lines-server\n",
    )
    .unwrap();
    build_image(ctx.path(), tag);
}

/// Builds the context at `ctx` (its `Dockerfile`) as `tag`, with the classic builder: offline.
pub(crate) fn build_image(ctx: &std::path::Path, tag: &str) {
    let out = Command::new("docker")
        .args(["build", "-q", "-t", tag])
        .arg(ctx)
        .env("DOCKER_BUILDKIT", "0")
        .output()
        .unwrap();
    assert!(out.status.success(), "docker build: {}", text(&out));
}

/// Runs `f` to completion on a current-thread runtime (a synchronous test asking the API).
pub(crate) fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// The lines server's journal in `container` (run with `--dir /data`): the tools of the calls
/// it started, in order (empty while there is none).
pub(crate) fn lines_journal(container: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("journal");
    let ok = Command::new("docker")
        .args(["cp", &format!("{container}:/data/journal")])
        .arg(&dest)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success();
    if !ok {
        return Vec::new();
    }
    std::fs::read_to_string(dest)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| v["tool"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The API container's published host port (`127.0.0.1:PORT` → PORT).
pub(crate) fn api_port(container: &str) -> Option<u16> {
    docker(&["port", container, "8080/tcp"])
        .lines()
        .next()
        .and_then(|l| l.rsplit(':').next())
        .and_then(|p| p.trim().parse().ok())
}

/// The host's address on Docker's default bridge (what `host-gateway` resolves to): the
/// network's gateway, or, when IPAM does not say (the usual `docker0`), the subnet's first
/// address, which Docker gives the bridge.
pub(crate) fn bridge_gateway() -> String {
    let ipam: serde_json::Value = serde_json::from_str(&docker(&[
        "network",
        "inspect",
        "bridge",
        "--format",
        "{{json .IPAM.Config}}",
    ]))
    .expect("docker network inspect bridge");
    let config = &ipam[0];
    if let Some(gateway) = config["Gateway"].as_str().filter(|g| !g.is_empty()) {
        return gateway.to_string();
    }
    let subnet = config["Subnet"].as_str().expect("the bridge has a subnet");
    let network: std::net::Ipv4Addr = subnet.split('/').next().unwrap().parse().unwrap();
    std::net::Ipv4Addr::from(u32::from(network) + 1).to_string()
}

/// Builds `tag`: `FROM scratch` with the host's `/bin/sh`, the programs `extra` names (from
/// `/bin`, e.g. `sleep`), the shared libraries they load and a `/workspace` of mode 1777 — the
/// smallest image a `shell` tool or a job runs in (no registry is reachable here).
pub(crate) fn shell_image(tag: &str, extra: &[&str]) {
    let ctx = tempfile::tempdir().unwrap();
    let mut files: Vec<(std::path::PathBuf, String)> = Vec::new();
    let mut add = |program: &str, at: &str| {
        let bin = std::fs::canonicalize(program).unwrap();
        files.push((bin.clone(), at.to_string()));
        let ldd = Command::new("ldd").arg(&bin).output().unwrap();
        for line in String::from_utf8_lossy(&ldd.stdout).lines() {
            // `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)` or `/lib64/ld-linux-x86-64.so.2 (0x…)`
            let path = line
                .split("=>")
                .last()
                .and_then(|s| s.split_whitespace().next())
                .filter(|p| p.starts_with('/'));
            if let Some(path) = path {
                files.push((
                    std::path::Path::new(path).to_path_buf(),
                    path[1..].to_string(),
                ));
            }
        }
    };
    add("/bin/sh", "bin/sh");
    for program in extra {
        add(&format!("/bin/{program}"), &format!("bin/{program}"));
    }
    files.sort_by(|a, b| a.1.cmp(&b.1));
    files.dedup_by(|a, b| a.1 == b.1);
    // Labelled with its tag: two tests building it at once get two images, never one shared
    // ID that one test's cleanup would pull from under the other.
    let mut dockerfile = format!("FROM scratch\nLABEL dev.ninetrix.test={tag}\n");
    for (from, to) in &files {
        let dest = ctx.path().join(to);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(from, &dest).unwrap();
        dockerfile.push_str(&format!("COPY {to} /{to}\n"));
    }
    // A `/workspace` of mode 1777, as a pool's images have, which Docker copies into an empty
    // volume mounted there (a tar keeps the directory's own mode; COPY of a directory would not).
    let skeleton = ctx.path().join("skeleton");
    std::fs::create_dir_all(skeleton.join("workspace")).unwrap();
    std::fs::set_permissions(
        skeleton.join("workspace"),
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )
    .unwrap();
    let status = Command::new("tar")
        .arg("-C")
        .arg(&skeleton)
        .arg("-cf")
        .arg(ctx.path().join("skeleton.tar"))
        .arg("workspace")
        .status()
        .unwrap();
    assert!(status.success());
    dockerfile.push_str("ADD skeleton.tar /\n");
    std::fs::write(ctx.path().join("Dockerfile"), dockerfile).unwrap();
    build_image(ctx.path(), tag);
}
