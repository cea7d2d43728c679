//! The `export` job: stream the tenant's messages (conversation/sequence order), then its
//! entries (id order), through the artifact encoder into fixed-size chunks stored in the
//! database.
//!
//! Three things overlap: a reader task fetches pages of `batch_size` records ahead (see
//! [`export_pages::for_each_page`]); the job encodes them; and whenever `COMMIT_CHUNKS`
//! full chunks are ready they commit on their own task — the chunks plus the checkpoint
//! (read positions and the encoder state: bytes handed out, the partial-chunk carry,
//! counts, section) in one transaction fenced by the lease — while encoding goes on (see
//! `commits.rs`: inserts overlap, checkpoints land in order). The check runs after every
//! record, so a commit follows a chunk boundary and its carry is less than one line.
//! Memory is a few pages and a few chunks, whatever the size of the export.
//!
//! Resuming after a crash: the hash state is not in the checkpoint (it has no stable
//! serialized form); it is rebuilt by streaming the committed chunks once, then the carry
//! is hashed on top. The header's time is the operation's `created_at_ms`, so a resumed run
//! writes the same bytes and digest as an uninterrupted one, provided the tenant's data did
//! not change meanwhile (an export is not a snapshot: rows written behind its read position
//! during the run are not in it).

use std::time::{Duration, Instant};

mod commits;

use commits::Commits;

use tokio::sync::mpsc;

use super::{Job, Prepared, SubmitCtx, SubmitError};
use crate::kinds::job::{Finish, JobCtx, JobError, encode};
use crate::store::artifacts::export_pages::{self, SparePages, StoredPage};
use crate::store::artifacts::{self, exports};
use crate::store::operations::transitions;
use crate::store::{entries, messages};
use context_jobs::artifact::{ArtifactDigest, EncodeError, Encoder, Finished, Header, Section};
use context_jobs::contract::{ContextInsight, ExportContextRequest};
use context_jobs::ids::ArtifactId;
use context_jobs::kinds::export::{Export, ExportArgs, ExportCheckpoint, ExportResult, PHASE_EXPORTING};
use context_jobs::operation::{ErrorCode, Progress, Transition};

/// Full chunks accumulated before a commit.
const COMMIT_CHUNKS: usize = 4;
/// Pages the reader may fetch ahead of the encoder.
const PAGES_AHEAD: usize = 2;

impl Job for Export {
    /// The page reader's `COPY … TO` and the chunk commits in flight.
    const CONNECTIONS: u32 = 1 + commits::COMMITS_IN_FLIGHT as u32;

    async fn prepare(_: &SubmitCtx<'_>, submission: ExportContextRequest) -> Result<Prepared, SubmitError> {
        Ok(Prepared::plain::<Export>(Export::args(submission)?))
    }

    async fn run(ctx: &JobCtx, args: ExportArgs) -> Result<Finish<ExportResult>, JobError> {
        let saved = match ctx.checkpoint::<ExportCheckpoint>()? {
            Some(saved) if saved.encoder.section == Section::Done => {
                let artifact_id = ArtifactId::from_stored(saved.artifact_id.as_str());
                return finished_result(ctx, &artifact_id).await.map(Finish::Done);
            }
            // A failed or cancelled export keeps its unfinished artifact so a retry resumes
            // it; if it has gone since (deleted, expired), the retry starts over.
            Some(saved) => {
                let artifact_id = ArtifactId::from_stored(saved.artifact_id.as_str());
                exports::is_writing(&ctx.db, ctx.tenant(), &artifact_id).await?.then_some(saved)
            }
            None => None,
        };
        let (checkpoint, total, processed) = match saved {
            Some(saved) => {
                ctx.before_first_batch().await?;
                (saved, ctx.operation.total, ctx.operation.processed)
            }
            None => {
                let (checkpoint, total) = start(ctx, &args).await?;
                (checkpoint, total, 0)
            }
        };
        export(ctx, &args, checkpoint, total, processed).await.map(Finish::Done)
    }
}

/// First run: create the artifact, name it on the operation, and checkpoint the header
/// with the expected record count (messages and entries: the total only grows from there,
/// if records are added while the export runs). Returns the checkpoint and that total.
async fn start(ctx: &JobCtx, args: &ExportArgs) -> Result<(ExportCheckpoint, i64), JobError> {
    let tenant = ctx.tenant();
    let messages = if args.filter.is_empty() {
        messages::count_estimate(&ctx.db, tenant).await?
    } else {
        artifacts::export_filter::count_messages(&ctx.db, tenant, &args.filter).await?
    };
    let total = messages + entries::reads::export_count(&ctx.db, tenant, args.include_expired, &args.filter).await?;
    let artifact_id = ArtifactId::from_ulid(ulid::Ulid::generate());
    let header = Header::new(tenant.as_str(), ctx.operation.created_at_ms);
    let mut encoder = Encoder::new(ctx.config.artifacts.artifact_chunk_bytes, &header);
    let chunks = encoder.take_ready();
    let checkpoint = ExportCheckpoint {
        artifact_id: artifact_id.to_string(),
        after_message: None,
        after_entry: None,
        encoder: encoder.state().clone(),
    };
    let progress = Progress { phase: PHASE_EXPORTING, processed: 0, total, checkpoint: Some(encode(&checkpoint)?) };
    let mut tx = ctx.begin().await?;
    let retention = ctx.config.artifacts.artifact_retention_days;
    exports::create(&mut tx, &artifact_id, tenant, &ctx.operation.id, retention).await?;
    let named = Transition::SetArtifact { artifact_id: artifact_id.as_str() };
    transitions::apply(&mut tx, &ctx.lease, &named).await?;
    exports::insert_chunks(&mut tx, &artifact_id, &chunks).await?;
    let signals = ctx.checkpoint_in(&mut tx, &progress).await?;
    ctx.commit(tx).await?;
    ctx.boundary(signals)?;
    Ok((checkpoint, total))
}

async fn export(
    ctx: &JobCtx,
    args: &ExportArgs,
    mut checkpoint: ExportCheckpoint,
    mut total: i64,
    mut processed: i64,
) -> Result<ExportResult, JobError> {
    let chunk_bytes = ctx.config.artifacts.artifact_chunk_bytes;
    let emitted = checkpoint.encoder.emitted;
    let artifact_id = ArtifactId::from_stored(checkpoint.artifact_id.as_str());
    let prefix = if emitted == 0 {
        ArtifactDigest::new()
    } else {
        artifacts::digest_prefix(&ctx.db, ctx.tenant(), &artifact_id, emitted).await?
    };
    let mut encoder = Encoder::resume(chunk_bytes, checkpoint.encoder.clone(), prefix);
    let spares = SparePages::default();
    let mut pages = spawn_reader(ctx, args, &checkpoint, &spares);
    let mut committed = processed;
    let mut commits = Commits::new();
    let (mut wait_read, mut wait_commit, mut busy) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    loop {
        commits.boundary(ctx).await?;
        let t = Instant::now();
        let Some(page) = pages.recv().await else { break };
        wait_read += t.elapsed();
        let t = Instant::now();
        let page = page?;
        let (messages, entries) = match &page {
            Page::Messages(rows) => (Some(rows.rows()), None),
            Page::Entries(entries) => (None, Some(entries.iter())),
        };
        let items =
            messages.into_iter().flatten().map(Item::Message).chain(entries.into_iter().flatten().map(Item::Entry));
        // The position of the last record encoded, made owned only when a checkpoint needs it.
        let mut position = None;
        for item in items {
            match &item {
                Item::Message(row) => encoder.stored_message(&row.columns).map_err(encode_failed)?,
                Item::Entry(entry) => encoder.entry(entry).map_err(encode_failed)?,
            }
            position = Some(item);
            processed += 1;
            // Checked after every record, so a commit lands just after a chunk boundary
            // and the carry in its checkpoint is less than one line.
            if encoder.ready_bytes() >= COMMIT_CHUNKS * chunk_bytes {
                let t = Instant::now();
                total = total.max(processed);
                record_position(&mut checkpoint, position.take());
                commits.spawn(ctx, &mut encoder, &mut checkpoint, None, (processed, total), &mut committed).await;
                wait_commit += t.elapsed();
            }
        }
        record_position(&mut checkpoint, position);
        if let Page::Messages(page) = page {
            spares.give(page);
        }
        busy += t.elapsed();
    }
    tracing::debug!(
        operation = %ctx.operation.id, wait_read_ms = wait_read.as_millis() as u64,
        wait_commit_ms = wait_commit.as_millis() as u64, encode_ms = (busy.saturating_sub(wait_commit)).as_millis() as u64,
        "export pipeline"
    );
    let finished = encoder.finish().map_err(encode_failed)?;
    total = total.max(processed);
    commits.spawn(ctx, &mut encoder, &mut checkpoint, Some(finished.clone()), (processed, total), &mut committed).await;
    let sealed = commits.settle().await?;
    if sealed.stops() {
        // The commit before it saw a cancel or a pause, so the seal was not written.
        ctx.boundary(sealed)?;
        return Err(JobError::transient("the export's sealing commit was not written"));
    }
    // Sealed, with the checkpoint that says so: the export is done, and a deadline or a
    // shutdown seen now comes too late (it failed an export whose artifact was ready).
    Ok(ExportResult::new(&checkpoint.artifact_id, &finished))
}

/// One page the reader fetched.
enum Page {
    Messages(StoredPage),
    Entries(Vec<ContextInsight>),
}

enum Item<'a> {
    Message(export_pages::StoredRow<'a>),
    Entry(&'a ContextInsight),
}

/// Note where the reads continue after `item` (the last record encoded), if any.
fn record_position(checkpoint: &mut ExportCheckpoint, item: Option<Item<'_>>) {
    match item {
        Some(Item::Message(row)) => checkpoint.after_message = Some((row.conversation_id.to_string(), row.sequence)),
        Some(Item::Entry(entry)) => checkpoint.after_entry = Some(entry.id.clone()),
        None => {}
    }
}

/// Read pages ahead of the encoder (messages, then entries) on their own task, so the
/// database reads overlap encoding and commits. At most [`PAGES_AHEAD`] pages wait.
fn spawn_reader(
    ctx: &JobCtx,
    args: &ExportArgs,
    checkpoint: &ExportCheckpoint,
    spares: &SparePages,
) -> mpsc::Receiver<Result<Page, JobError>> {
    let spares = spares.clone();
    let (tx, rx) = mpsc::channel(PAGES_AHEAD);
    let db = ctx.db.clone();
    let tenant = ctx.tenant().clone();
    let include_expired = args.include_expired;
    let filter = args.filter.clone();
    let batch = ctx.batch_size().max(1) as usize;
    let after_message = checkpoint.after_message.clone();
    let mut after_entry = checkpoint.after_entry.clone();
    let section = checkpoint.encoder.section;
    tokio::spawn(async move {
        if section == Section::Messages {
            let after = after_message.as_ref().map(|(c, s)| (c.as_str(), *s));
            let read = export_pages::for_each_page(&db, &tenant, &filter, after, batch, &spares, |page| {
                let tx = tx.clone();
                async move { tx.send(Ok(Page::Messages(page))).await.is_ok() }
            })
            .await;
            if let Err(e) = read {
                let _ = tx.send(Err(e.into())).await;
                return;
            }
        }
        loop {
            let page = match entries::reads::export_page(
                &db,
                &tenant,
                include_expired,
                &filter,
                after_entry.as_deref(),
                batch,
            )
            .await
            {
                Ok(page) => page,
                Err(e) => {
                    let _ = tx.send(Err(e.into())).await;
                    return;
                }
            };
            // A page may be cut short by its bytes: only an empty one says the entries end.
            let Some(last) = page.last() else { return };
            after_entry = Some(last.id.clone());
            if tx.send(Ok(Page::Entries(page))).await.is_err() {
                return; // the job stopped listening
            }
        }
    });
    rx
}

/// The result of an export whose last batch already committed (a resumed run).
async fn finished_result(ctx: &JobCtx, artifact_id: &ArtifactId) -> Result<ExportResult, JobError> {
    let row = artifacts::get(&ctx.db, ctx.tenant(), artifact_id).await?.ok_or_else(|| {
        JobError::permanent(ErrorCode::ArtifactNotFound, format!("artifact {artifact_id} no longer exists"))
    })?;
    let finished = Finished {
        digest: row.digest.unwrap_or_default(),
        size_bytes: row.size_bytes.max(0) as u64,
        messages: row.messages.unwrap_or(0).max(0) as u64,
        entries: row.entries.unwrap_or(0).max(0) as u64,
    };
    Ok(ExportResult::new(artifact_id.as_str(), &finished))
}

fn encode_failed(e: EncodeError) -> JobError {
    JobError::permanent(ErrorCode::Internal, format!("export encoding failed: {e}"))
}
