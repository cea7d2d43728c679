//! The `inference` operation as data: the stored job, its checkpoint, the result a
//! finished turn reports, the reply it may append to the conversation, and the stable
//! error codes it can fail with. The Responses wire codec itself lives in
//! [`crate::responses`]; this module decides what a decoded reply *means* for an
//! operation (a refusal is an answer, a mixed refusal is a failure) and how a stored
//! conversation becomes the input of a turn ([`history`]).

mod history;
mod submission;

pub use history::{EVENT_ROLE, HistoryScan, history_window, record_cost, record_messages};
pub use submission::{
    InferenceSubmission, MAX_INFERENCE_MESSAGES, MAX_TOOLS, MIN_MAX_OUTPUT_TOKENS, REASONING_EFFORTS,
};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Kind, request_variant};
use crate::contract::{ContextOperationKind, ConversationRecord};
use crate::responses::{ResponseDecodeError, ResponsesRequest, TokenUsage, decode_response};

/// The stored payload of an `inference` operation: one Responses turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InferenceJob {
    /// The turn as submitted. `messages` holds only the caller's new messages: the
    /// conversation's history is loaded by the worker (within the history budget)
    /// and placed before them.
    pub request: ResponsesRequest,
    /// Conversation to load history from and (with `append_reply`) append the reply to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    #[serde(default)]
    pub append_reply: bool,
}

pub struct Inference;

impl Kind for Inference {
    const KIND: ContextOperationKind = ContextOperationKind::Inference;
    type Submission = InferenceSubmission;
    type Args = InferenceJob;
    type Checkpoint = InferenceCheckpoint;
    type Output = InferenceResult;
    /// A turn is one provider call: a retry calls again from the start.
    const RESUMABLE: bool = false;
    request_variant!(Inference);
}

pub const PHASE_CALLING_PROVIDER: &str = "calling_provider";
pub const PHASE_APPENDING_REPLY: &str = "appending_reply";

/// How a successful turn ended. A refusal is the model's answer to the turn, so the
/// operation succeeds and says so here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum InferenceOutcome {
    Completed,
    Refused,
}

impl InferenceOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Refused => "refused",
        }
    }
}

/// The `result` of a succeeded inference operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct InferenceResult {
    pub outcome: InferenceOutcome,
    /// The assistant text; for a refusal, the refusal (plus any accompanying text).
    pub text: String,
    /// Raw `function_call` items the model requested, in order.
    pub tool_calls: Vec<Value>,
    /// Raw `reasoning` + `function_call` items to send back verbatim, in output
    /// order, when the tool turn is continued.
    pub echo: Vec<Value>,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub model: Option<String>,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub usage: Option<TokenUsage>,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub response_id: Option<String>,
    /// Provider calls made for this operation, across retries and resumptions.
    pub provider_attempts: u32,
    /// The id of the reply appended to the conversation (`appendReply`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub appended_message_id: Option<String>,
}

/// Read a provider body as a turn: `Ok` for a completed turn and for a refusal (the
/// turn's answer); every other decode error is the operation's failure.
pub fn decode_turn(body: &Value, provider_attempts: u32) -> Result<InferenceResult, ResponseDecodeError> {
    match decode_response(body) {
        Ok(d) => Ok(InferenceResult {
            outcome: InferenceOutcome::Completed,
            text: d.text,
            tool_calls: d.tool_calls,
            echo: d.echo,
            model: d.model,
            usage: d.usage,
            response_id: d.response_id,
            provider_attempts,
            appended_message_id: None,
        }),
        Err(ResponseDecodeError::Refused { message, usage, model, response_id }) => Ok(InferenceResult {
            outcome: InferenceOutcome::Refused,
            text: message,
            tool_calls: Vec::new(),
            echo: Vec::new(),
            model,
            usage,
            response_id,
            provider_attempts,
            appended_message_id: None,
        }),
        Err(e) => Err(e),
    }
}

/// What a running inference operation has durably reached.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InferenceCheckpoint {
    /// Provider calls started so far (written *before* each call).
    #[serde(default)]
    pub provider_attempts: u32,
    /// Calls that failed transiently and were retried, across runs: the retry budget
    /// (`RESPONSES_MAX_ATTEMPTS`) is the operation's, so a rate limit's deferral back to the
    /// queue (a new run) does not start it again — a provider answering 429 forever ended
    /// no operation that way.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed_calls: u32,
    /// The newest conversation sequence the history snapshot includes, fixed by the
    /// first attempt so a resumed turn sends the same history (and never its own reply).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_through: Option<i64>,
    /// The decoded reply, checkpointed before it is appended: a resumed operation
    /// that finds it here appends it (idempotently) and finishes without calling the
    /// provider again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<InferenceResult>,
}

/// The id of the reply an operation appends: derived from the operation id, so a
/// retried or resumed append of the same reply is skipped by the idempotent append.
pub fn reply_message_id(operation_id: &str) -> String {
    format!("{operation_id}:reply")
}

/// The assistant record `appendReply` appends. Its metadata keeps what a later turn
/// needs to continue (the echo items) and where it came from.
pub fn reply_record(operation_id: &str, conversation_id: &str, result: &InferenceResult) -> ConversationRecord {
    let mut inference = json!({
        "operationId": operation_id,
        "outcome": result.outcome.as_str(),
    });
    if let Some(model) = &result.model {
        inference["model"] = json!(model);
    }
    if let Some(id) = &result.response_id {
        inference["responseId"] = json!(id);
    }
    if !result.echo.is_empty() {
        inference["echo"] = Value::Array(result.echo.clone());
    }
    let reply = Value::String(result.text.clone());
    ConversationRecord {
        metadata: json!({ "inference": inference }),
        ..ConversationRecord::new(reply_message_id(operation_id), conversation_id, "assistant", reply)
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completed() -> Value {
        json!({"id": "resp_1", "status": "completed", "model": "m",
               "output": [{"type": "reasoning", "id": "rs_1", "summary": []},
                          {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}],
               "usage": {"input_tokens": 3, "output_tokens": 4}})
    }

    #[test]
    fn a_completed_turn_keeps_calls_echo_and_accounting() {
        let r = decode_turn(&completed(), 2).unwrap();
        assert_eq!(r.outcome, InferenceOutcome::Completed);
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.echo.len(), 2);
        assert_eq!(r.echo[0]["type"], "reasoning");
        assert_eq!((r.model.as_deref(), r.response_id.as_deref()), (Some("m"), Some("resp_1")));
        assert_eq!(r.usage.unwrap().output_tokens, 4);
        assert_eq!(r.provider_attempts, 2);
    }

    #[test]
    fn a_refusal_is_an_answer_but_a_mixed_refusal_is_not() {
        let refusal = json!({"type": "message", "content": [{"type": "refusal", "refusal": "no"}]});
        let r = decode_turn(&json!({"id": "resp_2", "model": "m", "output": [refusal.clone()]}), 1).unwrap();
        assert_eq!(r.outcome, InferenceOutcome::Refused);
        assert_eq!(r.text, "no");
        assert_eq!(r.response_id.as_deref(), Some("resp_2"));
        assert!(r.tool_calls.is_empty() && r.echo.is_empty());
        let call = json!({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"});
        let e = decode_turn(&json!({"output": [refusal, call]}), 1).unwrap_err();
        assert_eq!(e.error_code(), "mixed_refusal_tool_calls");
    }

    #[test]
    fn result_serializes_camel_case_with_the_outcome_in_snake_case() {
        let mut r = decode_turn(&completed(), 1).unwrap();
        r.appended_message_id = Some(reply_message_id("OP"));
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["outcome"], "completed");
        assert_eq!(v["providerAttempts"], 1);
        assert_eq!(v["appendedMessageId"], "OP:reply");
        assert_eq!(v["toolCalls"][0]["call_id"], "c1");
        assert_eq!(v["responseId"], "resp_1");
        assert_eq!(serde_json::from_value::<InferenceResult>(v).unwrap(), r);
    }

    #[test]
    fn checkpoint_round_trips_and_defaults_from_empty() {
        assert_eq!(serde_json::from_str::<InferenceCheckpoint>("{}").unwrap(), InferenceCheckpoint::default());
        let c = InferenceCheckpoint {
            provider_attempts: 2,
            failed_calls: 1,
            history_through: Some(9),
            result: Some(decode_turn(&completed(), 2).unwrap()),
        };
        let text = serde_json::to_string(&c).unwrap();
        assert!(text.contains(r#""failedCalls":1"#), "{text}");
        let back: InferenceCheckpoint = serde_json::from_str(&text).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn reply_record_is_an_assistant_message_with_a_derived_id_and_the_echo() {
        let r = decode_turn(&completed(), 1).unwrap();
        let rec = reply_record("01OP", "conv", &r);
        assert_eq!(rec.id, "01OP:reply");
        assert_eq!(rec.role, "assistant");
        assert_eq!(rec.scope.conversation_id, "conv");
        assert_eq!(rec.metadata["inference"]["operationId"], "01OP");
        assert_eq!(rec.metadata["inference"]["echo"], json!(r.echo));
        assert_eq!(rec.metadata["inference"]["outcome"], "completed");
        crate::contract::validate_append("t/p", std::slice::from_ref(&rec)).unwrap();
    }
}
