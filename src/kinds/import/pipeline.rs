//! The import's pipeline: a task fetches the artifact's chunks, a task decodes them into
//! batches, and the job writes one batch while the next is prepared (at most one write in
//! flight, so they commit in order). Small bounded channels keep memory at a few chunks and
//! batches whatever the artifact's size.

use std::sync::atomic::Ordering;

use tokio::sync::mpsc;

use super::{malformed, prepare, write_batch};
use crate::kinds::job::{JobCtx, JobError};
use crate::store::Db;
use crate::store::artifacts::{ArtifactRow, ChunkReader};
use crate::store::messages::StoredMessages;
use crate::store::operations::transitions::Signals;
use context_jobs::artifact::{Decoded, Decoder, Record};
use context_jobs::contract::ContextInsight;
use context_jobs::kinds::import::{ImportArgs, ImportCheckpoint};

/// One batch of decoded records and where it ends.
#[derive(Default)]
pub(super) struct Batch {
    /// Serialised here, off the writer's critical path.
    pub(super) messages: StoredMessages,
    pub(super) entries: Vec<ContextInsight>,
    /// `(offset, line)` just past the batch's last record; `None` for an empty batch.
    pub(super) end: Option<(u64, u64)>,
    /// Nothing follows: the decoder reached a valid end.
    pub(super) last: bool,
}

/// Decode from the checkpoint's line boundary into batches of `batch_size` records; the
/// final batch (possibly empty) says it is the last. A failure is sent instead of a batch.
pub(super) fn spawn_decoder(
    ctx: &JobCtx,
    args: &ImportArgs,
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
    let args = args.clone();
    tokio::spawn(async move {
        // Records are prepared and serialised as they are decoded, so a batch exists once,
        // in its stored form (not also as decoded records).
        let mut decoded: Vec<Decoded> = Vec::new();
        let mut next = Batch::default();
        while let Some(d) = decoder.as_mut() {
            let fed = match pieces.recv().await {
                Some(Ok(piece)) => d.feed(&piece, &mut decoded).map_err(malformed),
                Some(Err(e)) => Err(e),
                None => decoder.take().map(Decoder::finish).transpose().map(|_| ()).map_err(malformed),
            };
            if let Err(e) = fed {
                let _ = tx.send(Err(e)).await;
                return;
            }
            for mut d in decoded.drain(..) {
                if let Err(e) = prepare(&args, &mut d) {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
                next.end = Some((d.end_offset, d.line));
                match d.record {
                    Record::Message(m) => next.messages.push(&m),
                    Record::Entry(e) => next.entries.push(e),
                }
                if next.messages.len() + next.entries.len() >= batch
                    && tx.send(Ok(std::mem::take(&mut next))).await.is_err()
                {
                    return;
                }
            }
        }
        next.last = true;
        let _ = tx.send(Ok(next)).await;
    });
    rx
}

/// Fetch the artifact's chunks from `offset` ahead of their consumer.
pub(super) fn spawn_fetcher(db: &Db, artifact: &ArtifactRow, offset: u64) -> mpsc::Receiver<Result<Vec<u8>, JobError>> {
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
pub(super) struct Write(tokio::task::JoinHandle<Result<(ImportCheckpoint, Signals), JobError>>);

impl Write {
    pub(super) fn spawn(
        ctx: &JobCtx,
        messages: StoredMessages,
        entries: Vec<ContextInsight>,
        checkpoint: ImportCheckpoint,
        total: u64,
    ) -> Write {
        let (db, lease, tenant) = (ctx.db.clone(), ctx.lease.clone(), ctx.tenant().clone());
        let (changes, progressed) = (ctx.changes.clone(), ctx.processed.clone());
        Write(tokio::spawn(async move {
            let mut checkpoint = checkpoint;
            let started = std::time::Instant::now();
            let signals = write_batch(&db, &lease, &tenant, &messages, &entries, &mut checkpoint, total).await?;
            changes.committed(&lease.operation_id, &lease.tenant);
            progressed.store((checkpoint.messages_read + checkpoint.entries_read) as i64, Ordering::Relaxed);
            let write_ms = started.elapsed().as_millis() as u64;
            tracing::debug!(operation = %lease.operation_id, line = checkpoint.line, write_ms, "import batch committed");
            Ok((checkpoint, signals))
        }))
    }

    /// Wait for the write: the checkpoint it committed and whether cancel was requested.
    pub(super) async fn join(mut self) -> Result<(ImportCheckpoint, Signals), JobError> {
        (&mut self.0).await.map_err(|e| JobError::transient(format!("an import write task failed: {e}")))?
    }
}

/// A job that stops early does not leave its write running (the transaction rolls back).
impl Drop for Write {
    fn drop(&mut self) {
        self.0.abort();
    }
}
