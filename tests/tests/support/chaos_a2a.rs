//! The chaos suite's A2A tasks (issue 43): a caller sends the appender's pool A2A messages over
//! the JSON-RPC endpoint (`SendMessage`, `returnImmediately`) into three contexts — sessions the
//! session replicas serve — while the nemeses kill the runners and the API. Now and then it
//! sends an earlier message again with its `messageId`, as a client that got no answer would; a
//! send the API did not answer (it was down) is sent again after the restart, the same way.
//!
//! What [`A2aTasks::check`] asserts, once every message has been sent again after the faults:
//! every answer to a `messageId` named the same task; every task ends `COMPLETED`, answered by
//! exactly one turn of its thread (one `turn_completed` for its inbox seq); each context's
//! session holds exactly one inbox message per `messageId` sent to it; and `ListTasks` of a
//! context lists each of its tasks once.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ninetrix_e2e::Lcg;
use ninetrix_proto::ThreadId;
use ninetrix_proto::events::TraceEvent;
use serde_json::{Value, json};

use super::Admin;

/// The contexts the messages go to.
const CONTEXTS: u64 = 3;

/// How long a task may take to end once the API stays up.
const SETTLE: Duration = Duration::from_secs(120);

/// The A2A caller's state through the faults.
pub(crate) struct A2aTasks {
    http: reqwest::Client,
    endpoint: String,
    /// Every `messageId` sent, with its context, in order.
    sent: Vec<(String, String)>,
    /// The task each answer to a `messageId` named (every answer, to compare them).
    answers: BTreeMap<String, Vec<String>>,
    /// Sends the API did not answer.
    pub(crate) unanswered: usize,
}

impl A2aTasks {
    /// A caller of `agent` of `pool` on the API at `url` (the admin token: `--insecure-dev`).
    pub(crate) fn new(url: &str, pool: &str, agent: &str) -> A2aTasks {
        A2aTasks {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap(),
            endpoint: format!("{url}/a2a/{pool}/{agent}"),
            sent: Vec::new(),
            answers: BTreeMap::new(),
            unanswered: 0,
        }
    }

    /// One JSON-RPC call: its `result`, or `None` when the API did not answer it (or answered an
    /// error, which the caller treats the same way: it sends again later).
    async fn call(&self, method: &str, params: Value) -> Option<Value> {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let response = self
            .http
            .post(&self.endpoint)
            .bearer_auth("insecure-dev")
            .header("A2A-Version", "1.0")
            .json(&body)
            .send()
            .await
            .ok()?;
        let answer: Value = response.json().await.ok()?;
        answer.get("result").cloned()
    }

    /// Sends message `id` into `context`; records the task it names.
    async fn send(&mut self, id: &str, context: &str) {
        let params = json!({
            "message": {"messageId": id, "contextId": context, "role": "ROLE_USER",
                        "parts": [{"text": format!("a2a {id}")}]},
            "configuration": {"returnImmediately": true}
        });
        match self.call("SendMessage", params).await {
            Some(result) => {
                let task = result["task"]["id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                self.answers.entry(id.to_string()).or_default().push(task);
            }
            None => self.unanswered += 1,
        }
    }

    /// One round's work: a new message, or (one round in five) an earlier one sent again.
    pub(crate) async fn step(&mut self, rng: &mut Lcg) {
        if !self.sent.is_empty() && rng.next(5) == 0 {
            let (id, context) = self.sent[rng.next(self.sent.len() as u64) as usize].clone();
            self.send(&id, &context).await;
        } else {
            let n = self.sent.len() as u64;
            let (id, context) = (format!("a2a-{n}"), format!("chaos-a2a-{}", n % CONTEXTS));
            self.sent.push((id.clone(), context.clone()));
            self.send(&id, &context).await;
        }
    }

    /// Sends every message once more (the API stays up now), waits for every task to end, and
    /// checks the invariants above. Returns a summary for the suite's last line.
    pub(crate) async fn check(&mut self, admin: &Admin, seed: u64) -> String {
        for (id, context) in self.sent.clone() {
            self.send(&id, &context).await;
        }
        let mut threads: BTreeMap<ThreadId, Vec<u64>> = BTreeMap::new();
        for (id, answers) in &self.answers {
            let task = &answers[0];
            assert!(
                answers.iter().all(|t| t == task && !t.is_empty()),
                "seed {seed}: messageId {id} named more than one task: {answers:?}"
            );
            let done = self.settled(task, seed).await;
            let n = &done["metadata"]["ninetrix"];
            let thread: ThreadId = n["thread_id"].as_str().unwrap().parse().unwrap();
            threads
                .entry(thread)
                .or_default()
                .push(n["seq"].as_u64().unwrap_or_default());
        }
        assert_eq!(
            self.answers.len(),
            self.sent.len(),
            "seed {seed}: a message was never answered"
        );
        for (thread, seqs) in &threads {
            let trace = admin.trace(*thread).await;
            for seq in seqs {
                let turns = trace
                    .iter()
                    .filter(|e| matches!(e, TraceEvent::TurnCompleted(t) if t.seq == *seq))
                    .count();
                assert_eq!(
                    turns, 1,
                    "seed {seed}: inbox seq {seq} of {thread} was answered by {turns} turns"
                );
            }
            let summary = admin.client.thread(*thread).await.unwrap().unwrap();
            assert_eq!(
                summary.inbox_seq,
                seqs.len() as u64,
                "seed {seed}: context thread {thread} holds other messages than its tasks'"
            );
        }
        for c in 0..CONTEXTS {
            let context = format!("chaos-a2a-{c}");
            let listed = self
                .call("ListTasks", json!({"contextId": context, "pageSize": 100}))
                .await
                .expect("ListTasks answers");
            let mine = self.sent.iter().filter(|(_, ctx)| *ctx == context).count();
            assert_eq!(
                listed["tasks"].as_array().map_or(0, Vec::len),
                mine,
                "seed {seed}: context {context} lists other tasks than were sent: {listed}"
            );
        }
        format!(
            "{} A2A tasks ({} sends unanswered and sent again)",
            self.sent.len(),
            self.unanswered
        )
    }

    /// `GetTask` of `task` until it reads `COMPLETED`.
    async fn settled(&self, task: &str, seed: u64) -> Value {
        let deadline = Instant::now() + SETTLE;
        loop {
            if let Some(t) = self.call("GetTask", json!({"id": task})).await {
                let state = t["status"]["state"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                if state == "TASK_STATE_COMPLETED" {
                    return t;
                }
                assert!(
                    !matches!(
                        state.as_str(),
                        "TASK_STATE_FAILED" | "TASK_STATE_CANCELED" | "TASK_STATE_REJECTED"
                    ),
                    "seed {seed}: task {task} ended {state}: {t}"
                );
            }
            assert!(
                Instant::now() < deadline,
                "seed {seed}: task {task} did not complete"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
