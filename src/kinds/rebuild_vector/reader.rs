//! The rebuild's read-ahead, two stages in front of the writer: one task walks the tenant's
//! pages, another embeds them and encodes the vectors, so the next page is read while this
//! one is embedded and both overlap writing. Each stage runs at most `AHEAD` batches ahead
//! of the next. Dropping the reader stops both.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::embedder::{EmbedError, Embedder};
use crate::kinds::job::JobError;
use crate::store::Db;
use crate::store::vectors::{WalkPage, encode_all, walk_page};
use context_jobs::ids::TenantKey;
use context_jobs::operation::ErrorCode;

/// Batches waiting between two stages. One more is being made meanwhile, so each stage has
/// up to two in front of the next: enough to absorb either side's variance (a slow read, a
/// slow embedding, a slow commit) without stalling the other.
const AHEAD: usize = 1;

/// A page of entries and their vectors (dimension, stored form), in order.
pub struct Batch {
    pub page: WalkPage,
    pub dim: usize,
    pub blobs: Vec<Vec<u8>>,
}

pub struct Reader {
    batches: mpsc::Receiver<Result<Batch, JobError>>,
    tasks: [tokio::task::JoinHandle<()>; 2],
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.tasks.iter().for_each(|t| t.abort());
    }
}

impl Reader {
    /// Walk `tenant`'s active entries after change sequence `after`, `batch` at a time.
    pub fn spawn(db: Db, embedder: Arc<Embedder>, tenant: TenantKey, after: i64, batch: i64) -> Self {
        let (send_page, mut pages) = mpsc::channel::<Result<WalkPage, JobError>>(AHEAD);
        let walk = tokio::spawn(async move {
            // The first page is a quarter of a batch, so the writer starts early (the pipeline
            // fills in a quarter of the time); the rest are whole batches.
            let (mut after, mut limit) = (after, (batch / 4).max(1));
            loop {
                let page = walk_page(&db, &tenant, after, limit).await.map_err(JobError::from);
                limit = batch;
                let stop = page.as_ref().map_or(true, |p| p.last);
                if let Ok(p) = &page {
                    after = p.next_after;
                }
                if send_page.send(page).await.is_err() || stop {
                    return;
                }
            }
        });
        let (send, batches) = mpsc::channel(AHEAD);
        let embed = tokio::spawn(async move {
            while let Some(page) = pages.recv().await {
                let batch = match page {
                    Ok(page) => embed_page(&embedder, page).await,
                    Err(e) => Err(e),
                };
                if send.send(batch).await.is_err() {
                    return;
                }
            }
        });
        Self { batches, tasks: [walk, embed] }
    }

    /// The next batch, in walk order.
    pub async fn next(&mut self) -> Result<Batch, JobError> {
        self.batches.recv().await.unwrap_or_else(|| Err(JobError::transient("batch reader stopped")))
    }
}

/// A page's encoded vectors.
async fn embed_page(embedder: &Embedder, page: WalkPage) -> Result<Batch, JobError> {
    let texts = crate::store::vectors::texts(&page.items);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let vectors = embedder.embed(&refs).await.map_err(|e| match e {
        EmbedError::Transient(m) => JobError::transient(m),
        EmbedError::Permanent(m) => JobError::permanent(ErrorCode::EmbeddingFailed, m),
    })?;
    let (dim, blobs) = encode_all(&vectors);
    Ok(Batch { page, dim, blobs })
}
