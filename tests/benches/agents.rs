//! Agents per machine (issue 12, goal 5): `up` of N scripted durable replicas on the real Docker
//! Engine, and what the pool costs the host once it is up. Per N and run:
//!
//! - `up` wall time until every runner is Ready (and, from `up --json`, when the last container
//!   was created and the API was ready);
//! - host memory per agent: `MemAvailable` before `up` and after Ready (noisy when other work
//!   runs beside it), the growth of the PSS of the processes a pool consists of (runners, shims,
//!   fuse-overlayfs, docker-init, dockerd, containerd, the API) plus the kernel's unreclaimable
//!   slab, and the sum of the containers' cgroup memory;
//! - CPU of the idle pool: after a settle, `/proc/stat` over a window (busy share of all cores,
//!   whatever ran) and the same window per process group (user + system time, plus the time of
//!   children they reaped: a shim reaps `runc` and `docker exec`'d healthchecks);
//! - up to 100 concurrent `ninetrix invoke`s to distinct replicas: wall time until all answered;
//! - `down --purge` wall time.
//!
//! Opt-in, never in the test suite:
//!
//! ```sh
//! cargo build --release -p ninetrix-cli && \
//!   NINETRIX_BENCH_AGENTS=100,500 cargo bench -p ninetrix-e2e --bench agents
//! ```
//!
//! `NINETRIX_BENCH_AGENTS` (default `100`), `NINETRIX_BENCH_RUNS` (runs per N, default 2),
//! `NINETRIX_BENCH_SETTLE_SECS` (default 20), `NINETRIX_BENCH_IDLE_SECS` (default 30). It uses
//! its own `AGENTFILE_HOME`, API container (`ninetrix-api-bench-agents`) and pool (`benchagents`),
//! removes all of them at the end and on failure (and any leftovers of an interrupted run at the
//! start), and every command it runs has a deadline.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use ninetrix_e2e::ninetrix_bin;

const POOL: &str = "benchagents";
const API: &str = "ninetrix-api-bench-agents";
/// The whole bench stops (cleaning up) once this has passed.
const BENCH_DEADLINE: Duration = Duration::from_secs(3 * 3600);

fn env_secs(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let sizes: Vec<u32> = std::env::var("NINETRIX_BENCH_AGENTS")
        .unwrap_or_else(|_| "100".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .filter(|&n| n > 0)
        .collect();
    let runs = u32::try_from(env_secs("NINETRIX_BENCH_RUNS", 2).max(1)).unwrap_or(2);
    let settle = Duration::from_secs(env_secs("NINETRIX_BENCH_SETTLE_SECS", 20));
    let idle = Duration::from_secs(env_secs("NINETRIX_BENCH_IDLE_SECS", 30).max(1));
    let bench = Bench::new();
    bench.clean();
    let started = Instant::now();
    // Warm-up: builds the image and starts the API once, so `up` measures the pool alone.
    bench.write(1);
    bench.ninetrix_ok(&["up", "-f", bench.file_str()], Duration::from_secs(300));
    bench.down(Duration::from_secs(120));
    println!(
        "machine: {} cores, {:.1} GiB, load average before: {}",
        cores(),
        meminfo("MemTotal") as f64 / KIB_PER_GIB,
        loadavg()
    );
    let mut results = Vec::new();
    for &n in &sizes {
        for run in 1..=runs {
            assert!(
                started.elapsed() < BENCH_DEADLINE,
                "the bench ran out of time"
            );
            let r = bench.measure(n, run, settle, idle);
            eprintln!("{r:?}");
            results.push(r);
        }
    }
    print_tables(&results, idle);
    // `bench` drops here: the API, its volume and everything of the pool go.
}

/// The bench's home, agentfile and cleanup.
struct Bench {
    dir: tempfile::TempDir,
    /// The agentfile's path.
    file: String,
}

impl Bench {
    fn new() -> Bench {
        let dir = tempfile::tempdir().unwrap();
        let file = dir
            .path()
            .join("agentfile.yaml")
            .to_string_lossy()
            .into_owned();
        Bench { dir, file }
    }

    fn file(&self) -> PathBuf {
        PathBuf::from(&self.file)
    }

    fn file_str(&self) -> &str {
        &self.file
    }

    fn write(&self, replicas: u32) {
        std::fs::write(
            self.file(),
            format!(
                "name: {POOL}\nagents:\n  agent:\n    runtime: {{ provider: scripted, script: [\"ok\"] }}\n    execution: {{ replicas: {replicas} }}\n"
            ),
        )
        .unwrap();
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(ninetrix_bin());
        c.args(args)
            .env("AGENTFILE_HOME", self.dir.path().join("home"))
            .env("NINETRIX_API_CONTAINER", API)
            .env("NINETRIX_API_PORT", "0")
            .env_remove("AGENTFILE_API_URL")
            .env_remove("NO_COLOR");
        c
    }

    /// Runs `ninetrix args` with a deadline; its stdout and the time it took.
    fn ninetrix(&self, args: &[&str], limit: Duration) -> (ExitStatus, String, Duration) {
        let out = self.dir.path().join(format!("out-{}", unique()));
        let mut c = self.command(args);
        c.stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(out.with_extension("err")).unwrap());
        let started = Instant::now();
        let child = c.spawn().unwrap();
        let status = wait_all(vec![child], limit).pop().unwrap();
        let took = started.elapsed();
        let stdout = std::fs::read_to_string(&out).unwrap_or_default();
        let stderr = std::fs::read_to_string(out.with_extension("err")).unwrap_or_default();
        let _ = std::fs::remove_file(&out);
        let _ = std::fs::remove_file(out.with_extension("err"));
        match status {
            Some(s) => (s, format!("{stdout}{stderr}"), took),
            None => panic!(
                "ninetrix {args:?} did not finish within {} s:\n{}",
                limit.as_secs(),
                tail(&format!("{stdout}{stderr}"), 40)
            ),
        }
    }

    fn ninetrix_ok(&self, args: &[&str], limit: Duration) -> (String, Duration) {
        let (status, out, took) = self.ninetrix(args, limit);
        assert!(status.success(), "ninetrix {args:?}: {}", tail(&out, 40));
        (out, took)
    }

    /// `down --purge`: its wall time, and whether it left the network with stale endpoints.
    /// Docker 20.10 can keep stale endpoints on a network after many containers stop at once
    /// (moby/moby#42119): `down` then reports the network it could not remove (and the next
    /// `up` of the pool reuses it). Any other failure fails the bench.
    fn down(&self, limit: Duration) -> (Duration, bool) {
        let (status, out, took) = self.ninetrix(
            &["down", "-f", self.file_str(), "--purge", "-t", "10"],
            limit,
        );
        assert!(
            status.success() || out.contains("still has active endpoints"),
            "down --purge: {}",
            tail(&out, 40)
        );
        (took, !status.success())
    }

    /// One N, one run.
    fn measure(&self, n: u32, run: u32, settle: Duration, idle: Duration) -> Sample {
        self.write(n);
        let load = loadavg();
        let before_mem = meminfo("MemAvailable");
        let before_slab = meminfo("SUnreclaim");
        let before_pss = pss_by_group();
        let before_up = snapshot();
        let (busy0, total0) = machine_ticks();
        let wait = (60 + u64::from(n) / 2).to_string();
        let (out, up) = self.ninetrix_ok(
            &[
                "up",
                "-f",
                self.file_str(),
                "--json",
                "--wait-timeout",
                &wait,
            ],
            Duration::from_secs(120 + u64::from(n)),
        );
        let steps = UpSteps::of(&out);
        let (busy1, total1) = machine_ticks();
        let up_cpu = cpu_seconds(&before_up, &snapshot());
        let up_machine = (busy1 - busy0) as f64 / (total1 - total0).max(1) as f64;
        let after_mem = meminfo("MemAvailable");
        let after_slab = meminfo("SUnreclaim");
        let after_pss = pss_by_group();
        let ids = pool_container_ids();
        assert_eq!(ids.len(), n as usize, "every replica has a container");
        let cgroup: u64 = ids.iter().map(|id| cgroup_memory(id)).sum();
        let pss_growth: BTreeMap<String, i64> = after_pss
            .iter()
            .map(|(g, kb)| (g.clone(), kb - before_pss.get(g).copied().unwrap_or(0)))
            .collect();

        std::thread::sleep(settle);
        let cpu = idle_cpu(idle);

        let invokes = n.min(100);
        let invoke_started = Instant::now();
        let children: Vec<Child> = (1..=invokes)
            .map(|i| {
                let mut c = self.command(&[
                    "invoke",
                    "-f",
                    self.file_str(),
                    "--agent",
                    "agent",
                    "--replica",
                    &i.to_string(),
                    "-m",
                    "hello",
                    "--timeout",
                    "120",
                ]);
                c.stdout(Stdio::null()).stderr(Stdio::null());
                c.spawn().unwrap()
            })
            .collect();
        let statuses = wait_all(children, Duration::from_secs(180));
        let invoke_time = invoke_started.elapsed();
        let answered = statuses
            .iter()
            .filter(|s| s.is_some_and(|s| s.success()))
            .count();

        let (down, stuck_network) = self.down(Duration::from_secs(120 + u64::from(n)));
        Sample {
            n,
            run,
            load,
            up,
            steps,
            mem_available_drop_kb: before_mem as i64 - after_mem as i64,
            slab_growth_kb: after_slab as i64 - before_slab as i64,
            pss_growth_kb: pss_growth,
            cgroup_bytes: cgroup,
            cpu,
            invokes,
            answered,
            invoke_time,
            down,
            stuck_network,
            up_cpu,
            up_machine,
        }
    }

    /// Removes everything of the bench: the pool (down --purge), the API and its volume, then
    /// whatever is left by label and name.
    fn clean(&self) {
        let mut c = self.command(&[
            "down",
            "-p",
            POOL,
            "--purge",
            "--api",
            "--volumes",
            "-t",
            "2",
        ]);
        c.stdout(Stdio::null()).stderr(Stdio::null());
        if let Ok(child) = c.spawn() {
            wait_all(vec![child], Duration::from_secs(600));
        }
        let label = format!("label=dev.ninetrix.pool={POOL}");
        for id in docker(&["ps", "-aq", "--filter", &label]).split_whitespace() {
            docker(&["rm", "-f", id]);
        }
        docker(&["rm", "-f", API]);
        docker(&["volume", "rm", &format!("{API}-data")]);
        for n in docker(&["network", "ls", "-q", "--filter", &label]).split_whitespace() {
            docker(&["network", "rm", n]);
        }
        for v in docker(&["volume", "ls", "-q", "--filter", &label]).split_whitespace() {
            docker(&["volume", "rm", v]);
        }
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        self.clean();
    }
}

/// Waits for every child until `limit`; children still running then are killed (`None`).
fn wait_all(mut children: Vec<Child>, limit: Duration) -> Vec<Option<ExitStatus>> {
    let deadline = Instant::now() + limit;
    let mut done: Vec<Option<ExitStatus>> = vec![None; children.len()];
    loop {
        for (i, c) in children.iter_mut().enumerate() {
            if done[i].is_none() {
                done[i] = c.try_wait().ok().flatten();
            }
        }
        if done.iter().all(Option::is_some) {
            return done;
        }
        if Instant::now() >= deadline {
            for (i, c) in children.iter_mut().enumerate() {
                if done[i].is_none() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
            }
            return done;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn unique() -> String {
    ninetrix_proto::ThreadId::new_v7().to_string()
}

fn tail(s: &str, lines: usize) -> String {
    let all: Vec<&str> = s.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn docker(args: &[&str]) -> String {
    Command::new("docker")
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

fn pool_container_ids() -> Vec<String> {
    docker(&[
        "ps",
        "-q",
        "--no-trunc",
        "--filter",
        &format!("label=dev.ninetrix.pool={POOL}"),
    ])
    .split_whitespace()
    .map(str::to_string)
    .collect()
}

/// A container's cgroup memory (v1 `cgroupfs` layout, else v2), 0 if neither is readable.
fn cgroup_memory(id: &str) -> u64 {
    [
        format!("/sys/fs/cgroup/memory/docker/{id}/memory.usage_in_bytes"),
        format!("/sys/fs/cgroup/system.slice/docker-{id}.scope/memory.current"),
        format!("/sys/fs/cgroup/docker/{id}/memory.current"),
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok())
    .and_then(|s| s.trim().parse().ok())
    .unwrap_or(0)
}

/// KiB in a GiB (`/proc/meminfo` counts KiB).
const KIB_PER_GIB: f64 = 1024.0 * 1024.0;
/// Bytes in a MiB.
const MIB: f64 = 1024.0 * 1024.0;

/// A `/proc/meminfo` field in KiB.
fn meminfo(field: &str) -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)
                .and_then(|r| r.strip_prefix(':'))
                .and_then(|r| r.split_whitespace().next())
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The group a process belongs to, by its name and command line; `None` for unrelated ones.
fn group(comm: &str, cmdline: &str) -> Option<&'static str> {
    Some(match comm {
        "dockerd" => "dockerd",
        "containerd" => "containerd",
        c if c.starts_with("containerd-shim") => "shims",
        "runc" | "runc:[2:INIT]" | "runc:[1:CHILD]" | "runc:[0:PARENT]" => "shims",
        "fuse-overlayfs" => "fuse-overlayfs",
        "docker-init" => "docker-init",
        "docker-proxy" => "dockerd",
        "ninetrix" if cmdline.contains("\0runner") || cmdline.starts_with("/ninetrix\0runner") => {
            "runners"
        }
        "ninetrix" if cmdline.contains("\0api") => "api",
        _ => return None,
    })
}

/// Every process: pid, group, and its `/proc/<pid>` directory.
fn processes() -> Vec<(u32, &'static str)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let e = e.ok()?;
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        let cmdline = std::fs::read_to_string(e.path().join("cmdline")).unwrap_or_default();
        Some((pid, group(comm.trim(), &cmdline)?))
    })
    .collect()
}

/// Proportional set size (KiB) per group.
fn pss_by_group() -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for (pid, g) in processes() {
        let kb = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
            .ok()
            .and_then(|s| {
                s.lines().find_map(|l| {
                    l.strip_prefix("Pss:")
                        .and_then(|r| r.split_whitespace().next())
                        .and_then(|v| v.parse::<i64>().ok())
                })
            })
            .unwrap_or(0);
        *out.entry(g.to_string()).or_insert(0) += kb;
    }
    out
}

/// Clock ticks of a process: its own user + system time and that of the children it reaped.
fn ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the command: state is field 3 (index 0 here); utime 14, stime 15, cutime 16, cstime 17.
    (11..=14)
        .map(|i| fields.get(i).and_then(|v| v.parse::<u64>().ok()))
        .sum()
}

/// `/proc/stat`'s first line: (busy, total) ticks over all cores.
fn machine_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest is inside user).
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    let total: u64 = v.iter().take(8).sum();
    (total - idle, total)
}

/// CPU over an idle window.
#[derive(Debug, Clone)]
struct Cpu {
    /// Busy share of all cores, whatever ran (0–1).
    machine: f64,
    /// Share of all cores per group (0–1).
    groups: BTreeMap<String, f64>,
}

/// USER_HZ on Linux.
const HZ: f64 = 100.0;

/// Ticks per process of the groups.
type Snapshot = BTreeMap<u32, (&'static str, u64)>;

fn snapshot() -> Snapshot {
    processes()
        .into_iter()
        .filter_map(|(pid, g)| Some((pid, (g, ticks(pid)?))))
        .collect()
}

/// CPU seconds per group between two snapshots (a process born in between counts from zero; one
/// that ended counts only through the parent that reaped it).
fn cpu_seconds(first: &Snapshot, second: &Snapshot) -> BTreeMap<String, f64> {
    let mut groups: BTreeMap<String, f64> = BTreeMap::new();
    for (pid, (g, t1)) in second {
        let t0 = first.get(pid).map_or(0, |(_, t)| *t);
        *groups.entry(g.to_string()).or_insert(0.0) += t1.saturating_sub(t0) as f64 / HZ;
    }
    groups
}

fn idle_cpu(window: Duration) -> Cpu {
    let (busy0, total0) = machine_ticks();
    let first = snapshot();
    let started = Instant::now();
    std::thread::sleep(window);
    let second = snapshot();
    let (busy1, total1) = machine_ticks();
    let secs = started.elapsed().as_secs_f64();
    let groups = cpu_seconds(&first, &second)
        .into_iter()
        .map(|(g, s)| (g, s / secs / cores() as f64))
        .collect();
    Cpu {
        machine: (busy1 - busy0) as f64 / (total1 - total0).max(1) as f64,
        groups,
    }
}

/// Times from `up --json`'s steps (elapsed since `up` began).
#[derive(Debug, Clone, Default)]
struct UpSteps {
    api_ready: f64,
    last_created: f64,
    last_ready: f64,
    failed: usize,
}

impl UpSteps {
    fn of(out: &str) -> UpSteps {
        let mut s = UpSteps::default();
        for line in out.lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let at = v["elapsed_ms"].as_f64().unwrap_or(0.0) / 1000.0;
            if v["error"] == true {
                s.failed += 1;
            }
            match (v["type"].as_str(), v["status"].as_str()) {
                (Some("API"), Some("Ready")) => s.api_ready = at,
                (Some("Container"), Some("Created")) => s.last_created = s.last_created.max(at),
                (Some("Container"), Some(st)) if st.starts_with("Ready") => {
                    s.last_ready = s.last_ready.max(at)
                }
                _ => {}
            }
        }
        s
    }
}

#[derive(Debug)]
struct Sample {
    n: u32,
    run: u32,
    load: String,
    up: Duration,
    steps: UpSteps,
    mem_available_drop_kb: i64,
    slab_growth_kb: i64,
    pss_growth_kb: BTreeMap<String, i64>,
    cgroup_bytes: u64,
    cpu: Cpu,
    invokes: u32,
    answered: usize,
    invoke_time: Duration,
    down: Duration,
    /// `down` left the network behind (Docker's stale endpoints).
    stuck_network: bool,
    /// CPU seconds per group during `up`.
    up_cpu: BTreeMap<String, f64>,
    /// Busy share of all cores during `up`, whatever ran.
    up_machine: f64,
}

fn print_tables(results: &[Sample], idle: Duration) {
    let mib = |kb: f64| kb / 1024.0;
    println!();
    println!(
        "| agents | run | load before | `up` until all Ready | API ready / last created / last Ready | MemAvailable drop per agent | PSS + slab growth per agent | cgroup memory per agent | idle CPU, pool processes | idle CPU, whole machine | concurrent `invoke`s answered | `down --purge` |"
    );
    println!("|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in results {
        let n = f64::from(r.n);
        let pss: i64 = r.pss_growth_kb.values().sum();
        let pool_cpu: f64 = r.cpu.groups.values().sum();
        println!(
            "| {} | {} | {} | {:.1} s | {:.1} / {:.1} / {:.1} s | {:.1} MiB | {:.1} MiB | {:.2} MiB | {:.1} % | {:.1} % | {} of {} in {:.2} s | {:.1} s |",
            r.n,
            r.run,
            r.load,
            r.up.as_secs_f64(),
            r.steps.api_ready,
            r.steps.last_created,
            r.steps.last_ready,
            mib(r.mem_available_drop_kb as f64) / n,
            mib((pss + r.slab_growth_kb) as f64) / n,
            r.cgroup_bytes as f64 / MIB / n,
            pool_cpu * 100.0,
            r.cpu.machine * 100.0,
            r.answered,
            r.invokes,
            r.invoke_time.as_secs_f64(),
            r.down.as_secs_f64(),
        );
        if r.stuck_network {
            println!(
                "(run {} of {}: Docker left the pool network with stale endpoints)",
                r.run, r.n
            );
        }
    }
    println!();
    println!("CPU seconds used during `up` by process group, and the machine's busy share:");
    let names = group_names(results.iter().map(|r| &r.up_cpu));
    println!(
        "| agents | run | {} | sum | machine busy |",
        names.join(" | ")
    );
    println!("|---:|---:|{}---:|---:|", "---:|".repeat(names.len()));
    for r in results {
        let cells: Vec<String> = names
            .iter()
            .map(|g| format!("{:.1}", r.up_cpu.get(g).copied().unwrap_or(0.0)))
            .collect();
        println!(
            "| {} | {} | {} | {:.1} | {:.0} % |",
            r.n,
            r.run,
            cells.join(" | "),
            r.up_cpu.values().sum::<f64>(),
            r.up_machine * 100.0
        );
    }
    println!();
    println!(
        "Idle CPU by process group ({} s window; share of all {} cores):",
        idle.as_secs(),
        cores()
    );
    let names = group_names(results.iter().map(|r| &r.cpu.groups));
    println!("| agents | run | {} |", names.join(" | "));
    println!("|---:|---:|{}", "---:|".repeat(names.len()));
    for r in results {
        let cells: Vec<String> = names
            .iter()
            .map(|g| {
                format!(
                    "{:.2} %",
                    r.cpu.groups.get(g).copied().unwrap_or(0.0) * 100.0
                )
            })
            .collect();
        println!("| {} | {} | {} |", r.n, r.run, cells.join(" | "));
    }
    println!();
    println!("Memory growth by process group (PSS, MiB per agent) and kernel slab:");
    let names = group_names(results.iter().map(|r| &r.pss_growth_kb));
    println!(
        "| agents | run | {} | slab (unreclaimable) |",
        names.join(" | ")
    );
    println!("|---:|---:|{}---:|", "---:|".repeat(names.len()));
    for r in results {
        let n = f64::from(r.n);
        let cells: Vec<String> = names
            .iter()
            .map(|g| {
                format!(
                    "{:.2}",
                    mib(r.pss_growth_kb.get(g).copied().unwrap_or(0) as f64) / n
                )
            })
            .collect();
        println!(
            "| {} | {} | {} | {:.2} |",
            r.n,
            r.run,
            cells.join(" | "),
            mib(r.slab_growth_kb as f64) / n
        );
    }
}

/// The process groups named in any of the runs' tables, sorted, each once.
fn group_names<'a, V: 'a>(tables: impl Iterator<Item = &'a BTreeMap<String, V>>) -> Vec<String> {
    let names: std::collections::BTreeSet<&String> = tables.flat_map(|t| t.keys()).collect();
    names.into_iter().cloned().collect()
}
