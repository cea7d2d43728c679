//! The `export` job: stream the tenant's messages (conversation/sequence order), then its
//! entries (id order), through the artifact encoder into fixed-size chunks stored in the
//! database.
//!
//! Three things overlap: a reader task fetches pages of `batch_size` records ahead; the
//! job encodes them; and whenever [`COMMIT_CHUNKS`] full chunks are ready they commit on
//! their own task — the chunks plus the checkpoint (read positions and the encoder state:
//! bytes handed out, the partial-chunk carry, counts, section) in one transaction fenced by
//! the lease — while encoding goes on. At most one commit is in flight, so they apply in
//! order. The check runs after every record, so a commit follows a chunk boundary and its
//! carry is less than one line. Memory is a few pages and a few chunks, whatever the size.
//!
//! Resuming after a crash: the hash state is not in the checkpoint (it has no stable
//! serialized form); it is rebuilt by streaming the committed chunks once, then the carry
//! is hashed on top. The header's time is the operation's `created_at_ms`, so a resumed run
//! writes the same bytes and digest as an uninterrupted one, provided the tenant's data did
//! not change meanwhile (an export is not a snapshot: rows written behind its read position
//! during the run are not in it).

use serde_json::{Value, json};

use tokio::sync::mpsc;

use super::{JobCtx, JobError};
use crate::auth::TenantKey;
use crate::db::{BeginWrite as _, Db};
use crate::store::artifacts::{self, discard_export};
use crate::store::leases::{Lease, Progress, SET_ARTIFACT_REF_SQL};
use crate::store::{entries, messages};
use crate::{create_export_artifact, fenced_checkpoint, seal_export_artifact, store_export_chunks, with_pool};
use context_jobs::artifact::{ArtifactDigest, EncodeError, Encoder, Finished, Header, Section, error_code as artifact_code};
use context_jobs::contract::{ContextInsight, ConversationRecord};
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
    let total = messages::count_all(&ctx.db, &tenant).await?;
    let artifact_id = ulid::Ulid::generate().to_string();
    let header = Header::new(tenant.as_str(), ctx.operation.created_at_ms);
    let mut encoder = Encoder::new(ctx.config.artifact_chunk_bytes, &header);
    let chunks = encoder.take_ready();
    let checkpoint = ExportCheckpoint { artifact_id, after_message: None, after_entry: None, encoder: encoder.state().clone() };
    let progress = Progress { phase: "exporting", processed: 0, total, checkpoint: Some(encode_checkpoint(&checkpoint)) };
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
        store_export_chunks!(&mut *tx, id, &chunks)?;
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
    let mut inflight: Option<Commit> = None;
    while let Some(page) = pages.recv().await {
        for item in page? {
            match item {
                Item::Message(record) => {
                    encoder.message(&record).map_err(encode_failed)?;
                    checkpoint.after_message = Some((record.scope.conversation_id, record.sequence));
                }
                Item::Entry(entry) => {
                    encoder.entry(&entry).map_err(encode_failed)?;
                    checkpoint.after_entry = Some(entry.id);
                }
            }
            processed += 1;
            // Checked after every record, so a commit lands just after a chunk boundary
            // and the carry in its checkpoint is less than one line.
            if encoder.ready_bytes() >= COMMIT_CHUNKS * chunk_bytes {
                if let Some(previous) = inflight.take() {
                    ctx.boundary(previous.join().await?)?;
                }
                total = total.max(processed);
                inflight = Some(Commit::spawn(ctx, &mut encoder, &mut checkpoint, None, (processed, total), &mut committed));
            }
        }
    }
    let finished = encoder.finish().map_err(encode_failed)?;
    if let Some(previous) = inflight.take() {
        ctx.boundary(previous.join().await?)?;
    }
    total = total.max(processed);
    Commit::spawn(ctx, &mut encoder, &mut checkpoint, Some(finished.clone()), (processed, total), &mut committed)
        .join()
        .await?;
    Ok(result(&checkpoint.artifact_id, &finished))
}

enum Item {
    Message(ConversationRecord),
    Entry(ContextInsight),
}

/// Read pages ahead of the encoder (messages, then entries) on their own task, so the
/// database reads overlap encoding and commits. At most [`PAGES_AHEAD`] pages wait.
fn spawn_reader(ctx: &JobCtx, job: &ExportJob, checkpoint: &ExportCheckpoint) -> mpsc::Receiver<Result<Vec<Item>, JobError>> {
    let (tx, rx) = mpsc::channel(PAGES_AHEAD);
    let db = ctx.db.clone();
    let tenant = TenantKey::from_stored(ctx.operation.tenant.clone());
    let include_expired = job.include_expired;
    let batch = ctx.batch_size().max(1) as usize;
    let mut after_message = checkpoint.after_message.clone();
    let mut after_entry = checkpoint.after_entry.clone();
    let mut section = checkpoint.encoder.section;
    tokio::spawn(async move {
        while section != Section::Done {
            let page: Result<Vec<Item>, JobError> = match section {
                Section::Messages => {
                    let after = after_message.as_ref().map(|(c, s)| (c.as_str(), *s));
                    messages::export_page(&db, &tenant, after, batch).await.map_err(JobError::from).map(|page| {
                        if let Some(last) = page.last() {
                            after_message = Some((last.scope.conversation_id.clone(), last.sequence));
                        }
                        page.into_iter().map(Item::Message).collect()
                    })
                }
                _ => entries::export_page(&db, &tenant, include_expired, after_entry.as_deref(), batch)
                    .await
                    .map_err(JobError::from)
                    .map(|page| {
                        if let Some(last) = page.last() {
                            after_entry = Some(last.id.clone());
                        }
                        page.into_iter().map(Item::Entry).collect()
                    }),
            };
            let short = page.as_ref().map_or(true, |p| p.len() < batch);
            let failed = page.is_err();
            if tx.send(page).await.is_err() || failed {
                return; // the job stopped listening, or there is nothing more to read
            }
            if short {
                section = if section == Section::Messages { Section::Entries } else { Section::Done };
            }
        }
    });
    rx
}

/// A commit running on its own task while the next batch is encoded; joined before the
/// next one starts, so commits apply in order and at most one is in flight.
struct Commit(tokio::task::JoinHandle<Result<bool, JobError>>);

impl Commit {
    /// Take the ready chunks and the checkpoint they complete, and commit them.
    fn spawn(
        ctx: &JobCtx,
        encoder: &mut Encoder,
        checkpoint: &mut ExportCheckpoint,
        finished: Option<Finished>,
        (processed, total): (i64, i64),
        committed: &mut i64,
    ) -> Commit {
        let chunks = encoder.take_ready();
        checkpoint.encoder = encoder.state().clone();
        let phase = if finished.is_some() { "sealing" } else { "exporting" };
        let progress = Progress { phase, processed, total, checkpoint: Some(encode_checkpoint(checkpoint)) };
        let (db, lease, artifact_id) = (ctx.db.clone(), ctx.lease.clone(), checkpoint.artifact_id.clone());
        let records = (processed - std::mem::replace(committed, processed)).max(0) as u64;
        Commit(tokio::spawn(async move {
            let started = std::time::Instant::now();
            let cancel = commit(&db, &lease, &artifact_id, &chunks, finished.as_ref(), &progress).await?;
            metrics::counter!(crate::metrics::ITEMS_PROCESSED, "kind" => "export").increment(records);
            let bytes: usize = chunks.iter().map(|(_, c)| c.len()).sum();
            let commit_ms = started.elapsed().as_millis() as u64;
            tracing::debug!(operation = %lease.operation_id, processed, bytes, commit_ms, "export batch committed");
            Ok(cancel)
        }))
    }

    /// Wait for the commit; `Ok(cancel requested)`.
    async fn join(mut self) -> Result<bool, JobError> {
        (&mut self.0).await.map_err(|e| JobError::Transient(anyhow::anyhow!("an export commit task failed: {e}")))?
    }
}

/// A job that stops early (an error) does not leave its commit running: aborting drops
/// the transaction, which rolls back.
impl Drop for Commit {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One fenced transaction: the chunks, the seal when `finished`, and the checkpoint.
async fn commit(
    db: &Db,
    lease: &Lease,
    artifact_id: &str,
    chunks: &[(u64, Vec<u8>)],
    finished: Option<&Finished>,
    progress: &Progress,
) -> Result<bool, JobError> {
    let gone = || JobError::permanent(artifact_code::NOT_FOUND, format!("artifact {artifact_id} was deleted during the export"));
    let cancel = with_pool!(db, pool => {
        let mut tx = pool.begin_write().await?;
        if !store_export_chunks!(&mut *tx, artifact_id, chunks)? {
            return Err(gone());
        }
        if let Some(f) = finished
            && !seal_export_artifact!(&mut *tx, artifact_id, f)?
        {
            return Err(gone());
        }
        let cancel = fenced_checkpoint!(&mut *tx, lease, progress)?;
        tx.commit().await?;
        cancel
    });
    // A finished export ignores a late cancel: its artifact is complete.
    Ok(cancel && finished.is_none())
}

/// The result of an export whose last batch already committed (a resumed run).
async fn finished_result(ctx: &JobCtx, artifact_id: &str) -> Result<Value, JobError> {
    let row = artifacts::get(&ctx.db, &ctx.operation.tenant, artifact_id)
        .await?
        .ok_or_else(|| JobError::permanent(artifact_code::NOT_FOUND, format!("artifact {artifact_id} no longer exists")))?;
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
