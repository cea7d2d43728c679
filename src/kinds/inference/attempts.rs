//! The provider call with its retry loop, run inside the job while it holds the lease.
//!
//! Before each attempt a fenced checkpoint records the attempt count (so it survives a
//! crash and is reported with the result). The request and every backoff sleep run
//! under [`guarded`]: a cancel request, process shutdown or a lost lease drops the
//! future, which aborts the in-flight HTTP request. The runner's heartbeat renews the
//! lease every lease/3 meanwhile; the cancel poll renews it too.

use std::future::Future;
use std::time::Duration;

use serde_json::Value;

use crate::kinds::job::{JobCtx, JobError, encode};
use crate::metrics::{INFERENCE_PROVIDER_RETRIES, INFERENCE_TOKENS};
use crate::provider::responses_client::{ProviderReply, ResponsesClient, TransportError};
use crate::store::now_ms;
use crate::store::operations::transitions::Signals;
use crate::store::operations::{FenceError, transitions};
use context_jobs::kinds::inference::{InferenceCheckpoint, InferenceResult, PHASE_CALLING_PROVIDER, decode_turn};
use context_jobs::operation::rate_limit::estimate_tokens;
use context_jobs::operation::schedule::phase::WAITING_FOR_RATE_LIMIT;
use context_jobs::operation::{ErrorCode, Progress, Transition};
use context_jobs::responses::{HttpDisposition, classify_http, classify_transport_error, decode_usage};

/// How often a running call checks the operation's cancel flag (and renews the lease).
const CANCEL_POLL: Duration = Duration::from_millis(500);

/// What one attempt came to.
enum Next {
    Done(InferenceResult),
    Retry { after_ms: u64, reason: &'static str },
    Fail { code: ErrorCode, message: String },
}

/// Call the provider until a usable reply, a permanent failure, or the attempt budget
/// (`RESPONSES_MAX_ATTEMPTS` for this run) is spent.
pub(super) async fn call(
    ctx: &JobCtx,
    client: &ResponsesClient,
    body: &Value,
    checkpoint: &mut InferenceCheckpoint,
) -> Result<InferenceResult, JobError> {
    let max_attempts = ctx.config.provider.responses_max_attempts;
    let model = body["model"].as_str().unwrap_or_default().to_string();
    let estimate = estimate_tokens(body.to_string().len(), body["max_output_tokens"].as_u64().map(|n| n as u32));
    loop {
        let admitted = admit(ctx, &model, estimate, checkpoint).await?;
        checkpoint.provider_attempts += 1;
        let signals = save(ctx, checkpoint, PHASE_CALLING_PROVIDER, 0).await?;
        ctx.boundary(signals)?;
        let reply = guarded(ctx, client.create(body)).await?;
        settle(ctx, &admitted, &reply).await;
        if let Ok(r) = &reply
            && r.status == 429
            && let Some(after_ms) = context_jobs::responses::rate_limit_block_ms(&r.retry)
            && let Err(e) = ctx.limiter.block(&model, after_ms).await
        {
            tracing::warn!(operation = %ctx.operation.id, error = format!("{e:#}"), "could not record the provider's 429");
        }
        let next = judge(client, reply, checkpoint.provider_attempts, checkpoint.failed_calls, max_attempts);
        match next {
            Next::Done(result) => return Ok(result),
            Next::Fail { code, message } => {
                let attempts = checkpoint.provider_attempts;
                tracing::warn!(operation = %ctx.operation.id, code = code.as_str(), attempts, error = %message, "inference failed");
                return Err(JobError::permanent(code, format!("{message} (provider attempts: {attempts})")));
            }
            Next::Retry { after_ms, reason } => {
                metrics::counter!(INFERENCE_PROVIDER_RETRIES, "reason" => reason).increment(1);
                tracing::info!(operation = %ctx.operation.id, attempt = checkpoint.provider_attempts, reason, delay_ms = after_ms, "provider call failed transiently; retrying");
                // Counted in a commit before the wait: a deferral after it (a new run)
                // continues the count.
                checkpoint.failed_calls += 1;
                let signals = save(ctx, checkpoint, PHASE_CALLING_PROVIDER, 0).await?;
                ctx.boundary(signals)?;
                guarded(ctx, tokio::time::sleep(Duration::from_millis(after_ms))).await?;
            }
        }
    }
}

/// A wait longer than this goes back to the queue (phase `waiting_for_rate_limit`) instead
/// of holding a worker slot.
const DEFER_AFTER_MS: u64 = 2_000;

/// Wait until the rate limits admit this turn (checkpointing that it waits), or hand it back
/// to the queue until they will.
async fn admit(
    ctx: &JobCtx,
    model: &str,
    estimate: u64,
    checkpoint: &InferenceCheckpoint,
) -> Result<crate::ratelimit::Admitted, JobError> {
    let mut announced = false;
    loop {
        let wait_ms = match ctx.limiter.admit(ctx.tenant(), model, estimate).await {
            Ok(Ok(admitted)) => return Ok(admitted),
            Ok(Err(wait_ms)) => wait_ms,
            Err(e) => {
                // Its store's text (Redis or the database) goes to the log, not the operation.
                tracing::warn!(operation = %ctx.operation.id, error = format!("{e:#}"), "rate limiter unavailable");
                return Err(JobError::transient("the rate limiter is unavailable"));
            }
        };
        metrics::counter!(crate::metrics::RATE_LIMIT_WAITS, "outcome" => if wait_ms > DEFER_AFTER_MS { "deferred" } else { "waited" })
            .increment(1);
        if wait_ms > DEFER_AFTER_MS {
            return Err(JobError::Deferred { until_ms: now_ms() + wait_ms as i64, phase: WAITING_FOR_RATE_LIMIT });
        }
        if !announced {
            let signals = save(ctx, checkpoint, WAITING_FOR_RATE_LIMIT, 0).await?;
            ctx.boundary(signals)?;
            announced = true;
        }
        guarded(ctx, tokio::time::sleep(Duration::from_millis(wait_ms))).await?;
    }
}

/// Account the tokens a reply reports against the estimate it was admitted with.
async fn settle(ctx: &JobCtx, admitted: &crate::ratelimit::Admitted, reply: &Result<ProviderReply, TransportError>) {
    let Ok(ProviderReply { body: Ok(body), .. }) = reply else { return };
    let Some(usage) = decode_usage(&body["usage"]) else { return };
    let actual = u64::from(usage.input_tokens) + u64::from(usage.output_tokens);
    if let Err(e) = ctx.limiter.settle(admitted, actual).await {
        tracing::debug!(operation = %ctx.operation.id, error = format!("{e:#}"), "could not settle the turn's tokens");
    }
}

/// Decide what an attempt's reply means. `failed_calls` is how many calls of the operation
/// failed transiently before this one (the retry budget); `provider_attempts` the
/// operation's running total of calls.
fn judge(
    client: &ResponsesClient,
    reply: Result<ProviderReply, TransportError>,
    provider_attempts: u32,
    failed_calls: u32,
    max_attempts: u32,
) -> Next {
    let jitter = fastrand::f64();
    let reply = match reply {
        Ok(reply) => reply,
        Err(e) => {
            let timed_out = matches!(e, TransportError::Timeout);
            return match classify_transport_error(failed_calls, max_attempts, jitter) {
                HttpDisposition::Retry { after_ms } => {
                    Next::Retry { after_ms, reason: if timed_out { "timeout" } else { "transport" } }
                }
                HttpDisposition::Fail { code } => {
                    let code = if timed_out { ErrorCode::Timeout } else { code };
                    Next::Fail { code, message: e.to_string() }
                }
            };
        }
    };
    if !(200..300).contains(&reply.status) {
        let body = reply.body.as_ref().unwrap_or(&Value::Null);
        let detail = match &reply.body {
            Ok(b) => b["error"]["message"].as_str().map(|m| client.scrub(m)).unwrap_or_default(),
            Err(e) => e.clone(),
        };
        let message = format!("the provider answered HTTP {}: {detail}", reply.status);
        return match classify_http(reply.status, &reply.retry, body, failed_calls, max_attempts, jitter) {
            HttpDisposition::Retry { after_ms } => Next::Retry { after_ms, reason: "http_status" },
            HttpDisposition::Fail { code } => Next::Fail { code, message },
        };
    }
    let body = match reply.body {
        Ok(body) => body,
        Err(e) => {
            return Next::Fail { code: ErrorCode::MalformedResponse, message: e };
        }
    };
    // Billed whether or not the turn is usable, so counted before decoding.
    if let Some(usage) = decode_usage(&body["usage"]) {
        metrics::counter!(INFERENCE_TOKENS, "direction" => "input").increment(u64::from(usage.input_tokens));
        metrics::counter!(INFERENCE_TOKENS, "direction" => "output").increment(u64::from(usage.output_tokens));
    }
    match decode_turn(&body, provider_attempts) {
        Ok(result) => Next::Done(result),
        // A `failed` reply caused by a `server_error` is retried like a 5xx.
        Err(e) if e.is_transient() => match classify_transport_error(failed_calls, max_attempts, jitter) {
            HttpDisposition::Retry { after_ms } => Next::Retry { after_ms, reason: "server_error" },
            HttpDisposition::Fail { code } => Next::Fail { code, message: client.scrub(&e.to_string()) },
        },
        Err(e) => Next::Fail { code: e.error_code(), message: client.scrub(&e.to_string()) },
    }
}

/// Run `fut` until it completes, polling the cancel flag beside it. A cancel request,
/// process shutdown or a lost lease drops `fut` (aborting an in-flight request).
async fn guarded<F: Future>(ctx: &JobCtx, fut: F) -> Result<F::Output, JobError> {
    tokio::pin!(fut);
    let mut poll = tokio::time::interval_at(tokio::time::Instant::now() + CANCEL_POLL, CANCEL_POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The deadline aborts the call (a pause lets it finish: the call is the turn's batch).
    let deadline = async {
        match ctx.until_deadline() {
            Some(left) => tokio::time::sleep(left).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            out = &mut fut => return Ok(out),
            () = ctx.shutdown.cancelled() => return Err(JobError::ShuttingDown),
            () = &mut deadline => return Err(JobError::deadline_exceeded()),
            _ = poll.tick() => match heartbeat(ctx).await {
                Ok(signals) if signals.cancel_requested => return Err(JobError::Cancelled),
                Ok(_) => {}
                Err(FenceError::LostLease) => return Err(JobError::LostLease),
                // A database hiccup: the call goes on; the next poll tries again.
                Err(e) => tracing::warn!(operation = %ctx.operation.id, error = %e, "cancel poll failed"),
            },
        }
    }
}

/// Renew the lease; what it learns.
async fn heartbeat(ctx: &JobCtx) -> Result<Signals, FenceError> {
    let t = Transition::Heartbeat { lease_until_ms: ctx.lease.renewed_until() };
    transitions::apply(&ctx.db, &ctx.lease, &t).await
}

/// Fenced checkpoint of `checkpoint` under `phase` (one statement: a commit in one round
/// trip); returns what it learns (a cancel request, a pause).
pub(super) async fn save(
    ctx: &JobCtx,
    checkpoint: &InferenceCheckpoint,
    phase: &'static str,
    processed: i64,
) -> Result<Signals, JobError> {
    let progress = Progress { phase, processed, total: 1, checkpoint: Some(encode(checkpoint)?) };
    let t = Transition::Checkpoint { progress: &progress, lease_until_ms: ctx.lease.renewed_until() };
    let signals = transitions::apply(&ctx.db, &ctx.lease, &t).await?;
    ctx.changes.committed(&ctx.operation.id, &ctx.operation.tenant);
    Ok(signals)
}
