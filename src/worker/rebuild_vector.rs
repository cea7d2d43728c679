//! The `rebuild_vector` job: re-embed the tenant's active entries (`force`) or only the
//! stale ones, in id order, one fenced transaction per batch holding the batch's vectors,
//! the keyset checkpoint (the last id done) and the progress. A crash resumes after the
//! last committed id: nothing is embedded twice by one run, nothing is skipped. The next
//! batch is read and embedded while the current one is written.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{JobCtx, JobError};
use crate::db::BeginWrite as _;
use crate::embedder::{EmbedError, Embedder};
use crate::store::leases::Progress;
use crate::store::vectors::{ToEmbed, WriteVectors as _, rebuild_page, rebuild_total};
use crate::{fenced_checkpoint, with_pool};
use context_jobs::kinds::rebuild_vector::RebuildVectorJob;
use context_jobs::operation::error_code;

/// Where a run resumes: after `after` (entry id order), with `written` vectors so far.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Checkpoint {
    after: String,
    written: u64,
}

fn checkpoint_text(c: &Checkpoint) -> Option<String> {
    Some(serde_json::to_string(c).unwrap_or_default())
}

/// PostgreSQL plans the batch statements from table statistics; right after a bulk import
/// (or in a fresh database) there may be none yet, and the planner then takes the tenant
/// for a handful of rows. A rebuild walks the whole tenant, so it refreshes them first.
async fn refresh_statistics(db: &crate::db::Db) {
    if let crate::db::Db::Postgres(pool) = db
        && let Err(e) = sqlx::query("ANALYZE context_entries").execute(pool).await
    {
        tracing::debug!(error = %e, "could not refresh context_entries statistics");
    }
}

/// The batch being read ahead; dropping it (any way the job ends) stops it.
struct Prefetch(tokio::task::JoinHandle<Result<Batch, JobError>>);

/// A page of entries and their vectors, in order.
type Batch = (Vec<ToEmbed>, Vec<Vec<f32>>);

impl Drop for Prefetch {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One batch: the next page after `after` and its vectors.
async fn read_and_embed(
    db: &crate::db::Db,
    embedder: &Embedder,
    tenant: &str,
    force: bool,
    after: &str,
    batch: i64,
) -> Result<Batch, JobError> {
    let page = rebuild_page(db, tenant, force, after, batch).await?;
    let texts = super::projector::texts(&page);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let vectors = embedder.embed(&refs).await.map_err(|e| match e {
        EmbedError::Transient(m) => JobError::Transient(anyhow::anyhow!(m)),
        EmbedError::Permanent(m) => JobError::permanent(error_code::EMBEDDING_FAILED, m),
    })?;
    Ok((page, vectors))
}

pub async fn run(ctx: &JobCtx, job: &RebuildVectorJob) -> Result<Value, JobError> {
    let embedder = Embedder::from_config(&ctx.config)
        .map_err(|e| JobError::permanent(error_code::INVALID_REQUEST, format!("embedder configuration: {e:#}")))?;
    let tenant = ctx.operation.tenant.as_str();
    let mut processed = ctx.operation.processed;
    let mut total = ctx.operation.total;
    let mut at: Checkpoint = match &ctx.operation.checkpoint {
        Some(saved) => serde_json::from_str(saved)
            .map_err(|e| JobError::permanent(error_code::CORRUPT_OPERATION, format!("bad rebuild checkpoint: {e}")))?,
        None => {
            refresh_statistics(&ctx.db).await;
            total = rebuild_total(&ctx.db, tenant, job.force).await?;
            let at = Checkpoint::default();
            let progress = Progress { phase: "embedding", processed: 0, total, checkpoint: checkpoint_text(&at) };
            let cancel = with_pool!(&ctx.db, pool => {
                let mut tx = pool.begin_write().await?;
                let cancel = fenced_checkpoint!(&mut *tx, &ctx.lease, &progress)?;
                tx.commit().await?;
                cancel
            });
            ctx.boundary(cancel)?;
            at
        }
    };
    let batch = ctx.batch_size();
    let model = embedder.model().to_string();
    let embedder = Arc::new(embedder);
    let fetch = |after: String| {
        let (db, embedder, tenant, force) = (ctx.db.clone(), embedder.clone(), tenant.to_string(), job.force);
        // A task of its own, so the next batch is read and embedded while this one writes.
        Prefetch(tokio::spawn(async move { read_and_embed(&db, &embedder, &tenant, force, &after, batch).await }))
    };
    let mut next_batch = fetch(at.after.clone());
    loop {
        let (page, vectors) =
            (&mut next_batch.0).await.map_err(|e| JobError::Transient(anyhow::anyhow!("batch task failed: {e}")))??;
        let last_page = (page.len() as i64) < batch;
        let next = Checkpoint {
            after: page.last().map(|e| e.id.clone()).unwrap_or_else(|| at.after.clone()),
            written: at.written,
        };
        next_batch = fetch(next.after.clone());
        let items: Vec<_> = page.iter().zip(vectors).collect();
        let done = processed + page.len() as i64;
        let (written, cancel) = with_pool!(&ctx.db, pool => {
            let mut tx = pool.begin_write().await?;
            let written = tx.write_vectors(tenant, &items, model.as_str()).await?;
            let saved = Checkpoint { after: next.after.clone(), written: next.written + written };
            // The count at the start was a snapshot: the end is the truth.
            let total = if last_page { done } else { total.max(done) };
            let progress = Progress { phase: "embedding", processed: done, total, checkpoint: checkpoint_text(&saved) };
            let cancel = fenced_checkpoint!(&mut *tx, &ctx.lease, &progress)?;
            tx.commit().await?;
            (written, cancel)
        });
        processed = done;
        total = if last_page { done } else { total.max(done) };
        at = Checkpoint { after: next.after, written: at.written + written };
        metrics::counter!(crate::metrics::ITEMS_PROCESSED, "kind" => "rebuild_vector").increment(page.len() as u64);
        if last_page {
            break;
        }
        ctx.boundary(cancel)?;
    }
    Ok(json!({"processed": processed, "total": total, "written": at.written, "force": job.force, "model": model}))
}
