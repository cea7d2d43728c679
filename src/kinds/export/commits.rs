//! An export's commits: each batch of chunks and its checkpoint in one fenced transaction
//! on its own task, overlapping encoding, landing in order.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::Semaphore;

use crate::changes::Changes;
use crate::kinds::job::{JobCtx, JobError, encode};
use crate::store::artifacts::exports;
use crate::store::operations::transitions::Signals;
use crate::store::operations::{Lease, transitions};
use crate::store::{Db, Engine};
use context_jobs::artifact::{Encoder, Finished};
use context_jobs::ids::ArtifactId;
use context_jobs::kinds::export::{ExportCheckpoint, PHASE_EXPORTING, PHASE_SEALING};
use context_jobs::operation::{ErrorCode, Progress, Transition};

/// Commits that may hold chunks at once (their inserts overlap; they commit in order).
pub(super) const COMMITS_IN_FLIGHT: usize = 2;

/// The commits of one export. Each runs on its own task while encoding goes on: its chunk
/// inserts start at once (on PostgreSQL; SQLite's single writer waits first), then it waits
/// for the commit before it to finish and only then writes its checkpoint and commits — so
/// checkpoints land in order, and a failed or cancelled commit stops every later one before
/// it commits. At most
/// [`COMMITS_IN_FLIGHT`] exist at a time (each holds its chunks).
pub(super) struct Commits {
    latest: Option<Commit>,
    slots: Arc<Semaphore>,
    /// Set by a commit that failed or saw a cancel request or a pause: the job stops.
    stop: Arc<AtomicBool>,
    /// Chunks stored by a commit, for the encoder to write the next ones into
    /// (`Encoder::recycle`: no fresh megabyte mapped and faulted in per chunk).
    stored: Arc<Mutex<Vec<Vec<u8>>>>,
}

struct Commit(tokio::task::JoinHandle<Result<Signals, JobError>>);

impl Commits {
    pub(super) fn new() -> Self {
        Self {
            latest: None,
            slots: Arc::new(Semaphore::new(COMMITS_IN_FLIGHT)),
            stop: Arc::new(AtomicBool::new(false)),
            stored: Arc::default(),
        }
    }

    /// Between pages: stop once a commit failed or saw a cancel, past the deadline, or at
    /// shutdown.
    pub(super) async fn boundary(&mut self, ctx: &JobCtx) -> Result<(), JobError> {
        if self.stop.load(Ordering::Relaxed) || ctx.shutdown.is_cancelled() || ctx.past_deadline() {
            ctx.boundary(self.settle().await?)?;
        }
        Ok(())
    }

    /// Wait for every commit; what the last one learnt.
    pub(super) async fn settle(&mut self) -> Result<Signals, JobError> {
        match self.latest.take() {
            Some(latest) => latest.join().await,
            None => Ok(Signals::default()),
        }
    }

    /// Once another commit may start, take the ready chunks and the checkpoint they
    /// complete, and commit them after the commits before them.
    pub(super) async fn spawn(
        &mut self,
        ctx: &JobCtx,
        encoder: &mut Encoder,
        checkpoint: &mut ExportCheckpoint,
        finished: Option<Finished>,
        (processed, total): (i64, i64),
        committed: &mut i64,
    ) {
        let slot = self.slots.clone().acquire_owned().await.expect("the semaphore is never closed");
        for chunk in std::mem::take(&mut *self.stored.lock().unwrap_or_else(|p| p.into_inner())) {
            encoder.recycle(chunk);
        }
        let chunks = encoder.take_ready();
        checkpoint.encoder = encoder.state().clone();
        let phase = if finished.is_some() { PHASE_SEALING } else { PHASE_EXPORTING };
        let progress = Progress { phase, processed, total, checkpoint: encode(checkpoint).ok() };
        let (db, lease) = (ctx.db.clone(), ctx.lease.clone());
        let artifact_id = ArtifactId::from_stored(checkpoint.artifact_id.as_str());
        let (changes, progressed): (Changes, _) = (ctx.changes.clone(), ctx.processed.clone());
        let records = (processed - std::mem::replace(committed, processed)).max(0) as u64;
        let (previous, stop, stored) = (self.latest.take(), self.stop.clone(), self.stored.clone());
        self.latest = Some(Commit(tokio::spawn(async move {
            let started = Instant::now();
            let batch =
                Batch { artifact_id: &artifact_id, chunks: &chunks, finished: finished.as_ref(), progress: &progress };
            let outcome = commit(&db, &lease, batch, previous).await;
            drop(slot);
            if outcome.is_ok() {
                changes.committed(&lease.operation_id, &lease.tenant);
                progressed.store(processed, Ordering::Relaxed);
            }
            if !matches!(outcome, Ok(s) if !s.stops()) {
                stop.store(true, Ordering::Relaxed);
            }
            if outcome.is_ok() {
                metrics::counter!(crate::metrics::ITEMS_PROCESSED, "kind" => "export").increment(records);
            }
            let bytes: usize = chunks.iter().map(|(_, c)| c.len()).sum();
            let commit_ms = started.elapsed().as_millis() as u64;
            tracing::debug!(operation = %lease.operation_id, processed, bytes, commit_ms, "export batch committed");
            stored.lock().unwrap_or_else(|p| p.into_inner()).extend(chunks.into_iter().map(|(_, chunk)| chunk));
            outcome
        })));
    }
}

impl Commit {
    /// Wait for the commit (and so for every one before it); `Ok(cancel requested)`.
    async fn join(mut self) -> Result<Signals, JobError> {
        (&mut self.0).await.map_err(|e| JobError::transient(format!("an export commit task failed: {e}")))?
    }
}

/// A job that stops early (an error) does not leave its commits running: aborting one
/// drops its transaction (a rollback) and the commit it was waiting for, and so on down.
impl Drop for Commit {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What one commit writes.
struct Batch<'a> {
    artifact_id: &'a ArtifactId,
    chunks: &'a [(u64, Vec<u8>)],
    finished: Option<&'a Finished>,
    progress: &'a Progress,
}

/// One fenced transaction: the chunks, then — once `previous` has committed — the seal
/// when finished and the checkpoint. `Ok(true)`: cancel was requested (if `previous` saw
/// it, this batch is rolled back).
async fn commit(db: &Db, lease: &Lease, batch: Batch<'_>, previous: Option<Commit>) -> Result<Signals, JobError> {
    let Batch { artifact_id, chunks, finished, progress } = batch;
    let gone = || {
        JobError::permanent(
            ErrorCode::ArtifactNotFound,
            format!("artifact {artifact_id} was deleted during the export"),
        )
    };
    // SQLite has one writer: a transaction that took the write lock and then waited for
    // the commit before it would hold off that very commit (until the busy timeout, then
    // fail it). There, the previous commit finishes first; PostgreSQL overlaps the inserts.
    let previous = match previous {
        Some(previous) if db.engine() == Engine::Sqlite => {
            let signals = previous.join().await?;
            if signals.stops() {
                return Ok(signals);
            }
            None
        }
        previous => previous,
    };
    let mut tx = db.begin_write().await?;
    tx.relax_commit().await?;
    exports::insert_chunks(&mut tx, artifact_id, chunks)
        .await
        .map_err(|e| if exports::is_missing_parent(&e) { gone() } else { e.into() })?;
    if let Some(previous) = previous {
        let signals = tx.wait_alive(previous.join()).await??;
        if signals.stops() {
            return Ok(signals);
        }
    }
    if !exports::touch(&mut tx, &lease.tenant, artifact_id).await? {
        return Err(gone());
    }
    if let Some(f) = finished
        && !exports::seal(&mut tx, &lease.tenant, artifact_id, f).await?
    {
        return Err(gone());
    }
    let t = Transition::Checkpoint { progress, lease_until_ms: lease.renewed_until() };
    let signals = transitions::apply(&mut tx, lease, &t).await?;
    tx.commit().await?;
    // A finished export ignores a late cancel or pause: its artifact is complete.
    Ok(if finished.is_some() { Signals::default() } else { signals })
}
