//! The operation commands: `get`, `wait`, `list`, `cancel`, `retry`, `forget`.

use reqwest::Method;
use serde::Serialize;

use super::args::{ListArgs, RetryArgs};
use super::exit::{CliError, CliResult, Exit};
use super::follow::follow;
use super::progress::{OperationBar, wanted};
use super::{Ctx, output};
use context_jobs::contract::{CONTEXT_OPERATIONS_PATH, ContextOperationState};
use context_jobs::operation::SubmitOptions;
use context_jobs::operation::view::{OperationList, OperationView};

fn path(id: &str) -> String {
    format!("{CONTEXT_OPERATIONS_PATH}/{id}")
}

fn show(ctx: &Ctx, op: &OperationView) {
    if ctx.json { output::json(op) } else { output::operation(op) }
}

pub async fn get(ctx: &Ctx, id: &str) -> CliResult<Exit> {
    let op: OperationView = ctx.client.get(&path(id)).await?;
    show(ctx, &op);
    Ok(Exit::Ok)
}

/// Follow `id` to its end; the exit code says how it ended.
pub async fn wait(ctx: &Ctx, id: &str, timeout: Option<std::time::Duration>) -> CliResult<Exit> {
    let mut bar = OperationBar::new(wanted(ctx.json), id);
    let followed = follow(&ctx.client, id, timeout, &mut bar).await;
    bar.finish();
    let followed = followed?;
    show(ctx, &followed.op);
    let state = followed.op.operation.state;
    let (exit, why) = match state {
        _ if followed.timed_out => (Exit::TimedOut, format!("still {} when the wait timed out", state.as_str())),
        ContextOperationState::Succeeded => return Ok(Exit::Ok),
        ContextOperationState::Failed => (Exit::Failed, "the operation failed".to_string()),
        ContextOperationState::Cancelled => (Exit::Cancelled, "the operation was cancelled".to_string()),
        other => (Exit::TimedOut, format!("still {}", other.as_str())),
    };
    Err(CliError::Ended(exit, format!("operation {id}: {why}")))
}

/// The listing's query string.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ListQuery<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tenant: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    created_after_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    created_before_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    q: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cursor: Option<String>,
}

pub async fn list(ctx: &Ctx, args: &ListArgs) -> CliResult<Exit> {
    let mut query = ListQuery {
        kind: args.kind.as_deref(),
        state: args.state.as_deref(),
        tenant: args.tenant.as_deref(),
        created_after_ms: args.created_after_ms,
        created_before_ms: args.created_before_ms,
        q: args.id_prefix.as_deref(),
        limit: args.limit,
        cursor: args.cursor.clone(),
    };
    let mut all = OperationList { items: Vec::new(), next_cursor: None };
    loop {
        let request = ctx.client.request(Method::GET, CONTEXT_OPERATIONS_PATH).query(&query);
        let page: OperationList = ctx.client.decode(ctx.client.send(request).await?).await?;
        all.items.extend(page.items);
        all.next_cursor = page.next_cursor;
        match &all.next_cursor {
            Some(next) if args.all => query.cursor = Some(next.clone()),
            _ => break,
        }
    }
    if ctx.json {
        output::json(&all);
    } else {
        output::operations(&all);
        if let Some(next) = &all.next_cursor {
            output::note(format!("more: --cursor {next}"));
        }
    }
    Ok(Exit::Ok)
}

pub async fn cancel(ctx: &Ctx, id: &str) -> CliResult<Exit> {
    let op: OperationView = ctx.client.post(&format!("{}/cancel", path(id)), &serde_json::Map::new()).await?;
    show(ctx, &op);
    Ok(Exit::Ok)
}

pub async fn retry(ctx: &Ctx, args: &RetryArgs) -> CliResult<Exit> {
    let options = SubmitOptions {
        priority: args.priority,
        deadline_ms: args.deadline_ms,
        timeout_ms: args.timeout_ms,
        not_before_ms: args.not_before_ms,
    };
    let op: OperationView = ctx.client.post(&format!("{}/retry", path(&args.id)), &options).await?;
    show(ctx, &op);
    Ok(Exit::Ok)
}

/// What `forget --json` prints (the API answers 204 with no body).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Forgotten<'a> {
    id: &'a str,
    forgotten: bool,
}

pub async fn forget(ctx: &Ctx, id: &str) -> CliResult<Exit> {
    ctx.client.no_content(ctx.client.request(Method::DELETE, &path(id))).await?;
    if ctx.json {
        output::json(&Forgotten { id, forgotten: true });
    } else {
        println!("forgot {id}");
    }
    Ok(Exit::Ok)
}
