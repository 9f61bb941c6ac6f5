//! The objects of a pool on Kubernetes, as JSON values (one per object).
//!
//! Per durable agent: a headless Service `<pool>-<agent>` and, per replica `n`, a StatefulSet
//! `<pool>-<agent>-<n>` of one pod. Per batch agent replica: a Job `<pool>-<agent>-<n>`
//! (`backoffLimit: 0`). For the pool: the checkpoint API as a Deployment and a Service
//! `ninetrix-api`. Secrets are referenced by name only; their values are never rendered.
//!
//! Why one StatefulSet per replica and not one with `replicas: N`: the runner reads its thread
//! from `AGENTFILE_THREAD_ID` (environment only) and its runner token from
//! `/run/secrets/AGENTFILE_RUNNER_TOKEN`, and the image is `FROM scratch` (no shell to pick a
//! value by ordinal). A StatefulSet's pods share one template, so they would share one thread
//! and one token. Each replica therefore gets its own StatefulSet (a stable name, a PVC, a pod
//! restarted forever) whose thread ID is derived here, deterministically, from pool, agent and
//! replica ([`thread_id`]), so re-rendering gives the same threads.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use ninetrix_proto::agentfile::{AgentSpec, Agentfile};

/// Label: `app.kubernetes.io/name`.
const NAME: &str = "app.kubernetes.io/name";
/// Label: `app.kubernetes.io/part-of` (the pool).
const PART_OF: &str = "app.kubernetes.io/part-of";
/// Label: `app.kubernetes.io/component` (`api` or `runner`).
const COMPONENT: &str = "app.kubernetes.io/component";
/// The API's Service and Deployment name.
pub(crate) const API_NAME: &str = "ninetrix-api";
/// The API's port.
const API_PORT: u16 = 8080;
/// Where the runner's secrets are mounted (the runner reads `/run/secrets/<NAME>`).
const SECRETS_DIR: &str = "/run/secrets";
/// Where the API's secrets are mounted.
const API_SECRETS_DIR: &str = "/run/secrets/api";
/// The annotation that documents the restart behaviour on every runner pod.
const RESTARTS: &str = "ninetrix.dev/restarts";

/// What the manifests depend on besides the agentfile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RenderOptions {
    /// The namespace written on every object (`None`: none written).
    pub(crate) namespace: Option<String>,
    /// The ninetrix image (runner and API).
    pub(crate) image: String,
    /// The size of each durable replica's workspace PVC (`1Gi`).
    pub(crate) storage: String,
}

impl RenderOptions {
    /// The default image: `ninetrix/runner:<this version>`.
    pub(crate) fn default_image() -> String {
        format!("ninetrix/runner:{}", env!("CARGO_PKG_VERSION"))
    }
}

/// A Kubernetes object name from a ninetrix name (`_` is not allowed in DNS-1123 names).
pub(crate) fn dns(name: &str) -> String {
    name.replace('_', "-")
}

/// The per-agent Secret of model keys and other `secrets:`: `<pool>-<agent>-secrets`.
pub(crate) fn agent_secret(pool: &str, agent: &str) -> String {
    dns(&format!("{pool}-{agent}-secrets"))
}

/// The per-replica Secret of the runner token (and, for a durable agent, the agent token):
/// `<pool>-<agent>-<n>-runner`.
pub(crate) fn runner_secret(pool: &str, agent: &str, replica: u32) -> String {
    dns(&format!("{pool}-{agent}-{replica}-runner"))
}

/// The API's Secret: `<pool>-api` (keys `api-secret`, `admin-token`, `database-url`).
pub(crate) fn api_secret(pool: &str) -> String {
    dns(&format!("{pool}-api"))
}

/// `<pool>-<agent>-<n>`: a replica's StatefulSet or Job.
pub(crate) fn replica_name(pool: &str, agent: &str, replica: u32) -> String {
    dns(&format!("{pool}-{agent}-{replica}"))
}

/// The thread of replica `n` of `agent` in `pool` on Kubernetes: a UUID (version 8) from the
/// SHA-256 of the three, so every render gives the same thread and the tokens minted for it
/// stay valid. Distinct from the random v7 threads `ninetrix up` keeps in its state file.
pub(crate) fn thread_id(pool: &str, agent: &str, replica: u32) -> uuid::Uuid {
    let digest = Sha256::digest(format!("ninetrix k8s thread\0{pool}\0{agent}\0{replica}"));
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes).into_uuid()
}

fn labels(pool: &str, agent: Option<&str>, component: &str) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    m.insert(NAME.into(), json!("ninetrix"));
    m.insert(PART_OF.into(), json!(pool));
    m.insert(COMPONENT.into(), json!(component));
    m.insert(crate::pool::spec::POOL.into(), json!(pool));
    if let Some(agent) = agent {
        m.insert(crate::pool::spec::AGENT.into(), json!(agent));
    }
    m
}

fn metadata(name: &str, labels: &serde_json::Map<String, Value>, opts: &RenderOptions) -> Value {
    let mut m = json!({ "name": name, "labels": labels });
    if let Some(ns) = &opts.namespace {
        m["namespace"] = json!(ns);
    }
    m
}

/// Every object of `pool`, in a stable order: the API first, then each agent in file order.
pub(crate) fn render(af: &Agentfile, pool: &str, opts: &RenderOptions) -> Vec<Value> {
    let mut out = api(pool, opts);
    for spec in &af.agents {
        if spec.execution.durability {
            let mut l = labels(pool, Some(&spec.name), "runner");
            l.remove(COMPONENT);
            let svc_labels = labels(pool, Some(&spec.name), "runner");
            out.push(json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": metadata(&dns(&format!("{pool}-{}", spec.name)), &svc_labels, opts),
                "spec": { "clusterIP": "None", "selector": l },
            }));
        }
        for n in 1..=spec.execution.replicas {
            out.push(if spec.execution.durability {
                stateful_set(spec, pool, n, opts)
            } else {
                job(spec, pool, n, opts)
            });
        }
    }
    out
}

fn api(pool: &str, opts: &RenderOptions) -> Vec<Value> {
    let l = labels(pool, None, "api");
    let secret = api_secret(pool);
    let deployment = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(API_NAME, &l, opts),
        "spec": {
            "replicas": 1,
            "selector": { "matchLabels": l },
            "template": {
                "metadata": { "labels": l },
                "spec": {
                    "containers": [{
                        "name": "api",
                        "image": opts.image,
                        "command": ["/ninetrix", "api"],
                        "args": [
                            "--listen", format!("0.0.0.0:{API_PORT}"),
                            "--secret-file", format!("{API_SECRETS_DIR}/api-secret"),
                            "--admin-token-file", format!("{API_SECRETS_DIR}/admin-token"),
                        ],
                        // `--database` reads DATABASE_URL: the URL (with its password) stays out
                        // of the command line.
                        "env": [{
                            "name": "DATABASE_URL",
                            "valueFrom": { "secretKeyRef": { "name": secret, "key": "database-url" } },
                        }],
                        "ports": [{ "name": "http", "containerPort": API_PORT }],
                        "volumeMounts": [{ "name": "api-secrets", "mountPath": API_SECRETS_DIR, "readOnly": true }],
                    }],
                    "volumes": [{
                        "name": "api-secrets",
                        "secret": {
                            "secretName": secret,
                            "items": [
                                { "key": "api-secret", "path": "api-secret" },
                                { "key": "admin-token", "path": "admin-token" },
                            ],
                        },
                    }],
                },
            },
        },
    });
    let service = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(API_NAME, &l, opts),
        "spec": {
            "selector": l,
            "ports": [{ "name": "http", "port": API_PORT, "targetPort": "http" }],
        },
    });
    vec![deployment, service]
}

/// The runner container of replica `n`: the same variables `up` gives (pool/spec.rs), the
/// secrets as files under `/run/secrets`.
fn container(spec: &AgentSpec, pool: &str, n: u32, opts: &RenderOptions) -> Value {
    let mut env = vec![
        json!({ "name": "AGENTFILE_API_URL", "value": format!("http://{API_NAME}:{API_PORT}") }),
        json!({ "name": "AGENTFILE_THREAD_ID", "value": thread_id(pool, &spec.name, n).to_string() }),
        json!({ "name": "AGENTFILE_POOL", "value": pool }),
        json!({ "name": "AGENTFILE_AGENT", "value": spec.name }),
        json!({ "name": "AGENTFILE_REPLICA", "value": n.to_string() }),
        json!({ "name": "AGENTFILE_AGENT_SPEC", "value": serde_json::to_string(spec).unwrap_or_default() }),
        json!({ "name": "AGENTFILE_WORKSPACE", "value": "/workspace" }),
    ];
    env.extend(
        spec.env
            .iter()
            .map(|(k, v)| json!({ "name": k, "value": v })),
    );
    let mut limits = serde_json::Map::new();
    if let Some(cpu) = spec.runtime.resources.cpu {
        limits.insert(
            "cpu".into(),
            json!(format!("{}m", (cpu * 1000.0).round() as u64)),
        );
    }
    if let Some(bytes) = spec.runtime.resources.memory_bytes {
        limits.insert("memory".into(), json!(bytes.to_string()));
    }
    let mut c = json!({
        "name": "runner",
        "image": opts.image,
        "command": ["/ninetrix", "runner"],
        "env": env,
        "volumeMounts": [
            { "name": "workspace", "mountPath": "/workspace" },
            { "name": "secrets", "mountPath": SECRETS_DIR, "readOnly": true },
        ],
    });
    if !limits.is_empty() {
        c["resources"] = json!({ "limits": limits });
    }
    c
}

/// The projected `/run/secrets` volume: the agent's Secret (if it has secrets) and the
/// replica's runner Secret.
fn secrets_volume(spec: &AgentSpec, pool: &str, n: u32) -> Value {
    let mut sources = Vec::new();
    if !spec.secrets.is_empty() {
        sources.push(json!({ "secret": {
            "name": agent_secret(pool, &spec.name),
            "items": spec.secrets.iter().map(|s| json!({ "key": s, "path": s })).collect::<Vec<_>>(),
        }}));
    }
    let mut items =
        vec![json!({ "key": "AGENTFILE_RUNNER_TOKEN", "path": "AGENTFILE_RUNNER_TOKEN" })];
    if spec.execution.durability {
        items.push(json!({ "key": "AGENTFILE_AGENT_TOKEN", "path": "AGENTFILE_AGENT_TOKEN" }));
    }
    sources
        .push(json!({ "secret": { "name": runner_secret(pool, &spec.name, n), "items": items } }));
    json!({ "name": "secrets", "projected": { "sources": sources } })
}

fn replica_labels(spec: &AgentSpec, pool: &str, n: u32) -> serde_json::Map<String, Value> {
    let mut l = labels(pool, Some(&spec.name), "runner");
    l.insert(crate::pool::spec::REPLICA.into(), json!(n.to_string()));
    l
}

fn stateful_set(spec: &AgentSpec, pool: &str, n: u32, opts: &RenderOptions) -> Value {
    let l = replica_labels(spec, pool, n);
    let mut meta = metadata(&replica_name(pool, &spec.name, n), &l, opts);
    meta["annotations"] = json!({ RESTARTS: RESTART_NOTE });
    json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": meta,
        "spec": {
            "replicas": 1,
            "serviceName": dns(&format!("{pool}-{}", spec.name)),
            "podManagementPolicy": "Parallel",
            "selector": { "matchLabels": l },
            "template": {
                "metadata": { "labels": l, "annotations": { RESTARTS: RESTART_NOTE } },
                "spec": {
                    "restartPolicy": "Always",
                    "terminationGracePeriodSeconds": crate::pool::spec::STOP_TIMEOUT,
                    "containers": [container(spec, pool, n, opts)],
                    "volumes": [secrets_volume(spec, pool, n)],
                },
            },
            "volumeClaimTemplates": [{
                "metadata": { "name": "workspace", "labels": l },
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": { "requests": { "storage": opts.storage } },
                },
            }],
        },
    })
}

/// What the restart annotation says.
const RESTART_NOTE: &str = "restartPolicy Always: Kubernetes restarts a failing runner forever \
(CrashLoopBackOff, up to 5 minutes apart); there is no restart budget like up's on-failure:3. \
See docs/kubernetes.md.";

fn job(spec: &AgentSpec, pool: &str, n: u32, opts: &RenderOptions) -> Value {
    let l = replica_labels(spec, pool, n);
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(&replica_name(pool, &spec.name, n), &l, opts),
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": { "labels": l },
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": crate::pool::spec::STOP_TIMEOUT,
                    "containers": [container(spec, pool, n, opts)],
                    "volumes": [
                        { "name": "workspace", "emptyDir": {} },
                        secrets_volume(spec, pool, n),
                    ],
                },
            },
        },
    })
}

/// The objects as one multi-document YAML stream: each document is JSON (YAML 1.2 is a superset
/// of JSON), `---` between them. No YAML serializer is needed and kubectl reads it as is.
pub(crate) fn to_documents(objects: &[Value]) -> String {
    let mut out = String::new();
    for o in objects {
        out.push_str("---\n");
        out.push_str(&serde_json::to_string_pretty(o).unwrap_or_default());
        out.push('\n');
    }
    out
}

/// The shell lines that create the Secrets the manifests refer to, values left for the admin to
/// fill in (`…`): the API's, each agent's, and each replica's runner Secret with the tokens the
/// checkpoint API mints for its thread (`POST /v1/tokens/runner`, `POST /v1/tokens/agent`).
pub(crate) fn secret_commands(af: &Agentfile, pool: &str, opts: &RenderOptions) -> Vec<String> {
    let ns = opts
        .namespace
        .as_deref()
        .map(|n| format!(" -n {n}"))
        .unwrap_or_default();
    let mut out = vec![format!(
        "kubectl{ns} create secret generic {} --from-literal=api-secret=… --from-literal=admin-token=… --from-literal=database-url=postgres://…",
        api_secret(pool)
    )];
    for spec in &af.agents {
        if !spec.secrets.is_empty() {
            let keys: Vec<String> = spec
                .secrets
                .iter()
                .map(|s| format!("--from-literal={s}=\"${s}\""))
                .collect();
            out.push(format!(
                "kubectl{ns} create secret generic {} {}",
                agent_secret(pool, &spec.name),
                keys.join(" ")
            ));
        }
        for n in 1..=spec.execution.replicas {
            let mut line = format!(
                "kubectl{ns} create secret generic {} --from-literal=AGENTFILE_RUNNER_TOKEN=…",
                runner_secret(pool, &spec.name, n)
            );
            if spec.execution.durability {
                line.push_str(" --from-literal=AGENTFILE_AGENT_TOKEN=…");
            }
            line.push_str(&format!("   # thread {}", thread_id(pool, &spec.name, n)));
            out.push(line);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> RenderOptions {
        RenderOptions {
            namespace: Some("agents".into()),
            image: "registry.example/ninetrix:1".into(),
            storage: "2Gi".into(),
        }
    }

    fn example() -> Agentfile {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../agentfile.example.yaml");
        let text = std::fs::read_to_string(path).unwrap();
        ninetrix_proto::agentfile::parse("agentfile.example.yaml", &text)
            .unwrap_or_else(|r| panic!("{}", r.render(false)))
            .agentfile
    }

    const SMALL: &str = "\
name: tiny
agents:
  worker:
    metadata: { role: worker }
    runtime:
      provider: anthropic
      model: claude-sonnet-4-6
    secrets: [ANTHROPIC_API_KEY, K8S_RENDER_TEST_SECRET]
    execution: { durability: false }
  keeper:
    metadata: { role: keeper }
    runtime: { provider: scripted, script: [{ text: hi }] }
    execution: { durability: true, replicas: 2 }
";

    fn small() -> Agentfile {
        ninetrix_proto::agentfile::parse("agentfile.yaml", SMALL)
            .unwrap_or_else(|r| panic!("{}", r.render(false)))
            .agentfile
    }

    fn kinds_and_names(objects: &[Value]) -> Vec<(String, String)> {
        objects
            .iter()
            .map(|o| {
                (
                    o["kind"].as_str().unwrap().to_string(),
                    o["metadata"]["name"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
        objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    }

    #[test]
    fn the_small_pool_has_the_api_a_job_and_a_stateful_set_per_durable_replica() {
        let objects = render(&small(), "tiny", &opts());
        let names = kinds_and_names(&objects);
        let expected: Vec<(String, String)> = [
            ("Deployment", "ninetrix-api"),
            ("Service", "ninetrix-api"),
            ("Job", "tiny-worker-1"),
            ("Service", "tiny-keeper"),
            ("StatefulSet", "tiny-keeper-1"),
            ("StatefulSet", "tiny-keeper-2"),
        ]
        .iter()
        .map(|(k, n)| (k.to_string(), n.to_string()))
        .collect();
        assert_eq!(names, expected);
    }

    #[test]
    fn every_object_is_labelled_and_namespaced() {
        for o in render(&small(), "tiny", &opts()) {
            let l = &o["metadata"]["labels"];
            assert_eq!(l[NAME], "ninetrix", "{o}");
            assert_eq!(l[PART_OF], "tiny");
            assert_eq!(l["dev.ninetrix.pool"], "tiny");
            assert_eq!(o["metadata"]["namespace"], "agents");
            if o["metadata"]["name"] != API_NAME {
                assert!(l["dev.ninetrix.agent"].is_string(), "{o}");
            }
        }
        let none = RenderOptions {
            namespace: None,
            ..opts()
        };
        for o in render(&small(), "tiny", &none) {
            assert!(o["metadata"].get("namespace").is_none());
        }
    }

    #[test]
    fn a_stateful_set_has_one_replica_its_service_a_pvc_and_its_own_thread() {
        let objects = render(&small(), "tiny", &opts());
        let set = find(&objects, "StatefulSet", "tiny-keeper-2");
        let spec = &set["spec"];
        assert_eq!(spec["replicas"], 1);
        assert_eq!(spec["serviceName"], "tiny-keeper");
        assert_eq!(spec["podManagementPolicy"], "Parallel");
        assert_eq!(spec["template"]["spec"]["restartPolicy"], "Always");
        let claim = &spec["volumeClaimTemplates"][0];
        assert_eq!(claim["metadata"]["name"], "workspace");
        assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "2Gi");
        // The selector matches the pod labels.
        let sel = spec["selector"]["matchLabels"].as_object().unwrap();
        let pod = spec["template"]["metadata"]["labels"].as_object().unwrap();
        for (k, v) in sel {
            assert_eq!(pod.get(k), Some(v));
        }
        let c = &spec["template"]["spec"]["containers"][0];
        assert_eq!(c["image"], "registry.example/ninetrix:1");
        assert_eq!(c["command"], json!(["/ninetrix", "runner"]));
        let env = |name: &str| {
            c["env"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["name"] == name)
                .map(|e| e["value"].clone())
                .unwrap_or_else(|| panic!("no {name}"))
        };
        assert_eq!(env("AGENTFILE_REPLICA"), "2");
        assert_eq!(env("AGENTFILE_POOL"), "tiny");
        assert_eq!(env("AGENTFILE_AGENT"), "keeper");
        assert_eq!(env("AGENTFILE_API_URL"), "http://ninetrix-api:8080");
        let thread = env("AGENTFILE_THREAD_ID");
        assert_eq!(thread, thread_id("tiny", "keeper", 2).to_string());
        assert_ne!(
            thread_id("tiny", "keeper", 1),
            thread_id("tiny", "keeper", 2)
        );
        assert_eq!(
            thread_id("tiny", "keeper", 2),
            thread_id("tiny", "keeper", 2)
        );
        thread
            .as_str()
            .unwrap()
            .parse::<ninetrix_proto::ThreadId>()
            .unwrap();
        let spec_json: AgentSpec =
            serde_json::from_str(env("AGENTFILE_AGENT_SPEC").as_str().unwrap()).unwrap();
        assert_eq!(spec_json.name, "keeper");
    }

    #[test]
    fn secrets_are_referenced_by_name_and_their_values_never_appear() {
        // `set_var` is unsafe (and unsafe code is forbidden), so the secret is one the test
        // process already has: Cargo sets CARGO_MANIFEST_DIR. Its value must not be rendered.
        let value = std::env::var("CARGO_MANIFEST_DIR").unwrap();
        let with_env = SMALL.replace("K8S_RENDER_TEST_SECRET", "CARGO_MANIFEST_DIR");
        let af = ninetrix_proto::agentfile::parse("agentfile.yaml", &with_env)
            .unwrap_or_else(|r| panic!("{}", r.render(false)))
            .agentfile;
        let rendered = to_documents(&render(&af, "tiny", &opts()));
        assert!(rendered.contains("CARGO_MANIFEST_DIR"));
        assert!(!rendered.contains(&value));
        assert!(
            !secret_commands(&af, "tiny", &opts())
                .concat()
                .contains(&value)
        );
        let objects = render(&small(), "tiny", &opts());
        let job = find(&objects, "Job", "tiny-worker-1");
        let sources = &job["spec"]["template"]["spec"]["volumes"][1]["projected"]["sources"];
        assert_eq!(sources[0]["secret"]["name"], "tiny-worker-secrets");
        let keys: Vec<&str> = sources[0]["secret"]["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["key"].as_str().unwrap())
            .collect();
        assert_eq!(keys, ["ANTHROPIC_API_KEY", "K8S_RENDER_TEST_SECRET"]);
        assert_eq!(sources[1]["secret"]["name"], "tiny-worker-1-runner");
        let set = find(&objects, "StatefulSet", "tiny-keeper-1");
        let sources = &set["spec"]["template"]["spec"]["volumes"][0]["projected"]["sources"];
        // No secrets: only the runner Secret, with both tokens.
        assert_eq!(sources.as_array().unwrap().len(), 1);
        assert_eq!(sources[0]["secret"]["name"], "tiny-keeper-1-runner");
        assert_eq!(
            sources[0]["secret"]["items"][1]["key"],
            "AGENTFILE_AGENT_TOKEN"
        );
        let api = find(&objects, "Deployment", "ninetrix-api");
        let c = &api["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(
            c["env"][0]["valueFrom"]["secretKeyRef"],
            json!({ "name": "tiny-api", "key": "database-url" })
        );
        assert_eq!(
            api["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"],
            "tiny-api"
        );
        // No Secret object is rendered at all.
        assert!(objects.iter().all(|o| o["kind"] != "Secret"));
        // The commands name the keys, not values.
        let lines = secret_commands(&small(), "tiny", &opts());
        assert!(lines[0].starts_with("kubectl -n agents create secret generic tiny-api "));
        assert!(lines.iter().any(|l| l.contains(
            "tiny-worker-secrets --from-literal=ANTHROPIC_API_KEY=\"$ANTHROPIC_API_KEY\""
        )));
    }

    #[test]
    fn a_batch_agent_is_a_job_that_is_not_retried() {
        let objects = render(&small(), "tiny", &opts());
        let job = find(&objects, "Job", "tiny-worker-1");
        assert_eq!(job["spec"]["backoffLimit"], 0);
        assert_eq!(job["spec"]["template"]["spec"]["restartPolicy"], "Never");
    }

    #[test]
    fn the_example_renders_its_agents() {
        let af = example();
        let objects = render(&af, "research-pool", &opts());
        let names = kinds_and_names(&objects);
        for spec in &af.agents {
            for n in 1..=spec.execution.replicas {
                let kind = if spec.execution.durability {
                    "StatefulSet"
                } else {
                    "Job"
                };
                let name = replica_name("research-pool", &spec.name, n);
                assert!(
                    names.contains(&(kind.to_string(), name.clone())),
                    "{kind} {name} in {names:?}"
                );
            }
        }
        let text = to_documents(&objects);
        assert_eq!(text.matches("---\n").count(), objects.len());
    }

    #[test]
    fn names_with_underscores_become_dns_names() {
        assert_eq!(replica_name("my_pool", "a_b", 3), "my-pool-a-b-3");
        assert_eq!(runner_secret("p", "a_b", 1), "p-a-b-1-runner");
    }
}
