//! The Redis backend (apalis-redis): connection, push, depth, vacuum, workers.
//!
//! Keys of queue `q` (apalis-redis 1.0): `q:active` (list of due ids), `q:scheduled` (zset by
//! due time; every push lands here first and is promoted by the next fetch), `q:inflight:{w}`
//! (set per worker), `q:workers` (zset by heartbeat), `q:done` / `q:dead` (sets, never
//! trimmed by apalis), `q:data` (hash id → payload), `q:meta:{id}` (hash per message).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use apalis::prelude::{BackendExt as _, TaskBuilder, WorkerBuilder, WorkerBuilderExt as _, WorkerContext};
use apalis_redis::{Config as RedisConfig, RedisStorage};
use futures::FutureExt as _;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncConnectionConfig, Script};
use tokio::sync::Notify;

use super::worker::{Deliver, Envelope, LenientCodec, REDIS_RECHECKS, WakeOrInterval};
use super::{HEARTBEAT_INTERVAL, MISSED_HEARTBEATS, QueueDepth};
use crate::store::engine::redact_url;

pub(super) struct RedisQueue {
    /// What every connection of the process is made with (the change relay's too).
    client: redis::Client,
    conn: ConnectionManager,
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

/// No task locks: a fetch already moves the id into the worker's in-flight set, which is
/// all that orphan recovery reads, and the operation's lease lives in the database. A lock
/// is one more script per message whose `LREM` walks the whole due list for an id the
/// fetch had already taken off it (52 µs a call behind a 5,000-message backlog).
fn apalis_config(queue: &str) -> RedisConfig {
    RedisConfig::default()
        .queue(queue)
        .batch_size(1)
        .lock_tasks(false)
        .heartbeat_interval(HEARTBEAT_INTERVAL)
        .missed_heartbeats(MISSED_HEARTBEATS)
        .emit_events(false)
}

const DEPTH: &str = r"
local now = ARGV[1]
local pending = redis.call('llen', KEYS[1]) + redis.call('zcount', KEYS[2], '-inf', now)
local scheduled = redis.call('zcount', KEYS[2], '(' .. now, '+inf')
local inflight = 0
for _, worker in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do
  inflight = inflight + redis.call('scard', ARGV[2] .. ':' .. worker)
end
return {pending, scheduled, inflight, redis.call('scard', KEYS[4])}
";

/// Re-enqueue what a stopped worker still holds and forget the worker (apalis' own close
/// path removes the wrong zset member and leaves its metadata key behind).
const RELEASE: &str = r"
local jobs = redis.call('smembers', KEYS[1])
if #jobs > 0 then
  redis.call('rpush', KEYS[2], unpack(jobs))
  redis.call('del', KEYS[1])
  redis.call('del', KEYS[3])
  redis.call('lpush', KEYS[3], 1)
end
redis.call('zrem', KEYS[4], ARGV[1])
redis.call('del', KEYS[5])
return #jobs
";

/// Delete finished ids (members of the set KEYS[1]) whose `done_at` is at or before the
/// cutoff, with their payload and metadata. ARGV: cutoff, meta prefix, ids...
const VACUUM_FINISHED: &str = r"
local deleted = 0
for i = 3, #ARGV do
  local id = ARGV[i]
  local meta = ARGV[2] .. ':' .. id
  local done_at = redis.call('hget', meta, 'done_at')
  if (not done_at) or tonumber(done_at) <= tonumber(ARGV[1]) then
    redis.call('srem', KEYS[1], id)
    redis.call('hdel', KEYS[2], id)
    redis.call('del', meta)
    deleted = deleted + 1
  end
end
return deleted
";

fn glob_escape(s: &str) -> String {
    s.chars().flat_map(|c| if matches!(c, '*' | '?' | '[' | ']' | '\\') { vec!['\\', c] } else { vec![c] }).collect()
}

impl RedisQueue {
    /// `client` made from `url` (`QueueConfig::redis_client`), which errors show redacted.
    pub(super) async fn connect(client: redis::Client, url: &str) -> anyhow::Result<Self> {
        let shown = redact_url(url);
        // One quick probe so an unreachable Redis fails startup in seconds with one line.
        let probe = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(3)))
            .set_response_timeout(Some(Duration::from_secs(3)));
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&probe)
            .await
            .map_err(|e| anyhow::anyhow!("cannot connect to Redis at {shown}: {e}"))?;
        let _: String = redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .map_err(|e| anyhow::anyhow!("Redis at {shown} does not answer PING: {e}"))?;
        // The long-lived connection: responses may be slow under load (the 500 ms default
        // turns that into a fatal worker error), and it reconnects by itself after a restart.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(5)))
            .set_response_timeout(Some(Duration::from_secs(15)))
            .set_number_of_retries(8)
            .set_max_delay(Duration::from_secs(2));
        let conn = client
            .get_connection_manager_with_config(config)
            .await
            .map_err(|e| anyhow::anyhow!("cannot connect to Redis at {shown}: {e}"))?;
        Ok(Self { client, conn })
    }

    pub(super) fn connection(&self) -> ConnectionManager {
        self.conn.clone()
    }

    pub(super) fn client(&self) -> redis::Client {
        self.client.clone()
    }

    pub(super) async fn push(&self, queue: &str, payloads: Vec<Vec<u8>>) -> anyhow::Result<()> {
        let mut conn = self.conn.clone();
        let tasks: Vec<_> = payloads.into_iter().map(|p| TaskBuilder::new(p).build()).collect();
        apalis_redis::queries::push_tasks(&mut conn, &apalis_config(queue), &tasks).await?;
        Ok(())
    }

    pub(super) async fn ping(&self) -> anyhow::Result<()> {
        let mut conn = self.conn.clone();
        let _: String = redis::cmd("PING").query_async(&mut conn).await?;
        Ok(())
    }

    /// `SET key NX`: true when the key was missing (and is now set).
    pub(super) async fn set_marker(&self, key: &str) -> anyhow::Result<bool> {
        let mut conn = self.conn.clone();
        let set: Option<String> = redis::cmd("SET").arg(key).arg(now_secs()).arg("NX").query_async(&mut conn).await?;
        Ok(set.is_some())
    }

    pub(super) async fn depth(&self, queue: &str) -> anyhow::Result<QueueDepth> {
        let config = apalis_config(queue);
        let mut conn = self.conn.clone();
        let (pending, scheduled, inflight, dead): (u64, u64, u64, u64) = Script::new(DEPTH)
            .key(config.active_jobs_list())
            .key(config.scheduled_jobs_set())
            .key(config.workers_set())
            .key(config.dead_jobs_set())
            .arg(now_secs())
            .arg(config.inflight_jobs_set())
            .invoke_async(&mut conn)
            .await?;
        Ok(QueueDepth { pending, scheduled, inflight, dead })
    }

    pub(super) async fn vacuum(&self, queue: &str, older_than: Duration) -> anyhow::Result<u64> {
        let config = apalis_config(queue);
        let mut conn = self.conn.clone();
        let cutoff = now_secs().saturating_sub(older_than.as_secs());
        let script = Script::new(VACUUM_FINISHED);
        let mut deleted = 0u64;
        for set in [config.done_jobs_set(), config.dead_jobs_set()] {
            let mut cursor = 0u64;
            loop {
                let (next, ids): (u64, Vec<String>) =
                    redis::cmd("SSCAN").arg(&set).arg(cursor).arg("COUNT").arg(500).query_async(&mut conn).await?;
                if !ids.is_empty() {
                    let mut invocation = script.prepare_invoke();
                    invocation.key(&set).key(config.job_data_hash()).arg(cutoff).arg(config.job_meta_hash());
                    for id in &ids {
                        invocation.arg(id);
                    }
                    deleted += invocation.invoke_async::<u64>(&mut conn).await?;
                }
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        // Metadata of workers that are no longer registered (one key per worker ever run).
        let pattern = format!("{}:workers:metadata:*", glob_escape(queue));
        let prefix = format!("{queue}:workers:metadata:");
        let mut cursor = 0u64;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(500)
                .query_async(&mut conn)
                .await?;
            for key in keys {
                let Some(worker) = key.strip_prefix(&prefix) else {
                    continue;
                };
                let alive: Option<f64> =
                    redis::cmd("ZSCORE").arg(config.workers_set()).arg(worker).query_async(&mut conn).await?;
                if alive.is_none() {
                    let _: u64 = redis::cmd("DEL").arg(&key).query_async(&mut conn).await?;
                }
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        Ok(deleted)
    }

    pub(super) async fn release_worker(&self, queue: &str, worker: &str) -> anyhow::Result<u64> {
        let config = apalis_config(queue);
        let mut conn = self.conn.clone();
        let released: u64 = Script::new(RELEASE)
            .key(format!("{}:{worker}", config.inflight_jobs_set()))
            .key(config.active_jobs_list())
            .key(config.signal_list())
            .key(config.workers_set())
            .key(format!("{queue}:workers:metadata:{worker}"))
            .arg(worker)
            .invoke_async(&mut conn)
            .await?;
        Ok(released)
    }

    pub(super) fn worker(
        &self,
        queue: &str,
        name: &str,
        deliver: Deliver,
        concurrency: usize,
        wake: Arc<Notify>,
    ) -> (WorkerContext, super::worker::WorkerRun) {
        let backend = RedisStorage::<Envelope>::new(self.conn.clone())
            .with_config(apalis_config(queue))
            .with_codec(LenientCodec)
            .poll_with_strategy(WakeOrInterval::new(wake, REDIS_RECHECKS));
        let ctx = WorkerContext::new(name);
        let worker = WorkerBuilder::new(ctx.clone())
            .backend(backend)
            .concurrency(concurrency)
            .build(move |envelope: Envelope| deliver.call(envelope));
        (ctx, worker.run().boxed())
    }
}
