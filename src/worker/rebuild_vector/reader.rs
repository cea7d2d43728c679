//! The rebuild's read-ahead: a task that walks the tenant's pages, embeds them and encodes
//! the vectors, up to `AHEAD` batches in front of the writer, so reading and embedding
//! (one core) overlap writing (the database's). Dropping the reader stops the task.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::db::Db;
use crate::embedder::{EmbedError, Embedder};
use crate::store::vector_writes::encode_all;
use crate::store::vectors::{WalkPage, walk_page};
use crate::worker::JobError;
use context_jobs::operation::error_code;

/// Batches waiting in the channel. One more is being made meanwhile, so the writer has up to
/// two in front of it: enough to absorb either side's variance (a slow embedding, a slow
/// commit) without stalling the other.
const AHEAD: usize = 1;

/// A page of entries and their vectors (dimension, stored form), in order.
pub struct Batch {
    pub page: WalkPage,
    pub dim: usize,
    pub blobs: Vec<Vec<u8>>,
}

pub struct Reader {
    batches: mpsc::Receiver<Result<Batch, JobError>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Reader {
    /// Walk `tenant`'s active entries after change sequence `after`, `batch` at a time.
    pub fn spawn(db: Db, embedder: Arc<Embedder>, tenant: String, after: i64, batch: i64) -> Self {
        let (send, batches) = mpsc::channel(AHEAD);
        let task = tokio::spawn(async move {
            // The first page is a quarter of a batch, so the writer starts early (the pipeline
            // fills in a quarter of the time); the rest are whole batches.
            let (mut after, mut limit) = (after, (batch / 4).max(1));
            loop {
                let next = read_and_embed(&db, &embedder, &tenant, after, limit).await;
                limit = batch;
                let stop = match &next {
                    Ok(b) => {
                        after = b.page.next_after;
                        b.page.last
                    }
                    Err(_) => true,
                };
                if send.send(next).await.is_err() || stop {
                    return;
                }
            }
        });
        Self { batches, task }
    }

    /// The next batch, in walk order.
    pub async fn next(&mut self) -> Result<Batch, JobError> {
        self.batches.recv().await.unwrap_or_else(|| Err(JobError::Transient(anyhow::anyhow!("batch reader stopped"))))
    }
}

/// One batch: the next page after `after` and its encoded vectors.
async fn read_and_embed(db: &Db, embedder: &Embedder, tenant: &str, after: i64, batch: i64) -> Result<Batch, JobError> {
    let page = walk_page(db, tenant, after, batch).await?;
    let texts = super::super::projector::texts(&page.items);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let vectors = embedder.embed(&refs).await.map_err(|e| match e {
        EmbedError::Transient(m) => JobError::Transient(anyhow::anyhow!(m)),
        EmbedError::Permanent(m) => JobError::permanent(error_code::EMBEDDING_FAILED, m),
    })?;
    let (dim, blobs) = encode_all(&vectors);
    Ok(Batch { page, dim, blobs })
}
