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

use super::{Job, Prepared, SubmitCtx, SubmitError};
use crate::kinds::job::{Finish, JobCtx, JobError};
use crate::provider::responses_client::ResponsesClient;
use crate::store::{StoreError, messages};
use context_jobs::contract::ContextOperationState;
use context_jobs::kinds::inference::{
    EVENT_ROLE, HistoryScan, Inference, InferenceCheckpoint, InferenceJob, InferenceResult, InferenceSubmission,
    PHASE_APPENDING_REPLY, reply_message_id, reply_record,
};
use context_jobs::operation::{ErrorCode, Progress, phase};
use context_jobs::responses::{ResponsesRequest, build_request_body};

/// History rows read per query while walking back through a conversation.
const HISTORY_PAGE: usize = 200;

impl Job for Inference {
    /// History alone must have something to send: a conversation this tenant cannot see,
    /// or one without messages, is a 404 when no new messages are given.
    async fn prepare(ctx: &SubmitCtx<'_>, submission: InferenceSubmission) -> Result<Prepared, SubmitError> {
        let job = submission.into_job()?;
        if let (Some(conversation), true) = (job.conversation_id.as_deref(), job.request.messages.is_empty()) {
            let newest = messages::recent(ctx.db, ctx.tenant, conversation, &[], 1).await?;
            if newest.is_empty() {
                return Err(SubmitError::NotFound(format!("conversation {conversation:?} has no messages to load")));
            }
        }
        let rate_key = Some(job.request.model.clone());
        Ok(Prepared { rate_key, ..Prepared::plain::<Inference>(job) })
    }

    async fn run(ctx: &JobCtx, job: InferenceJob) -> Result<Finish<InferenceResult>, JobError> {
        let outcome = turn(ctx, &job).await;
        let label = match &outcome {
            Ok(result) => Some(result.outcome.as_str()),
            Err(JobError::Permanent { code, .. }) => Some(code.as_str()),
            Err(JobError::Cancelled | JobError::CancelledWith(_)) => Some(ContextOperationState::Cancelled.as_str()),
            Err(_) => None,
        };
        if let Some(label) = label {
            metrics::counter!(crate::metrics::INFERENCE_OUTCOMES, "outcome" => label).increment(1);
        }
        // One turn, done: progress 1/1.
        let last = Progress { phase: phase::DONE, processed: 1, total: 1, checkpoint: None };
        outcome.map(|result| Finish::DoneAt(result, last))
    }
}

async fn turn(ctx: &JobCtx, job: &InferenceJob) -> Result<InferenceResult, JobError> {
    let mut checkpoint: InferenceCheckpoint = ctx.checkpoint()?.unwrap_or_default();
    let mut result = match checkpoint.result.take() {
        // Resumed after the reply was checkpointed: only the append (if any) is left.
        Some(result) => result,
        None => {
            let client = ResponsesClient::from_config(&ctx.config)
                .map_err(|e| JobError::permanent(ErrorCode::InvalidRequest, format!("{e:#}")))?;
            let messages = load_messages(ctx, job, &mut checkpoint).await?;
            if messages.is_empty() {
                return Err(JobError::permanent(
                    ErrorCode::InvalidRequest,
                    "nothing to send: the conversation has no usable history and no new messages were given",
                ));
            }
            let request = ResponsesRequest { messages, ..job.request.clone() };
            let result = attempts::call(ctx, &client, &build_request_body(&request), &mut checkpoint).await?;
            if job.append_reply {
                checkpoint.result = Some(result.clone());
                // The answer is in hand: a cancel arriving now is not worth discarding it.
                attempts::save(ctx, &checkpoint, PHASE_APPENDING_REPLY, 1).await?;
            }
            result
        }
    };
    if let (true, Some(conversation)) = (job.append_reply, job.conversation_id.as_deref()) {
        let record = reply_record(ctx.operation.id.as_str(), conversation, &result);
        match messages::append(&ctx.db, ctx.tenant(), std::slice::from_ref(&record)).await {
            Ok(_) => {}
            Err(StoreError::Conflict(m)) => return Err(JobError::permanent(ErrorCode::ConversationDeleting, m)),
            Err(e) => return Err(e.into()),
        }
        result.appended_message_id = Some(reply_message_id(ctx.operation.id.as_str()));
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
    let tenant = ctx.tenant();
    let mut scan = HistoryScan::new(ctx.config.provider.inference_history_bytes);
    let mut through = checkpoint.history_through.unwrap_or(i64::MAX);
    'pages: loop {
        let page = messages::newest_through(&ctx.db, tenant, conversation, through, EVENT_ROLE, HISTORY_PAGE).await?;
        let full = page.len() == HISTORY_PAGE;
        for record in page {
            through = record.sequence - 1;
            if !scan.push(record) {
                break 'pages;
            }
        }
        if !full {
            break;
        }
    }
    if checkpoint.history_through.is_none() {
        checkpoint.history_through = Some(scan.newest_sequence().unwrap_or(0));
    }
    let mut messages = scan.into_messages();
    messages.extend(job.request.messages.iter().cloned());
    Ok(messages)
}
