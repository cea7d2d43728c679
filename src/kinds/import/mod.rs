//! The `import` job: messages and entries from a stored artifact (parsed incrementally,
//! never loaded whole) or from the inline records of the request.
//!
//! From an artifact, phase `validating` first streams every byte through the decoder and
//! the digest: a malformed artifact fails with the decoder's stable `errorCode` and the
//! offending line, having written nothing (on PostgreSQL the first batches are written
//! meanwhile, in a transaction that commits only after validation: `validating`). Then
//! phase `importing` decodes again from the
//! checkpointed line boundary and writes batches of `batch_size` records; each batch's
//! inserts and its checkpoint (byte offset, line number, counts) commit in one
//! transaction fenced by the lease, so a crash resumes after the last committed batch.
//! Fetching, decoding and writing run on separate tasks connected by small bounded
//! channels, so memory stays at a few chunks and batches whatever the artifact's size. On
//! PostgreSQL two batches' transactions overlap (one copies while the other commits);
//! they still commit in artifact order (`pipeline::Write`).
//!
//! Records keep their ids. Messages go through the one sequence-assignment path
//! ([`crate::store::messages::append_in`]): an id already in its conversation is skipped, the rest get
//! sequences after the existing ones in artifact order. Entries go through
//! [`crate::store::entries::rows::import`]. Re-importing is therefore a no-op that reports skips.

mod pipeline;
mod validating;

use super::{Job, Prepared, SubmitCtx, SubmitError};
use crate::changes::Changes;
use crate::kinds::job::{Finish, JobCtx, JobError, encode};
use crate::store::artifacts::{self, ArtifactRow};
use crate::store::messages::StoredMessages;
use crate::store::operations::Lease;
use crate::store::operations::transitions::{self, Signals};
use crate::store::{Db, Engine, StoreError, Tx, entries, messages};
use context_jobs::artifact::{DecodeError, Decoded, Decoder};
use context_jobs::contract::{ContextInsight, ConversationRecord, ImportContextRequest};
use context_jobs::ids::{ArtifactId, TenantKey};
use context_jobs::kinds::import::{
    Import, ImportArgs, ImportCheckpoint, ImportResult, PHASE_DONE, PHASE_IMPORTING, PHASE_VALIDATING,
};
use context_jobs::operation::{ErrorCode, Progress, Transition};
use pipeline::{Advance, Base, Batches, Write, spawn_decoder, spawn_fetcher};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, Ordering};
use tokio::sync::oneshot;

impl Job for Import {
    /// Two overlapping batch writes and the chunk fetcher; in the first run the validating
    /// transaction and the two passes' fetchers.
    const CONNECTIONS: u32 = 3;

    /// The core checks the sources and limits; here an `artifactRef` must name a ready
    /// artifact of the caller's tenant (else 404/409).
    async fn prepare(ctx: &SubmitCtx<'_>, submission: ImportContextRequest) -> Result<Prepared, SubmitError> {
        let (args, key) = Import::args(ctx.tenant.as_str(), submission)?;
        if let Some(id) = &args.artifact_ref {
            let id = ArtifactId::from_stored(id.as_str());
            let row = artifacts::get(ctx.db, ctx.tenant, &id)
                .await?
                .ok_or_else(|| SubmitError::NotFound(format!("artifact {id} not found")))?;
            if !row.is_ready() {
                return Err(SubmitError::Conflict(format!(
                    "artifact {id} is {}; it can be imported once ready",
                    row.state
                )));
            }
        }
        Ok(Prepared { idempotency_key: Some(key), ..Prepared::plain::<Import>(args) })
    }

    async fn run(ctx: &JobCtx, args: ImportArgs) -> Result<Finish<ImportResult>, JobError> {
        let checkpoint = ctx.checkpoint::<ImportCheckpoint>()?;
        if let Some(done) = checkpoint.as_ref().filter(|c| c.done) {
            return Ok(Finish::Done(done.into()));
        }
        ctx.before_first_batch().await?;
        let result = match &args.artifact_ref {
            Some(id) => from_artifact(ctx, &args, &ArtifactId::from_stored(id.as_str()), checkpoint).await?,
            None => inline(ctx, &args.messages, &args.entries).await?,
        };
        Ok(Finish::Done(result))
    }
}

/// Inline records: one batch (they obey the append limits), one transaction.
async fn inline(
    ctx: &JobCtx,
    messages: &[ConversationRecord],
    entries: &[ContextInsight],
) -> Result<ImportResult, JobError> {
    let n = (messages.len() + entries.len()) as u64;
    let rows: StoredMessages = messages.iter().collect();
    let advance = Advance { end: None, messages: messages.len() as u64, entries: entries.len() as u64, last: true };
    let rows = Rows { messages: &rows, entries, advance: &advance };
    let base = Base::Known(ImportCheckpoint::default());
    let (checkpoint, _) = write_batch(&ctx.db, &ctx.lease, ctx.tenant(), rows, base, None, n).await?;
    ctx.changes.committed(&ctx.operation.id, &ctx.operation.tenant);
    Ok((&checkpoint).into())
}

async fn from_artifact(
    ctx: &JobCtx,
    args: &ImportArgs,
    id: &ArtifactId,
    checkpoint: Option<ImportCheckpoint>,
) -> Result<ImportResult, JobError> {
    let artifact = artifacts::get(&ctx.db, ctx.tenant(), id).await?.filter(ArtifactRow::is_ready).ok_or_else(|| {
        JobError::permanent(ErrorCode::ArtifactNotFound, format!("artifact {id} is gone (deleted or expired)"))
    })?;
    if let Some(checkpoint) = checkpoint {
        let batches = spawn_decoder(ctx, args, &artifact, &checkpoint);
        return import(ctx, batches, checkpoint, ctx.operation.total.max(0) as u64).await;
    }
    let validating = Progress { phase: PHASE_VALIDATING, processed: 0, total: 0, checkpoint: None };
    ctx.save_progress(&validating).await?;
    let validation = validate(ctx, args, &artifact);
    let start = ImportCheckpoint::default();
    if ctx.db.engine() == Engine::Postgres {
        // The database writes while the validating pass reads (see `validating`).
        let mut batches = spawn_decoder(ctx, args, &artifact, &start);
        let (checkpoint, total) = validating::write(ctx, &mut batches, tokio::spawn(validation)).await?;
        if checkpoint.done {
            return Ok((&checkpoint).into());
        }
        return import(ctx, batches, checkpoint, total).await;
    }
    // SQLite has one writer: a transaction held open through validation would hold it.
    let total = validation.await?;
    ctx.save_progress(&progress(PHASE_IMPORTING, &start, total)?).await?;
    let batches = spawn_decoder(ctx, args, &artifact, &start);
    import(ctx, batches, start, total).await
}

/// Stream the whole artifact through the decoder and the digest, each record prepared as
/// the importing pass will write it (`Import::prepare_record`); nothing is written.
/// Resolves to the number of records. Owns what it needs, so it can run on its own task.
fn validate(
    ctx: &JobCtx,
    args: &ImportArgs,
    artifact: &ArtifactRow,
) -> impl Future<Output = Result<u64, JobError>> + Send + 'static {
    let mut pieces = spawn_fetcher(&ctx.db, artifact, 0);
    let (args, shutdown, tenant) = (args.clone(), ctx.shutdown.clone(), ctx.tenant().clone());
    let expected = artifact.digest.clone().unwrap_or_default();
    async move {
        let mut decoder = Decoder::new();
        let mut scratch = Vec::new();
        while let Some(piece) = pieces.recv().await {
            let piece = piece?;
            decoder.feed(&piece, &mut scratch).map_err(malformed)?;
            pieces.give(piece);
            for decoded in &mut scratch {
                prepare(&args, &tenant, decoded)?;
            }
            scratch.clear();
            if shutdown.is_cancelled() {
                return Err(JobError::ShuttingDown);
            }
        }
        let summary = decoder.finish().map_err(malformed)?;
        summary.check_digest(&expected).map_err(malformed)?;
        Ok(summary.messages + summary.entries)
    }
}

/// Three stages overlap: a task fetches chunks, a task decodes them into batches, and
/// batches are written as the next ones are prepared — one write at a time on SQLite
/// (one writer anyway), two overlapping on PostgreSQL for batches of messages (see
/// [`Write`]: each commits after the one before, so checkpoints stay in artifact order).
async fn import(
    ctx: &JobCtx,
    mut batches: Batches,
    mut checkpoint: ImportCheckpoint,
    total: u64,
) -> Result<ImportResult, JobError> {
    let overlapping = ctx.db.engine() == Engine::Postgres;
    let mut inflight: VecDeque<Write> = VecDeque::new();
    while let Some(batch) = batches.recv().await {
        let batch = batch?;
        // A batch with entries waits for every write before it: entries are not keyed by
        // conversation, so two transactions could wait on each other's.
        let overlap = overlapping && batch.entries.is_empty();
        while inflight.len() > usize::from(overlap) {
            let Some(write) = inflight.pop_front() else { break };
            let signals;
            (checkpoint, signals) = write.join().await?;
            ctx.boundary(signals)?;
        }
        let base = match inflight.back_mut() {
            None => Base::Known(checkpoint.clone()),
            Some(previous) => {
                if previous.locked().await {
                    previous.follow()?
                } else {
                    // It failed before taking its locks: report its error.
                    for write in std::mem::take(&mut inflight) {
                        write.join().await?;
                    }
                    return Err(JobError::transient("an import write ended before taking its locks"));
                }
            }
        };
        inflight.push_back(Write::spawn(ctx, batch, base, total));
    }
    let mut last = None;
    for write in std::mem::take(&mut inflight) {
        last = Some(write.join().await?.0);
    }
    let Some(checkpoint) = last else {
        return Err(JobError::transient("the artifact decoder stopped early"));
    };
    if !checkpoint.done {
        return Err(JobError::transient("the artifact decoder stopped before the end"));
    }
    Ok((&checkpoint).into())
}

/// A batch's records and what it adds to the checkpoint.
struct Rows<'a> {
    messages: &'a StoredMessages,
    entries: &'a [ContextInsight],
    advance: &'a Advance,
}

/// One fenced transaction: the messages, the entries and the checkpoint (`base` advanced
/// by the batch, counts updated). `locked` is told once the batch's conversation rows are
/// locked; `base` is awaited only before the checkpoint is written.
async fn write_batch(
    db: &Db,
    lease: &Lease,
    tenant: &TenantKey,
    rows: Rows<'_>,
    base: Base,
    locked: Option<oneshot::Sender<()>>,
    total: u64,
) -> Result<(ImportCheckpoint, Signals), JobError> {
    let mut tx = db.begin_write().await?;
    tx.relax_commit().await?;
    let counts = insert_rows(&mut tx, tenant, &rows, locked).await?;
    let next = counts.add_to(rows.advance.apply(tx.wait_alive(base.resolve()).await??));
    let signals = commit(tx, lease, &next, total, rows.messages.len() + rows.entries.len()).await?;
    Ok((next, signals))
}

/// The checkpoint `next` written (fenced by the lease) into `tx`, which commits with it;
/// `records` is what the transaction wrote.
async fn commit(
    mut tx: Tx,
    lease: &Lease,
    next: &ImportCheckpoint,
    total: u64,
    records: usize,
) -> Result<Signals, JobError> {
    let phase = if next.done { PHASE_DONE } else { PHASE_IMPORTING };
    let progress = progress(phase, next, total)?;
    let t = Transition::Checkpoint { progress: &progress, lease_until_ms: lease.renewed_until() };
    let signals = transitions::apply(&mut tx, lease, &t).await?;
    tx.commit().await?;
    metrics::counter!(crate::metrics::ITEMS_PROCESSED, "kind" => "import").increment(records as u64);
    Ok(signals)
}

/// After a commit of `checkpoint`: watchers of the operation are told, and the runner's
/// `processed` moves to it.
fn announce_commit(changes: &Changes, processed: &AtomicI64, lease: &Lease, checkpoint: &ImportCheckpoint) {
    changes.committed(&lease.operation_id, &lease.tenant);
    processed.store((checkpoint.messages_read + checkpoint.entries_read) as i64, Ordering::Relaxed);
}

/// What a batch's rows added: messages inserted and skipped, entries inserted and skipped.
struct Counts(u64, u64, u64, u64);

impl Counts {
    fn add_to(&self, mut checkpoint: ImportCheckpoint) -> ImportCheckpoint {
        checkpoint.messages.inserted += self.0;
        checkpoint.messages.skipped += self.1;
        checkpoint.entries.inserted += self.2;
        checkpoint.entries.skipped += self.3;
        checkpoint
    }
}

/// A batch's messages (conversations locked first, `locked` told then) and entries into
/// `tx`.
async fn insert_rows(
    tx: &mut Tx,
    tenant: &TenantKey,
    rows: &Rows<'_>,
    locked: Option<oneshot::Sender<()>>,
) -> Result<Counts, JobError> {
    let held = messages::lock_conversations(tx, tenant, rows.messages).await.map_err(append_failed)?;
    if let Some(locked) = locked {
        let _ = locked.send(());
    }
    let appended = messages::insert_locked(tx, tenant, held).await.map_err(append_failed)?;
    let (inserted, skipped) = entries::rows::import(tx, tenant, rows.entries).await?;
    Ok(Counts(appended.appended as u64, appended.skipped as u64, inserted, skipped))
}

fn progress(phase: &'static str, checkpoint: &ImportCheckpoint, total: u64) -> Result<Progress, JobError> {
    let processed = checkpoint.messages_read + checkpoint.entries_read;
    Ok(Progress {
        phase,
        processed: processed as i64,
        total: total.max(processed) as i64,
        checkpoint: Some(encode(checkpoint)?),
    })
}

/// A record as the import writes it (renamed), or the line's failure.
pub(super) fn prepare(args: &ImportArgs, tenant: &TenantKey, decoded: &mut Decoded) -> Result<(), JobError> {
    Import::prepare_record(args, tenant.as_str(), &mut decoded.record).map_err(|e| {
        JobError::permanent(ErrorCode::ArtifactBadLine, format!("malformed artifact: line {}: {e}", decoded.line))
    })
}

pub(super) fn malformed(e: DecodeError) -> JobError {
    JobError::permanent(e.code(), format!("malformed artifact: {e}"))
}

/// A conversation being deleted refuses appends until the delete ends: retry later.
fn append_failed(e: StoreError) -> JobError {
    match e {
        StoreError::Conflict(m) => JobError::transient(m),
        other => other.into(),
    }
}
