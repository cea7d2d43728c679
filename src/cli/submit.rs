//! `submit <kind>`: each kind's request DTO built from its flags, posted to the kind's own
//! endpoint with the scheduling options beside its fields (`SubmitOptions`) and the
//! `Idempotency-Key` header; then the operation (REST form) is shown or followed.

use reqwest::Method;
use serde::Serialize;

use super::args::{ExportArgs, ImportSource, InferenceArgs, SubmitCommon, SubmitKind};
use super::client::Client;
use super::exit::{CliError, CliResult, Exit};
use super::{Ctx, output, transfer};
use context_jobs::contract::{
    CONTEXT_EXPORT_PATH, CONTEXT_IMPORT_PATH, CONTEXT_OPERATIONS_PATH, CONVERSATION_DELETE_PATH, ConversationIdMap,
    ConversationScope, DeleteConversationRequest, ExportContextRequest, ExportFilter, INFERENCE_PATH,
    ImportContextRequest, RETENTION_PATH, RebuildVectorProjectionRequest, RetentionPolicy, RetentionRequest,
    VECTOR_REBUILD_PATH,
};
use context_jobs::kinds::inference::InferenceSubmission;
use context_jobs::operation::SubmitOptions;
use context_jobs::operation::view::OperationView;

/// A kind's request with the scheduling options at its top level, as every submission
/// endpoint takes them.
#[derive(Serialize)]
struct Submission<'a, T: Serialize> {
    #[serde(flatten)]
    request: &'a T,
    #[serde(flatten)]
    options: SubmitOptions,
}

fn options(common: &SubmitCommon) -> SubmitOptions {
    SubmitOptions {
        priority: common.priority,
        deadline_ms: common.deadline_ms,
        timeout_ms: common.timeout_ms,
        not_before_ms: common.not_before_ms,
    }
}

/// `KEY=VALUE` (`what` names the flag in the error).
pub fn pair(text: &str, what: &str) -> CliResult<(String, String)> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(CliError::Usage(format!("{what} takes KEY=VALUE, not {text:?}"))),
    }
}

/// An import's renames from `--prefix` and `--map OLD=NEW`.
pub fn id_map(prefix: &Option<String>, map: &[String]) -> CliResult<Option<ConversationIdMap>> {
    let map = map.iter().map(|m| pair(m, "--map")).collect::<CliResult<_>>()?;
    let renames = ConversationIdMap { prefix: prefix.clone(), map };
    Ok((!renames.is_empty()).then_some(renames))
}

/// Post `request` to `path`; the new operation's id (from `Location`).
async fn post<T: Serialize>(client: &Client, path: &str, request: &T, common: &SubmitCommon) -> CliResult<String> {
    let body = Submission { request, options: options(common) };
    let mut http = client.request(Method::POST, path).json(&body);
    if let Some(key) = &common.idempotency_key {
        http = http.header("idempotency-key", key);
    }
    let response = client.check(client.send(http).await?).await?;
    let location = response.headers().get(reqwest::header::LOCATION).and_then(|v| v.to_str().ok());
    let prefix = format!("{CONTEXT_OPERATIONS_PATH}/");
    location.and_then(|l| l.strip_prefix(&prefix)).map(str::to_string).ok_or_else(|| CliError::Api {
        status: response.status().as_u16(),
        message: "the submission's answer has no Location of an operation".into(),
    })
}

pub async fn run(ctx: &Ctx, kind: SubmitKind) -> CliResult<Exit> {
    let client = &ctx.client;
    let (id, common) = match kind {
        SubmitKind::Delete { conversation, reason, common } => {
            let request = DeleteConversationRequest { scope: ConversationScope::conversation(conversation), reason };
            (post(client, CONVERSATION_DELETE_PATH, &request, &common).await?, common)
        }
        SubmitKind::Retention { conversation, max_age_days, max_messages, common } => {
            let policy = match (max_age_days, max_messages) {
                (None, None) => RetentionPolicy::default(),
                (max_age_days, max_messages) => RetentionPolicy { max_age_days, max_messages },
            };
            let request = RetentionRequest { scope: ConversationScope::conversation(conversation), policy };
            (post(client, RETENTION_PATH, &request, &common).await?, common)
        }
        SubmitKind::Export(ExportArgs { conversations, agent, from_ms, to_ms, include_expired, common }) => {
            let filter = ExportFilter { conversation_ids: conversations, agent_id: agent, from_ms, to_ms };
            let request = ExportContextRequest { include_expired, filter };
            (post(client, CONTEXT_EXPORT_PATH, &request, &common).await?, common)
        }
        SubmitKind::Import(args) => (import(ctx, &args.source, &args.common).await?, args.common),
        SubmitKind::Rebuild { force, common } => {
            let request = RebuildVectorProjectionRequest { force };
            (post(client, VECTOR_REBUILD_PATH, &request, &common).await?, common)
        }
        SubmitKind::Inference(args) => {
            let request = inference(&args)?;
            (post(client, INFERENCE_PATH, &request, &args.common).await?, args.common)
        }
    };
    if common.wait {
        return super::ops::wait(ctx, &id, common.wait_timeout).await;
    }
    let op: OperationView = client.get(&format!("{CONTEXT_OPERATIONS_PATH}/{id}")).await?;
    if ctx.json {
        output::json(&op)
    } else {
        output::operation(&op)
    }
    Ok(Exit::Ok)
}

/// Submit an import of `source` (uploading a local file first); its operation id.
pub async fn import(ctx: &Ctx, source: &ImportSource, common: &SubmitCommon) -> CliResult<String> {
    let artifact = match (&source.artifact, &source.file) {
        (Some(artifact), _) => artifact.clone(),
        (None, Some(file)) => transfer::upload_file(ctx, file, None, source.chunk_size).await?.id,
        (None, None) => return Err(CliError::Usage("give --artifact ID or --file FILE".into())),
    };
    // The import request carries its key in the body (the contract requires one): the
    // given one, else one per artifact, so repeating the same import is one operation.
    let key = common.idempotency_key.clone().unwrap_or_else(|| format!("import-{artifact}"));
    let request = ImportContextRequest {
        artifact_ref: Some(artifact),
        messages: Vec::new(),
        entries: Vec::new(),
        idempotency_key: key,
        conversation_id_map: id_map(&source.prefix, &source.map)?,
    };
    let common = SubmitCommon { idempotency_key: None, ..common.clone() };
    post(&ctx.client, CONTEXT_IMPORT_PATH, &request, &common).await
}

fn inference(args: &InferenceArgs) -> CliResult<InferenceSubmission> {
    // `messages` is free-form in the submission (chat messages or typed Responses items);
    // a `--message` is the plain chat form of a user turn.
    let messages = args.messages.iter().map(|text| serde_json::json!({"role": "user", "content": text})).collect();
    let metadata = args.metadata.iter().map(|m| pair(m, "--metadata")).collect::<CliResult<_>>()?;
    Ok(InferenceSubmission {
        model: args.model.clone(),
        messages,
        conversation_id: args.conversation.clone(),
        instructions: args.instructions.clone(),
        tools: Vec::new(),
        tool_choice: None,
        max_output_tokens: args.max_output_tokens,
        reasoning_effort: args.reasoning_effort.clone(),
        metadata,
        append_reply: args.append_reply,
    })
}
