//! Containing an agent on the real Docker Engine (issue 39): under the hardened defaults a
//! `shell` tool tries to write `/`, read a secret it was not given, raise a limit only a
//! capability allows, and fork-bomb — each is refused, the refusal is in the tool's result, and
//! the agent answers the next message; the secret it was given by name reaches it. An agentfile
//! naming a runtime the engine lacks is refused before anything is created. An agent with
//! `network.egress` reaches the host it allows through the pool's proxy, is refused another
//! (the refusal in its tool result, `ps` and `logs`), and has no route around the proxy.

mod support;

use std::time::Duration;

use ninetrix_proto::ThreadId;
use support::docker::{Pool, SECRET, block_on, docker, inspect, text, wait_for};

#[test]
fn a_hostile_shell_is_refused_each_time_and_the_agent_keeps_answering() {
    let pool = Pool::new("sec");
    let image = format!("ninetrix-test-shell:{}", pool.name);
    support::docker::shell_image(&image, &[]);
    let call = |command: &str| {
        format!(
            "        - tool_calls: [{{ name: shell, args: {{ command: {} }} }}]\n",
            serde_json::to_string(command).unwrap()
        )
    };
    let script = [
        call("echo pwned > /pwned; echo wrote=$?"),
        call("read -r k < /run/secrets/TEST_SECRET; echo read=$? got=$k"),
        call(
            "while read -r k v; do case $k in CapEff:|CapPrm:|CapBnd:) echo $k$v;; esac; done < /proc/self/status",
        ),
        call("f() { f | f & }; f; echo bombed"),
        call("echo kept > /workspace/ok; read -r x < /workspace/ok; echo $x given=$GIVEN"),
    ]
    .concat();
    pool.write(&format!(
        "agents:
  worker:
    runtime:
      provider: scripted
      image: {image}
      tool_timeout: 30
      script:
{script}        - text: Done.
    tools: [{{ name: shell, secrets: [GIVEN] }}]
    secrets: [TEST_SECRET]
"
    ));
    let given = "given-to-shell-7731";
    let up = pool
        .command(&["up", "-f", pool.file().to_str().unwrap()])
        .env("GIVEN", given)
        .output()
        .unwrap();
    assert!(up.status.success(), "up: {}", text(&up));
    let c = inspect(&pool.container("worker", 1));
    assert_eq!(c["Config"]["User"], "65532:65532");
    assert_eq!(c["HostConfig"]["ReadonlyRootfs"], true);

    let out = pool.invoke("worker", "go", &["--timeout", "120"]);
    assert!(out.status.success(), "invoke: {}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "Done.");
    let results = tool_results(&pool, "worker", "shell");
    assert_eq!(results.len(), 5, "{results:#?}");
    let has = |i: usize, needle: &str| {
        assert!(
            results[i].contains(needle),
            "call {i}: {needle} in {:?}",
            results[i]
        );
    };
    // The root filesystem is read-only (and not the tool's to write in any case).
    has(0, "wrote=");
    assert!(!results[0].contains("wrote=0"), "{}", results[0]);
    // The runner's secrets are out of the tool's reach (Landlock), though the runner reads them.
    has(1, "got=\n");
    assert!(!results[1].contains("read=0"), "{}", results[1]);
    assert!(!results[1].contains(SECRET), "{}", results[1]);
    // No capability now, and none to gain: the bounding set is empty too.
    for set in ["CapEff:", "CapPrm:", "CapBnd:"] {
        has(2, &format!("{set}0000000000000000"));
    }
    // The fork bomb hit the pids limit and died with its call.
    has(3, "bombed");
    // The workspace is writable, and the secret given to `shell` by name arrived.
    has(4, &format!("kept given={given}"));
    assert!(
        docker(&[
            "exec",
            &pool.container("worker", 1),
            "/bin/sh",
            "-c",
            "echo alive"
        ])
        .contains("alive"),
        "the container still runs"
    );
    // The agent keeps working: a second message gets its answer.
    let again = pool.invoke("worker", "again", &["--timeout", "60"]);
    assert!(again.status.success(), "invoke again: {}", text(&again));

    // The agent image `up` built on the test's base image, then that base (the pool itself is
    // removed by `Pool`'s drop).
    let agent_image = c["Image"].as_str().unwrap_or_default().to_string();
    drop(pool);
    docker(&["image", "rm", "-f", &agent_image]);
    docker(&["image", "rm", "-f", &image]);
}

#[test]
fn a_runtime_the_engine_lacks_is_refused_before_anything_is_created() {
    let pool = Pool::new("rt");
    pool.write(
        "agents:
  boxed:
    runtime: { provider: scripted, script: [hi], isolation: ninetrix-no-such-runtime }
",
    );
    let out = pool.ninetrix(&["up", "-f", pool.file().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let said = text(&out);
    assert!(
        said.contains("agent `boxed` asks for `ninetrix-no-such-runtime`")
            && said.contains("it has: ")
            && said.contains("nothing was created"),
        "{said}"
    );
    let created = docker(&[
        "ps",
        "-a",
        "-q",
        "--filter",
        &format!("label=dev.ninetrix.pool={}", pool.name),
    ]);
    assert!(created.trim().is_empty(), "containers: {created}");
    let networks = docker(&[
        "network",
        "ls",
        "-q",
        "--filter",
        &format!("name={}", pool.name),
    ]);
    assert!(networks.trim().is_empty(), "networks: {networks}");
    assert!(!pool.state_file().exists(), "no pool file");
}

/// A one-answer HTTP server on the host's Docker bridge address (what `host.docker.internal`
/// is in a container): every request gets `200` and `body`. Returns its port; it serves as long
/// as `rt` runs.
fn bridge_server(rt: &tokio::runtime::Runtime, gateway: &str, body: &'static str) -> u16 {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = rt
        .block_on(tokio::net::TcpListener::bind((gateway, 0)))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    rt.spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf).await;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
    port
}

/// What each call of `tool` in replica 1's thread returned, in order.
fn tool_results(pool: &Pool, agent: &str, tool: &str) -> Vec<String> {
    let client = pool.admin_client(&format!("ninetrix-api-{}", pool.name));
    let thread: ThreadId = pool.state()["agents"][agent]["1"]["thread_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    block_on(client.tool_calls(thread))
        .unwrap()
        .into_iter()
        .filter(|c| c.tool == tool)
        .map(|c| c.result.unwrap_or_default())
        .collect()
}

#[test]
fn an_agent_with_an_egress_allow_list_reaches_only_what_it_allows() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let gateway = support::docker::bridge_gateway();
    let allowed = bridge_server(&rt, &gateway, "hello from the allowed host");
    let denied = bridge_server(&rt, &gateway, "hello from the other host");
    let pool = Pool::new("egr");
    let get = |port: u16| {
        format!(
            "        - tool_calls: [{{ name: http_request, args: {{ url: \"http://host.docker.internal:{port}/\" }} }}]\n"
        )
    };
    let image = format!("ninetrix-test-shell:{}", pool.name);
    support::docker::shell_image(&image, &[]);
    let around = format!(
        "        - tool_calls: [{{ name: shell, args: {{ command: \"HTTP_PROXY= http_proxy= HTTPS_PROXY= https_proxy= /ninetrix health --url http://{gateway}:{allowed}/; echo rc=$?\" }} }}]\n"
    );
    pool.write(&format!(
        "agents:
  fetcher:
    runtime:
      provider: scripted
      image: {image}
      script:
{}{}{around}        - text: Done.
    tools: [http_request, shell]
    network: {{ egress: [\"host.docker.internal:{allowed}\"] }}
",
        get(allowed),
        get(denied)
    ));
    let validate = pool.ninetrix(&["validate", "-f", pool.file().to_str().unwrap()]);
    assert!(
        text(&validate).contains(&format!("host.docker.internal:{allowed} (network.egress)")),
        "{}",
        text(&validate)
    );
    pool.up(&[]);
    let runner = pool.container("fetcher", 1);
    let proxy = format!("ninetrix-{}-fetcher-egress", pool.name);
    let c = inspect(&runner);
    assert_eq!(
        c["HostConfig"]["NetworkMode"],
        inspect(&proxy)["NetworkSettings"]["Networks"][&proxy]["NetworkID"],
        "the runner is on the agent's internal network"
    );

    let out = pool.invoke("fetcher", "go", &["--timeout", "120"]);
    assert!(out.status.success(), "invoke: {}", text(&out));
    let results = tool_results(&pool, "fetcher", "http_request");
    assert_eq!(results.len(), 2, "{results:#?}");
    assert!(
        results[0].contains("hello from the allowed host"),
        "{}",
        results[0]
    );
    assert!(
        results[1].contains("403") && results[1].contains("allow-list"),
        "{}",
        results[1]
    );
    assert!(
        !results[1].contains("hello from the other host"),
        "{}",
        results[1]
    );

    // No way around the proxy for a tool: without it, even the allowed host is out of reach (the
    // internal network still routes to the host's own addresses; the tool sandbox lets tools
    // connect only to the proxy's port).
    let shells = tool_results(&pool, "fetcher", "shell");
    assert_eq!(shells.len(), 1, "{shells:#?}");
    assert!(
        shells[0].contains("not reachable: Permission denied") && shells[0].contains("rc=1"),
        "{}",
        shells[0]
    );

    // The refusal shows on the proxy's `ps` line (its report comes every few seconds) and in
    // its logs.
    let mut line = String::new();
    wait_for(
        "the refusal on the proxy's ps line",
        Duration::from_secs(30),
        || {
            let said = text(&pool.ninetrix(&["ps", "-p", &pool.name]));
            line = said
                .lines()
                .find(|l| l.contains("egress:fetcher") && l.contains("1 refused"))
                .unwrap_or_default()
                .to_string();
            !line.is_empty()
        },
    );
    assert!(
        line.contains(&format!("host.docker.internal:{denied}")) && line.contains(&runner),
        "{line}"
    );
    let logs = pool.ninetrix(&["logs", "-p", &pool.name]);
    assert!(
        text(&logs).contains("egress_refused") && text(&logs).contains(&denied.to_string()),
        "{}",
        text(&logs)
    );

    // `down` removes the proxy and the internal network with the pool; then the agent image `up`
    // built on the test's base image, and that base.
    let agent_image = c["Image"].as_str().unwrap_or_default().to_string();
    drop(pool);
    assert!(
        docker(&["ps", "-aq", "--filter", &format!("name={proxy}")])
            .trim()
            .is_empty()
    );
    assert!(
        docker(&["network", "ls", "-q", "--filter", &format!("name={proxy}")])
            .trim()
            .is_empty()
    );
    docker(&["image", "rm", "-f", &agent_image]);
    docker(&["image", "rm", "-f", &image]);
}
