//! The job broker on the real Docker Engine (issue 40): `ninetrix job-broker` as a host process
//! beside a real `ninetrix api`, its pool's network and workspace volumes made by the test.
//! With a runner token of a replica's thread, a job is created, started, read and waited for
//! (its output and exit code), a second create of the same call answers the same job, and the
//! file it wrote is in the replica's volume. Another thread's token does not see it; a token of
//! an agent without job tools is forbidden, a bad token unauthorized. A sleeping job is killed;
//! `max_concurrent` refuses one job too many; a job past its timeout is stopped by the reaper
//! and reported `timed_out`. Every container, volume, network and image the test made goes,
//! even when it fails.

mod support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ninetrix_client::{Client, Token};
use ninetrix_e2e::{ApiProcess, ninetrix_bin};
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::RunnerTokenRequest;
use ninetrix_proto::jobs::{JobOutput, JobState, JobView, THREAD_HEADER};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use support::docker::docker;

const ADMIN: &str = "jobs-broker-admin-token-0123456789";

/// Everything the test made in Docker, removed on drop (a failed assertion included).
struct Made {
    pool: String,
    image: String,
    network: String,
    volumes: Vec<String>,
}

impl Drop for Made {
    fn drop(&mut self) {
        let containers = docker(&[
            "ps",
            "-aq",
            "--filter",
            &format!("label=dev.ninetrix.pool={}", self.pool),
        ]);
        for id in containers.split_whitespace() {
            docker(&["rm", "-f", "-v", id]);
        }
        for v in &self.volumes {
            docker(&["volume", "rm", "-f", v]);
        }
        docker(&["network", "rm", &self.network]);
        docker(&["image", "rm", "-f", &self.image]);
    }
}

/// The broker process, killed on drop.
struct BrokerProcess {
    child: Child,
    url: String,
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `ninetrix api` with a secret and an admin token (not `--insecure-dev`: tokens matter here).
fn api(dir: &Path) -> ApiProcess {
    let secret = dir.join("secret");
    let admin = dir.join("admin-token");
    std::fs::write(&secret, "jobs-broker-secret-0123456789abcdef").unwrap();
    std::fs::write(&admin, ADMIN).unwrap();
    let db = format!("sqlite://{}", dir.join("api.db").display());
    ApiProcess::start(&[
        "--database",
        &db,
        "--secret-file",
        &secret.display().to_string(),
        "--admin-token-file",
        &admin.display().to_string(),
    ])
}

async fn broker(config: &Value, api_url: &str) -> BrokerProcess {
    let port = free_port();
    let child = Command::new(ninetrix_bin())
        .args(["job-broker", "--listen", &format!("127.0.0.1:{port}")])
        .env("AGENTFILE_JOBS_CONFIG", config.to_string())
        .env("AGENTFILE_API_URL", api_url)
        .env("NINETRIX_LOG_FORMAT", "json")
        .stdout(Stdio::null())
        .spawn()
        .expect("ninetrix job-broker starts");
    let broker = BrokerProcess {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = http.get(format!("{}/healthz", broker.url)).send().await
            && r.status() == StatusCode::OK
        {
            return broker;
        }
        assert!(
            Instant::now() < deadline,
            "the broker never answered /healthz"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A runner token of a new thread labelled with `pool`, `agent` and replica 1.
async fn token(admin: &Client, pool: &str, agent: &str) -> (ThreadId, String) {
    let thread = ThreadId::new_v7();
    let minted = admin
        .mint_runner_token(&RunnerTokenRequest {
            thread_id: thread,
            pool: Some(pool.into()),
            agent: Some(agent.into()),
            replica: Some(1),
        })
        .await
        .unwrap();
    (thread, minted.token)
}

/// A caller of the broker: a thread and its token.
struct Runner<'a> {
    http: &'a reqwest::Client,
    url: &'a str,
    thread: ThreadId,
    token: String,
}

impl Runner<'_> {
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(&self.token)
            .header(THREAD_HEADER, self.thread.to_string());
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.expect("the broker answers");
        let status = resp.status();
        let body = resp.json().await.unwrap_or(Value::Null);
        (status, body)
    }

    async fn create(&self, key: &str, command: &str, timeout: Option<u64>) -> (StatusCode, Value) {
        let mut body = json!({"key": key, "command": command, "turn": 1});
        if let Some(t) = timeout {
            body["timeout_secs"] = t.into();
        }
        self.call(Method::POST, "/v1/jobs", Some(body)).await
    }

    async fn view(&self, method: Method, path: &str, body: Option<Value>) -> JobView {
        let (status, body) = self.call(method, path, body).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
        serde_json::from_value(body).unwrap()
    }

    /// Waits (the broker's wait, a few seconds at a time) until the job exited, at most `limit`.
    async fn until_exited(&self, id: &str, limit: Duration) -> JobView {
        let deadline = Instant::now() + limit;
        loop {
            let view = self
                .view(
                    Method::POST,
                    &format!("/v1/jobs/{id}/wait"),
                    Some(json!({"timeout_secs": 5})),
                )
                .await;
            if view.state == JobState::Exited {
                return view;
            }
            assert!(
                Instant::now() < deadline,
                "job {id} still {:?} after {limit:?}",
                view.state
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_run_beside_the_runner_in_its_workspace_within_their_limits() {
    let suffix: String = ThreadId::new_v7()
        .as_uuid()
        .simple()
        .to_string()
        .chars()
        .rev()
        .take(6)
        .collect();
    let pool = format!("tjobs{suffix}");
    let made = Made {
        image: format!("ninetrix-test-jobs:{pool}"),
        network: format!("ninetrix-{pool}"),
        volumes: vec![format!("ninetrix-{pool}-coder-1-workspace")],
        pool: pool.clone(),
    };
    support::docker::shell_image(&made.image, &["sleep"]);
    docker(&[
        "network",
        "create",
        "--label",
        &format!("dev.ninetrix.pool={pool}"),
        &made.network,
    ]);
    for v in &made.volumes {
        docker(&[
            "volume",
            "create",
            "--label",
            &format!("dev.ninetrix.pool={pool}"),
            v,
        ]);
    }
    let dir = tempfile::tempdir().unwrap();
    let api = api(dir.path());
    let http = ninetrix_client::http_client();
    let admin = Client::new(http.clone(), &api.url, Some(Token::new(ADMIN)));
    let config = json!({
        "pool": pool,
        "agents": {"coder": {
            "image": made.image,
            "network": made.network,
            "env": ["GREETING=hello"],
            "max_concurrent": 2,
            "default_timeout_secs": 600,
            "cpus": 0.5,
            "memory_bytes": 64 << 20,
            "replicas": 1,
            "security": serde_json::to_value(ninetrix_agentfile::security::Security::default()).unwrap(),
            "isolation": null
        }}
    });
    let broker = broker(&config, &api.url).await;
    let (thread, tok) = token(&admin, &pool, "coder").await;
    let runner = Runner {
        http: &http,
        url: &broker.url,
        thread,
        token: tok,
    };

    // Create (not started), start, read, wait: the output and the exit code.
    let command =
        "echo $GREETING from $(pwd); echo oops >&2; echo kept > /workspace/out.txt; exit 3";
    let (status, created) = runner.create("t1:call_1", command, None).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let job: JobView = serde_json::from_value(created).unwrap();
    assert_eq!(
        (job.state, job.command.as_str()),
        (JobState::Created, command)
    );
    let id = job.id.to_string();
    let container = format!("ninetrix-{pool}-job-{id}");
    let c = support::docker::inspect(&container);
    assert_eq!(c["Config"]["User"], "65532:65532");
    assert_eq!(c["HostConfig"]["ReadonlyRootfs"], true);
    assert_eq!(c["HostConfig"]["CapDrop"], json!(["ALL"]));
    assert_eq!(c["HostConfig"]["NetworkMode"], json!(made.network));
    assert_eq!(c["HostConfig"]["RestartPolicy"]["Name"], "no");
    assert_eq!(
        c["Config"]["Labels"]["dev.ninetrix.job.thread"],
        json!(thread.to_string())
    );
    assert!(
        !c["Config"]["Env"].to_string().contains(&runner.token),
        "no token in the job's environment"
    );
    let started = runner
        .view(Method::POST, &format!("/v1/jobs/{id}/start"), None)
        .await;
    assert_ne!(started.state, JobState::Created);
    let ended = runner.until_exited(&id, Duration::from_secs(60)).await;
    assert_eq!(ended.exit_code, Some(3), "{ended:?}");
    assert!(!ended.timed_out);
    let (status, out) = runner
        .call(Method::GET, &format!("/v1/jobs/{id}/output"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    let out: JobOutput = serde_json::from_value(out).unwrap();
    assert!(out.text.contains("hello from /workspace\n"), "{out:?}");
    assert!(out.text.contains("oops\n"), "{out:?}");
    assert_eq!((out.from, out.next, out.cut), (0, 2, false));
    // Starting it again changes nothing.
    let again = runner
        .view(Method::POST, &format!("/v1/jobs/{id}/start"), None)
        .await;
    assert_eq!((again.state, again.exit_code), (JobState::Exited, Some(3)));

    // The same call again: the same job, one container.
    let (status, same) = runner.create("t1:call_1", command, None).await;
    assert_eq!(status, StatusCode::OK, "{same}");
    assert_eq!(same["id"], json!(id));
    let with_id = docker(&[
        "ps",
        "-aq",
        "--filter",
        &format!("label=dev.ninetrix.job={id}"),
    ]);
    assert_eq!(with_id.split_whitespace().count(), 1);

    // The file it wrote is in the replica's volume.
    let mountpoint = docker(&[
        "volume",
        "inspect",
        "-f",
        "{{.Mountpoint}}",
        &made.volumes[0],
    ]);
    let written = std::fs::read_to_string(Path::new(mountpoint.trim()).join("out.txt")).unwrap();
    assert_eq!(written, "kept\n");

    // Another thread of the same agent does not see it.
    let (other_thread, other_token) = token(&admin, &pool, "coder").await;
    let other = Runner {
        http: &http,
        url: &broker.url,
        thread: other_thread,
        token: other_token.clone(),
    };
    let (status, body) = other
        .call(Method::GET, &format!("/v1/jobs/{id}"), None)
        .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::NOT_FOUND, &json!("not_found")),
        "{body}"
    );
    let (status, body) = other.call(Method::GET, "/v1/jobs", None).await;
    assert_eq!((status, body), (StatusCode::OK, json!([])));
    // A token sent for a thread that is not its own is refused by the API: unauthorized.
    let borrowed = Runner {
        http: &http,
        url: &broker.url,
        thread,
        token: other_token,
    };
    let (status, body) = borrowed.call(Method::GET, "/v1/jobs", None).await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::UNAUTHORIZED, &json!("unauthorized")),
        "{body}"
    );
    // An agent without job tools: forbidden, naming it.
    let (writer_thread, writer_token) = token(&admin, &pool, "writer").await;
    let writer = Runner {
        http: &http,
        url: &broker.url,
        thread: writer_thread,
        token: writer_token,
    };
    let (status, body) = writer.create("t1:w", "echo no", None).await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::FORBIDDEN, &json!("forbidden")),
        "{body}"
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains(&format!("agent writer has no job tools in pool {pool}")),
        "{body}"
    );
    // A bad token, and none at all: unauthorized.
    let bad = Runner {
        http: &http,
        url: &broker.url,
        thread,
        token: "nxr2.garbage.token".into(),
    };
    let (status, body) = bad.call(Method::GET, "/v1/jobs", None).await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::UNAUTHORIZED, &json!("unauthorized")),
        "{body}"
    );
    let resp = http
        .get(format!("{}/v1/jobs", broker.url))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);

    // A sleeping job is killed; two jobs at once are the most: the third is refused.
    let (status, body) = runner.create("t2:sleep", "sleep 300", None).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let sleeper = body["id"].as_str().unwrap().to_string();
    let running = runner
        .view(Method::POST, &format!("/v1/jobs/{sleeper}/start"), None)
        .await;
    assert_eq!(running.state, JobState::Running);
    let (status, body) = runner.create("t2:idle", "sleep 300", None).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = runner.create("t2:third", "sleep 300", None).await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::TOO_MANY_REQUESTS, &json!("too_many_jobs")),
        "{body}"
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("2 of 2 jobs of agent coder run"),
        "{body}"
    );
    let killed = runner
        .view(Method::POST, &format!("/v1/jobs/{sleeper}/kill"), None)
        .await;
    assert_eq!(killed.state, JobState::Exited, "{killed:?}");
    assert!(!killed.timed_out);
    // Killing it again is the same answer.
    let again = runner
        .view(Method::POST, &format!("/v1/jobs/{sleeper}/kill"), None)
        .await;
    assert_eq!(again.state, JobState::Exited);

    // A job past its timeout is stopped by the reaper and says so.
    let (status, body) = runner.create("t3:slow", "sleep 120", Some(2)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let slow = body["id"].as_str().unwrap().to_string();
    runner
        .view(Method::POST, &format!("/v1/jobs/{slow}/start"), None)
        .await;
    let ended = runner.until_exited(&slow, Duration::from_secs(60)).await;
    assert!(ended.timed_out, "{ended:?}");

    // The thread's jobs, oldest first.
    let (status, all) = runner.call(Method::GET, "/v1/jobs", None).await;
    assert_eq!(status, StatusCode::OK, "{all}");
    let ids: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 4, "{all}");
    assert_eq!(
        (ids[0], ids[1], ids[3]),
        (id.as_str(), sleeper.as_str(), slow.as_str())
    );

    drop(broker);
    drop(api);
    drop(made);
}
