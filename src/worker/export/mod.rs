//! The `export` job: stream the tenant's messages (conversation/sequence order), then its
//! entries (id order), through the artifact encoder into fixed-size chunks stored in the
//! database.
//!
//! Three things overlap: a reader task fetches pages of `batch_size` records ahead (see
//! [`export_pages::for_each_page`]); the job encodes them; and whenever `COMMIT_CHUNKS`
//! full chunks are ready they commit on their own task — the chunks plus the checkpoint
//! (read positions and the encoder state: bytes handed out, the partial-chunk carry,
//! counts, section) in one transaction fenced by the lease — while encoding goes on (see
//! `commits.rs`: inserts overlap, checkpoints land in order). The check runs after every
//! record, so a commit follows a chunk boundary and its carry is less than one line.
//! Memory is a few pages and a few chunks, whatever the size of the export.
//!
//! Resuming after a crash: the hash state is not in the checkpoint (it has no stable
//! serialized form); it is rebuilt by streaming the committed chunks once, then the carry
//! is hashed on top. The header's time is the operation's `created_at_ms`, so a resumed run
//! writes the same bytes and digest as an uninterrupted one, provided the tenant's data did
//! not change meanwhile (an export is not a snapshot: rows written behind its read position
//! during the run are not in it).

use std::time::{Duration, Instant};

mod commits;

use commits::Commits;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{JobCtx, JobError};
use crate::auth::TenantKey;
use crate::db::BeginWrite as _;
use crate::store::artifact_exports::discard_export;
use crate::store::export_pages::{self, StoredPage};
use crate::store::fenced::SET_ARTIFACT_REF_SQL;
use crate::store::leases::Progress;
use crate::store::{artifacts, entries, messages};
use crate::{create_export_artifact, fenced_checkpoint, insert_export_chunks, with_pool};
use context_jobs::artifact::{
    ArtifactDigest, EncodeError, Encoder, Finished, Header, Section, error_code as artifact_code,
};
use context_jobs::contract::ContextInsight;
use context_jobs::kinds::export::{ExportCheckpoint, ExportJob};
use context_jobs::operation::error_code;

/// Full chunks accumulated before a commit.
const COMMIT_CHUNKS: usize = 4;
/// Pages the reader may fetch ahead of the encoder.
const PAGES_AHEAD: usize = 2;

pub async fn run(ctx: &JobCtx, job: &ExportJob) -> Result<Value, JobError> {
    let checkpoint = match &ctx.operation.checkpoint {
        Some(saved) => serde_json::from_str::<ExportCheckpoint>(saved)
            .map_err(|e| JobError::permanent(error_code::CORRUPT_OPERATION, format!("bad export checkpoint: {e}")))?,
        None => start(ctx).await?,
    };
    let artifact_id = checkpoint.artifact_id.clone();
    let outcome = if checkpoint.encoder.section == Section::Done {
        finished_result(ctx, &artifact_id).await
    } else {
        export(ctx, job, checkpoint).await
    };
    // A failed or cancelled export leaves no half-written artifact behind.
    if matches!(outcome, Err(JobError::Permanent { .. } | JobError::Cancelled))
        && let Err(e) = discard_export(&ctx.db, &ctx.operation.tenant, &artifact_id).await
    {
        tracing::warn!(operation = %ctx.operation.id, error = %e, "could not discard the unfinished artifact");
    }
    outcome
}

/// First run: create the artifact, name it on the operation, and checkpoint the header.
async fn start(ctx: &JobCtx) -> Result<ExportCheckpoint, JobError> {
    let tenant = TenantKey::from_stored(ctx.operation.tenant.clone());
    let total = messages::count_estimate(&ctx.db, &tenant).await?;
    let artifact_id = ulid::Ulid::generate().to_string();
    let header = Header::new(tenant.as_str(), ctx.operation.created_at_ms);
    let mut encoder = Encoder::new(ctx.config.artifact_chunk_bytes, &header);
    let chunks = encoder.take_ready();
    let checkpoint =
        ExportCheckpoint { artifact_id, after_message: None, after_entry: None, encoder: encoder.state().clone() };
    let progress =
        Progress { phase: "exporting", processed: 0, total, checkpoint: Some(encode_checkpoint(&checkpoint)) };
    let lease = &ctx.lease;
    let cancel = with_pool!(&ctx.db, pool => {
        let mut tx = pool.begin_write().await?;
        let id = checkpoint.artifact_id.as_str();
        create_export_artifact!(&mut *tx, id, tenant.as_str(), lease.operation_id.as_str(), ctx.config.artifact_retention_days)?;
        let named = sqlx::query(SET_ARTIFACT_REF_SQL)
            .bind(lease.operation_id.as_str())
            .bind(lease.token.as_str())
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if named != 1 {
            return Err(JobError::LostLease);
        }
        insert_export_chunks!(&mut *tx, id, &chunks)?;
        let cancel = fenced_checkpoint!(&mut *tx, lease, &progress)?;
        tx.commit().await?;
        cancel
    });
    ctx.boundary(cancel)?;
    Ok(checkpoint)
}

async fn export(ctx: &JobCtx, job: &ExportJob, mut checkpoint: ExportCheckpoint) -> Result<Value, JobError> {
    let tenant = TenantKey::from_stored(ctx.operation.tenant.clone());
    let chunk_bytes = ctx.config.artifact_chunk_bytes;
    let emitted = checkpoint.encoder.emitted;
    let prefix = if emitted == 0 {
        ArtifactDigest::new()
    } else {
        artifacts::digest_prefix(&ctx.db, tenant.as_str(), &checkpoint.artifact_id, emitted).await?
    };
    let mut encoder = Encoder::resume(chunk_bytes, checkpoint.encoder.clone(), prefix);
    let mut pages = spawn_reader(ctx, job, &checkpoint);
    let mut processed = ctx.operation.processed;
    let mut total = ctx.operation.total;
    let mut committed = processed;
    let mut commits = Commits::new();
    let (mut wait_read, mut wait_commit, mut busy) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    loop {
        commits.boundary(ctx).await?;
        let t = Instant::now();
        let Some(page) = pages.recv().await else { break };
        wait_read += t.elapsed();
        let t = Instant::now();
        let page = page?;
        let (messages, entries) = match &page {
            Page::Messages(rows) => (Some(rows.rows()), None),
            Page::Entries(entries) => (None, Some(entries.iter())),
        };
        let items =
            messages.into_iter().flatten().map(Item::Message).chain(entries.into_iter().flatten().map(Item::Entry));
        // The position of the last record encoded, made owned only when a checkpoint needs it.
        let mut position = None;
        for item in items {
            match &item {
                Item::Message(row) => encoder.stored_message(&row.columns).map_err(encode_failed)?,
                Item::Entry(entry) => encoder.entry(entry).map_err(encode_failed)?,
            }
            position = Some(item);
            processed += 1;
            // Checked after every record, so a commit lands just after a chunk boundary
            // and the carry in its checkpoint is less than one line.
            if encoder.ready_bytes() >= COMMIT_CHUNKS * chunk_bytes {
                let t = Instant::now();
                total = total.max(processed);
                record_position(&mut checkpoint, position.take());
                commits.spawn(ctx, &mut encoder, &mut checkpoint, None, (processed, total), &mut committed).await;
                wait_commit += t.elapsed();
            }
        }
        record_position(&mut checkpoint, position);
        busy += t.elapsed();
    }
    tracing::debug!(
        operation = %ctx.operation.id, wait_read_ms = wait_read.as_millis() as u64,
        wait_commit_ms = wait_commit.as_millis() as u64, encode_ms = (busy.saturating_sub(wait_commit)).as_millis() as u64,
        "export pipeline"
    );
    let finished = encoder.finish().map_err(encode_failed)?;
    total = total.max(processed);
    commits.spawn(ctx, &mut encoder, &mut checkpoint, Some(finished.clone()), (processed, total), &mut committed).await;
    ctx.boundary(commits.settle().await?)?;
    Ok(result(&checkpoint.artifact_id, &finished))
}

/// One page the reader fetched.
enum Page {
    Messages(StoredPage),
    Entries(Vec<ContextInsight>),
}

enum Item<'a> {
    Message(export_pages::StoredRow<'a>),
    Entry(&'a ContextInsight),
}

/// Note where the reads continue after `item` (the last record encoded), if any.
fn record_position(checkpoint: &mut ExportCheckpoint, item: Option<Item<'_>>) {
    match item {
        Some(Item::Message(row)) => checkpoint.after_message = Some((row.conversation_id.to_string(), row.sequence)),
        Some(Item::Entry(entry)) => checkpoint.after_entry = Some(entry.id.clone()),
        None => {}
    }
}

/// Read pages ahead of the encoder (messages, then entries) on their own task, so the
/// database reads overlap encoding and commits. At most [`PAGES_AHEAD`] pages wait.
fn spawn_reader(
    ctx: &JobCtx,
    job: &ExportJob,
    checkpoint: &ExportCheckpoint,
) -> mpsc::Receiver<Result<Page, JobError>> {
    let (tx, rx) = mpsc::channel(PAGES_AHEAD);
    let db = ctx.db.clone();
    let tenant = TenantKey::from_stored(ctx.operation.tenant.clone());
    let include_expired = job.include_expired;
    let batch = ctx.batch_size().max(1) as usize;
    let after_message = checkpoint.after_message.clone();
    let mut after_entry = checkpoint.after_entry.clone();
    let section = checkpoint.encoder.section;
    tokio::spawn(async move {
        if section == Section::Messages {
            let after = after_message.as_ref().map(|(c, s)| (c.as_str(), *s));
            let read = export_pages::for_each_page(&db, &tenant, after, batch, |page| {
                let tx = tx.clone();
                async move { tx.send(Ok(Page::Messages(page))).await.is_ok() }
            })
            .await;
            if let Err(e) = read {
                let _ = tx.send(Err(e.into())).await;
                return;
            }
        }
        loop {
            let page = match entries::export_page(&db, &tenant, include_expired, after_entry.as_deref(), batch).await {
                Ok(page) => page,
                Err(e) => {
                    let _ = tx.send(Err(e.into())).await;
                    return;
                }
            };
            let Some(last) = page.last() else { return };
            after_entry = Some(last.id.clone());
            let full = page.len() >= batch;
            if tx.send(Ok(Page::Entries(page))).await.is_err() || !full {
                return; // the job stopped listening, or there is nothing more to read
            }
        }
    });
    rx
}

/// The result of an export whose last batch already committed (a resumed run).
async fn finished_result(ctx: &JobCtx, artifact_id: &str) -> Result<Value, JobError> {
    let row = artifacts::get(&ctx.db, &ctx.operation.tenant, artifact_id).await?.ok_or_else(|| {
        JobError::permanent(artifact_code::NOT_FOUND, format!("artifact {artifact_id} no longer exists"))
    })?;
    let finished = Finished {
        digest: row.digest.unwrap_or_default(),
        size_bytes: row.size_bytes.max(0) as u64,
        messages: row.messages.unwrap_or(0).max(0) as u64,
        entries: row.entries.unwrap_or(0).max(0) as u64,
    };
    Ok(result(artifact_id, &finished))
}

fn result(artifact_id: &str, f: &Finished) -> Value {
    json!({
        "artifactId": artifact_id,
        "digest": f.digest,
        "sizeBytes": f.size_bytes,
        "messages": f.messages,
        "entries": f.entries,
    })
}

fn encode_checkpoint(checkpoint: &ExportCheckpoint) -> String {
    serde_json::to_string(checkpoint).unwrap_or_default()
}

fn encode_failed(e: EncodeError) -> JobError {
    JobError::permanent(error_code::INTERNAL, format!("export encoding failed: {e}"))
}
