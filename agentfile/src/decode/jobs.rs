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
            JobsProblem::Unused(agent) => format!(
                "`runtime.jobs` has no effect: agent `{agent}` has none of the job tools"
            ),
            JobsProblem::Secrets(entry) => format!(
                "jobs are given no secrets yet; `secrets` on `{entry}` would reach no job"
            ),
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
            j.jobs.default_timeout_secs = cx.duration(f.value, &f.path, DurationField::JobTimeout)?;
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
