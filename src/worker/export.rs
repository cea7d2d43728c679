//! The `export` job: stream the tenant's messages (conversation/sequence order), then its
//! entries (id order), through the artifact encoder into fixed-size chunks stored in the
//! database.
//!
//! Batches: pages of `batch_size` records are encoded; whenever at least
//! [`COMMIT_CHUNKS`] full chunks are ready (and at the end) they are stored together with
//! the checkpoint — read positions plus the encoder state, including the partial-chunk
//! carry — in one transaction fenced by the lease. Memory is a page of records plus a few
//! chunks, whatever the export's size.
//!
//! Resuming after a crash: the hash state is not in the checkpoint (it has no stable
//! serialized form); it is rebuilt by streaming the chunks already committed, once, then
//! the carry is hashed on top. The header's time is the operation's `created_at_ms`, so a
//! resumed run writes the same bytes and digest as an uninterrupted one, provided the
//! tenant's data did not change meanwhile (an export is not a snapshot: rows written
//! behind its read position during the run are not in it).

use serde_json::{Value, json};

use super::{JobCtx, JobError};
use crate::auth::TenantKey;
use crate::db::BeginWrite as _;
use crate::store::artifacts::{self, discard_export};
use crate::store::leases::{Progress, SET_ARTIFACT_REF_SQL};
use crate::store::{entries, messages};
use crate::{create_export_artifact, fenced_checkpoint, seal_export_artifact, store_export_chunks, with_pool};
use context_jobs::artifact::{ArtifactDigest, EncodeError, Encoder, Finished, Header, Section, error_code as artifact_code};
use context_jobs::kinds::export::{ExportCheckpoint, ExportJob};
use context_jobs::operation::error_code;

/// Full chunks accumulated before a commit: fewer transactions, and the carry stored in
/// each checkpoint (at most one chunk) stays small next to what the batch wrote.
const COMMIT_CHUNKS: usize = 4;

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
    let batch = ctx.batch_size().max(1) as usize;
    let mut processed = ctx.operation.processed;
    let mut total = ctx.operation.total;
    let mut committed = processed;
    let (mut read_time, mut encode_time) = (std::time::Duration::ZERO, std::time::Duration::ZERO);
    loop {
        let mut finished = None;
        match encoder.state().section {
            Section::Messages => {
                let after = checkpoint.after_message.as_ref().map(|(c, s)| (c.as_str(), *s));
                let t = std::time::Instant::now();
                let page = messages::export_page(&ctx.db, &tenant, after, batch).await?;
                read_time += t.elapsed();
                let t = std::time::Instant::now();
                for record in &page {
                    encoder.message(record).map_err(encode_failed)?;
                }
                if let Some(last) = page.last() {
                    checkpoint.after_message = Some((last.scope.conversation_id.clone(), last.sequence));
                }
                processed += page.len() as i64;
                encode_time += t.elapsed();
                if page.len() < batch {
                    encoder.end_messages();
                }
            }
            Section::Entries => {
                let after = checkpoint.after_entry.as_deref();
                let page = entries::export_page(&ctx.db, &tenant, job.include_expired, after, batch).await?;
                for entry in &page {
                    encoder.entry(entry).map_err(encode_failed)?;
                }
                if let Some(last) = page.last() {
                    checkpoint.after_entry = Some(last.id.clone());
                }
                processed += page.len() as i64;
                if page.len() < batch {
                    finished = Some(encoder.finish().map_err(encode_failed)?);
                }
            }
            Section::Done => return finished_result(ctx, &checkpoint.artifact_id).await,
        }
        total = total.max(processed);
        if finished.is_none() && encoder.ready_bytes() < COMMIT_CHUNKS * chunk_bytes {
            continue;
        }
        let chunks = encoder.take_ready();
        checkpoint.encoder = encoder.state().clone();
        let phase = if finished.is_some() { "sealing" } else { "exporting" };
        let progress = Progress { phase, processed, total, checkpoint: Some(encode_checkpoint(&checkpoint)) };
        let t = std::time::Instant::now();
        let cancel = commit(ctx, &checkpoint.artifact_id, &chunks, finished.as_ref(), &progress).await?;
        let commit_time = t.elapsed();
        let bytes: usize = chunks.iter().map(|(_, c)| c.len()).sum();
        metrics::counter!(crate::metrics::ITEMS_PROCESSED, "kind" => "export").increment((processed - committed).max(0) as u64);
        committed = processed;
        tracing::debug!(
            operation = %ctx.operation.id, processed, bytes, read_ms = read_time.as_millis() as u64,
            encode_ms = encode_time.as_millis() as u64, commit_ms = commit_time.as_millis() as u64,
            "export batch committed"
        );
        (read_time, encode_time) = (std::time::Duration::ZERO, std::time::Duration::ZERO);
        if let Some(f) = finished {
            return Ok(result(&checkpoint.artifact_id, &f));
        }
        ctx.boundary(cancel)?;
    }
}

/// One fenced transaction: the chunks, the seal when `finished`, and the checkpoint.
async fn commit(
    ctx: &JobCtx,
    artifact_id: &str,
    chunks: &[(u64, Vec<u8>)],
    finished: Option<&Finished>,
    progress: &Progress,
) -> Result<bool, JobError> {
    let gone = || JobError::permanent(artifact_code::NOT_FOUND, format!("artifact {artifact_id} was deleted during the export"));
    Ok(with_pool!(&ctx.db, pool => {
        let mut tx = pool.begin_write().await?;
        if !store_export_chunks!(&mut *tx, artifact_id, chunks)? {
            return Err(gone());
        }
        if let Some(f) = finished
            && !seal_export_artifact!(&mut *tx, artifact_id, f)?
        {
            return Err(gone());
        }
        let cancel = fenced_checkpoint!(&mut *tx, &ctx.lease, progress).map_err(JobError::from)?;
        tx.commit().await?;
        // A finished export ignores a late cancel: its artifact is complete.
        cancel && finished.is_none()
    }))
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
