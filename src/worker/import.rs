//! The `import` job: messages and entries from a stored artifact (parsed incrementally,
//! never loaded whole) or from the inline records of the request.
//!
//! From an artifact, phase `validating` first streams every byte through the decoder and
//! the digest: a malformed artifact fails with the decoder's stable `errorCode` and the
//! offending line, having written nothing. Then phase `importing` decodes again from the
//! checkpointed line boundary and writes batches of `batch_size` records; each batch's
//! inserts and its checkpoint (byte offset, line number, counts) commit in one
//! transaction fenced by the lease, so a crash resumes after the last committed batch.
//! Fetching, decoding and writing run on separate tasks connected by small bounded
//! channels, so memory stays at a few chunks and batches whatever the artifact's size.
//!
//! Records keep their ids. Messages go through the one sequence-assignment path
//! ([`crate::append_in_tx!`]): an id already in its conversation is skipped, the rest get
//! sequences after the existing ones in artifact order. Entries go through
//! [`crate::import_entries!`]. Re-importing is therefore a no-op that reports skips.

use serde_json::{Value, json};

use tokio::sync::mpsc;

use super::{JobCtx, JobError};
use crate::db::{BeginWrite as _, Db};
use crate::store::StoreError;
use crate::store::artifacts::{self, ArtifactRow, ChunkReader};
use crate::store::leases::{Lease, Progress};
use crate::{append_in_tx, fenced_checkpoint, import_entries, relax_commit, with_pool};
use context_jobs::artifact::{DecodeError, Decoded, Decoder, Record, error_code as artifact_code};
use context_jobs::contract::{ContextInsight, ConversationRecord};
use context_jobs::kinds::import::{ImportCheckpoint, ImportCounts, ImportJob};
use context_jobs::operation::error_code;

pub async fn run(ctx: &JobCtx, job: &ImportJob) -> Result<Value, JobError> {
    let checkpoint =
        match &ctx.operation.checkpoint {
            Some(saved) => Some(serde_json::from_str::<ImportCheckpoint>(saved).map_err(|e| {
                JobError::permanent(error_code::CORRUPT_OPERATION, format!("bad import checkpoint: {e}"))
            })?),
            None => None,
        };
    if let Some(done) = checkpoint.as_ref().filter(|c| c.done) {
        return Ok(result(done));
    }
    match &job.artifact_ref {
        Some(id) => from_artifact(ctx, id, checkpoint).await,
        None => inline(ctx, &job.messages, &job.entries).await,
    }
}

/// Inline records: one batch (they obey the append limits), one transaction.
async fn inline(ctx: &JobCtx, messages: &[ConversationRecord], entries: &[ContextInsight]) -> Result<Value, JobError> {
    let n = (messages.len() + entries.len()) as u64;
    let mut checkpoint = ImportCheckpoint {
        messages_read: messages.len() as u64,
        entries_read: entries.len() as u64,
        done: true,
        ..Default::default()
    };
    write_batch(&ctx.db, &ctx.lease, &ctx.operation.tenant, messages, entries, &mut checkpoint, n).await?;
    Ok(result(&checkpoint))
}

async fn from_artifact(ctx: &JobCtx, id: &str, checkpoint: Option<ImportCheckpoint>) -> Result<Value, JobError> {
    let artifact =
        artifacts::get(&ctx.db, &ctx.operation.tenant, id).await?.filter(ArtifactRow::is_ready).ok_or_else(|| {
            JobError::permanent(artifact_code::NOT_FOUND, format!("artifact {id} is gone (deleted or expired)"))
        })?;
    let (checkpoint, total) = match checkpoint {
        Some(c) => (c, ctx.operation.total.max(0) as u64),
        None => {
            let total = validate(ctx, &artifact).await?;
            let checkpoint = ImportCheckpoint::default();
            let progress = progress("importing", &checkpoint, total);
            ctx.save_progress(&progress).await?;
            (checkpoint, total)
        }
    };
    import(ctx, &artifact, checkpoint, total).await
}

/// Stream the whole artifact through the decoder and the digest; nothing is written.
/// Returns the number of records.
async fn validate(ctx: &JobCtx, artifact: &ArtifactRow) -> Result<u64, JobError> {
    let progress = Progress { phase: "validating", processed: 0, total: 0, checkpoint: None };
    let cancel = with_pool!(&ctx.db, pool => {
        let mut tx = pool.begin_write().await?;
        let cancel = fenced_checkpoint!(&mut *tx, &ctx.lease, &progress)?;
        tx.commit().await?;
        cancel
    });
    ctx.boundary(cancel)?;
    let mut pieces = spawn_fetcher(&ctx.db, artifact, 0);
    let mut decoder = Decoder::new();
    let mut scratch = Vec::new();
    while let Some(piece) = pieces.recv().await {
        decoder.feed(&piece?, &mut scratch).map_err(malformed)?;
        scratch.clear();
        if ctx.shutdown.is_cancelled() {
            return Err(JobError::ShuttingDown);
        }
    }
    let summary = decoder.finish().map_err(malformed)?;
    summary.check_digest(artifact.digest.as_deref().unwrap_or_default()).map_err(malformed)?;
    Ok(summary.messages + summary.entries)
}

/// Three stages overlap: a task fetches chunks, a task decodes them into batches, and
/// the job writes one batch while the next is prepared (at most one write in flight, so
/// they commit in order).
async fn import(
    ctx: &JobCtx,
    artifact: &ArtifactRow,
    mut checkpoint: ImportCheckpoint,
    total: u64,
) -> Result<Value, JobError> {
    let mut batches = spawn_decoder(ctx, artifact, &checkpoint);
    let mut inflight: Option<Write> = None;
    while let Some(batch) = batches.recv().await {
        let batch = batch?;
        if let Some(previous) = inflight.take() {
            let cancel;
            (checkpoint, cancel) = previous.join().await?;
            ctx.boundary(cancel)?;
        }
        let mut next = checkpoint.clone();
        if let Some((offset, line)) = batch.end {
            (next.offset, next.line) = (offset, line);
        }
        next.messages_read += batch.messages.len() as u64;
        next.entries_read += batch.entries.len() as u64;
        next.done = batch.last;
        inflight = Some(Write::spawn(ctx, batch.messages, batch.entries, next, total));
    }
    let Some(last) = inflight else {
        return Err(JobError::Transient(anyhow::anyhow!("the artifact decoder stopped early")));
    };
    let (checkpoint, _) = last.join().await?;
    if !checkpoint.done {
        return Err(JobError::Transient(anyhow::anyhow!("the artifact decoder stopped before the end")));
    }
    Ok(result(&checkpoint))
}

/// One batch of decoded records and where it ends.
struct Batch {
    messages: Vec<ConversationRecord>,
    entries: Vec<ContextInsight>,
    /// `(offset, line)` just past the batch's last record; `None` for an empty batch.
    end: Option<(u64, u64)>,
    /// Nothing follows: the decoder reached a valid end.
    last: bool,
}

/// Decode from the checkpoint's line boundary into batches of `batch_size` records; the
/// final batch (possibly empty) says it is the last.
fn spawn_decoder(
    ctx: &JobCtx,
    artifact: &ArtifactRow,
    checkpoint: &ImportCheckpoint,
) -> mpsc::Receiver<Result<Batch, JobError>> {
    let (tx, rx) = mpsc::channel(1);
    let batch = ctx.batch_size().max(1) as usize;
    let mut pieces = spawn_fetcher(&ctx.db, artifact, checkpoint.offset);
    let mut decoder = Some(if checkpoint.offset == 0 {
        Decoder::new()
    } else {
        Decoder::resume(checkpoint.offset, checkpoint.line, checkpoint.messages_read, checkpoint.entries_read)
    });
    tokio::spawn(async move {
        let mut pending: Vec<Decoded> = Vec::new();
        loop {
            while pending.len() < batch
                && let Some(d) = decoder.as_mut()
            {
                let fed = match pieces.recv().await {
                    Some(Ok(piece)) => d.feed(&piece, &mut pending).map_err(malformed),
                    Some(Err(e)) => Err(e),
                    None => decoder.take().map(Decoder::finish).transpose().map(|_| ()).map_err(malformed),
                };
                if let Err(e) = fed {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            }
            let mut next = Batch { messages: Vec::new(), entries: Vec::new(), end: None, last: false };
            for d in pending.drain(..pending.len().min(batch)) {
                next.end = Some((d.end_offset, d.line));
                match d.record {
                    Record::Message(m) => next.messages.push(m),
                    Record::Entry(e) => next.entries.push(e),
                }
            }
            next.last = decoder.is_none() && pending.is_empty();
            let last = next.last;
            if tx.send(Ok(next)).await.is_err() || last {
                return;
            }
        }
    });
    rx
}

/// Fetch the artifact's chunks from `offset` ahead of their consumer.
fn spawn_fetcher(db: &Db, artifact: &ArtifactRow, offset: u64) -> mpsc::Receiver<Result<Vec<u8>, JobError>> {
    let (tx, rx) = mpsc::channel(2);
    let mut reader = ChunkReader::new(db, &artifact.tenant, &artifact.id, offset);
    tokio::spawn(async move {
        loop {
            let piece = match reader.next_piece().await {
                Ok(Some(piece)) => Ok(piece),
                Ok(None) => return,
                Err(e) => Err(JobError::from(e)),
            };
            let failed = piece.is_err();
            if tx.send(piece).await.is_err() || failed {
                return;
            }
        }
    });
    rx
}

/// A batch's write on its own task; joined before the next one starts.
struct Write(tokio::task::JoinHandle<Result<(ImportCheckpoint, bool), JobError>>);

impl Write {
    fn spawn(
        ctx: &JobCtx,
        messages: Vec<ConversationRecord>,
        entries: Vec<ContextInsight>,
        checkpoint: ImportCheckpoint,
        total: u64,
    ) -> Write {
        let (db, lease, tenant) = (ctx.db.clone(), ctx.lease.clone(), ctx.operation.tenant.clone());
        Write(tokio::spawn(async move {
            let mut checkpoint = checkpoint;
            let started = std::time::Instant::now();
            let cancel = write_batch(&db, &lease, &tenant, &messages, &entries, &mut checkpoint, total).await?;
            let write_ms = started.elapsed().as_millis() as u64;
            tracing::debug!(operation = %lease.operation_id, line = checkpoint.line, write_ms, "import batch committed");
            Ok((checkpoint, cancel))
        }))
    }

    /// Wait for the write: the checkpoint it committed and whether cancel was requested.
    async fn join(mut self) -> Result<(ImportCheckpoint, bool), JobError> {
        (&mut self.0).await.map_err(|e| JobError::Transient(anyhow::anyhow!("an import write task failed: {e}")))?
    }
}

/// A job that stops early does not leave its write running (the transaction rolls back).
impl Drop for Write {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One fenced transaction: the messages, the entries and the checkpoint (counts updated).
async fn write_batch(
    db: &Db,
    lease: &Lease,
    tenant: &str,
    messages: &[ConversationRecord],
    entries: &[ContextInsight],
    checkpoint: &mut ImportCheckpoint,
    total: u64,
) -> Result<bool, JobError> {
    let mut next = checkpoint.clone();
    let cancel = with_pool!(db, pool => {
        let mut tx = pool.begin_write().await?;
        relax_commit!(&mut *tx, db)?;
        let appended = append_in_tx!(&mut *tx, tenant, messages).map_err(append_failed)?;
        let (inserted, skipped) = import_entries!(&mut *tx, tenant, entries)?;
        next.messages.inserted += appended.appended as u64;
        next.messages.skipped += appended.skipped as u64;
        next.entries.inserted += inserted;
        next.entries.skipped += skipped;
        let phase = if next.done { "done" } else { "importing" };
        let cancel = fenced_checkpoint!(&mut *tx, lease, &progress(phase, &next, total))?;
        tx.commit().await?;
        cancel
    });
    metrics::counter!(crate::metrics::ITEMS_PROCESSED, "kind" => "import")
        .increment((messages.len() + entries.len()) as u64);
    *checkpoint = next;
    Ok(cancel)
}

fn progress(phase: &'static str, checkpoint: &ImportCheckpoint, total: u64) -> Progress {
    let processed = checkpoint.messages_read + checkpoint.entries_read;
    Progress {
        phase,
        processed: processed as i64,
        total: total.max(processed) as i64,
        checkpoint: Some(serde_json::to_string(checkpoint).unwrap_or_default()),
    }
}

fn result(checkpoint: &ImportCheckpoint) -> Value {
    let counts = |c: &ImportCounts| json!({"inserted": c.inserted, "skipped": c.skipped});
    json!({"messages": counts(&checkpoint.messages), "entries": counts(&checkpoint.entries)})
}

fn malformed(e: DecodeError) -> JobError {
    JobError::permanent(e.code(), format!("malformed artifact: {e}"))
}

/// A conversation being deleted refuses appends until the delete ends: retry later.
fn append_failed(e: StoreError) -> JobError {
    match e {
        StoreError::Conflict(m) => JobError::Transient(anyhow::anyhow!(m)),
        other => other.into(),
    }
}
