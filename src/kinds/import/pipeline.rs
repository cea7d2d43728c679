//! The import's pipeline: a task fetches the artifact's chunks, a task decodes them into
//! batches, and batches are written on their own tasks while the next are decoded — one
//! write at a time on SQLite, two overlapping on PostgreSQL (see [`Write`]). Small bounded
//! channels keep memory at a few chunks and batches whatever the artifact's size.

use tokio::sync::{mpsc, oneshot};

use super::{Rows, announce_commit, malformed, prepare, write_batch};
use crate::kinds::job::{JobCtx, JobError};
use crate::store::Db;
use crate::store::artifacts::{self, ArtifactRow, ChunkReader, SpareChunks};
use crate::store::messages::StoredMessages;
use crate::store::operations::transitions::Signals;
use context_jobs::artifact::{Decoded, Decoder, Record};
use context_jobs::contract::ContextInsight;
use context_jobs::kinds::import::{ImportArgs, ImportCheckpoint};
use context_jobs::operation::ErrorCode;

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

/// A batch is also cut once its lines hold this many artifact bytes, so large records
/// (a message line may reach 16 MiB) keep a batch — and the few in flight — to a few
/// megabytes, as small ones do (5,000 lines of ~230 bytes: ~1 MiB).
const BATCH_BYTES: u64 = 4 << 20;

/// Decoded batches in artifact order, or the failure that ended the decoding.
pub(super) type Batches = mpsc::Receiver<Result<Batch, JobError>>;

/// Decode from the checkpoint's line boundary into batches of `batch_size` records; the
/// final batch (possibly empty) says it is the last. A failure is sent instead of a batch.
pub(super) fn spawn_decoder(
    ctx: &JobCtx,
    args: &ImportArgs,
    artifact: &ArtifactRow,
    checkpoint: &ImportCheckpoint,
) -> Batches {
    let (tx, rx) = mpsc::channel(1);
    let batch = ctx.batch_size().max(1) as usize;
    let start_offset = checkpoint.offset;
    let mut pieces = spawn_fetcher(&ctx.db, artifact, start_offset);
    let mut decoder = Some(if checkpoint.offset == 0 {
        Decoder::unhashed()
    } else {
        Decoder::resume(checkpoint.offset, checkpoint.line, checkpoint.messages_read, checkpoint.entries_read)
    });
    let (args, tenant) = (args.clone(), ctx.tenant().clone());
    tokio::spawn(async move {
        // Records are prepared and serialised as they are decoded, so a batch exists once,
        // in its stored form (not also as decoded records).
        let mut decoded: Vec<Decoded> = Vec::new();
        let mut next = Batch::default();
        // Where the batch being built starts in the artifact: its lines' bytes bound it too.
        let mut batch_start = start_offset;
        while let Some(d) = decoder.as_mut() {
            let fed = match pieces.recv().await {
                Some(Ok(piece)) => {
                    let fed = d.feed(&piece, &mut decoded).map_err(malformed);
                    pieces.give(piece);
                    fed
                }
                Some(Err(e)) => Err(e),
                None => decoder.take().map(Decoder::finish).transpose().map(|_| ()).map_err(malformed),
            };
            if let Err(e) = fed {
                let _ = tx.send(Err(e)).await;
                return;
            }
            for mut d in decoded.drain(..) {
                if let Err(e) = prepare(&args, &tenant, &mut d) {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
                next.end = Some((d.end_offset, d.line));
                match d.record {
                    Record::Message(m) => next.messages.push(&m),
                    Record::Entry(e) => next.entries.push(e),
                }
                let records = next.messages.len() + next.entries.len();
                if records >= batch || d.end_offset - batch_start >= BATCH_BYTES {
                    batch_start = d.end_offset;
                    if tx.send(Ok(std::mem::take(&mut next))).await.is_err() {
                        return;
                    }
                }
            }
        }
        next.last = true;
        let _ = tx.send(Ok(next)).await;
    });
    rx
}

/// The artifact's chunks from an offset, fetched ahead of their consumer, which gives each
/// back ([`Self::give`]) once done with it for the next chunk to be read into.
pub(super) struct Pieces {
    rx: mpsc::Receiver<Result<Vec<u8>, JobError>>,
    spares: SpareChunks,
}

impl Pieces {
    pub(super) async fn recv(&mut self) -> Option<Result<Vec<u8>, JobError>> {
        self.rx.recv().await
    }

    pub(super) fn give(&self, piece: Vec<u8>) {
        self.spares.give(piece);
    }
}

/// Fetch the artifact's chunks from `offset` ahead of their consumer.
pub(super) fn spawn_fetcher(db: &Db, artifact: &ArtifactRow, offset: u64) -> Pieces {
    let (tx, rx) = mpsc::channel(2);
    let spares = SpareChunks::default();
    let mut reader = ChunkReader::new(db, &artifact.tenant, &artifact.id, offset);
    let given = spares.clone();
    let (db, tenant, id, size) = (db.clone(), artifact.tenant.clone(), artifact.id.clone(), artifact.size_bytes);
    tokio::spawn(async move {
        loop {
            let piece = match reader.next_piece_into(given.take().unwrap_or_default()).await {
                Ok(Some(piece)) => Ok(piece),
                Ok(None) if reader.position() >= size.max(0) as u64 => return,
                // The chunks ran out before the artifact's size: it was deleted (or expired)
                // while it was read. Not a malformed artifact, which is what the decoder
                // would make of the early end.
                Ok(None) => Err(match artifacts::get(&db, &tenant, &id).await {
                    Ok(None) => JobError::permanent(
                        ErrorCode::ArtifactNotFound,
                        format!("artifact {id} was deleted during the import"),
                    ),
                    Ok(Some(_)) => JobError::permanent(
                        ErrorCode::Internal,
                        format!("artifact {id}'s stored chunks end at byte {} of {size}", reader.position()),
                    ),
                    Err(e) => JobError::from(e),
                }),
                Err(e) => Err(JobError::from(e)),
            };
            let failed = piece.is_err();
            if tx.send(piece).await.is_err() || failed {
                return;
            }
        }
    });
    Pieces { rx, spares }
}

/// What a batch adds to the checkpoint it builds on.
pub(super) struct Advance {
    /// `(offset, line)` just past its last record (`None`: leave them).
    pub(super) end: Option<(u64, u64)>,
    pub(super) messages: u64,
    pub(super) entries: u64,
    pub(super) last: bool,
}

impl Advance {
    pub(super) fn of(batch: &Batch) -> Self {
        let (messages, entries) = (batch.messages.len() as u64, batch.entries.len() as u64);
        Advance { end: batch.end, messages, entries, last: batch.last }
    }

    pub(super) fn apply(&self, mut checkpoint: ImportCheckpoint) -> ImportCheckpoint {
        if let Some((offset, line)) = self.end {
            (checkpoint.offset, checkpoint.line) = (offset, line);
        }
        checkpoint.messages_read += self.messages;
        checkpoint.entries_read += self.entries;
        checkpoint.done = self.last;
        checkpoint
    }
}

/// The checkpoint a batch's write builds on: known when it starts, or the one the write
/// before it commits (sent once that commit has returned).
pub(super) enum Base {
    Known(ImportCheckpoint),
    After(oneshot::Receiver<ImportCheckpoint>),
}

impl Base {
    pub(super) async fn resolve(self) -> Result<ImportCheckpoint, JobError> {
        match self {
            Base::Known(checkpoint) => Ok(checkpoint),
            Base::After(previous) => {
                previous.await.map_err(|_| JobError::transient("the previous import batch did not commit"))
            }
        }
    }
}

/// A batch's write on its own task.
///
/// On PostgreSQL two writes overlap: the next batch's transaction starts once this one has
/// locked its conversation rows ([`Write::locked`]) — so a conversation both batches hold
/// waits for this commit and keeps artifact order — and it commits only after this one
/// has, on top of the checkpoint this one committed ([`Write::follow`]). A batch that
/// fails takes the one after it down with it (its transaction rolls back), so the
/// committed checkpoints stay a prefix of the artifact.
pub(super) struct Write {
    task: tokio::task::JoinHandle<Result<(ImportCheckpoint, Signals), JobError>>,
    locked: Option<oneshot::Receiver<()>>,
    committed: Option<oneshot::Receiver<ImportCheckpoint>>,
}

impl Write {
    pub(super) fn spawn(ctx: &JobCtx, batch: Batch, base: Base, total: u64) -> Write {
        let (db, lease, tenant) = (ctx.db.clone(), ctx.lease.clone(), ctx.tenant().clone());
        let (changes, progressed) = (ctx.changes.clone(), ctx.processed.clone());
        let (locked_tx, locked) = oneshot::channel();
        let (committed_tx, committed) = oneshot::channel();
        let task = tokio::spawn(async move {
            let started = std::time::Instant::now();
            let advance = Advance::of(&batch);
            let rows = Rows { messages: &batch.messages, entries: &batch.entries, advance: &advance };
            let (checkpoint, signals) = write_batch(&db, &lease, &tenant, rows, base, Some(locked_tx), total).await?;
            let _ = committed_tx.send(checkpoint.clone());
            announce_commit(&changes, &progressed, &lease, &checkpoint);
            let write_ms = started.elapsed().as_millis() as u64;
            tracing::debug!(operation = %lease.operation_id, line = checkpoint.line, write_ms, "import batch committed");
            Ok((checkpoint, signals))
        });
        Write { task, locked: Some(locked), committed: Some(committed) }
    }

    /// Wait until the write holds its conversations' locks; `false` if it ended without
    /// (it failed: [`Write::join`] says why).
    pub(super) async fn locked(&mut self) -> bool {
        match self.locked.take() {
            Some(locked) => locked.await.is_ok(),
            None => true,
        }
    }

    /// The base of the write that follows this one (one follows each).
    pub(super) fn follow(&mut self) -> Result<Base, JobError> {
        let committed =
            self.committed.take().ok_or_else(|| JobError::transient("an import write was followed twice"))?;
        Ok(Base::After(committed))
    }

    /// Wait for the write: the checkpoint it committed and whether cancel was requested.
    pub(super) async fn join(mut self) -> Result<(ImportCheckpoint, Signals), JobError> {
        (&mut self.task).await.map_err(|e| JobError::transient(format!("an import write task failed: {e}")))?
    }
}

/// A job that stops early does not leave its writes running (their transactions roll
/// back).
impl Drop for Write {
    fn drop(&mut self) {
        self.task.abort();
    }
}
