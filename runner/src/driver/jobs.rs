//! The job tools in the driver: `job_start` through the pool's job broker with its kill points,
//! the reads (`job_status`, `job_output`, `job_wait`) and `job_kill`; what a `job_start` left
//! without an outcome by a crash comes to (the job it made, started if it was not, or *not run*
//! — never a second job); and the re-attach at boot, which traces the thread's jobs as found.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use ninetrix_agentfile::tools::JOB_START;
use ninetrix_proto::events::{JobEvent, TraceEvent};
use ninetrix_proto::jobs::{CreateJob, JobErrorCode, JobId, JobState, JobView};
use serde_json::Value;

use crate::checkpoints::Checkpoints;
use crate::engine::PlannedCall;
use crate::jobs::{self, Broker, JobsError, faults};
use crate::tools::ToolOutput;

use super::Runner;
use super::tool_calls::Executed;

/// The time kept for `job_wait`'s answer within the tool timeout.
const WAIT_MARGIN: Duration = Duration::from_secs(5);

/// The jobs of one runner: the broker of its thread, and each job as this runner last saw it
/// (what tells a job that just ended from one already traced as ended, and what a job whose
/// container vanished is reported with).
#[derive(Debug)]
pub(super) struct Jobs {
    broker: Broker,
    seen: Mutex<Vec<JobView>>,
}

impl Jobs {
    pub(super) fn new(broker: Broker) -> Self {
        Self {
            broker,
            seen: Mutex::new(Vec::new()),
        }
    }

    /// Remembers `jobs` as seen now; answers those this runner sees ended for the first time.
    fn saw(&self, jobs: &[JobView]) -> Vec<JobView> {
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut ended = Vec::new();
        for job in jobs {
            let before = seen
                .iter()
                .position(|s| s.id == job.id)
                .map(|i| seen.remove(i));
            if job.state == JobState::Exited && before.is_none_or(|b| b.state != JobState::Exited) {
                ended.push(job.clone());
            }
            seen.push(job.clone());
        }
        ended
    }

    /// The answer for `wanted`, which the broker does not know (`why`): with the job as last
    /// seen when this runner saw it.
    fn missing(&self, wanted: &str, why: String) -> String {
        let seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match jobs::find(&seen, wanted) {
            Ok(last) => jobs::vanished_text(&why, last),
            Err(_) => why,
        }
    }
}

/// The trace event of `job`.
fn event(job: &JobView) -> JobEvent {
    JobEvent {
        job: job.id.to_string(),
        name: job.name.clone(),
        command: crate::engine::preview(&job.command, jobs::COMMAND_PREVIEW),
        state: job.state.as_str().to_string(),
        exit_code: job.exit_code,
        timed_out: job.timed_out,
    }
}

/// A broker failure as a tool outcome: refused → the model reads why; not sent → it did not
/// happen; lost → it may have.
fn failed(e: JobsError) -> Executed {
    match e {
        JobsError::Refused(r) => Executed::Answered(ToolOutput::error(r.message)),
        e @ JobsError::NotSent(_) => Executed::NotSent(e.to_string()),
        e @ JobsError::Lost(_) => Executed::Lost(e.to_string()),
    }
}

impl<C: Checkpoints> Runner<C> {
    /// Runs a job tool (`name` is one of the job tools) as call `key` of turn `turn`.
    pub(super) async fn job_tool(
        &self,
        name: &str,
        args: &Value,
        key: &str,
        turn: u64,
    ) -> Executed {
        let Some(jobs) = &self.jobs else {
            return Executed::Answered(ToolOutput::error(
                "this pool runs no background jobs: its backend gave the runner no job broker \
                 (jobs run on one Docker host with `ninetrix up`)",
            ));
        };
        if args.get("_raw").is_some() {
            return Executed::Answered(ToolOutput::error(
                "the arguments were not valid JSON; call the tool again with a JSON object",
            ));
        }
        let out = match name {
            JOB_START => return self.job_start(jobs, args, key, turn).await,
            "job_status" => self.job_status(jobs, args).await,
            "job_output" => self.job_output(jobs, args).await,
            "job_wait" => self.job_wait(jobs, args).await,
            "job_kill" => self.job_kill(jobs, args).await,
            other => Err(Executed::Answered(ToolOutput::error(format!(
                "`{other}` is not a job tool"
            )))),
        };
        out.unwrap_or_else(|e| e)
    }

    /// `job_start`: create the job's container (named from `key`), start it, answer the job.
    /// The call's intent is committed before this runs (it is a `write`).
    async fn job_start(&self, jobs: &Jobs, args: &Value, key: &str, turn: u64) -> Executed {
        let start = match jobs::start_args(args) {
            Ok(start) => start,
            Err(why) => return Executed::Answered(ToolOutput::error(why)),
        };
        faults::crash(faults::BEFORE_CREATE, &self.config.workspace);
        let created = match jobs
            .broker
            .create(&CreateJob {
                key: key.to_string(),
                name: start.name,
                command: start.command,
                timeout_secs: start.timeout_secs,
                turn,
            })
            .await
        {
            Ok(job) => job,
            Err(e) => return failed(e),
        };
        faults::crash(faults::BEFORE_START, &self.config.workspace);
        let job = match jobs.broker.start(&created.id).await {
            Ok(job) => job,
            Err(e) => return failed(e),
        };
        faults::crash(faults::AFTER_START, &self.config.workspace);
        self.events.emit(TraceEvent::JobStarted(event(&job)));
        Executed::Answered(ToolOutput::ok(jobs::started_text(&job)))
    }

    /// What a `job_start` whose outcome a crash (or a lost answer) left unknown comes to: the
    /// job its key names, started if it was only created; *not run* if no container of it
    /// exists. `None`: the broker could not say (the caller reports the outcome unknown).
    pub(super) async fn recover_job_start(&self, call: &PlannedCall) -> Option<ToolOutput> {
        let jobs = self.jobs.as_ref()?;
        let id = JobId::of(jobs.broker.thread(), &call.key);
        match jobs.broker.get(&id).await {
            Ok(None) => Some(ToolOutput::error(jobs::not_run_text(&id))),
            Ok(Some(job)) => {
                let job = if job.state == JobState::Created {
                    match jobs.broker.start(&id).await {
                        Ok(job) => job,
                        Err(e) => {
                            tracing::warn!("cannot start job {id} found created: {e}");
                            return None;
                        }
                    }
                } else {
                    job
                };
                self.events.emit(TraceEvent::JobReattached(event(&job)));
                self.observe(jobs, std::slice::from_ref(&job));
                Some(ToolOutput::ok(jobs::started_text(&job)))
            }
            Err(e) => {
                tracing::warn!("cannot ask the job broker about job {id}: {e}");
                None
            }
        }
    }

    /// At boot: traces each job of the thread as found (running, or ended while the runner was
    /// down). Jobs go on without their runner; this only tells the trace and the log.
    pub(super) async fn reattach_jobs(&self) {
        // A thread's first boot has no jobs to find.
        let Some(jobs) = self.jobs.as_ref().filter(|_| self.boot_count > 1) else {
            return;
        };
        match jobs.broker.list().await {
            Ok(list) => {
                for job in &list {
                    self.events.emit(TraceEvent::JobReattached(event(job)));
                    self.observe(jobs, std::slice::from_ref(job));
                }
            }
            Err(e) => tracing::warn!("cannot list this thread's jobs at boot: {e}"),
        }
    }

    /// Remembers `list` as seen, tracing `job_finished` for each job this runner sees ended for
    /// the first time.
    fn observe(&self, jobs: &Jobs, list: &[JobView]) {
        for job in jobs.saw(list) {
            self.events.emit(TraceEvent::JobFinished(event(&job)));
        }
    }

    /// The job the `job` argument names among the thread's: by ID, one request for that job;
    /// by name, the thread's list.
    async fn named_job(&self, jobs: &Jobs, args: &Value) -> Result<JobView, Executed> {
        let wanted = jobs::job_arg(args).map_err(|w| Executed::Answered(ToolOutput::error(w)))?;
        if let Ok(id) = wanted.parse::<JobId>() {
            return match jobs.broker.get(&id).await.map_err(failed)? {
                Some(job) => {
                    self.observe(jobs, std::slice::from_ref(&job));
                    Ok(job)
                }
                None => Err(Executed::Answered(ToolOutput::error(
                    jobs.missing(wanted, jobs::no_such_job(wanted)),
                ))),
            };
        }
        let list = jobs.broker.list().await.map_err(failed)?;
        self.observe(jobs, &list);
        jobs::find(&list, wanted)
            .cloned()
            .map_err(|w| Executed::Answered(ToolOutput::error(jobs.missing(wanted, w))))
    }

    async fn job_status(&self, jobs: &Jobs, args: &Value) -> Result<Executed, Executed> {
        if args.get("job").is_none_or(Value::is_null) {
            let list = jobs.broker.list().await.map_err(failed)?;
            self.observe(jobs, &list);
            let all: Vec<Value> = list.iter().map(jobs::summary).collect();
            return Ok(Executed::Answered(ToolOutput::ok(
                serde_json::json!({ "jobs": all }).to_string(),
            )));
        }
        let job = self.named_job(jobs, args).await?;
        Ok(Executed::Answered(ToolOutput::ok(
            jobs::summary(&job).to_string(),
        )))
    }

    async fn job_output(&self, jobs: &Jobs, args: &Value) -> Result<Executed, Executed> {
        let query =
            jobs::output_query(args).map_err(|w| Executed::Answered(ToolOutput::error(w)))?;
        let job = self.named_job(jobs, args).await?;
        let out = jobs.broker.output(&job.id, &query).await.map_err(failed)?;
        self.observe(jobs, std::slice::from_ref(&out.job));
        Ok(Executed::Answered(ToolOutput::ok(crate::tools::storable(
            jobs::output_text(&out),
        ))))
    }

    /// `job_wait`: waits in pieces of at most a broker wait each, until the job ends or the
    /// wait (at most the tool timeout, less a margin) is over. The broker going away meanwhile (a
    /// recreate by `up`) is waited out within the same deadline; re-run after a crash of the
    /// runner, it waits again: the job went on meanwhile.
    async fn job_wait(&self, jobs: &Jobs, args: &Value) -> Result<Executed, Executed> {
        let most = self
            .tool_ctx
            .timeout
            .saturating_sub(WAIT_MARGIN)
            .as_secs()
            .max(1);
        let secs =
            jobs::wait_secs(args, most).map_err(|w| Executed::Answered(ToolOutput::error(w)))?;
        let wanted = jobs::job_arg(args).map_err(|w| Executed::Answered(ToolOutput::error(w)))?;
        let started = Instant::now();
        let deadline = started + Duration::from_secs(secs);
        let list = self
            .patiently(deadline, || jobs.broker.list())
            .await
            .map_err(failed)?;
        self.observe(jobs, &list);
        let mut job = jobs::find(&list, wanted)
            .cloned()
            .map_err(|w| Executed::Answered(ToolOutput::error(jobs.missing(wanted, w))))?;
        while job.state != JobState::Exited {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let id = job.id.clone();
            job = match self
                .patiently(deadline, || {
                    jobs.broker.wait_once(&id, left.as_secs().max(1))
                })
                .await
            {
                Ok(job) => job,
                // Its container was removed while the runner waited.
                Err(JobsError::Refused(r)) if r.code == JobErrorCode::NotFound => {
                    return Err(Executed::Answered(ToolOutput::error(
                        jobs.missing(wanted, r.message),
                    )));
                }
                Err(e) => return Err(failed(e)),
            };
        }
        self.observe(jobs, std::slice::from_ref(&job));
        Ok(Executed::Answered(ToolOutput::ok(jobs::waited_text(
            &job,
            started.elapsed().as_secs(),
        ))))
    }

    /// Runs `call` until it is answered (a refusal is an answer), retrying while the broker is
    /// unreachable or drops the request, until `deadline` or shutdown.
    async fn patiently<T, F, Fut>(&self, deadline: Instant, mut call: F) -> Result<T, JobsError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, JobsError>>,
    {
        let mut pause = Duration::from_millis(500);
        loop {
            match call().await {
                Err(e @ (JobsError::NotSent(_) | JobsError::Lost(_)))
                    if Instant::now() + pause < deadline && !self.shutdown.is_cancelled() =>
                {
                    tracing::warn!("{e}; trying again in {} ms", pause.as_millis());
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(4));
                }
                other => return other,
            }
        }
    }

    async fn job_kill(&self, jobs: &Jobs, args: &Value) -> Result<Executed, Executed> {
        let job = self.named_job(jobs, args).await?;
        let job = jobs.broker.kill(&job.id).await.map_err(failed)?;
        self.observe(jobs, std::slice::from_ref(&job));
        Ok(Executed::Answered(ToolOutput::ok(
            jobs::summary(&job).to_string(),
        )))
    }
}

#[cfg(test)]
mod tests {
    use ninetrix_proto::ThreadId;

    use super::*;
    use crate::config::SecretValue;

    fn view(id: &str, state: JobState) -> JobView {
        crate::jobs::sample(id, "build", state)
    }

    #[test]
    fn a_job_is_seen_ended_once() {
        let jobs = Jobs::new(Broker::new(
            reqwest::Client::new(),
            "http://broker:7480",
            SecretValue::new("t"),
            ThreadId::new_v7(),
            Some(1),
        ));
        let (a, b) = ("00000000000000a1", "00000000000000b2");
        assert!(jobs.saw(&[view(a, JobState::Running)]).is_empty());
        let ended = jobs.saw(&[view(a, JobState::Exited), view(b, JobState::Exited)]);
        assert_eq!(
            ended.len(),
            2,
            "one that ended while watched, one found ended"
        );
        assert!(jobs.saw(&[view(a, JobState::Exited)]).is_empty());
        let last = jobs.missing(b, "gone".into());
        assert!(
            last.starts_with("gone\nLast seen") && last.contains("exited"),
            "{last}"
        );
        assert_eq!(jobs.missing("other", "gone".into()), "gone");
    }
}
