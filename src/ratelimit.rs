//! Provider rate limits shared by every worker process: requests and tokens per
//! minute/hour/day per model (and optionally per tenant), several stacked on one key, as
//! configured (`CONTEXT_OPS_RATE_LIMITS`; rules and arithmetic in the core's
//! `operation::rate_limit`). In production the keys live in Redis (one Lua script admits a
//! turn against all of them at once); embedded, in the database (`store::rate_limits`). A
//! provider's 429 blocks its model for the `retry-after` it sent, for everyone.

use std::sync::Arc;

use redis::Script;
use redis::aio::ConnectionManager;

use crate::store::{Db, rate_limits};
use context_jobs::ids::TenantKey;
use context_jobs::operation::rate_limit::{RateLimit, RateRule, Unit, block_key, keys_for};

/// Admit against the block key, then every limit key, all or none. KEYS[1] is the block
/// key, KEYS[2..] the limit keys; ARGV[1] now (µs), then per limit key its increment and
/// window (µs). Returns 0 (admitted) or the wait in µs.
const ADMIT: &str = r"
local now = tonumber(ARGV[1])
local blocked = tonumber(redis.call('get', KEYS[1]) or '0')
if blocked > now then return blocked - now end
local wait = 0
local news = {}
for i = 2, #KEYS do
  local inc = tonumber(ARGV[2 * (i - 1)])
  local window = tonumber(ARGV[2 * (i - 1) + 1])
  local tat = tonumber(redis.call('get', KEYS[i]) or '0')
  if tat < now then tat = now end
  local new = tat + inc
  if new - now > window and new - now - window > wait then wait = new - now - window end
  news[i] = new
end
if wait > 0 then return wait end
for i = 2, #KEYS do
  local window = tonumber(ARGV[2 * (i - 1) + 1])
  redis.call('set', KEYS[i], string.format('%d', news[i]), 'PX', math.floor(window / 1000) + 1000)
end
return 0
";

/// Move a key's arrival time by ARGV[1] µs, never below min(now, tat); ARGV[2] now (µs),
/// ARGV[3] the key's least expiry (ms). The key lives at least until its arrival time: a
/// turn that used more than a window's worth moves it past `now + window`, and a key that
/// expired before then would forget that debt (the next burst admitted in full).
const SETTLE: &str = r"
local tat = tonumber(redis.call('get', KEYS[1]) or '0')
local now = tonumber(ARGV[2])
local moved = tat + tonumber(ARGV[1])
local floor = math.min(now, tat)
if moved < floor then moved = floor end
local ttl = math.max(tonumber(ARGV[3]), math.floor((moved - now) / 1000) + 1000)
redis.call('set', KEYS[1], string.format('%d', moved), 'PX', string.format('%d', ttl))
return 0
";

/// Block until ARGV[1] (µs) unless blocked longer already; ARGV[2] expiry (ms).
const BLOCK: &str = r"
local until_us = tonumber(ARGV[1])
local current = tonumber(redis.call('get', KEYS[1]) or '0')
if until_us > current then redis.call('set', KEYS[1], string.format('%d', until_us), 'PX', tonumber(ARGV[2])) end
return 0
";

#[derive(Clone)]
enum Backend {
    Db(Db),
    Redis { conn: ConnectionManager, namespace: String },
}

/// The limiter of one deployment (cheap to clone).
#[derive(Clone)]
pub struct RateLimiter {
    backend: Backend,
    rules: Arc<Vec<RateRule>>,
}

/// What a turn was admitted with, to settle its real token use afterwards.
#[derive(Debug, Clone, Default)]
pub struct Admitted {
    tokens: Vec<(String, RateLimit)>,
    estimated_tokens: u64,
}

fn now_us() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros() as i64).unwrap_or(0)
}

impl RateLimiter {
    /// Redis when the deployment has it, else the database.
    pub fn new(db: &Db, redis: Option<(ConnectionManager, String)>, rules: Vec<RateRule>) -> Self {
        let backend = match redis {
            Some((conn, namespace)) => Backend::Redis { conn, namespace },
            None => Backend::Db(db.clone()),
        };
        Self { backend, rules: Arc::new(rules) }
    }

    fn key(&self, key: &str) -> String {
        match &self.backend {
            Backend::Redis { namespace, .. } => format!("{namespace}:{key}"),
            Backend::Db(_) => key.to_string(),
        }
    }

    /// Admit one turn of `model` for `tenant` estimated at `tokens`: `Ok` to go ahead, or
    /// `Err(wait_ms)` until the limits allow it. No configured rule: always admitted.
    pub async fn admit(&self, tenant: &TenantKey, model: &str, tokens: u64) -> anyhow::Result<Result<Admitted, u64>> {
        let limits = keys_for(&self.rules, tenant.as_str(), model);
        let costs: Vec<(String, RateLimit, u64)> = limits
            .into_iter()
            .map(|(key, limit)| {
                let cost = match limit.unit {
                    Unit::Requests => 1,
                    Unit::Tokens => tokens,
                };
                (self.key(&key), limit, cost)
            })
            .collect();
        let block = self.key(&block_key(model));
        let now = now_us();
        let wait_us = match &self.backend {
            Backend::Db(db) => match rate_limits::admit(db, &costs, &block, now).await? {
                Ok(()) => 0,
                Err(wait) => wait,
            },
            Backend::Redis { conn, .. } => {
                let script = Script::new(ADMIT);
                let mut invocation = script.prepare_invoke();
                invocation.key(&block).arg(now);
                for (key, limit, cost) in &costs {
                    invocation.key(key).arg(limit.increment_us(*cost)).arg(limit.window_ms * 1000);
                }
                invocation.invoke_async::<i64>(&mut conn.clone()).await?
            }
        };
        if wait_us > 0 {
            return Ok(Err((wait_us as u64).div_ceil(1000)));
        }
        let tokens_keys =
            costs.into_iter().filter(|(_, l, _)| l.unit == Unit::Tokens).map(|(k, l, _)| (k, l)).collect();
        Ok(Ok(Admitted { tokens: tokens_keys, estimated_tokens: tokens }))
    }

    /// The turn used `actual` tokens: account the difference from its estimate.
    pub async fn settle(&self, admitted: &Admitted, actual: u64) -> anyhow::Result<()> {
        let now = now_us();
        for (key, limit) in &admitted.tokens {
            let delta = limit.settle_units(admitted.estimated_tokens, actual);
            if delta == 0 {
                continue;
            }
            match &self.backend {
                Backend::Db(db) => rate_limits::settle(db, key, limit, delta, now).await?,
                Backend::Redis { conn, .. } => {
                    Script::new(SETTLE)
                        .key(key)
                        .arg(limit.delta_us(delta))
                        .arg(now)
                        .arg(limit.window_ms + 1000)
                        .invoke_async::<i64>(&mut conn.clone())
                        .await?;
                }
            }
        }
        Ok(())
    }

    /// Until when (ms since the epoch) a 429 holds `model`, if it does now.
    pub async fn blocked_until_ms(&self, model: &str) -> anyhow::Result<Option<i64>> {
        let key = self.key(&block_key(model));
        let until_ms = match &self.backend {
            Backend::Db(db) => rate_limits::blocked_until(db, &key).await?,
            Backend::Redis { conn, .. } => {
                let until_us: Option<i64> = redis::cmd("GET").arg(&key).query_async(&mut conn.clone()).await?;
                until_us.map(|us| (us + 999) / 1000)
            }
        };
        Ok(until_ms.filter(|&until| until > now_us() / 1000))
    }

    /// A provider answered 429 for `model`: hold every turn of it for `retry_after_ms`.
    pub async fn block(&self, model: &str, retry_after_ms: u64) -> anyhow::Result<()> {
        let key = self.key(&block_key(model));
        let until_us = now_us() + retry_after_ms as i64 * 1000;
        match &self.backend {
            Backend::Db(db) => rate_limits::block(db, &key, (until_us + 999) / 1000).await?,
            Backend::Redis { conn, .. } => {
                Script::new(BLOCK)
                    .key(&key)
                    .arg(until_us)
                    .arg(retry_after_ms as i64 + 1000)
                    .invoke_async::<i64>(&mut conn.clone())
                    .await?;
            }
        }
        Ok(())
    }
}
