//! The `inference` job: one Responses turn, as a checkpointed operation.
//!
//! 1. Load the conversation's newest history within `CONTEXT_OPS_INFERENCE_HISTORY_BYTES`
//!    (the snapshot's newest sequence is fixed in the checkpoint, so a resumed turn
//!    sends the same history and never its own reply), then the caller's new messages.
//! 2. Call the provider ([`attempts`]): bounded attempts with backoff, a fenced
//!    checkpoint counting each attempt *before* it starts, cancellation and shutdown
//!    aborting the in-flight request.
//! 3. With `appendReply`: checkpoint the decoded result (fenced), then append the reply
//!    under an id derived from the operation id. The append is the idempotent
//!    `store::messages::append` in its own transaction rather than one transaction with
//!    the checkpoint: the result is durable before any effect, so a resumed operation
//!    finds it, appends (a repeat is skipped by id) and finishes — no second provider
//!    call, no second reply, and the reply stored always equals the result reported.
//!    The one owner of the append SQL stays the only one.
//!
//! A crash *during* the provider call repeats the call on resume: create has no
//! idempotency key, so that turn may be billed twice (the attempt count says so).

mod attempts;

use serde_json::Value;

use super::{JobCtx, JobError};
use crate::auth::TenantKey;
use crate::provider::responses_client::ResponsesClient;
use crate::store::StoreError;
use crate::store::messages;
use context_jobs::kinds::inference::{
    InferenceCheckpoint, InferenceJob, InferenceResult, error_code as inference_code, history_window, record_cost,
    reply_message_id, reply_record,
};
use context_jobs::operation::error_code;
use context_jobs::responses::{ResponsesRequest, build_request_body};

/// Tokens by `direction` (`input`, `output`), from every reply that reported usage.
pub const TOKENS: &str = "context_ops_inference_tokens_total";
/// Finished turns by `outcome`: `completed`, `refused`, `cancelled`, or the error code.
pub const OUTCOMES: &str = "context_ops_inference_outcomes_total";
/// Provider attempts that were retried, by the `reason` class of the failure.
pub const PROVIDER_RETRIES: &str = "context_ops_inference_provider_retries_total";

/// History rows read per query while walking back through a conversation.
const HISTORY_PAGE: usize = 200;

pub async fn run(ctx: &JobCtx, job: &InferenceJob) -> Result<Value, JobError> {
    let outcome = turn(ctx, job).await;
    let label = match &outcome {
        Ok(result) => Some(result.outcome.as_str()),
        Err(JobError::Permanent { code, .. }) => Some(*code),
        Err(JobError::Cancelled) => Some("cancelled"),
        Err(_) => None,
    };
    if let Some(label) = label {
        metrics::counter!(OUTCOMES, "outcome" => label).increment(1);
    }
    let result = outcome?;
    serde_json::to_value(&result).map_err(|e| JobError::permanent(error_code::INTERNAL, e.to_string()))
}

async fn turn(ctx: &JobCtx, job: &InferenceJob) -> Result<InferenceResult, JobError> {
    let mut checkpoint: InferenceCheckpoint = match ctx.operation.checkpoint.as_deref() {
        None => InferenceCheckpoint::default(),
        Some(text) => serde_json::from_str(text).map_err(|e| {
            JobError::permanent(error_code::CORRUPT_OPERATION, format!("inference checkpoint does not decode: {e}"))
        })?,
    };
    let mut result = match checkpoint.result.take() {
        // Resumed after the reply was checkpointed: only the append (if any) is left.
        Some(result) => result,
        None => {
            let client = ResponsesClient::from_config(&ctx.config)
                .map_err(|e| JobError::permanent(error_code::INVALID_REQUEST, format!("{e:#}")))?;
            let messages = load_messages(ctx, job, &mut checkpoint).await?;
            if messages.is_empty() {
                return Err(JobError::permanent(
                    error_code::INVALID_REQUEST,
                    "nothing to send: the conversation has no usable history and no new messages were given",
                ));
            }
            let request = ResponsesRequest { messages, ..job.request.clone() };
            let result = attempts::call(ctx, &client, &build_request_body(&request), &mut checkpoint).await?;
            if job.append_reply {
                checkpoint.result = Some(result.clone());
                // The answer is in hand: a cancel arriving now is not worth discarding it.
                attempts::save(ctx, &checkpoint, "appending_reply", 1).await?;
            }
            result
        }
    };
    if let (true, Some(conversation)) = (job.append_reply, job.conversation_id.as_deref()) {
        let tenant = TenantKey::from_stored(ctx.operation.tenant.clone());
        let record = reply_record(&ctx.operation.id, conversation, &result);
        match messages::append(&ctx.db, &tenant, std::slice::from_ref(&record)).await {
            Ok(_) => {}
            Err(StoreError::Conflict(m)) => {
                return Err(JobError::permanent(inference_code::CONVERSATION_DELETING, m));
            }
            Err(e) => return Err(e.into()),
        }
        result.appended_message_id = Some(reply_message_id(&ctx.operation.id));
    }
    Ok(result)
}

/// The turn's messages: the conversation's newest history within the byte budget,
/// then the caller's new messages. Fixes `history_through` on the first attempt.
async fn load_messages(
    ctx: &JobCtx,
    job: &InferenceJob,
    checkpoint: &mut InferenceCheckpoint,
) -> Result<Vec<Value>, JobError> {
    let Some(conversation) = job.conversation_id.as_deref() else {
        return Ok(job.request.messages.clone());
    };
    let tenant = TenantKey::from_stored(ctx.operation.tenant.clone());
    let budget = ctx.config.inference_history_bytes;
    let mut newest_first = Vec::new();
    let mut used = 0usize;
    let mut through = checkpoint.history_through.unwrap_or(i64::MAX);
    'pages: loop {
        let page = messages::newest_through(&ctx.db, &tenant, conversation, through, HISTORY_PAGE).await?;
        let full = page.len() == HISTORY_PAGE;
        for record in page {
            used += record_cost(&record);
            through = record.sequence - 1;
            newest_first.push(record);
            // One record past the budget is enough to know where the window ends.
            if used > budget {
                break 'pages;
            }
        }
        if !full {
            break;
        }
    }
    if checkpoint.history_through.is_none() {
        checkpoint.history_through = Some(newest_first.first().map_or(0, |r| r.sequence));
    }
    newest_first.reverse();
    let mut messages = history_window(&newest_first, budget);
    messages.extend(job.request.messages.iter().cloned());
    Ok(messages)
}
