//! The `rebuild_vector` job: re-embed the tenant's active entries (`force`) or only the
//! stale ones (those above the projection watermark), walking them in change order, one
//! fenced transaction per batch holding the batch's vectors, the watermark's advance, the
//! keyset checkpoint (the last change sequence done) and the progress. A crash resumes
//! after the last committed batch: nothing is embedded twice by one run, nothing is
//! skipped — an entry rewritten during the walk moves to a later change sequence, so the
//! walk meets it again. The next batches are read and embedded (`reader`) while the
//! current one is written.

mod reader;

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{JobCtx, JobError};
use crate::db::BeginWrite as _;
use crate::embedder::Embedder;
use crate::store::leases::Progress;
use crate::store::vector_writes::{VectorBatch, WriteVectors as _};
use crate::store::vectors::{active_after, projected_seq};
use crate::{fenced_checkpoint, relax_commit, with_pool};
use context_jobs::kinds::rebuild_vector::RebuildVectorJob;
use context_jobs::operation::error_code;
use reader::Reader;

/// Where a run resumes: after change sequence `after_seq`, with `written` vectors so far.
/// (A checkpoint from before the walk was in change order has no `after_seq`: the run
/// starts its walk again, which only rewrites what differs.)
#[derive(Debug, Default, Serialize, Deserialize)]
struct Checkpoint {
    #[serde(default)]
    after_seq: i64,
    #[serde(default)]
    written: u64,
}

fn checkpoint_text(c: &Checkpoint) -> Option<String> {
    Some(serde_json::to_string(c).unwrap_or_default())
}

/// Where the walk starts: the saved checkpoint, or a new one (forced: every active entry;
/// else those above the watermark) committed with the total, counted while the first
/// batch is already on its way.
async fn start(
    ctx: &JobCtx,
    job: &RebuildVectorJob,
    spawn_reader: impl Fn(i64) -> Reader,
) -> Result<(Checkpoint, i64, Reader), JobError> {
    let tenant = ctx.operation.tenant.as_str();
    if let Some(saved) = &ctx.operation.checkpoint {
        let at: Checkpoint = serde_json::from_str(saved)
            .map_err(|e| JobError::permanent(error_code::CORRUPT_OPERATION, format!("bad rebuild checkpoint: {e}")))?;
        let reader = spawn_reader(at.after_seq);
        return Ok((at, ctx.operation.total, reader));
    }
    let after_seq = if job.force { 0 } else { projected_seq(&ctx.db, tenant).await? };
    let reader = spawn_reader(after_seq);
    let total = active_after(&ctx.db, tenant, after_seq).await?;
    let at = Checkpoint { after_seq, written: 0 };
    let progress = Progress { phase: "embedding", processed: 0, total, checkpoint: checkpoint_text(&at) };
    ctx.save_progress(&progress).await?;
    Ok((at, total, reader))
}

pub async fn run(ctx: &JobCtx, job: &RebuildVectorJob) -> Result<Value, JobError> {
    let embedder = Embedder::from_config(&ctx.config)
        .map_err(|e| JobError::permanent(error_code::INVALID_REQUEST, format!("embedder configuration: {e:#}")))?;
    let tenant = ctx.operation.tenant.as_str();
    let model = embedder.model().to_string();
    let embedder = Arc::new(embedder);
    let batch = ctx.batch_size();
    let spawn_reader = |after| Reader::spawn(ctx.db.clone(), embedder.clone(), tenant.to_string(), after, batch);
    let (mut at, mut total, mut reader) = start(ctx, job, spawn_reader).await?;
    let mut processed = ctx.operation.processed;
    // Whether the bulk path still looks worth trying.
    let mut bulk = true;
    loop {
        let reader::Batch { page, dim, blobs } = reader.next().await?;
        let vectors = VectorBatch {
            covered_through: Some(page.covered_through),
            read_at: Some(page.read_at),
            bulk,
            ..VectorBatch::new(tenant, model.as_str(), dim, &page.items, &blobs)
        };
        let done = processed + page.items.len() as i64;
        // The count at the start was a snapshot: the end is the truth.
        let new_total = if page.last { done } else { total.max(done) };
        let (written, cancel) = write_batch(ctx, &vectors, page.next_after, at.written, done, new_total).await?;
        (processed, total) = (done, new_total);
        at = Checkpoint { after_seq: page.next_after, written: at.written + written.vectors };
        // Entries that already have vectors (a forced rebuild over a full projection):
        // the upsert from here on.
        bulk &= !written.bulk_conflict;
        metrics::counter!(crate::metrics::ITEMS_PROCESSED, "kind" => "rebuild_vector")
            .increment(page.items.len() as u64);
        if page.last {
            break;
        }
        ctx.boundary(cancel)?;
    }
    Ok(json!({"processed": processed, "total": total, "written": at.written, "force": job.force, "model": model}))
}

/// One batch's transaction: its vectors, the watermark, the checkpoint and the progress,
/// fenced by the lease. Returns what was written and whether a cancel was requested.
async fn write_batch(
    ctx: &JobCtx,
    vectors: &VectorBatch<'_>,
    after_seq: i64,
    written_before: u64,
    processed: i64,
    total: i64,
) -> Result<(crate::store::vector_writes::Written, bool), JobError> {
    Ok(with_pool!(&ctx.db, pool => {
        let mut tx = pool.begin_write().await?;
        // Vectors are derived data and the checkpoint commits with them: a database crash
        // that loses the last batches' commits rolls both back together, and the walk embeds
        // those batches again (a worker crash loses nothing: the commit is in the server).
        // The terminal commit is synchronous and flushes everything before it.
        relax_commit!(&mut *tx, &ctx.db)?;
        let written = tx.write_vectors(vectors).await?;
        let saved = Checkpoint { after_seq, written: written_before + written.vectors };
        let progress = Progress { phase: "embedding", processed, total, checkpoint: checkpoint_text(&saved) };
        let cancel = fenced_checkpoint!(&mut *tx, &ctx.lease, &progress)?;
        tx.commit().await?;
        (written, cancel)
    }))
}
