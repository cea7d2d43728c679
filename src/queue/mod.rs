//! The delivery pipe: one apalis queue per operation kind, on Redis (apalis-redis) or on the
//! service's own SQLite database (apalis-sqlite).
//!
//! The operation row in the database is the truth; a queue message only says "look at
//! operation X". Workers claim operations with a compare-and-set, so a duplicate delivery is
//! harmless; a lost one is rare and the dispatcher re-pushes anyway. That is why nothing here
//! retries on apalis' terms: the handler records every outcome in the database and the apalis
//! task always completes `Ok`.
//!
//! Every default of apalis 1.0 that loses or duplicates work is overridden (see
//! `/work/shared/notes/apalis-1.0.md`): explicit queue names `{namespace}:{kind}`, a 250 ms
//! poll interval (plus an in-process wake-up on push), `batch_size(1)`, unique worker names
//! per process and restart, explicit heartbeat/missed-heartbeat settings, no `timeout` or
//! `catch_panic` layers (panics are caught by spawning the handler), a payload codec that
//! never fails, and our own depth, vacuum and restart logic.

mod redis;
mod sqlite;
mod worker;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use context_jobs::contract::ContextOperationKind;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::store::Db;
use context_jobs::ids::OperationId;

/// How often an idle worker looks for new messages. A push from this process also wakes the
/// worker of its kind at once.
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// apalis worker heartbeat. A worker silent for `HEARTBEAT_INTERVAL × MISSED_HEARTBEATS`
/// (30 s) has its in-flight messages re-enqueued by the other workers of its queue.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);
pub const MISSED_HEARTBEATS: usize = 6;
/// How long one push may take. A submission answers after it whatever the queue does (the
/// row is the truth: a push that failed or timed out is the dispatcher's to do), and a
/// dispatcher round with Redis down stops at its first slow push instead of blocking on the
/// connection's reconnect attempts.
pub const PUSH_TIMEOUT: Duration = Duration::from_millis(300);
/// The same bound on SQLite, where the queue is the service's own file: a push there only
/// waits for the write lock, which a loaded machine can hold longer than 300 ms (seen:
/// pushes failing under a parallel test run), and giving up would only delay the work.
pub const SQLITE_PUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// How long running handlers get to finish after shutdown is requested.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// Payload of every queue message, serialized as `{"operationId": "..."}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperationMessage {
    #[serde(alias = "operation_id")]
    pub operation_id: String,
    /// The dispatcher found the operation orphaned (its lease holder is gone): recover it
    /// by id. Otherwise the message is a wake-up for its kind, and the worker starts the
    /// next operation by fair share (which may be another one).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recover: bool,
}

/// What the workers call for each delivered message. It must never fail the apalis task:
/// the handler records outcomes in the database itself. A panic inside the returned future
/// is caught and logged; it never kills the worker.
pub trait OperationHandler: Send + Sync + 'static {
    fn handle(&self, kind: ContextOperationKind, operation_id: String) -> BoxFuture<'static, ()>;

    /// The whole message (the runner needs its `recover` flag); by default the id alone.
    fn handle_message(&self, kind: ContextOperationKind, message: OperationMessage) -> BoxFuture<'static, ()> {
        self.handle(kind, message.operation_id)
    }
}

/// Messages per state in one kind's queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct QueueDepth {
    /// Waiting to be taken (due now).
    pub pending: u64,
    /// Waiting for a future time.
    pub scheduled: u64,
    /// Taken by a worker and not yet acknowledged.
    pub inflight: u64,
    /// Given up by apalis (never expected: our handler always completes `Ok`).
    pub dead: u64,
}

/// The queue handle: cheap to clone, shared by the API (push) and the workers.
#[derive(Clone)]
pub struct Queue {
    inner: Arc<Inner>,
}

struct Inner {
    backend: Backend,
    namespace: String,
    concurrency: usize,
    /// One per kind (index in `ContextOperationKind::ALL`): wakes this process' worker of
    /// that kind right after a push, so in-process deliveries do not wait for the poll tick.
    wake: Vec<Arc<Notify>>,
}

enum Backend {
    Redis(Box<redis::RedisQueue>),
    Sqlite(sqlite::SqliteQueue),
}

fn kind_index(kind: ContextOperationKind) -> usize {
    ContextOperationKind::ALL.iter().position(|k| *k == kind).expect("ALL lists every kind")
}

impl Queue {
    /// Redis when `config.queue.redis_url` is set, else apalis-sqlite on the service's own SQLite
    /// pool (its migrations tracked in `_apalis_migrations`). PostgreSQL without `REDIS_URL`
    /// is a startup error; unreachable Redis fails fast with one clear line.
    pub async fn connect(config: &Config, db: &Db) -> anyhow::Result<Queue> {
        anyhow::ensure!(!config.queue.queue_namespace.is_empty(), "CONTEXT_OPS_QUEUE_NAMESPACE must not be empty");
        let backend = match (config.queue.redis_client()?, db) {
            (Some(client), _) => {
                let url = config.queue.redis_url.as_deref().unwrap_or_default();
                Backend::Redis(Box::new(redis::RedisQueue::connect(client, url).await?))
            }
            (None, Db::Sqlite(pool)) => Backend::Sqlite(sqlite::SqliteQueue::connect(db, pool.clone()).await?),
            (None, Db::Postgres(_)) => anyhow::bail!(
                "REDIS_URL is required with a PostgreSQL DATABASE_URL: the embedded queue runs only on SQLite"
            ),
        };
        Ok(Queue {
            inner: Arc::new(Inner {
                backend,
                namespace: config.queue.queue_namespace.clone(),
                concurrency: config.worker.worker_concurrency.max(1),
                wake: ContextOperationKind::ALL.iter().map(|_| Arc::new(Notify::new())).collect(),
            }),
        })
    }

    /// The Redis connection (production), shared with the rate limiter.
    pub fn redis(&self) -> Option<::redis::aio::ConnectionManager> {
        match &self.inner.backend {
            Backend::Redis(r) => Some(r.connection()),
            Backend::Sqlite(_) => None,
        }
    }

    /// The Redis client (production) the queue's connections were made with, for the
    /// process's other Redis connections (the change relay).
    pub fn redis_client(&self) -> Option<::redis::Client> {
        match &self.inner.backend {
            Backend::Redis(r) => Some(r.client()),
            Backend::Sqlite(_) => None,
        }
    }

    /// The namespace every key of this deployment lives under.
    pub fn namespace(&self) -> &str {
        &self.inner.namespace
    }

    /// `"redis"` or `"sqlite"`.
    pub fn backend_name(&self) -> &'static str {
        match self.inner.backend {
            Backend::Redis(_) => "redis",
            Backend::Sqlite(_) => "sqlite",
        }
    }

    /// The queue of `kind`: `"{namespace}:{kind}"` (never a Rust type path).
    pub fn queue_name(&self, kind: ContextOperationKind) -> String {
        format!("{}:{}", self.inner.namespace, kind.as_str())
    }

    /// Push one message to the kind's queue: "start the next operation of this kind".
    pub async fn push(&self, kind: ContextOperationKind, operation_id: &OperationId) -> anyhow::Result<()> {
        self.push_many(kind, std::slice::from_ref(operation_id)).await
    }

    /// Push "recover orphaned operation X" to the kind's queue.
    pub async fn push_recovery(&self, kind: ContextOperationKind, operation_id: &OperationId) -> anyhow::Result<()> {
        let message = OperationMessage { operation_id: operation_id.to_string(), recover: true };
        self.push_messages(kind, vec![message]).await
    }

    /// Push one message per operation, in one round trip (a resume, a dispatcher round).
    pub async fn push_many(&self, kind: ContextOperationKind, operation_ids: &[OperationId]) -> anyhow::Result<()> {
        let messages =
            operation_ids.iter().map(|id| OperationMessage { operation_id: id.to_string(), recover: false }).collect();
        self.push_messages(kind, messages).await
    }

    async fn push_messages(&self, kind: ContextOperationKind, messages: Vec<OperationMessage>) -> anyhow::Result<()> {
        if messages.is_empty() {
            return Ok(());
        }
        let first = messages[0].operation_id.clone();
        let (count, payloads) =
            (messages.len(), messages.iter().map(serde_json::to_vec).collect::<Result<Vec<_>, _>>()?);
        let queue = self.queue_name(kind);
        let push = async {
            match &self.inner.backend {
                Backend::Redis(r) => r.push(&queue, payloads).await,
                Backend::Sqlite(s) => s.push(&queue, payloads).await,
            }
        };
        let bound = match &self.inner.backend {
            Backend::Redis(_) => PUSH_TIMEOUT,
            Backend::Sqlite(_) => SQLITE_PUSH_TIMEOUT,
        };
        let result = match tokio::time::timeout(bound, push).await {
            Ok(result) => result,
            Err(_) => Err(anyhow::anyhow!("no answer within {bound:?}")),
        };
        let outcome = if result.is_ok() { "ok" } else { "error" };
        metrics::counter!(crate::metrics::QUEUE_PUSHES, "kind" => kind.as_str(), "outcome" => outcome)
            .increment(count as u64);
        match count {
            1 => result.with_context(|| format!("cannot push operation {first} to queue {queue}"))?,
            n => result.with_context(|| format!("cannot push {n} operations (from {first}) to queue {queue}"))?,
        }
        self.inner.wake[kind_index(kind)].notify_one();
        Ok(())
    }

    /// Whether the queue may have lost messages since the last call: true when Redis no
    /// longer holds this deployment's marker key (a restart without persistence, a flush,
    /// or the first call ever), which this call then sets again. `SET NX` makes exactly one
    /// process of the deployment see each loss. The SQLite queue lives in the database and
    /// loses nothing.
    pub async fn lost_messages(&self) -> anyhow::Result<bool> {
        match &self.inner.backend {
            Backend::Redis(r) => {
                let marker = format!("{}:marker", self.inner.namespace);
                tokio::time::timeout(PUSH_TIMEOUT, r.set_marker(&marker))
                    .await
                    .map_err(|_| anyhow::anyhow!("Redis did not answer within {PUSH_TIMEOUT:?}"))?
            }
            Backend::Sqlite(_) => Ok(false),
        }
    }

    /// The queue answers (readiness): `PING` on Redis; the SQLite queue is the database.
    pub async fn ping(&self) -> anyhow::Result<()> {
        match &self.inner.backend {
            Backend::Redis(r) => r.ping().await,
            Backend::Sqlite(_) => Ok(()),
        }
    }

    /// Messages per state in the kind's queue, read directly (LLEN/ZCOUNT/SCARD on Redis, a
    /// COUNT over apalis' `Jobs` table on SQLite): apalis' own stats calls are unreliable.
    pub async fn depth(&self, kind: ContextOperationKind) -> anyhow::Result<QueueDepth> {
        let queue = self.queue_name(kind);
        match &self.inner.backend {
            Backend::Redis(r) => r.depth(&queue).await,
            Backend::Sqlite(s) => s.depth(&queue).await,
        }
        .with_context(|| format!("cannot read the depth of queue {queue}"))
    }

    /// Housekeeping for what apalis never deletes: finished messages (Redis `:done`/`:dead`
    /// members with their data and metadata; SQLite `Jobs` rows) older than `older_than`, and
    /// the bookkeeping of long-gone workers. Returns the number of messages deleted.
    pub async fn vacuum(&self, older_than: Duration) -> anyhow::Result<u64> {
        let mut deleted = 0;
        for kind in ContextOperationKind::ALL {
            let queue = self.queue_name(kind);
            deleted += match &self.inner.backend {
                Backend::Redis(r) => r.vacuum(&queue, older_than).await,
                Backend::Sqlite(s) => s.vacuum(&queue, older_than).await,
            }
            .with_context(|| format!("cannot vacuum queue {queue}"))?;
        }
        Ok(deleted)
    }

    /// Start one supervised apalis worker per kind, each running up to
    /// `config.worker.worker_concurrency` handlers at once. Workers restart after errors (with
    /// backoff, under a fresh name) until `shutdown` is cancelled; then they stop taking
    /// messages and running handlers get up to [`SHUTDOWN_TIMEOUT`] to finish. The handle
    /// ends when every worker has stopped; it is an error only if that deadline was missed.
    pub fn spawn_workers(
        &self,
        handler: Arc<dyn OperationHandler>,
        shutdown: CancellationToken,
    ) -> tokio::task::JoinHandle<anyhow::Result<()>> {
        let supervisors: Vec<_> = ContextOperationKind::ALL
            .into_iter()
            .map(|kind| tokio::spawn(worker::supervise(self.clone(), kind, handler.clone(), shutdown.clone())))
            .collect();
        tokio::spawn(async move {
            let mut failures = Vec::new();
            for (kind, supervisor) in ContextOperationKind::ALL.into_iter().zip(supervisors) {
                match supervisor.await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => failures.push(format!("{}: {e:#}", kind.as_str())),
                    Err(e) => failures.push(format!("{}: supervisor task failed: {e}", kind.as_str())),
                }
            }
            anyhow::ensure!(failures.is_empty(), "queue workers did not stop cleanly: {}", failures.join("; "));
            Ok(())
        })
    }
}
