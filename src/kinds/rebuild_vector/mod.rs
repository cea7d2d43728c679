//! The `rebuild_vector` job: re-embed the tenant's active entries (`force`) or only the
//! stale ones (those above the projection watermark), walking them in change order, one
//! fenced transaction per batch holding the batch's vectors, the watermark's advance, the
//! keyset checkpoint (the last change sequence done) and the progress. A crash resumes
//! after the last committed batch: nothing is embedded twice by one run, nothing is
//! skipped — an entry rewritten during the walk moves to a later change sequence, so the
//! walk meets it again. The next batches are read and embedded (`reader`) while the
//! current one is written; the last one commits the operation's success with it.

mod reader;

use std::sync::Arc;

use super::{Job, Prepared, SubmitCtx, SubmitError};
use crate::embedder::Embedder;
use crate::kinds::job::{Finish, JobCtx, JobError, encode};
use crate::store::vectors::reads::active_after;
use crate::store::vectors::{VectorBatch, Written, projected_seq, writes};
use context_jobs::contract::RebuildVectorProjectionRequest;
use context_jobs::kinds::rebuild_vector::{
    PHASE_EMBEDDING, RebuildCheckpoint, RebuildResult, RebuildVector, RebuildVectorArgs,
};
use context_jobs::operation::{ErrorCode, Progress};
use reader::Reader;

impl Job for RebuildVector {
    /// The batch's write transaction and the read-ahead's walk.
    const CONNECTIONS: u32 = 2;

    async fn prepare(_: &SubmitCtx<'_>, submission: RebuildVectorProjectionRequest) -> Result<Prepared, SubmitError> {
        Ok(Prepared::plain::<RebuildVector>(RebuildVector::args(submission)))
    }

    async fn run(ctx: &JobCtx, args: RebuildVectorArgs) -> Result<Finish<RebuildResult>, JobError> {
        let embedder = Embedder::from_config(&ctx.config)
            .map_err(|e| JobError::permanent(ErrorCode::InvalidRequest, format!("embedder configuration: {e:#}")))?;
        let tenant = ctx.tenant();
        let model = embedder.model().to_string();
        let embedder = Arc::new(embedder);
        let batch = ctx.batch_size();
        let spawn_reader = |after| Reader::spawn(ctx.db.clone(), embedder.clone(), tenant.clone(), after, batch);
        let (mut at, mut total, mut reader) = start(ctx, &args, spawn_reader).await?;
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
            let saved = |written: &Written| RebuildCheckpoint {
                after_seq: page.next_after,
                written: at.written + written.vectors,
            };
            // Each batch commits durably: it takes vector sequences, which recall indexes
            // in other processes use as marks (`Tx::durable_commit`).
            let mut tx = ctx.begin().await?;
            let written = writes::write(&mut tx, &vectors).await?;
            let next = saved(&written);
            let progress = Progress {
                phase: PHASE_EMBEDDING,
                processed: done,
                total: new_total,
                checkpoint: Some(encode(&next)?),
            };
            // The last page's batch finishes the operation in its commit.
            let finished = page.last.then(|| RebuildResult {
                processed: done.max(0) as u64,
                total: new_total.max(0) as u64,
                written: next.written,
                force: args.force,
                model: model.clone(),
            });
            let signals = ctx.checkpoint_or_succeed(&mut tx, &progress, finished.as_ref()).await?;
            ctx.commit(tx).await?;
            (processed, total, at) = (done, new_total, next);
            // Entries that already have vectors (a forced rebuild over a full projection):
            // the upsert from here on.
            bulk &= !written.bulk_conflict;
            metrics::counter!(crate::metrics::ITEMS_PROCESSED, "kind" => "rebuild_vector")
                .increment(page.items.len() as u64);
            if let Some(result) = finished {
                return Ok(Finish::Committed(result));
            }
            ctx.boundary(signals)?;
        }
    }
}

/// Where the walk starts: the saved checkpoint, or a new one (forced: every active entry;
/// else those above the watermark) committed with the total, counted while the first
/// batch is already on its way.
async fn start(
    ctx: &JobCtx,
    args: &RebuildVectorArgs,
    spawn_reader: impl Fn(i64) -> Reader,
) -> Result<(RebuildCheckpoint, i64, Reader), JobError> {
    if let Some(at) = ctx.checkpoint::<RebuildCheckpoint>()? {
        ctx.before_first_batch().await?;
        let reader = spawn_reader(at.after_seq);
        return Ok((at, ctx.operation.total, reader));
    }
    let tenant = ctx.tenant();
    let after_seq = if args.force { 0 } else { projected_seq(&ctx.db, tenant).await? };
    let reader = spawn_reader(after_seq);
    let total = active_after(&ctx.db, tenant, after_seq).await?;
    let at = RebuildCheckpoint { after_seq, written: 0 };
    let progress = Progress { phase: PHASE_EMBEDDING, processed: 0, total, checkpoint: Some(encode(&at)?) };
    ctx.save_progress(&progress).await?;
    Ok((at, total, reader))
}
