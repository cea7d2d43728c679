//! The first run of an artifact import on PostgreSQL: the database writes while the
//! validating pass reads.
//!
//! Validation reads and decodes the whole artifact before anything may commit; run alone
//! it left PostgreSQL idle (~1.2 s per 1,000,000 messages on the build machine). Here it
//! runs on its own task while the importing pass writes its first batches into one
//! transaction, which commits — with the first checkpoint — only once every line has
//! validated, and rolls back otherwise: a malformed artifact still writes nothing, and
//! after that commit the import goes on batch by batch as before.
//!
//! That transaction takes at most `CONTEXT_OPS_IMPORT_VALIDATING_BATCHES` batches (64):
//! it holds their conversations' locks until the artifact has validated, and a crash
//! before its commit loses its work. Its locks are taken batch by batch, not in one key
//! order, so a concurrent writer of the same conversations can deadlock with it;
//! PostgreSQL then aborts one of the two, and an aborted import retries (a transient
//! error) from its last checkpoint.

use tokio::task::JoinHandle;

use super::pipeline::{Advance, Batches};
use super::{Rows, announce_commit, commit, insert_rows};
use crate::kinds::job::{JobCtx, JobError};
use context_jobs::kinds::import::ImportCheckpoint;

/// The validating pass on its task: stopped if the import ends first.
struct Validation(JoinHandle<Result<u64, JobError>>);

impl Drop for Validation {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Write `batches` until the validation ends (the first batch always, so the overlap does
/// not depend on which task wins the first race), then commit them with the first
/// checkpoint. Returns it and the artifact's record count.
pub(super) async fn write(
    ctx: &JobCtx,
    batches: &mut Batches,
    validation: JoinHandle<Result<u64, JobError>>,
) -> Result<(ImportCheckpoint, u64), JobError> {
    let mut validation = Validation(validation);
    let mut tx = ctx.db.begin_write().await?;
    tx.relax_commit().await?;
    let mut next = ImportCheckpoint::default();
    for _ in 0..ctx.config.artifacts.import_validating_batches {
        // The decoder fails on the first malformed line exactly as the validation does
        // (the same decoder), so its error is the one to report.
        let Some(batch) = batches.recv().await.transpose()? else { break };
        let advance = Advance::of(&batch);
        let rows = Rows { messages: &batch.messages, entries: &batch.entries, advance: &advance };
        next = insert_rows(&mut tx, ctx.tenant(), &rows, None).await?.add_to(advance.apply(next));
        if batch.last || validation.0.is_finished() {
            break;
        }
    }
    let total = tx
        .wait_alive(&mut validation.0)
        .await?
        .map_err(|e| JobError::transient(format!("the validating task failed: {e}")))??;
    // It started from the empty checkpoint: what it read is what it wrote.
    let records = (next.messages_read + next.entries_read) as usize;
    let signals = commit(tx, &ctx.lease, &next, total, records).await?;
    announce_commit(&ctx.changes, &ctx.processed, &ctx.lease, &next);
    tracing::debug!(operation = %ctx.operation.id, line = next.line, records, "import: validated, first writes committed");
    // An artifact that fit in this transaction is imported: a cancel or a deadline seen
    // now comes too late (it ended an import whose every record was committed as failed).
    if !next.done {
        ctx.boundary(signals)?;
    }
    Ok((next, total))
}
