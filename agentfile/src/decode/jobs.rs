//! Background jobs: `runtime.jobs` (the image, concurrency, default timeout and resources of an
//! agent's jobs), the rules that tie it to the job tools (`tools: [jobs]` or the tools by name),
//! and their problems.
//!
//! A job is a command (`/bin/sh -c`) in a container of its own, started by the pool's job
//! broker, that outlives the runner; it is given the workspace but no secrets.

use super::*;
use crate::schema::Jobs;

/// A problem with `runtime.jobs` or the job tools.
#[derive(Debug)]
pub(super) enum JobsProblem<'a> {
    /// A `runtime.jobs.image` that is not a Docker image reference.
    Image(&'a str),
    /// Job tools in an agent whose jobs would have no shell: neither `runtime.jobs.image` nor
    /// `runtime.image`. How the entry that gives them is written (`jobs`, `job_start`, `all`).
    NeedImage(&'a str),
    /// `runtime.jobs` on agent `name`, which has no job tool (a warning).
    Unused(&'a str),
    /// `secrets:` on an entry that gives job tools (as written).
    Secrets(&'a str),
    /// A key of a tool entry that has no meaning on the `jobs` toolset (`effect`, `verify`).
    ToolsetKey(&'static str),
}

impl JobsProblem<'_> {
    /// The diagnostic kind (and so the wire code).
    pub(super) fn kind(&self) -> DiagnosticKind {
        use DiagnosticKind as K;
        match self {
            JobsProblem::Image(_) | JobsProblem::Secrets(_) | JobsProblem::ToolsetKey(_) => {
                K::InvalidValue
            }
            JobsProblem::NeedImage(_) => K::JobsNeedImage,
            JobsProblem::Unused(_) => K::SettingUnused,
        }
    }

    /// Warnings leave the agentfile valid.
    pub(super) fn severity(&self) -> Severity {
        match self {
            JobsProblem::Unused(_) => Severity::Warning,
            _ => Severity::Error,
        }
    }

    /// What is wrong.
    pub(super) fn message(&self) -> String {
        match self {
            JobsProblem::Image(text) => format!(
                "`image` must be a Docker image reference such as `python:3.12-slim`, found \
                 \"{text}\""
            ),
            JobsProblem::NeedImage(entry) => format!(
                "`{entry}` gives the job tools, and jobs run their commands with `/bin/sh -c`, \
                 but this agent's jobs have no image with a shell (no `runtime.jobs.image`, and \
                 no `runtime.image`: the runner's own image has no shell)"
            ),
            JobsProblem::Unused(agent) => {
                format!("`runtime.jobs` has no effect: agent `{agent}` has none of the job tools")
            }
            JobsProblem::Secrets(entry) => {
                format!("jobs are given no secrets yet; `secrets` on `{entry}` would reach no job")
            }
            JobsProblem::ToolsetKey("effect") => "`effect` cannot be pinned on the `jobs` \
                toolset: its tools have different classes (job_start write; job_status, \
                job_output, job_wait read; job_kill idempotent)"
                .into(),
            JobsProblem::ToolsetKey(key) => {
                format!("`{key}` does not apply to the `jobs` toolset, only to one tool")
            }
        }
    }

    /// What to do.
    pub(super) fn help(&self) -> String {
        match self {
            JobsProblem::Image(_) => "write `[registry/]repository[:tag][@digest]`, the \
                repository in lower case, e.g. `image: python:3.12-slim` or `image: \
                ghcr.io/acme/builder:1.4`; leave `image` out to run jobs in the agent's own \
                image (`runtime.image`)"
                .into(),
            JobsProblem::NeedImage(_) => "set `runtime.jobs.image` to the image jobs run in \
                (one with /bin/sh and the programs the commands need, e.g. `python:3.12-slim`), \
                or set `runtime.image` (e.g. `debian:stable-slim`): the agent and its jobs then \
                share that image"
                .into(),
            JobsProblem::Unused(_) => "add `jobs` to the agent's `tools` (job_start, job_status, \
                job_output, job_wait and job_kill), or remove `runtime.jobs`"
                .into(),
            JobsProblem::Secrets(_) => "remove `secrets` from this entry: a job gets the \
                workspace, never the agent's secrets; a command that needs a secret can run in \
                `shell` instead, with `{ name: shell, secrets: [NAME] }`"
                .into(),
            JobsProblem::ToolsetKey(key) => format!(
                "write `jobs` as a plain name; to set `{key}` on one tool, list the job tools \
                 by name instead, that one as `{{ name: job_start, {key}: … }}`"
            ),
        }
    }
}

/// `runtime.jobs:` as written.
pub(super) struct JobsIn {
    jobs: Jobs,
}

pub(super) const JOBS: Section<JobsIn> = Section {
    what: "jobs",
    keys: &[
        ("image", |cx, j, f| {
            let Some(image) = cx.nullable_string(&f)? else {
                j.jobs.image = None;
                return Some(());
            };
            if !names::is_image_reference(&image) {
                let problem = Problem::Jobs(JobsProblem::Image(&image));
                cx.report(&f.path, f.value.loc, problem);
                return None;
            }
            j.jobs.image = Some(image);
            Some(())
        }),
        ("max_concurrent", |cx, j, f| {
            j.jobs.max_concurrent =
                cx.integer(f.value, &f.path, 1, defaults::MAX_JOBS_MAX_CONCURRENT)?;
            Some(())
        }),
        ("default_timeout", |cx, j, f| {
            j.jobs.default_timeout_secs =
                cx.duration(f.value, &f.path, DurationField::JobTimeout)?;
            Some(())
        }),
        ("cpu", |cx, j, f| {
            j.jobs.resources.cpu = Some(cx.cpu(&f)?);
            Some(())
        }),
        ("memory", |cx, j, f| {
            j.jobs.resources.memory_bytes = Some(cx.memory(&f)?);
            Some(())
        }),
    ],
    unsupported: &[],
};

impl Cx {
    /// `runtime.jobs:` at `node` (`path`), over the defaults; `null` is every default.
    pub(super) fn jobs(&mut self, node: &Node, path: &str) -> Option<Jobs> {
        let mut j = JobsIn {
            jobs: Jobs::default(),
        };
        if matches!(node.kind, Kind::Null) {
            return Some(j.jobs);
        }
        self.dispatch(node, path, &JOBS, &mut j)?.then_some(j.jobs)
    }

    /// The rules between agent `key`'s job tools and its runtime: job tools need an image with
    /// a shell for their jobs (unless `shell_reported`: the agent's missing image is reported
    /// already), and `runtime.jobs` (its key at `jobs_at`) without job tools is a warning.
    /// `false` when an error was reported.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn agent_jobs(
        &mut self,
        path: &str,
        key: &Key,
        node: &Node,
        tools: &[ToolSpec],
        runtime: Option<&Runtime>,
        jobs_at: Option<Loc>,
        shell_reported: bool,
    ) -> bool {
        let has_jobs = tools
            .iter()
            .any(|t| t.mcp.is_none() && t.handoff.is_none() && tools::is_job_tool(&t.name));
        if !has_jobs {
            if let Some(at) = jobs_at {
                let problem = Problem::Jobs(JobsProblem::Unused(&key.name));
                self.report(&join(path, "runtime.jobs"), at, problem);
            }
            return true;
        }
        let Some(runtime) = runtime else {
            return true;
        };
        if runtime.image.is_some() || runtime.jobs.image.is_some() || shell_reported {
            return true;
        }
        let (entry_path, loc, written) =
            job_entry(node, path).unwrap_or_else(|| (join(path, "tools"), key.loc, "jobs".into()));
        let problem = Problem::Jobs(JobsProblem::NeedImage(&written));
        self.report(&entry_path, loc, problem);
        false
    }
}

/// The first entry of agent `node`'s `tools` (at `path`) that gives job tools: its path, where
/// it is, and its name as written (`all` for `tools: all`).
fn job_entry(node: &Node, path: &str) -> Option<(String, Loc, String)> {
    let Kind::Map(entries) = &node.kind else {
        return None;
    };
    let (_, list) = entries.iter().find(|(k, _)| k.name == "tools")?;
    let tools_path = join(path, "tools");
    let items = match &list.kind {
        Kind::Seq(items) => items,
        Kind::Str(s) => return Some((tools_path, list.loc, s.clone())),
        _ => return None,
    };
    items.iter().enumerate().find_map(|(i, item)| {
        let written = match &item.kind {
            Kind::Str(s) => s.clone(),
            // `source` says what the tool is when given; `name` then only labels it.
            Kind::Map(fields) => ["source", "name"]
                .iter()
                .find_map(|key| fields.iter().find(|(k, _)| k.name == *key))
                .and_then(|(_, v)| match &v.kind {
                    Kind::Str(s) => Some(s.clone()),
                    _ => None,
                })?,
            _ => return None,
        };
        is_jobs_name(&written).then(|| (format!("{tools_path}[{i}]"), item.loc, written))
    })
}

/// Whether a tool entry's name gives job tools: one of them, or the `jobs` toolset.
fn is_jobs_name(written: &str) -> bool {
    let bare = written.strip_prefix("builtin://").unwrap_or(written);
    bare == tools::JOBS_TOOLSET || tools::is_job_tool(bare)
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::Diagnostic;
    use crate::schema::{AgentSpec, Jobs, Resources};
    use crate::tools::{Effect, JOB_TOOLS};

    /// The scripted runtime line, with `extra` keys.
    fn runtime(extra: &str) -> String {
        format!("    runtime: {{ provider: scripted, script: [hi]{extra} }}\n")
    }

    fn agent_of(text: &str) -> AgentSpec {
        valid(text).agentfile.agents.remove(0)
    }

    /// Each diagnostic as `path | message | help`, for needle searches.
    fn lines(d: &[Diagnostic]) -> Vec<String> {
        d.iter()
            .map(|d| {
                let help = d.help.clone().unwrap_or_default();
                format!("{} | {} | {help}", d.path, d.message)
            })
            .collect()
    }

    #[test]
    fn the_jobs_toolset_gives_the_five_job_tools_with_their_effects() {
        let a = agent_of(&format!(
            "agents:\n  a:\n{}    tools: [file_read, jobs]\n",
            runtime(", image: debian:stable-slim")
        ));
        let names: Vec<&str> = a.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "file_read",
                "job_start",
                "job_status",
                "job_output",
                "job_wait",
                "job_kill"
            ]
        );
        let effects: Vec<Effect> = a.tools[1..].iter().map(|t| t.effect).collect();
        use Effect::{Idempotent, Read, Write};
        assert_eq!(effects, [Write, Read, Read, Read, Idempotent]);
        assert!(
            a.tools
                .iter()
                .all(|t| !t.effect_pinned && t.secrets.is_empty())
        );
        assert!(a.has_job_tools());
        // No `runtime.jobs`: the defaults, in the agent's own image.
        assert_eq!(a.runtime.jobs, Jobs::default());
        assert_eq!(
            (
                a.runtime.jobs.max_concurrent,
                a.runtime.jobs.default_timeout_secs
            ),
            (4, 3600)
        );
        assert_eq!(a.runtime.job_image(), Some("debian:stable-slim"));
        // `builtin://jobs` is the same toolset.
        let b = agent_of(&format!(
            "agents:\n  a:\n{}    tools: [\"builtin://jobs\"]\n",
            runtime(", image: debian")
        ));
        assert_eq!(b.tools.len(), JOB_TOOLS.len());
    }

    #[test]
    fn each_job_tool_can_be_named_alone_and_pinned() {
        let a = agent_of(&format!(
            "agents:\n  a:\n{}    tools: [job_start, {{ name: job_kill, effect: write }}]\n",
            runtime(", jobs: { image: \"python:3.12-slim\" }")
        ));
        let names: Vec<&str> = a.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["job_start", "job_kill"]);
        assert!(a.tools[1].effect_pinned && a.tools[1].effect == Effect::Write);
        assert_eq!(a.runtime.image, None);
        assert_eq!(a.runtime.job_image(), Some("python:3.12-slim"));
    }

    #[test]
    fn runtime_jobs_reads_every_key() {
        let a = agent_of(
            "agents:\n  a:\n    runtime:\n      provider: scripted\n      script: [hi]\n      \
             jobs:\n        image: ghcr.io/acme/builder:1.4\n        max_concurrent: 64\n        \
             default_timeout: 7d\n        cpu: 1.5\n        memory: 2Gi\n    tools: [jobs]\n",
        );
        assert_eq!(
            a.runtime.jobs,
            Jobs {
                image: Some("ghcr.io/acme/builder:1.4".into()),
                max_concurrent: 64,
                default_timeout_secs: 7 * 86_400,
                resources: Resources {
                    cpu: Some(1.5),
                    memory_bytes: Some(2 << 30),
                },
            }
        );
        // The agent's own resources are its own.
        assert_eq!(a.runtime.resources, Resources::default());
        assert_eq!(
            a.jobs_summary().unwrap(),
            "image ghcr.io/acme/builder:1.4 · at most 64 at once · default timeout 7d · 1.5 cpu, \
             2Gi each · the workspace, no secrets"
        );
        // Whole seconds, and the smallest values.
        let a = agent_of(&format!(
            "agents:\n  a:\n{}    tools: [jobs]\n",
            runtime(", image: debian, jobs: { max_concurrent: 1, default_timeout: 1 }")
        ));
        assert_eq!(
            (
                a.runtime.jobs.max_concurrent,
                a.runtime.jobs.default_timeout_secs
            ),
            (1, 1)
        );
        assert_eq!(
            a.jobs_summary().unwrap(),
            "image debian (the agent's) · at most 1 at once · default timeout 1s · no cpu or \
             memory limit · the workspace, no secrets"
        );
    }

    #[test]
    fn the_resolved_jobs_round_trip_through_json() {
        let a = agent_of(&format!(
            "agents:\n  a:\n{}    tools: [jobs]\n",
            runtime(", jobs: { image: alpine, default_timeout: 30m, memory: 512Mi }")
        ));
        let json = serde_json::to_value(&a).unwrap();
        assert_eq!(
            json["runtime"]["jobs"],
            serde_json::json!({
                "image": "alpine",
                "max_concurrent": 4,
                "default_timeout_secs": 1800,
                "resources": { "cpu": null, "memory_bytes": 536_870_912 }
            })
        );
        let back: AgentSpec = serde_json::from_value(json).unwrap();
        assert_eq!(back, a);
    }

    #[test]
    fn an_agent_without_job_tools_has_no_jobs_summary() {
        let a = agent_of(&format!(
            "agents:\n  a:\n{}    tools: [file_read]\n",
            runtime("")
        ));
        assert!(!a.has_job_tools());
        assert_eq!(a.jobs_summary(), None);
    }

    #[test]
    fn job_tools_without_an_image_with_a_shell_are_refused_at_their_entry() {
        let text = format!(
            "agents:\n  a:\n{}    tools: [file_read, jobs]\n",
            runtime("")
        );
        let d = assert_error(
            &text,
            "jobs_need_image",
            (4, 24),
            "`jobs` gives the job tools, and jobs run their commands with `/bin/sh -c`, but this \
             agent's jobs have no image with a shell (no `runtime.jobs.image`, and no \
             `runtime.image`: the runner's own image has no shell)",
        );
        assert_eq!(d.path, "agents.a.tools[1]");
        let help = d.help.unwrap();
        assert!(
            help.contains("`runtime.jobs.image`") && help.contains("`runtime.image`"),
            "{help}"
        );
        // A mapping entry is found too, by `source` before `name`.
        let text = format!(
            "agents:\n  a:\n{}    tools:\n      - file_read\n      - {{ name: job_status }}\n",
            runtime("")
        );
        let d = assert_error(
            &text,
            "jobs_need_image",
            (6, 9),
            "`job_status` gives the job tools, and jobs run their commands with `/bin/sh -c`, but this agent's jobs have no image with a shell (no `runtime.jobs.image`, and no `runtime.image`: the runner's own image has no shell)",
        );
        assert_eq!(d.path, "agents.a.tools[1]");
    }

    #[test]
    fn a_missing_shell_is_reported_once() {
        // `shell` needs `runtime.image` already, which would fix the jobs too.
        let text = format!("agents:\n  a:\n{}    tools: [shell, jobs]\n", runtime(""));
        assert_eq!(errors_at(&text), [("shell_needs_image", 4, 13)]);
        let text = format!("agents:\n  a:\n{}    tools: all\n", runtime(""));
        assert_eq!(
            errors(&text)
                .iter()
                .map(|d| d.kind.code())
                .collect::<Vec<_>>(),
            ["shell_needs_image"]
        );
        // With an image, `all` has every job tool.
        let a = agent_of(&format!(
            "agents:\n  a:\n{}    tools: all\n",
            runtime(", image: debian")
        ));
        assert!(JOB_TOOLS.iter().all(|n| a.offers(n)));
    }

    #[test]
    fn runtime_jobs_without_job_tools_is_a_warning() {
        let text = format!(
            "agents:\n  a:\n{}    tools: [file_read]\n",
            runtime(", jobs: { max_concurrent: 2 }")
        );
        let w = one_warning(&text);
        assert_eq!(
            (w.kind.code(), w.path.as_str(), w.line, w.column),
            ("setting_unused", "agents.a.runtime.jobs", 3, 50)
        );
        assert_eq!(
            w.message,
            "`runtime.jobs` has no effect: agent `a` has none of the job tools"
        );
        assert!(
            w.help
                .unwrap()
                .starts_with("add `jobs` to the agent's `tools`")
        );
        // `jobs: null` too: it was written for nothing.
        let text = format!("agents:\n  a:\n{}", runtime(", jobs: null"));
        assert_eq!(one_warning(&text).kind.code(), "setting_unused");
        // With job tools, `null` is every default.
        let a = agent_of(&format!(
            "agents:\n  a:\n{}    tools: [jobs]\n",
            runtime(", image: debian, jobs: null")
        ));
        assert_eq!(a.runtime.jobs, Jobs::default());
    }

    #[test]
    fn every_bad_jobs_setting_is_reported_at_its_value_with_help() {
        let text = "agents:\n  a:\n    runtime:\n      provider: scripted\n      script: [hi]\n      \
                    jobs:\n        image: \"Python:3.12\"\n        max_concurrent: 65\n        \
                    default_timeout: 8d\n        cpu: 0\n        memory: 3Mi\n        \
                    max_concurent: 2\n    tools: [jobs]\n";
        let d = errors(text);
        let got: Vec<(&str, &str, u32, u32)> = d
            .iter()
            .map(|d| (d.kind.code(), d.path.as_str(), d.line, d.column))
            .collect();
        assert_eq!(
            got,
            [
                ("invalid_value", "agents.a.runtime.jobs.image", 7, 16),
                (
                    "out_of_range",
                    "agents.a.runtime.jobs.max_concurrent",
                    8,
                    25
                ),
                (
                    "out_of_range",
                    "agents.a.runtime.jobs.default_timeout",
                    9,
                    26
                ),
                ("out_of_range", "agents.a.runtime.jobs.cpu", 10, 14),
                ("out_of_range", "agents.a.runtime.jobs.memory", 11, 17),
                ("unknown_key", "agents.a.runtime.jobs.max_concurent", 12, 9),
            ],
            "{:#?}",
            lines(&d)
        );
        assert!(d.iter().all(|d| d.help.is_some()), "{d:#?}");
        let text = lines(&d);
        let has = |path: &str, needle: &str| {
            assert!(
                text.iter()
                    .any(|t| t.starts_with(&format!("{path} |")) && t.contains(needle)),
                "{path} / {needle}: {text:#?}"
            );
        };
        has("agents.a.runtime.jobs.image", "found \"Python:3.12\"");
        has("agents.a.runtime.jobs.image", "repository in lower case");
        has(
            "agents.a.runtime.jobs.max_concurrent",
            "between 1 and 64, found 65",
        );
        has(
            "agents.a.runtime.jobs.default_timeout",
            "from 1 second to 7 days, found \"8d\"",
        );
        has("agents.a.runtime.jobs.default_timeout", "killed");
        has("agents.a.runtime.jobs.cpu", "more than 0, found 0");
        has("agents.a.runtime.jobs.memory", "below Docker's minimum");
        has(
            "agents.a.runtime.jobs.max_concurent",
            "did you mean `max_concurrent`?",
        );
    }

    #[test]
    fn bad_jobs_values_of_other_shapes() {
        let bad = |jobs: &str| {
            let text = format!(
                "agents:\n  a:\n{}    tools: [jobs]\n",
                runtime(&format!(", image: debian, jobs: {jobs}"))
            );
            let d = errors(&text);
            assert_eq!(d.len(), 1, "{jobs}: {d:#?}");
            (d[0].kind.code(), d[0].message.clone())
        };
        assert_eq!(bad("{ default_timeout: \"1 h\" }").0, "invalid_value");
        assert_eq!(bad("{ default_timeout: 0 }").0, "out_of_range");
        assert_eq!(bad("{ max_concurrent: 0 }").0, "out_of_range");
        assert_eq!(bad("{ max_concurrent: two }").0, "wrong_type");
        assert_eq!(bad("{ memory: lots }").0, "invalid_memory");
        assert_eq!(bad("{ cpu: 2000 }").0, "out_of_range");
        assert_eq!(bad("{ image: \"\" }").0, "invalid_value");
        assert_eq!(bad("{ image: [debian] }").0, "wrong_type");
        assert_eq!(bad("[debian]").0, "wrong_type");
        let (code, message) = bad("{ resources: { cpu: 1 } }");
        assert_eq!(code, "unknown_key");
        assert_eq!(message, "unknown key `resources` in jobs");
    }

    #[test]
    fn misplaced_jobs_keys_point_at_runtime_jobs() {
        let d = errors(&format!(
            "agents:\n  a:\n{}    tools: [jobs]\n    jobs: {{ image: debian }}\n",
            runtime(", image: debian")
        ));
        assert_eq!(d.len(), 1, "{d:#?}");
        assert_eq!(d[0].help.as_deref(), Some("`jobs` belongs under `runtime`"));
    }

    #[test]
    fn jobs_are_given_no_secrets() {
        for entry in [
            "{ name: jobs, secrets: [DB_URL] }",
            "{ name: job_start, secrets: [DB_URL] }",
        ] {
            let text = format!(
                "agents:\n  a:\n{}    tools:\n      - {entry}\n",
                runtime(", image: debian")
            );
            let d = errors(&text);
            assert_eq!(d.len(), 1, "{d:#?}");
            assert_eq!(d[0].kind.code(), "invalid_value");
            assert!(d[0].path.ends_with("tools[0].secrets"), "{}", d[0].path);
            assert_eq!(d[0].line, 5);
            assert!(
                d[0].message
                    .starts_with("jobs are given no secrets yet; `secrets` on `job"),
                "{}",
                d[0].message
            );
            assert!(
                d[0].help
                    .as_ref()
                    .unwrap()
                    .contains("{ name: shell, secrets: [NAME] }")
            );
        }
    }

    #[test]
    fn effect_and_verify_do_not_apply_to_the_toolset() {
        let text = format!(
            "agents:\n  a:\n{}    tools:\n      - name: jobs\n        effect: read\n        \
             verify: {{ tool: job_status, args: same }}\n",
            runtime(", image: debian")
        );
        let d = errors(&text);
        let got: Vec<(&str, &str, u32, u32)> = d
            .iter()
            .map(|d| (d.kind.code(), d.path.as_str(), d.line, d.column))
            .collect();
        assert_eq!(
            got,
            [
                ("invalid_value", "agents.a.tools[0].effect", 6, 9),
                ("invalid_value", "agents.a.tools[0].verify", 7, 9),
            ]
        );
        assert!(
            d[0].message
                .starts_with("`effect` cannot be pinned on the `jobs` toolset")
        );
        assert!(
            d[0].help
                .as_ref()
                .unwrap()
                .contains("{ name: job_start, effect: … }")
        );
        assert_eq!(
            d[1].message,
            "`verify` does not apply to the `jobs` toolset, only to one tool"
        );
        // On one job tool, `verify` is the ordinary verifier.
        let a = agent_of(&format!(
            "agents:\n  a:\n{}    tools:\n      - {{ name: job_start, verify: {{ tool: job_status, args: same }} }}\n      - job_status\n",
            runtime(", image: debian")
        ));
        assert_eq!(a.tools[0].verify.as_ref().unwrap().tool, "job_status");
    }

    #[test]
    fn a_tool_given_twice_is_one_error_naming_both_entries() {
        let text = format!(
            "agents:\n  a:\n{}    tools: [jobs, job_start, file_read]\n",
            runtime(", image: debian")
        );
        let d = assert_error(
            &text,
            "duplicate_tool",
            (4, 19),
            "tool `job_start` is listed twice (`jobs` and `job_start` both give it)",
        );
        assert_eq!(
            d.help.as_deref(),
            Some(
                "list each tool once: `jobs` gives job_start, job_status, job_output, job_wait, \
                 job_kill, so leave out the tools it gives, or name the ones needed instead of \
                 `jobs`"
            )
        );
        // The toolset twice: one error, not one per tool.
        let text = format!(
            "agents:\n  a:\n{}    tools: [jobs, jobs]\n",
            runtime(", image: debian")
        );
        assert_error(&text, "duplicate_tool", (4, 19), "`jobs` is listed twice");
        // The other way round, and a plain name twice as before.
        let text = format!(
            "agents:\n  a:\n{}    tools: [job_kill, jobs]\n",
            runtime(", image: debian")
        );
        assert_error(
            &text,
            "duplicate_tool",
            (4, 23),
            "tool `job_kill` is listed twice (`job_kill` and `jobs` both give it)",
        );
        let text = format!(
            "agents:\n  a:\n{}    tools: [file_read, file_read]\n",
            runtime("")
        );
        let d = assert_error(
            &text,
            "duplicate_tool",
            (4, 24),
            "tool `file_read` is listed twice",
        );
        assert_eq!(d.help.as_deref(), Some("list each tool once"));
    }

    #[test]
    fn a_misspelt_toolset_gets_the_toolset() {
        let text = format!(
            "agents:\n  a:\n{}    tools: [job]\n",
            runtime(", image: debian")
        );
        let d = errors(&text);
        assert_eq!(d.len(), 1, "{d:#?}");
        assert_eq!(d[0].kind.code(), "unknown_tool");
        assert!(
            d[0].help.as_ref().unwrap().contains("`jobs`"),
            "{:?}",
            d[0].help
        );
    }

    #[test]
    fn human_approval_can_gate_the_toolset() {
        let a = agent_of(&format!(
            "agents:\n  a:\n{}    tools: [jobs]\n    governance:\n      human_approval: {{ actions: [jobs] }}\n",
            runtime(", image: debian")
        ));
        for tool in JOB_TOOLS {
            assert!(a.governance.gates(tool, Effect::Read), "{tool}");
        }
    }

    #[test]
    fn a_batch_agent_may_start_jobs_that_outlive_it() {
        let parsed = valid(&format!(
            "agents:\n  a:\n{}    tools: [jobs]\n    execution: {{ durability: false, task: build }}\n",
            runtime(", jobs: { image: alpine }")
        ));
        assert!(
            parsed.warnings.diagnostics.is_empty(),
            "{:?}",
            parsed.warnings
        );
        let a = &parsed.agentfile.agents[0];
        assert!(!a.execution.durability && a.has_job_tools());
        assert_eq!(a.runtime.job_image(), Some("alpine"));
    }
}
