//! Snapshot objects (issue 41): content-addressed blobs and tree nodes, scoped by pool (the
//! thread's pool label, `''` without one), and their reference counts.
//!
//! A node holds one reference to each object it refers to (taken when it is stored, once: a
//! node stored again changes nothing), and a turn's snapshot one to its root. Releasing the last
//! reference deletes the object and releases what it refers to, in the same transaction
//! ([`release`]). An object nobody refers to for an hour (an upload a crash abandoned) is deleted
//! when snapshots of its pool are dropped ([`sweep`]). The rows a release decrements are locked
//! first (`Conn::LOCK`).

use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{ErrorCode, MissingObjectsResponse};
use ninetrix_proto::snapshots::{MAX_IDS_PER_REQUEST, Node, ObjectId, ObjectKind};

use crate::fork_rules::{check_object, missing_message};
use crate::store::codec::corrupt;
use crate::store::conn::{AssertSqlSafe, Conn, for_write, query, query_as};
use crate::store::{StoreError, StoreResult};

use super::threads::{SELECT_THREAD, ThreadRow, live};

/// How long an object may sit with no reference before a sweep deletes it (an upload in
/// progress has its node stored well within it).
const ABANDONED_AFTER_MS: i64 = 60 * 60 * 1000;

/// Most objects one sweep deletes (the rest wait for the next).
const SWEEP_BATCH: i64 = 1000;

/// IDs per `IN (…)` list.
const CHUNK: usize = 500;

/// The pool whose objects a thread's runner uses: its pool label (`''` without one).
pub(super) async fn pool_of<C: Conn>(c: &mut C, id: ThreadId) -> StoreResult<String> {
    let row: Option<ThreadRow> = query_as(SELECT_THREAD)
        .bind(id.to_string())
        .fetch_optional(&mut *c)
        .await?;
    let row = live(id, row.ok_or(StoreError::NotFound("thread"))?)?;
    Ok(row.pool.unwrap_or_default())
}

/// The IDs of `ids` that `pool` stores.
async fn stored<C: Conn>(
    c: &mut C,
    pool: &str,
    ids: &[ObjectId],
) -> StoreResult<std::collections::HashSet<String>> {
    let mut found = std::collections::HashSet::new();
    for chunk in ids.chunks(CHUNK) {
        let marks: Vec<String> = (0..chunk.len()).map(|i| format!("${}", i + 2)).collect();
        let sql = format!(
            "SELECT id FROM objects WHERE pool = $1 AND id IN ({})",
            marks.join(", ")
        );
        let mut q = query_as(AssertSqlSafe(sql)).bind(pool);
        for id in chunk {
            q = q.bind(id.as_str());
        }
        let rows: Vec<(String,)> = q.fetch_all(&mut *c).await?;
        found.extend(rows.into_iter().map(|(id,)| id));
    }
    Ok(found)
}

/// The IDs of `ids` that `pool` lacks, in order.
async fn lacking<C: Conn>(c: &mut C, pool: &str, ids: &[ObjectId]) -> StoreResult<Vec<ObjectId>> {
    let found = stored(c, pool, ids).await?;
    Ok(ids
        .iter()
        .filter(|id| !found.contains(id.as_str()))
        .cloned()
        .collect())
}

/// `POST …/objects/missing`: which of `ids` the thread's pool lacks.
pub(crate) async fn missing_objects<C: Conn>(
    c: &mut C,
    id: ThreadId,
    ids: &[ObjectId],
) -> StoreResult<MissingObjectsResponse> {
    if ids.len() > MAX_IDS_PER_REQUEST {
        return Err(StoreError::Invalid {
            code: ErrorCode::TooMany,
            message: format!(
                "`ids` has {} IDs; ask about at most {MAX_IDS_PER_REQUEST} per request",
                ids.len()
            ),
        });
    }
    let pool = pool_of(c, id).await?;
    Ok(MissingObjectsResponse {
        missing: lacking(c, &pool, ids).await?,
    })
}

/// `PUT …/objects/{object}`: stores an object of the thread's pool once (see [`check_object`]);
/// a node's objects must be stored already (409 `missing_objects`), and each gets one reference.
/// Storing one again changes nothing.
pub(crate) async fn put_object<C: Conn>(
    c: &mut C,
    id: ThreadId,
    object: &ObjectId,
    kind: ObjectKind,
    bytes: &[u8],
    now: i64,
) -> StoreResult<()> {
    let refs = check_object(object, kind, bytes).map_err(|message| StoreError::Invalid {
        code: ErrorCode::InvalidBody,
        message,
    })?;
    let pool = pool_of(c, id).await?;
    let exists: Option<(String,)> = query_as(for_write::<C>(
        "SELECT kind FROM objects WHERE pool = $1 AND id = $2",
    ))
    .bind(pool.as_str())
    .bind(object.as_str())
    .fetch_optional(&mut *c)
    .await?;
    if exists.is_some() {
        return Ok(());
    }
    let missing = lacking(c, &pool, &refs).await?;
    if !missing.is_empty() {
        return Err(StoreError::MissingObjects(missing_message(
            &format!("node {object}"),
            &missing,
        )));
    }
    let inserted = query(
        "INSERT INTO objects (pool, id, kind, size, refs, data, created_at) VALUES ($1, $2, $3, $4, 0, $5, $6) \
         ON CONFLICT (pool, id) DO NOTHING",
    )
    .bind(pool.as_str())
    .bind(object.as_str())
    .bind(kind.as_str())
    .bind(i64::try_from(bytes.len()).unwrap_or(i64::MAX))
    .bind(bytes)
    .bind(now)
    .execute(&mut *c)
    .await?
    .rows_affected();
    // A concurrent upload of the same object won (Postgres): its references are taken.
    if inserted == 1 {
        for r in &refs {
            add_ref(c, &pool, r).await?;
        }
    }
    Ok(())
}

/// One object's bytes, if the thread's pool stores it.
pub(crate) async fn get_object<C: Conn>(
    c: &mut C,
    id: ThreadId,
    object: &ObjectId,
) -> StoreResult<Option<Vec<u8>>> {
    let pool = pool_of(c, id).await?;
    let row: Option<(Vec<u8>,)> = query_as("SELECT data FROM objects WHERE pool = $1 AND id = $2")
        .bind(pool.as_str())
        .bind(object.as_str())
        .fetch_optional(&mut *c)
        .await?;
    Ok(row.map(|(d,)| d))
}

/// Whether `pool` stores `object` as a node.
pub(super) async fn is_node<C: Conn>(
    c: &mut C,
    pool: &str,
    object: &ObjectId,
) -> StoreResult<bool> {
    let row: Option<(String,)> = query_as("SELECT kind FROM objects WHERE pool = $1 AND id = $2")
        .bind(pool)
        .bind(object.as_str())
        .fetch_optional(&mut *c)
        .await?;
    Ok(row.is_some_and(|(k,)| k == ObjectKind::Node.as_str()))
}

/// One node of `pool`, decoded.
pub(super) async fn load_node<C: Conn>(
    c: &mut C,
    pool: &str,
    object: &ObjectId,
) -> StoreResult<Node> {
    let row: Option<(Vec<u8>,)> = query_as("SELECT data FROM objects WHERE pool = $1 AND id = $2")
        .bind(pool)
        .bind(object.as_str())
        .fetch_optional(&mut *c)
        .await?;
    let (data,) =
        row.ok_or_else(|| corrupt("snapshot", &format!("node {object} is not stored")))?;
    Node::decode(&data).map_err(|e| corrupt("snapshot node", &e))
}

/// One more reference to `object` (a sweep may have deleted it since it was looked up: then
/// 409 `missing_objects`, and the upload is sent again).
pub(super) async fn add_ref<C: Conn>(c: &mut C, pool: &str, object: &ObjectId) -> StoreResult<()> {
    let n = query("UPDATE objects SET refs = refs + 1 WHERE pool = $1 AND id = $2")
        .bind(pool)
        .bind(object.as_str())
        .execute(&mut *c)
        .await?
        .rows_affected();
    if n == 0 {
        return Err(StoreError::MissingObjects(missing_message(
            "the snapshot",
            std::slice::from_ref(object),
        )));
    }
    Ok(())
}

/// Releases one reference to each of `objects`; one left with none is deleted and releases what
/// it refers to, and so on down (iteratively, in this transaction).
pub(super) async fn release<C: Conn>(
    c: &mut C,
    pool: &str,
    objects: Vec<ObjectId>,
) -> StoreResult<()> {
    let mut stack = objects;
    while let Some(object) = stack.pop() {
        let row: Option<(String, i64)> = query_as(for_write::<C>(
            "SELECT kind, refs FROM objects WHERE pool = $1 AND id = $2",
        ))
        .bind(pool)
        .bind(object.as_str())
        .fetch_optional(&mut *c)
        .await?;
        let Some((kind, refs)) = row else { continue };
        if refs > 1 {
            query("UPDATE objects SET refs = refs - 1 WHERE pool = $1 AND id = $2")
                .bind(pool)
                .bind(object.as_str())
                .execute(&mut *c)
                .await?;
            continue;
        }
        stack.extend(delete(c, pool, &object, &kind).await?);
    }
    Ok(())
}

/// Deletes one object; returns what it referred to (each once).
async fn delete<C: Conn>(
    c: &mut C,
    pool: &str,
    object: &ObjectId,
    kind: &str,
) -> StoreResult<Vec<ObjectId>> {
    let refs = if kind == ObjectKind::Node.as_str() {
        let mut refs: Vec<ObjectId> = load_node(c, pool, object)
            .await?
            .refs()
            .into_iter()
            .cloned()
            .collect();
        refs.sort();
        refs.dedup();
        refs
    } else {
        Vec::new()
    };
    query("DELETE FROM objects WHERE pool = $1 AND id = $2")
        .bind(pool)
        .bind(object.as_str())
        .execute(&mut *c)
        .await?;
    Ok(refs)
}

/// Deletes the objects of `pool` left with no reference for more than an hour (uploads a crash
/// abandoned), releasing what they refer to.
pub(super) async fn sweep<C: Conn>(c: &mut C, pool: &str, now: i64) -> StoreResult<()> {
    let rows: Vec<(String, String)> = query_as(for_write::<C>(
        "SELECT id, kind FROM objects WHERE pool = $1 AND refs = 0 AND created_at < $2 ORDER BY created_at LIMIT $3",
    ))
    .bind(pool)
    .bind(now - ABANDONED_AFTER_MS)
    .bind(SWEEP_BATCH)
    .fetch_all(&mut *c)
    .await?;
    for (id, kind) in rows {
        let object: ObjectId = id.parse().map_err(|e: String| corrupt("object id", &e))?;
        let refs = delete(c, pool, &object, &kind).await?;
        release(c, pool, refs).await?;
    }
    Ok(())
}
