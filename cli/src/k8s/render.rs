//! The objects of a pool on Kubernetes, as JSON values (one per object).
//!
//! Per durable agent: a headless Service `<pool>-<agent>` and a StatefulSet `<pool>-<agent>` with
//! `replicas: N` (`podManagementPolicy: Parallel`, a workspace PVC per pod from
//! `volumeClaimTemplates`). A pod knows only its name `<pool>-<agent>-<ordinal>`
//! (`AGENTFILE_POD_NAME`, from the downward API): the runner takes ordinal + 1 as its replica and
//! asks the checkpoint API for that replica's thread and runner token
//! (`POST /v1/runners/pools/{pool}/agents/{agent}/replicas/{replica}`) with the agent token. The
//! API keeps one thread per replica, so an ordinal gets its thread back whatever the render, the
//! node or the scaling in between. Per batch agent (at most one replica): a Job `<pool>-<agent>`
//! (`backoffLimit: 0`) whose runner asks the same way for replica 1 (`AGENTFILE_REPLICA=1`: a
//! Job's pod name has no ordinal). For the pool: the checkpoint API as a Deployment and a Service
//! `ninetrix-api`.
//!
//! Secrets are referenced by name only; their values are never rendered. Every agent has one
//! Secret for its agent token (`<pool>-<agent>-agent`) and, if it lists `secrets:`, one for them
//! (`<pool>-<agent>-secrets`), both projected under `/run/secrets`. No thread ID and no runner
//! token appears in a manifest.

use serde_json::{Value, json};

use ninetrix_agentfile::{AgentSpec, Agentfile};
use ninetrix_runner::launch::{self, Instance, Launch, Replica as LaunchReplica};

use crate::objects::k8s::{agent_secret, agent_token_secret, api_secret, dns, telemetry_secret};
use crate::pool::spec::Telemetry;

use crate::objects::k8s::COMPONENT;
use crate::objects::k8s::NAME;
use crate::objects::k8s::PART_OF;
/// The API's Service and Deployment name.
pub(crate) const API_NAME: &str = "ninetrix-api";
/// The API's port.
const API_PORT: u16 = 8080;
/// Where the runner's secrets are mounted (the runner reads `/run/secrets/<NAME>`).
const SECRETS_DIR: &str = "/run/secrets";
/// Where the API's secrets are mounted.
const API_SECRETS_DIR: &str = "/run/secrets/api";
use crate::objects::k8s::RESTARTS;

/// What the manifests depend on besides the agentfile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RenderOptions {
    /// The namespace written on every object (`None`: none written).
    pub(crate) namespace: Option<String>,
    /// The ninetrix image (runner and API).
    pub(crate) image: String,
    /// The size of each durable replica's workspace PVC (`1Gi`).
    pub(crate) storage: String,
    /// The OpenTelemetry variables of the host: the non-secret ones are rendered into every
    /// runner's environment, the header variables (secrets) by name only, as keys of the pool's
    /// telemetry Secret ([`telemetry_secret`]).
    pub(crate) telemetry: Telemetry,
}

impl RenderOptions {
    /// The default image: `ninetrix/runner:<this version>`.
    pub(crate) fn default_image() -> String {
        format!("ninetrix/runner:{}", env!("CARGO_PKG_VERSION"))
    }
}

/// Longest name of an agent's StatefulSet, headless Service and Job. A StatefulSet's pods carry
/// the label `controller-revision-hash: <name>-<10 characters>`, and a label value has at most
/// 63 characters; a Service name is a DNS label (63).
const MAX_WORKLOAD_NAME: usize = 52;

/// `<pool>-<agent>`: an agent's StatefulSet and headless Service, or its Job — made a valid
/// Service name (RFC 1035 label: starts with a letter, ends with a letter or digit, at most
/// [`MAX_WORKLOAD_NAME`]). A name that starts with a digit gets `nx-` in front; one that is too
/// long or ends with `-` is cut and ends with 8 hex digits of the SHA-256 of `<pool>-<agent>`, so
/// two agents whose names share a long prefix still get two names.
pub(crate) fn agent_name(pool: &str, agent: &str) -> String {
    let full = format!("{pool}-{agent}");
    let mut name = dns(&full);
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert_str(0, "nx-");
    }
    if name.len() <= MAX_WORKLOAD_NAME && !name.ends_with('-') {
        return name;
    }
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(full.as_bytes());
    let hash: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    // Names are ASCII (`[a-z0-9_-]`), so a byte cut is a character cut.
    let head = name[..name.len().min(MAX_WORKLOAD_NAME - 9)].trim_end_matches('-');
    format!("{head}-{hash}")
}

/// Refuses a pool in which two agents would get the same Kubernetes name (`a_b` and `a-b` both
/// become `<pool>-a-b`): one object would silently replace the other.
pub(crate) fn check_names(af: &Agentfile, pool: &str) -> Result<(), String> {
    let mut seen: std::collections::BTreeMap<String, &str> = std::collections::BTreeMap::new();
    for spec in &af.agents {
        let name = agent_name(pool, &spec.name);
        if let Some(other) = seen.insert(name.clone(), &spec.name) {
            return Err(format!(
                "agents `{other}` and `{}` would both be named `{name}` on Kubernetes \
                 (`_` becomes `-` there): rename one of them",
                spec.name
            ));
        }
    }
    Ok(())
}

/// The key of the agent token in its Secret, and the file the runner reads under
/// `/run/secrets`.
const AGENT_TOKEN: &str = launch::var::AGENT_TOKEN;

fn labels(pool: &str, agent: Option<&str>, component: &str) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    m.insert(NAME.into(), json!("ninetrix"));
    m.insert(PART_OF.into(), json!(pool));
    m.insert(COMPONENT.into(), json!(component));
    m.insert(crate::objects::POOL.into(), json!(pool));
    if let Some(agent) = agent {
        m.insert(crate::objects::AGENT.into(), json!(agent));
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

/// What the agentfile asks for that the manifests do not carry, one sentence each (in file
/// order): MCP servers that run as sidecars, and triggers. `k8s render` prints them as warnings,
/// so a pool that would come up without a tool or a schedule does not look complete.
pub(crate) fn not_rendered(af: &Agentfile) -> Vec<String> {
    let mut out: Vec<String> = crate::pool::sidecar::Wanted::of(af)
        .iter()
        .map(|s| {
            format!(
                "MCP server `{}` runs as a sidecar (`image:` + `command:`), which is not rendered: \
                 run it as a Deployment and Service yourself and give it a `url:` \
                 (docs/kubernetes.md, \"Not covered\")",
                s.server
            )
        })
        .collect();
    out.extend(af.triggers.iter().map(|t| {
        format!(
            "{} trigger `{}` is not registered: `k8s render` registers nothing with the API; \
             register the pool's triggers with `PUT /v1/pools/<pool>/triggers` (docs/api.md, \
             \"Triggers\")",
            t.kind_name(),
            t.name
        )
    }));
    out
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
                "metadata": metadata(&agent_name(pool, &spec.name), &svc_labels, opts),
                "spec": { "clusterIP": "None", "selector": l },
            }));
            out.push(stateful_set(spec, pool, opts));
        } else {
            out.push(job(spec, pool, opts));
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

/// What the runner is told (the launch contract). A durable agent's pod learns its replica
/// from its name (`AGENTFILE_POD_NAME`, `<set>-<ordinal>`: ordinal + 1); a batch Job's pod name
/// has no ordinal, so it is told replica 1. The pod's UID is its instance: a container restarted
/// in its pod keeps it, so `trace` tells a crash restart from a new pod. The health report goes
/// where `ninetrix health` in the pod reads it.
fn launch(spec: &AgentSpec, pool: &str) -> Launch {
    Launch {
        api_url: Some(format!("http://{API_NAME}:{API_PORT}")),
        thread: None,
        pool: Some(pool.to_string()),
        agent: Some(spec.name.clone()),
        replica: Some(if spec.execution.durability {
            LaunchReplica::PodOrdinal
        } else {
            LaunchReplica::Number(1)
        }),
        spec: Some(serde_json::to_string(spec).unwrap_or_default()),
        workspace: Some(launch::WORKSPACE.to_string()),
        instance: Some(Instance::PodUid),
        created: None,
        health_file: Some(ninetrix_runner::health::DEFAULT_PATH.to_string()),
        jobs_url: None,
    }
}

/// The runner container: the variables `up` gives (pool/spec.rs) except the thread, which the
/// runner asks the API for by replica; the secrets as files under `/run/secrets`. A durable
/// agent's pod learns its replica from its name (`AGENTFILE_POD_NAME`, `<set>-<ordinal>`:
/// ordinal + 1); a batch Job's pod name has no ordinal, so it is told replica 1.
fn container(spec: &AgentSpec, pool: &str, opts: &RenderOptions) -> Value {
    let mut env: Vec<Value> = launch(spec, pool)
        .to_vars()
        .into_iter()
        .map(|v| match v.value {
            launch::Value::Text(value) => json!({ "name": v.name, "value": value }),
            launch::Value::PodField(path) => json!({
                "name": v.name,
                "valueFrom": { "fieldRef": { "fieldPath": path } },
            }),
        })
        .collect();
    // The host's non-secret OpenTelemetry variables, before the agent's own `env:` (which wins).
    env.extend(
        opts.telemetry
            .env
            .iter()
            .map(|(k, v)| json!({ "name": k, "value": v })),
    );
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
            { "name": "tmp", "mountPath": "/tmp" },
        ],
        "securityContext": container_security(spec),
    });
    if !limits.is_empty() {
        c["resources"] = json!({ "limits": limits });
    }
    c
}

/// The container's `securityContext`: what one host's hardened defaults are (docs/security.md)
/// in Kubernetes' words. (No pids limit: Kubernetes sets that per node, `podPidsLimit`.)
fn container_security(spec: &AgentSpec) -> Value {
    let sec = &spec.security;
    let mut c = json!({
        "runAsUser": sec.user.uid,
        "runAsGroup": sec.user.gid,
        "runAsNonRoot": !sec.user.is_root(),
        "allowPrivilegeEscalation": false,
        "readOnlyRootFilesystem": sec.read_only_root,
        "capabilities": { "drop": ["ALL"] },
    });
    if !sec.capabilities.is_empty() {
        c["capabilities"]["add"] = json!(sec.capabilities);
    }
    c
}

/// The pod-level settings of an agent's pods: the group that owns the workspace volume, the
/// runtime class (`runtime.isolation`), and the in-memory `/tmp`.
fn harden_pod(spec: &AgentSpec, pod: &mut Value) {
    pod["securityContext"] = json!({ "fsGroup": spec.security.user.gid });
    if let Some(class) = &spec.runtime.isolation {
        pod["runtimeClassName"] = json!(class);
    }
    if let Some(volumes) = pod["volumes"].as_array_mut() {
        volumes.push(json!({ "name": "tmp", "emptyDir": { "medium": "Memory" } }));
    }
}

/// The projected `/run/secrets` volume: the agent's Secret (if it has secrets), the pool's
/// telemetry Secret (if the host sets header variables) and its agent-token Secret.
fn secrets_volume(spec: &AgentSpec, pool: &str, opts: &RenderOptions) -> Value {
    let mut sources = Vec::new();
    if !opts.telemetry.secrets.is_empty() {
        sources.push(json!({ "secret": {
            "name": telemetry_secret(pool),
            "items": opts.telemetry.secrets.keys().map(|s| json!({ "key": s, "path": s })).collect::<Vec<_>>(),
        }}));
    }
    if !spec.secrets.is_empty() {
        sources.push(json!({ "secret": {
            "name": agent_secret(pool, &spec.name),
            "items": spec.secrets.iter().map(|s| json!({ "key": s, "path": s })).collect::<Vec<_>>(),
        }}));
    }
    sources.push(json!({ "secret": {
        "name": agent_token_secret(pool, &spec.name),
        "items": [{ "key": AGENT_TOKEN, "path": AGENT_TOKEN }],
    }}));
    json!({ "name": "secrets", "projected": { "sources": sources } })
}

fn stateful_set(spec: &AgentSpec, pool: &str, opts: &RenderOptions) -> Value {
    let l = labels(pool, Some(&spec.name), "runner");
    let name = agent_name(pool, &spec.name);
    let mut meta = metadata(&name, &l, opts);
    meta["annotations"] = json!({ RESTARTS: RESTART_NOTE });
    let mut set = json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": meta,
        "spec": {
            "replicas": spec.execution.replicas,
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "selector": { "matchLabels": l },
            "template": {
                "metadata": { "labels": l, "annotations": { RESTARTS: RESTART_NOTE } },
                "spec": {
                    "restartPolicy": "Always",
                    "terminationGracePeriodSeconds": crate::pool::spec::STOP_TIMEOUT,
                    "containers": [container(spec, pool, opts)],
                    "volumes": [secrets_volume(spec, pool, opts)],
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
    });
    harden_pod(spec, &mut set["spec"]["template"]["spec"]);
    set
}

/// What the restart annotation says.
const RESTART_NOTE: &str = "restartPolicy Always: Kubernetes restarts a failing runner forever \
(CrashLoopBackOff, up to 5 minutes apart); there is no restart budget like up's on-failure:3. \
See docs/kubernetes.md.";

/// A batch agent's Job: one pod, never retried, replica 1 (a batch agent has at most one).
fn job(spec: &AgentSpec, pool: &str, opts: &RenderOptions) -> Value {
    let mut l = labels(pool, Some(&spec.name), "runner");
    l.insert(crate::objects::REPLICA.into(), json!("1"));
    let mut job = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(&agent_name(pool, &spec.name), &l, opts),
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": { "labels": l },
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": crate::pool::spec::STOP_TIMEOUT,
                    "containers": [container(spec, pool, opts)],
                    "volumes": [
                        { "name": "workspace", "emptyDir": {} },
                        secrets_volume(spec, pool, opts),
                    ],
                },
            },
        },
    });
    harden_pod(spec, &mut job["spec"]["template"]["spec"]);
    job
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

/// Where the printed commands reach the API: through
/// `kubectl port-forward service/ninetrix-api 8080`.
const FORWARDED_API: &str = "http://localhost:8080";

/// The shell lines that create the Secrets the manifests refer to, in order, ready to copy:
/// the API's (values left for the admin to fill in: `…`), each agent's `secrets:` (from the
/// variables of the same names), and each agent's token, minted by the running API with the admin
/// token (`POST /v1/tokens/agent`), plus for a durable agent its replica count and collaborators
/// (`PUT /v1/pools/{pool}/agents/{agent}`, what its sessions are spread over). Lines starting
/// with `#` are comments. No value is read or written here.
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
    if !opts.telemetry.secrets.is_empty() {
        let keys: Vec<String> = opts
            .telemetry
            .secrets
            .keys()
            .map(|s| format!("--from-literal={s}=\"${s}\""))
            .collect();
        out.push(format!(
            "kubectl{ns} create secret generic {} {}",
            telemetry_secret(pool),
            keys.join(" ")
        ));
    }
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
    }
    out.push(format!(
        "# Once the API pod runs (these need curl and jq): kubectl{ns} port-forward service/{API_NAME} {API_PORT} &  export ADMIN_TOKEN=<the admin-token above>"
    ));
    let curl =
        "curl -fsS -H \"Authorization: Bearer $ADMIN_TOKEN\" -H 'content-type: application/json'";
    for spec in &af.agents {
        let agent = &spec.name;
        if spec.execution.durability {
            let collaborators = serde_json::to_string(&spec.collaborators).unwrap_or_default();
            out.push(format!(
                "{curl} -X PUT -d '{{\"replicas\":{},\"collaborators\":{collaborators}}}' {FORWARDED_API}/v1/pools/{pool}/agents/{agent}",
                spec.execution.replicas
            ));
        }
        out.push(format!(
            "kubectl{ns} create secret generic {} --from-literal={AGENT_TOKEN}=\"$({curl} -d '{{\"pool\":\"{pool}\",\"agent\":\"{agent}\"}}' {FORWARDED_API}/v1/tokens/agent | jq -r .token)\"",
            agent_token_secret(pool, agent)
        ));
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
            telemetry: Telemetry::default(),
        }
    }

    fn example() -> Agentfile {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../agentfile.example.yaml");
        let text = std::fs::read_to_string(path).unwrap();
        ninetrix_agentfile::parse("agentfile.example.yaml", &text)
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
        ninetrix_agentfile::parse("agentfile.yaml", SMALL)
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

    fn env_of(c: &Value, name: &str) -> Value {
        c["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} in {c}"))
    }

    /// The environment a pod's runner sees, from a rendered container.
    fn pod_env(c: &Value, pod: &str, uid: &str) -> std::collections::HashMap<String, String> {
        c["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let value = match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                    Some("metadata.name") => pod.to_string(),
                    Some("metadata.uid") => uid.to_string(),
                    Some(other) => panic!("unknown field {other}"),
                    None => e["value"].as_str().unwrap().to_string(),
                };
                (e["name"].as_str().unwrap().to_string(), value)
            })
            .collect()
    }

    #[test]
    fn the_runner_reads_back_what_kubernetes_launches_it_with() {
        let af = small();
        for spec in &af.agents {
            let c = container(spec, "tiny", &opts());
            let env = pod_env(&c, "tiny-keeper-1", "uid-7");
            let read = Launch::from_vars(&env).unwrap();
            let wanted = Launch {
                replica: Some(LaunchReplica::Number(if spec.execution.durability {
                    2
                } else {
                    1
                })),
                instance: Some(Instance::Id("uid-7".into())),
                ..launch(spec, "tiny")
            };
            assert_eq!(read, wanted, "{}", spec.name);
            assert_eq!(read.health_file.as_deref(), Some("/run/ninetrix/health"));
            // And the runner asks the API for that replica's thread with the agent token.
            let mut env = env;
            env.insert(AGENT_TOKEN.into(), "nxs1.t".into());
            let lookup = ninetrix_runner::replica::lookup(&env, std::path::Path::new("/none"))
                .unwrap()
                .unwrap();
            assert_eq!(
                (lookup.pool.as_str(), lookup.agent.as_str()),
                ("tiny", spec.name.as_str())
            );
        }
    }

    #[test]
    fn the_hosts_telemetry_reaches_the_runners_headers_by_secret_only() {
        let telemetry = Telemetry::from_vars([
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT".to_string(),
                "http://collector:4318".to_string(),
            ),
            (
                "OTEL_EXPORTER_OTLP_HEADERS".to_string(),
                "x-key=hunter2".to_string(),
            ),
        ]);
        let opts = RenderOptions {
            telemetry,
            ..opts()
        };
        let af = small();
        let objects = render(&af, "tiny", &opts);
        let text = to_documents(&objects);
        assert!(
            !text.contains("hunter2"),
            "a header value is never rendered"
        );
        let c = container(&af.agents[0], "tiny", &opts);
        let env = pod_env(&c, "tiny-keeper-0", "u");
        assert_eq!(env["OTEL_EXPORTER_OTLP_ENDPOINT"], "http://collector:4318");
        assert!(!env.contains_key("OTEL_EXPORTER_OTLP_HEADERS"));
        let volume = secrets_volume(&af.agents[0], "tiny", &opts);
        assert_eq!(
            volume["projected"]["sources"][0]["secret"],
            json!({
                "name": "tiny-telemetry",
                "items": [{ "key": "OTEL_EXPORTER_OTLP_HEADERS", "path": "OTEL_EXPORTER_OTLP_HEADERS" }],
            })
        );
        let commands = secret_commands(&af, "tiny", &opts);
        assert!(
            commands.contains(&"kubectl -n agents create secret generic tiny-telemetry --from-literal=OTEL_EXPORTER_OTLP_HEADERS=\"$OTEL_EXPORTER_OTLP_HEADERS\"".to_string()),
            "{commands:?}"
        );
    }

    #[test]
    fn the_small_pool_has_the_api_a_job_and_one_stateful_set_per_durable_agent() {
        let objects = render(&small(), "tiny", &opts());
        let names = kinds_and_names(&objects);
        let expected: Vec<(String, String)> = [
            ("Deployment", "ninetrix-api"),
            ("Service", "ninetrix-api"),
            ("Job", "tiny-worker"),
            ("Service", "tiny-keeper"),
            ("StatefulSet", "tiny-keeper"),
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
    fn a_stateful_set_has_the_agents_replicas_its_service_and_a_pvc() {
        let objects = render(&small(), "tiny", &opts());
        let set = find(&objects, "StatefulSet", "tiny-keeper");
        let spec = &set["spec"];
        assert_eq!(spec["replicas"], 2);
        assert_eq!(spec["serviceName"], "tiny-keeper");
        assert_eq!(spec["podManagementPolicy"], "Parallel");
        assert_eq!(spec["template"]["spec"]["restartPolicy"], "Always");
        assert!(set["metadata"]["annotations"][RESTARTS].is_string());
        assert!(spec["template"]["metadata"]["annotations"][RESTARTS].is_string());
        let claim = &spec["volumeClaimTemplates"][0];
        assert_eq!(claim["metadata"]["name"], "workspace");
        assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "2Gi");
        // The selector matches the pod labels, and the headless Service selects the pods.
        let sel = spec["selector"]["matchLabels"].as_object().unwrap();
        let pod = spec["template"]["metadata"]["labels"].as_object().unwrap();
        for (k, v) in sel {
            assert_eq!(pod.get(k), Some(v));
        }
        let svc = find(&objects, "Service", "tiny-keeper");
        for (k, v) in svc["spec"]["selector"].as_object().unwrap() {
            assert_eq!(pod.get(k), Some(v));
        }
        // A replica count other than 2 is the agentfile's too.
        let one = SMALL.replace("replicas: 2", "replicas: 5");
        let af = ninetrix_agentfile::parse("agentfile.yaml", &one)
            .unwrap_or_else(|r| panic!("{}", r.render(false)))
            .agentfile;
        let objects = render(&af, "tiny", &opts());
        assert_eq!(
            find(&objects, "StatefulSet", "tiny-keeper")["spec"]["replicas"],
            5
        );
        assert_eq!(
            objects
                .iter()
                .filter(|o| o["kind"] == "StatefulSet")
                .count(),
            1
        );
    }

    #[test]
    fn a_replica_learns_its_replica_from_its_pod_name_and_asks_the_api_for_its_thread() {
        let objects = render(&small(), "tiny", &opts());
        let set = find(&objects, "StatefulSet", "tiny-keeper");
        let c = &set["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["image"], "registry.example/ninetrix:1");
        assert_eq!(c["command"], json!(["/ninetrix", "runner"]));
        assert_eq!(
            env_of(c, "AGENTFILE_POD_NAME"),
            json!({
                "name": "AGENTFILE_POD_NAME",
                "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } },
            })
        );
        assert_eq!(env_of(c, "AGENTFILE_POOL")["value"], "tiny");
        assert_eq!(env_of(c, "AGENTFILE_AGENT")["value"], "keeper");
        assert_eq!(
            env_of(c, "AGENTFILE_API_URL")["value"],
            "http://ninetrix-api:8080"
        );
        let spec_json: AgentSpec =
            serde_json::from_str(env_of(c, "AGENTFILE_AGENT_SPEC")["value"].as_str().unwrap())
                .unwrap();
        assert_eq!(spec_json.name, "keeper");
        // No thread, no runner token, and no AGENTFILE_REPLICA (it would override the pod name).
        let names: Vec<&str> = c["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        for absent in [
            "AGENTFILE_THREAD_ID",
            "AGENTFILE_RUNNER_TOKEN",
            "AGENTFILE_REPLICA",
            "AGENTFILE_AGENT_TOKEN",
        ] {
            assert!(!names.contains(&absent), "{absent} in {names:?}");
        }
        let text = to_documents(&objects);
        assert!(!text.contains("AGENTFILE_THREAD_ID"));
        assert!(!text.contains("AGENTFILE_RUNNER_TOKEN"));
        // A batch Job's pod name has no ordinal: it is replica 1.
        let job = find(&objects, "Job", "tiny-worker");
        let c = &job["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(env_of(c, "AGENTFILE_REPLICA")["value"], "1");
        assert!(
            c["env"]
                .as_array()
                .unwrap()
                .iter()
                .all(|e| e["name"] != "AGENTFILE_POD_NAME" && e["name"] != "AGENTFILE_THREAD_ID")
        );
    }

    #[test]
    fn secrets_are_referenced_by_name_and_their_values_never_appear() {
        // `set_var` is unsafe (and unsafe code is forbidden), so the secret is one the test
        // process already has: Cargo sets CARGO_MANIFEST_DIR. Its value must not be rendered.
        let value = std::env::var("CARGO_MANIFEST_DIR").unwrap();
        let with_env = SMALL.replace("K8S_RENDER_TEST_SECRET", "CARGO_MANIFEST_DIR");
        let af = ninetrix_agentfile::parse("agentfile.yaml", &with_env)
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
        let job = find(&objects, "Job", "tiny-worker");
        let sources = &job["spec"]["template"]["spec"]["volumes"][1]["projected"]["sources"];
        assert_eq!(sources[0]["secret"]["name"], "tiny-worker-secrets");
        let keys: Vec<&str> = sources[0]["secret"]["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["key"].as_str().unwrap())
            .collect();
        assert_eq!(keys, ["ANTHROPIC_API_KEY", "K8S_RENDER_TEST_SECRET"]);
        assert_eq!(
            sources[1]["secret"],
            json!({
                "name": "tiny-worker-agent",
                "items": [{ "key": "AGENTFILE_AGENT_TOKEN", "path": "AGENTFILE_AGENT_TOKEN" }],
            })
        );
        let set = find(&objects, "StatefulSet", "tiny-keeper");
        let pod = &set["spec"]["template"]["spec"];
        assert_eq!(pod["volumes"][0]["name"], "secrets");
        assert_eq!(
            pod["containers"][0]["volumeMounts"][1],
            json!({ "name": "secrets", "mountPath": "/run/secrets", "readOnly": true })
        );
        let sources = &pod["volumes"][0]["projected"]["sources"];
        // No secrets: only the agent-token Secret, one for all the agent's replicas.
        assert_eq!(
            sources,
            &json!([{ "secret": {
                "name": "tiny-keeper-agent",
                "items": [{ "key": "AGENTFILE_AGENT_TOKEN", "path": "AGENTFILE_AGENT_TOKEN" }],
            }}])
        );
        // Every env entry of every container is a literal only if it is no secret: the tokens
        // and keys come from Secrets, by name.
        for o in &objects {
            let containers = &o["spec"]["template"]["spec"]["containers"];
            for c in containers.as_array().into_iter().flatten() {
                for e in c["env"].as_array().unwrap() {
                    let name = e["name"].as_str().unwrap();
                    assert!(
                        !name.contains("TOKEN") && !name.contains("KEY")
                            || e.get("value").is_none(),
                        "{name} has a literal value"
                    );
                }
            }
        }
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
    fn the_commands_mint_one_agent_token_secret_per_agent() {
        let lines = secret_commands(&small(), "tiny", &opts());
        for (agent, secret) in [
            ("worker", "tiny-worker-agent"),
            ("keeper", "tiny-keeper-agent"),
        ] {
            let line = lines
                .iter()
                .find(|l| l.contains(&format!("create secret generic {secret} ")))
                .unwrap_or_else(|| panic!("no {secret} in {lines:#?}"));
            assert!(line.starts_with("kubectl -n agents create secret generic "));
            assert!(line.contains("--from-literal=AGENTFILE_AGENT_TOKEN=\"$(curl -fsS -H \"Authorization: Bearer $ADMIN_TOKEN\""));
            assert!(line.contains(&format!(
                "-d '{{\"pool\":\"tiny\",\"agent\":\"{agent}\"}}' http://localhost:8080/v1/tokens/agent | jq -r .token)\""
            )));
        }
        // The durable agent's replica count is recorded (its sessions are spread over it); the
        // batch agent has no sessions.
        assert!(lines.iter().any(|l| l.contains(
            "-X PUT -d '{\"replicas\":2,\"collaborators\":[]}' http://localhost:8080/v1/pools/tiny/agents/keeper"
        )));
        assert!(
            !lines
                .iter()
                .any(|l| l.contains("/v1/pools/tiny/agents/worker"))
        );
        // No per-replica runner Secret and no thread any more.
        assert!(!lines.concat().contains("-runner"));
        assert!(!lines.concat().contains("RUNNER_TOKEN"));
        // Every line is a command or a comment.
        for l in &lines {
            assert!(
                l.starts_with("kubectl ") || l.starts_with("curl ") || l.starts_with("# "),
                "{l}"
            );
        }
    }

    #[test]
    fn a_batch_agent_is_a_job_that_is_not_retried() {
        let objects = render(&small(), "tiny", &opts());
        let job = find(&objects, "Job", "tiny-worker");
        assert_eq!(job["spec"]["backoffLimit"], 0);
        assert_eq!(job["spec"]["template"]["spec"]["restartPolicy"], "Never");
    }

    #[test]
    fn the_example_renders_its_agents() {
        let af = example();
        let objects = render(&af, "research-pool", &opts());
        let names = kinds_and_names(&objects);
        for spec in &af.agents {
            let kind = if spec.execution.durability {
                "StatefulSet"
            } else {
                "Job"
            };
            let name = agent_name("research-pool", &spec.name);
            let o = find(&objects, kind, &name);
            if spec.execution.durability {
                assert_eq!(o["spec"]["replicas"], spec.execution.replicas);
            }
            assert_eq!(
                names.iter().filter(|(_, n)| *n == name).count(),
                1 + usize::from(spec.execution.durability)
            );
        }
        let text = to_documents(&objects);
        assert_eq!(text.matches("---\n").count(), objects.len());
    }

    #[test]
    fn names_with_underscores_become_dns_names() {
        assert_eq!(agent_name("my_pool", "a_b"), "my-pool-a-b");
        assert_eq!(agent_token_secret("p", "a_b"), "p-a-b-agent");
        assert_eq!(agent_secret("p", "a_b"), "p-a-b-secrets");
    }

    /// An RFC 1035 label: what a Service name must be.
    fn is_dns_label(name: &str) -> bool {
        name.len() <= 63
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    }

    /// An RFC 1123 subdomain: what a Secret's, Deployment's or Job's name must be.
    fn is_dns_subdomain(name: &str) -> bool {
        name.len() <= 253
            && name.split('.').all(|part| {
                !part.is_empty()
                    && part.starts_with(|c: char| c.is_ascii_alphanumeric())
                    && part.ends_with(|c: char| c.is_ascii_alphanumeric())
                    && part
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            })
    }

    #[test]
    fn every_name_is_valid_on_kubernetes_for_the_longest_and_oddest_names() {
        let pool = "9".repeat(48);
        let long = format!("a{}", "b".repeat(46));
        let text = format!(
            "name: \"{pool}\"\nagents:\n  {long}c:\n    runtime: {{ provider: anthropic, model: m }}\n    secrets: [K]\n  \
             {long}d:\n    runtime: {{ provider: anthropic, model: m }}\n  \
             w_:\n    runtime: {{ provider: anthropic, model: m }}\n  \
             w:\n    runtime: {{ provider: anthropic, model: m }}\n  \
             batch_:\n    runtime: {{ provider: anthropic, model: m }}\n    execution: {{ durability: false }}\n"
        );
        let af = ninetrix_agentfile::parse("long.yaml", &text)
            .unwrap_or_else(|r| panic!("{}", r.render(false)))
            .agentfile;
        check_names(&af, &pool).unwrap();
        let objects = render(&af, &pool, &opts());
        let mut workloads = std::collections::BTreeSet::new();
        for o in &objects {
            let kind = o["kind"].as_str().unwrap();
            let name = o["metadata"]["name"].as_str().unwrap();
            assert!(is_dns_subdomain(name), "{kind} {name}");
            if matches!(kind, "Service" | "StatefulSet" | "Job") {
                assert!(is_dns_label(name), "{kind} {name}");
                assert!(name.len() <= MAX_WORKLOAD_NAME, "{kind} {name}");
            }
            if kind == "StatefulSet" {
                // Its pods' `controller-revision-hash` label value and their hostnames.
                assert!(name.len() + 11 <= 63, "{name}");
                assert!(
                    workloads.insert(name.to_string()),
                    "two StatefulSets named {name}"
                );
            }
        }
        // The agents that share a 48-character prefix, and `w_` beside `w`, got apart names.
        assert_eq!(workloads.len(), 4, "{workloads:?}");
        // Short, plain names are kept as they are.
        assert_eq!(agent_name("prod", "writer"), "prod-writer");
        assert_eq!(agent_name("9lives", "writer"), "nx-9lives-writer");
        assert_eq!(agent_name("p", "w_").len(), "p-w".len() + 9);
    }

    #[test]
    fn sidecars_and_triggers_are_named_as_not_rendered() {
        assert_eq!(not_rendered(&example()), Vec::<String>::new());
        let text = "name: p\nmcp_servers:\n  files:\n    image: registry.example/files:1\n    \
                    command: [files-server]\n  remote:\n    url: http://files.example/mcp\n\
                    triggers:\n  - name: nightly\n    type: schedule\n    cron: \"0 3 * * *\"\n    \
                    message: go\nagents:\n  a:\n    runtime: { provider: anthropic, model: m }\n    \
                    tools: [\"mcp://files\", \"mcp://remote\"]\n";
        let af = ninetrix_agentfile::parse("extras.yaml", text)
            .unwrap_or_else(|r| panic!("{}", r.render(false)))
            .agentfile;
        let warnings = not_rendered(&af);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].starts_with("MCP server `files` runs as a sidecar"),
            "{warnings:?}"
        );
        assert!(
            warnings[1].starts_with("schedule trigger `nightly`"),
            "{warnings:?}"
        );
    }

    #[test]
    fn agents_that_would_share_a_name_are_refused() {
        let text = "name: p\nagents:\n  a_b:\n    runtime: { provider: anthropic, model: m }\n  \
                    a-b:\n    runtime: { provider: anthropic, model: m }\n";
        let af = ninetrix_agentfile::parse("twins.yaml", text)
            .unwrap_or_else(|r| panic!("{}", r.render(false)))
            .agentfile;
        let err = check_names(&af, "p").unwrap_err();
        assert!(err.contains("`a_b` and `a-b`"), "{err}");
        assert!(err.contains("`p-a-b`"), "{err}");
        assert!(err.contains("rename one"), "{err}");
    }
}
