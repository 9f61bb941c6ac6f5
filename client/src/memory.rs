//! The memory routes: a runner's `memory` command (`POST /v1/runners/threads/{id}/memory`, runner
//! token) and the admin's listing, reads, edits, deletions and purge of memory files
//! (`/v1/memories…`, admin token).

use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    MemoriesDeleted, MemoryFile, MemoryFileContent, MemoryOpRequest, MemoryOpResult, MemoryScope,
    MemoryWrite,
};
use reqwest::Method;

use crate::{Client, ClientError};

/// One memory: an agent's (`session` none) or one of its sessions'.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryOf {
    /// The pool.
    pub pool: String,
    /// The agent.
    pub agent: String,
    /// For a session's memory: the session key (a thread that is not a session's: its ID).
    pub session: Option<String>,
}

impl MemoryOf {
    /// The query that names this memory (and `path`).
    fn pairs(&self, path: &str) -> Vec<(&'static str, String)> {
        let mut q = vec![
            ("pool", self.pool.clone()),
            ("agent", self.agent.clone()),
            ("path", path.to_string()),
        ];
        if let Some(key) = &self.session {
            q.push(("session", key.clone()));
        }
        q
    }
}

/// Filters of `GET /v1/memories`: the pool, and optionally one agent, scope and session.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryQuery {
    /// The pool.
    pub pool: String,
    /// Only this agent's.
    pub agent: Option<String>,
    /// Only this scope's.
    pub scope: Option<MemoryScope>,
    /// Only this session's.
    pub session: Option<String>,
    /// Skip this many.
    pub offset: Option<u32>,
}

impl Client {
    /// `POST …/memory`: runs one memory command of the thread's runner (applied once per
    /// `op_key`; the same key again answers the first result).
    pub async fn memory_op(
        &self,
        thread: ThreadId,
        request: &MemoryOpRequest,
    ) -> Result<MemoryOpResult, ClientError> {
        let p = format!("/v1/runners/threads/{thread}/memory");
        self.call(Method::POST, &p, &[], Some(request), None).await
    }

    /// `GET /v1/memories`: one page (up to 1,000) of memory files, without their content.
    pub async fn list_memories(&self, query: &MemoryQuery) -> Result<Vec<MemoryFile>, ClientError> {
        let mut pairs = vec![("pool", query.pool.clone())];
        if let Some(agent) = &query.agent {
            pairs.push(("agent", agent.clone()));
        }
        if let Some(scope) = query.scope {
            pairs.push(("scope", scope.as_str().to_string()));
        }
        if let Some(session) = &query.session {
            pairs.push(("session", session.clone()));
        }
        if let Some(offset) = query.offset {
            pairs.push(("offset", offset.to_string()));
        }
        self.call::<(), _>(Method::GET, "/v1/memories", &pairs, None, None)
            .await
    }

    /// `GET /v1/memories/file`: one memory file with its content; `None` if there is none.
    pub async fn memory_file(
        &self,
        memory: &MemoryOf,
        path: &str,
    ) -> Result<Option<MemoryFileContent>, ClientError> {
        self.call_optional::<(), _>(
            Method::GET,
            "/v1/memories/file",
            &memory.pairs(path),
            None,
            None,
        )
        .await
    }

    /// `PUT /v1/memories/file`: creates or overwrites a memory file.
    pub async fn put_memory_file(
        &self,
        memory: &MemoryOf,
        path: &str,
        content: &str,
    ) -> Result<MemoryFile, ClientError> {
        let body = MemoryWrite {
            content: content.to_string(),
        };
        self.call(
            Method::PUT,
            "/v1/memories/file",
            &memory.pairs(path),
            Some(&body),
            None,
        )
        .await
    }

    /// `DELETE /v1/memories/file`: deletes a memory file, or a directory with everything under
    /// it; how many files. Nothing there is `not_found`.
    pub async fn delete_memory_file(
        &self,
        memory: &MemoryOf,
        path: &str,
    ) -> Result<u64, ClientError> {
        let done: MemoriesDeleted = self
            .call::<(), _>(
                Method::DELETE,
                "/v1/memories/file",
                &memory.pairs(path),
                None,
                None,
            )
            .await?;
        Ok(done.files)
    }

    /// `DELETE /v1/memories`: deletes every memory of the pool (of one agent, when given); how
    /// many files.
    pub async fn purge_memories(
        &self,
        pool: &str,
        agent: Option<&str>,
    ) -> Result<u64, ClientError> {
        let mut pairs = vec![("pool", pool.to_string())];
        if let Some(agent) = agent {
            pairs.push(("agent", agent.to_string()));
        }
        let done: MemoriesDeleted = self
            .call::<(), _>(Method::DELETE, "/v1/memories", &pairs, None, None)
            .await?;
        Ok(done.files)
    }
}
